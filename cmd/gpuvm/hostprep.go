package main

import (
	"context"
	"encoding/json"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/doctor"
)

func newAdminHostPrepCmd(getenv func(string) string) *cobra.Command {
	var o hostOpts
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "host-prep",
		Short: "Put this host's GPUs in the modes /etc/gpuvm names (SR-IOV VFs, MIG mode, vfio-pci)",
		Long: `Prepares the GPU server it runs on, as its host { gpu } blocks say, from what
sysfs shows now; a second run does nothing. gpuvm-host-prep.service runs it at
every boot, before gpuvmd.

  vgpu         SR-IOV VFs enabled on boards whose vGPUs live on VFs (Ada,
               Hopper, Blackwell; A100-class): sriov-manage -e ADDR
  mig          MIG mode enabled (nvidia-smi -i ADDR -mig 1) when the GPU holds
               nothing; a GPU reset it then asks for is reported, never done
  passthrough  the GPU and the other functions of its slot bound to vfio-pci
               (driver_override, unbind, drivers_probe); other devices of its
               IOMMU group are reported, never touched

--dry-run prints the steps and changes nothing. --sysfs-root writes into a
captured tree (commands are reported, not run); --simulate prepares a
simulated server. The MIG instances and vGPUs of VMs that ran before a reboot
are made again by gpuvmd when it starts (docs/install.md, "After a reboot").

Exit status: 0 done (or nothing to do), 1 a step failed or needs the admin
(a GPU reset), 2 wrong usage.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, sys, preset, done, err := o.open(getenv, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer done()
			e := doctor.PrepEnv{Sys: sys, Config: cfg, Simulated: preset != ""}
			e.MIGMode = newBackendProbe(o, preset, o.stateDir, getenv, cmd.ErrOrStderr()).migMode
			if preset == "" && o.sysfsRoot == "" {
				e.Run = func(ctx context.Context, name string, args ...string) ([]byte, error) {
					return exec.CommandContext(ctx, name, args...).CombinedOutput()
				}
			}
			steps, err := doctor.Plan(cmd.Context(), e)
			if err != nil {
				return err
			}
			var outcomes []doctor.Outcome
			if !dryRun {
				outcomes = doctor.Apply(cmd.Context(), e, steps)
			}
			if asJSON {
				v := any(outcomes)
				if dryRun {
					v = steps
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				err = enc.Encode(v)
			} else {
				err = doctor.WriteSteps(cmd.OutOrStdout(), steps, outcomes, dryRun)
			}
			if err != nil {
				return err
			}
			if doctor.Failed(outcomes) > 0 {
				return exitError{exitFailure}
			}
			return nil
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the steps; change nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the steps (or their outcomes) as JSON")
	return cmd
}
