package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/config"
)

type resizeOpts struct {
	profile                 string
	back, dryRun, yes, snap bool
	wait                    bool
	out                     outputOpts
}

func newResizeCmd(getenv func(string) string) *cobra.Command {
	o := clientOpts{getenv: getenv}
	var opts resizeOpts
	cmd := &cobra.Command{
		Use:   "resize VM (--profile PROFILE | --back)",
		Short: "Move a stopped VM to another profile's GPU, vCPUs and memory; it keeps its disk",
		Long: `Moves a stopped VM, named by its name (among your live VMs) or its ID, to
another profile: its GPU (a MIG slice, a time-sliced vGPU, a whole GPU, or
none), its vCPUs and its memory change; its disk, with its image and data,
stays. The new GPU is given at the VM's next start ('gpuvm start').

Before anything changes, the plan is shown: both profiles, whether the VM's
image carries an NVIDIA guest driver the new GPU's vGPU manager accepts, which
NVIDIA licence the new kind of GPU needs, and what becomes of the disk.
--dry-run stops there. Otherwise gpuvm asks whether to take a snapshot of the
disk first, unless --snapshot (take one) or --yes (do not) answers it.

The VM records the profile it had: 'gpuvm resize VM --back' returns to it.
A VM that is not stopped, a profile that does not exist, is not open to you,
would take you past a quota, names another image or a smaller disk is refused
(exit 1), naming why; nothing changes then.

Output: the plan and a line by default; --json prints the api.ResizeVMResponse
(with --wait, the api.Operation as it ended).
` + connectionHelp + "\n" + exitHelp,
		Example: "  gpuvm resize box --profile h100-whole --dry-run\n  gpuvm resize box --profile h100-whole --snapshot --wait\n  gpuvm resize box --back --yes",
		Args:    exactArgs(1, "one VM name or ID"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			return runResize(ctx, c, cmd, args[0], opts)
		}),
		ValidArgsFunction: completeVMs(&o),
	}
	o.flags(cmd, false)
	f := cmd.Flags()
	f.StringVar(&opts.profile, "profile", "", "the profile to move the VM to")
	f.BoolVar(&opts.back, "back", false, "move the VM back to the profile it had before its last resize")
	f.BoolVar(&opts.dryRun, "dry-run", false, "show the plan only; change nothing")
	f.BoolVar(&opts.yes, "yes", false, "do not ask; take no snapshot first")
	f.BoolVar(&opts.snap, "snapshot", false, "take a snapshot of the disk first, without asking")
	f.BoolVar(&opts.wait, "wait", false, "wait until the resize is done")
	opts.out.flags(cmd, "")
	return cmd
}

func (o resizeOpts) check() error {
	switch {
	case o.profile == "" && !o.back:
		return usageError{errors.New("name the profile: --profile PROFILE, or --back for the one the VM had")}
	case o.profile != "" && o.back:
		return usageError{errors.New("--profile and --back exclude each other")}
	case o.yes && o.snap:
		return usageError{errors.New("--yes and --snapshot exclude each other")}
	}
	return o.out.check()
}

func runResize(ctx context.Context, c *client.Client, cmd *cobra.Command, ref string, o resizeOpts) error {
	if err := o.check(); err != nil {
		return err
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	target := o.profile
	if o.back {
		vm, err := c.GetVM(ctx, ref)
		if err != nil {
			return err
		}
		if vm.PreviousProfile == "" {
			return fmt.Errorf("VM %s was never resized: there is no profile to go back to (name one with --profile)", vm.Name)
		}
		target = vm.PreviousProfile
	}
	plan, err := c.ResizeVM(ctx, ref, api.ResizeVMRequest{Profile: target, DryRun: true})
	if err != nil {
		return err
	}
	if o.dryRun {
		if o.out.json {
			return writeJSON(stdout, plan)
		}
		return printResizePlan(stdout, ref, plan.Plan)
	}
	planOut := stdout
	if o.out.json {
		planOut = stderr
	}
	if err := printResizePlan(planOut, ref, plan.Plan); err != nil {
		return err
	}
	snap := o.snap
	if !o.yes && !o.snap {
		if snap, err = askSnapshot(terminalOf(cmd).in, stderr); err != nil {
			return err
		}
	}
	if snap {
		if err := snapshotBeforeResize(ctx, c, stderr, ref); err != nil {
			return err
		}
	}
	resp, err := c.ResizeVM(ctx, ref, api.ResizeVMRequest{Profile: target})
	if err != nil {
		return err
	}
	if !o.wait {
		if o.out.json {
			return writeJSON(stdout, resp)
		}
		_, err := fmt.Fprintf(stdout, "Resizing VM %s (%s) from %s to %s: operation %s. 'gpuvm start %s' gives it the new GPU.\n",
			resp.VM.Name, resp.VM.ID, plan.Plan.From.Profile, target, resp.Operation.ID, resp.VM.Name)
		return err
	}
	last, err := c.WaitOperation(ctx, resp.Operation.ID, func(api.Operation) {})
	if err != nil {
		return err
	}
	if o.out.json {
		if err := writeJSON(stdout, last); err != nil {
			return err
		}
	} else if last.State == api.OpDone {
		fmt.Fprintf(stdout, "VM %s now has profile %s (it had %s); 'gpuvm start %s' gives it the new GPU.\n",
			resp.VM.Name, target, plan.Plan.From.Profile, resp.VM.Name)
	}
	if last.State != api.OpDone {
		fmt.Fprintf(stderr, "gpuvm: the resize of VM %s failed, and it is as it was: %s\n", resp.VM.Name, orDash(last.Error))
		return exitError{exitFailure}
	}
	return nil
}

// askSnapshot asks whether to take a snapshot first; no answer at all (the
// input ended) refuses to guess.
func askSnapshot(in io.Reader, w io.Writer) (bool, error) {
	fmt.Fprint(w, "Take a snapshot of the disk first? [y/N] ")
	line, err := bufio.NewReader(in).ReadString('\n')
	if line == "" && err != nil {
		fmt.Fprintln(w)
		return false, usageError{errors.New("no answer to \"take a snapshot first?\": add --snapshot to take one or --yes to go on without")}
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// snapshotBeforeResize takes a snapshot of the VM's disk and waits for it:
// a resize is refused while another operation of the VM is unfinished.
func snapshotBeforeResize(ctx context.Context, c *client.Client, w io.Writer, ref string) error {
	resp, err := c.CreateSnapshot(ctx, ref, "before-resize")
	if err != nil {
		return fmt.Errorf("the snapshot before the resize: %w", err)
	}
	last, err := c.WaitOperation(ctx, resp.Operation.ID, func(api.Operation) {})
	if err != nil {
		return err
	}
	if last.State != api.OpDone {
		return fmt.Errorf("the snapshot before the resize failed (nothing was resized): %s", orDash(last.Error))
	}
	fmt.Fprintf(w, "Snapshot %s taken ('gpuvm snapshot restore %s %s' goes back to it).\n", resp.Snapshot.ID, ref, resp.Snapshot.ID)
	return nil
}

// printResizePlan writes a plan for people.
func printResizePlan(w io.Writer, ref string, p api.ResizePlan) error {
	var b strings.Builder
	fmt.Fprintf(&b, "VM %s: %s -> %s\n", ref, describeSide(p.From), describeSide(p.To))
	fmt.Fprintf(&b, "  Guest driver: %s (%s)\n", p.Driver, p.DriverDetail)
	fmt.Fprintf(&b, "  Licence now:   %s\n", describeLicences(p.From.Licences))
	fmt.Fprintf(&b, "  Licence after: %s\n", describeLicences(p.To.Licences))
	fmt.Fprintf(&b, "  Disk: %s\n", p.Disk)
	if p.Wait != "" {
		fmt.Fprintf(&b, "  Would wait to start: %s\n", p.Wait)
	}
	fmt.Fprintf(&b, "  Before: %s\n", p.Snapshot)
	_, err := io.WriteString(w, b.String())
	return err
}

func describeSide(s api.ResizeSide) string {
	gpu := "no GPU"
	if s.Kind != "" {
		gpu = strings.TrimSpace(s.Kind + " " + s.GPU)
	}
	if s.VCPUs == 0 {
		return fmt.Sprintf("%s (%s)", s.Profile, gpu)
	}
	return fmt.Sprintf("%s (%s, %d vCPUs, %s)", s.Profile, gpu, s.VCPUs, config.FormatSize(s.Memory))
}

func describeLicences(ls []api.LicenceNeed) string {
	if len(ls) == 0 {
		return "none (no GPU)"
	}
	var parts []string
	for _, l := range ls {
		what := "no vGPU licence"
		if len(l.Products) > 0 {
			what = strings.Join(l.Products, " or ")
		}
		parts = append(parts, fmt.Sprintf("%s: %s (%s; %s)", l.Kind, what, l.Why, l.Source))
	}
	return strings.Join(parts, "; ")
}
