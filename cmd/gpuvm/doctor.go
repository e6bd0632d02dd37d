package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backend/loader"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/doctor"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
)

// hostOpts are the flags of the commands that look at this host itself
// (admin doctor, admin host-prep): the configuration and which sysfs.
type hostOpts struct {
	config, sysfsRoot, simulate, stateDir string
}

func (o *hostOpts) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "configuration directory (default $GPUVM_CONFIG, else /etc/gpuvm)")
	f.StringVar(&o.sysfsRoot, "sysfs-root", "", "read (and write) sysfs in this directory, a captured tree, instead of /sys")
	f.StringVar(&o.simulate, "simulate", "", "a simulated GPU server of this preset (a100x4, a40x2, l40sx4, h100x8, mixed)")
	f.StringVar(&o.stateDir, "state-dir", "", "the simulator's state directory (default: a fresh temporary one)")
}

// open loads the configuration (an empty one when there is none) and opens
// sysfs: the simulator, a captured tree or /sys.
func (o *hostOpts) open(getenv func(string) string, stderr io.Writer) (*config.Config, host.SysFS, string, func(), error) {
	if o.simulate != "" && o.sysfsRoot != "" {
		return nil, nil, "", nil, usageError{errors.New("--simulate and --sysfs-root exclude each other")}
	}
	cfg := &config.Config{}
	dir := configDir(o.config, getenv)
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		l := new(config.Loader)
		c, diags := l.LoadDir(dir)
		if diags.HasErrors() {
			_ = l.WriteDiagnostics(stderr, diags, 100)
			return nil, nil, "", nil, fmt.Errorf("the configuration %s has errors (gpuvm config validate %s)", dir, dir)
		}
		cfg = c
	} else if o.config != "" {
		return nil, nil, "", nil, usageError{fmt.Errorf("--config %s: no such directory", o.config)}
	}
	preset := o.simulate
	if preset == "" && o.sysfsRoot == "" {
		preset = cfg.Server.Host.Simulate
	}
	done := func() {}
	switch {
	case preset != "":
		stateDir := o.stateDir
		if stateDir == "" {
			tmp, err := os.MkdirTemp("", "gpuvm-sim-")
			if err != nil {
				return nil, nil, "", nil, err
			}
			stateDir, done = tmp, func() { os.RemoveAll(tmp) }
			o.stateDir = tmp
		}
		s, err := sim.Open(sim.StateDir(stateDir, preset), preset)
		if err != nil {
			done()
			return nil, nil, "", nil, usageError{fmt.Errorf("--simulate %s: %w", preset, err)}
		}
		return cfg, s, preset, done, nil
	case o.sysfsRoot != "":
		if fi, err := os.Stat(o.sysfsRoot); err != nil || !fi.IsDir() {
			return nil, nil, "", nil, usageError{fmt.Errorf("--sysfs-root %s: not a directory", o.sysfsRoot)}
		}
		return cfg, host.NewDir(o.sysfsRoot), "", done, nil
	}
	return cfg, host.NewDir("/sys"), "", done, nil
}

func newAdminDoctorCmd(getenv func(string) string) *cobra.Command {
	var o hostOpts
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this host for gpuvm: IOMMU, vfio, NVIDIA driver, GPU modes, libvirt, KVM, storage, database",
		Long: `Checks the GPU server it runs on against /etc/gpuvm: the IOMMU (kernel
command line and /sys/kernel/iommu_groups), the vfio and vfio_pci modules, the
NVIDIA host driver and whether it is the vGPU manager, NVML, sriov-manage, each
GPU's mode against its host { gpu } block (VFs enabled for vgpu, MIG mode for
mig, vfio-pci for passthrough), libvirt and QEMU at the configuration's libvirt
uri and whether QEMU can use KVM, the storage pool and its free space,
/dev/kvm, and the database.

Every finding says what was seen and, when it is not ok, the command that
fixes it. --sysfs-root reads a captured sysfs tree instead of /sys (the rest
is still this machine's); --simulate a simulated server.

Exit status: 0 nothing wrong (warnings may be printed), 1 a problem found,
2 wrong usage.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, sys, preset, done, err := o.open(getenv, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer done()
			e := doctor.Env{Sys: sys, Config: cfg, Simulated: preset, Database: databaseProbe(cfg)}
			e.MIGMode = migModeProbe(o, preset, o.stateDir, getenv, cmd.ErrOrStderr())
			r := doctor.Run(cmd.Context(), e)
			if asJSON {
				err = doctor.WriteJSON(cmd.OutOrStdout(), r)
			} else {
				err = doctor.WriteText(cmd.OutOrStdout(), r)
			}
			if err != nil {
				return err
			}
			if r.Problems() > 0 {
				return exitError{exitFailure}
			}
			return nil
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the findings as JSON")
	return cmd
}

// migModeProbe reads MIG mode the way gpuvm host inventory does: from the
// mig backend binary (NVML on the real host, the simulator's NVML on a
// simulated one), else with nvidia-smi. A captured tree cannot tell.
func migModeProbe(o hostOpts, preset, stateDir string, getenv func(string) string, stderr io.Writer) func(context.Context, string) (bool, bool, string) {
	if o.sysfsRoot != "" {
		return func(context.Context, string) (bool, bool, string) {
			return false, false, "MIG mode is not in a captured sysfs tree"
		}
	}
	var modes map[string]bool
	var why string
	load := func(ctx context.Context) {
		if modes != nil || why != "" {
			return
		}
		dir := getenv("GPUVM_PLUGIN_DIR")
		if dir == "" {
			dir = loader.DefaultDir()
		}
		tmp := stateDir
		if tmp == "" {
			t, err := os.MkdirTemp("", "gpuvm-doctor-")
			if err != nil {
				why = err.Error()
				return
			}
			defer os.RemoveAll(t)
			tmp = t
		}
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		l := loader.New(loader.Config{Dir: dir, Enabled: []string{"mig"}, Logger: log,
			Backend: backend.Config{Simulate: preset, StateDir: tmp, NVML: backend.NVMLAuto}})
		defer l.Close()
		startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = l.Start(startCtx)
		b, ok := l.Backend("mig")
		if !ok {
			why = "the mig backend did not start from " + dir
			return
		}
		inv, err := b.Inventory(startCtx)
		if err != nil {
			why = "the mig backend's inventory: " + err.Error()
			return
		}
		modes = map[string]bool{}
		for _, g := range backend.Merge([]backend.Inventory{inv}).GPUs {
			modes[g.Address] = g.MIGEnabled
		}
	}
	return func(ctx context.Context, addr string) (bool, bool, string) {
		load(ctx)
		if on, ok := modes[addr]; ok {
			return on, true, ""
		}
		if preset != "" {
			return false, false, orText(why, "the mig backend does not know "+addr)
		}
		out, err := exec.CommandContext(ctx, "nvidia-smi", "-i", addr, "--query-gpu=mig.mode.current", "--format=csv,noheader").Output()
		if err != nil {
			return false, false, orText(why, "no mig backend") + "; nvidia-smi: " + err.Error()
		}
		switch v := strings.TrimSpace(string(out)); v {
		case "Enabled":
			return true, true, ""
		case "Disabled":
			return false, true, ""
		default:
			return false, false, "nvidia-smi says " + v
		}
	}
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// databaseProbe checks the configured database: PostgreSQL is asked for its
// schema version; a SQLite file (which this pure-Go CLI cannot open) is
// looked for, and gpuvmd checks its schema when it opens it.
func databaseProbe(cfg *config.Config) func(context.Context) (string, doctor.Severity, string) {
	db := cfg.Server.Database
	stateDir := cfg.Server.StateDir
	if stateDir == "" {
		stateDir = "/var/lib/gpuvm"
	}
	return func(ctx context.Context) (string, doctor.Severity, string) {
		if db.Driver == "postgres" {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, db.DSN)
			if err != nil {
				return "PostgreSQL unreachable: " + err.Error(), doctor.Error, "check database { dsn } in /etc/gpuvm and that the server accepts this host (pg_hba.conf)"
			}
			defer conn.Close(ctx)
			var v *int64
			if err := conn.QueryRow(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&v); err != nil {
				return "PostgreSQL reachable, no gpuvm schema yet (gpuvmd creates it at its first start)", doctor.OK, ""
			}
			n := int64(0)
			if v != nil {
				n = *v
			}
			return fmt.Sprintf("PostgreSQL reachable, schema version %d", n), doctor.OK, ""
		}
		path := db.Path
		if path == "" {
			path = filepath.Join(stateDir, "gpuvm.db")
		}
		if fi, err := os.Stat(stateDir); err != nil || !fi.IsDir() {
			return "no state directory " + stateDir, doctor.Warning, "install -d -m 0750 " + stateDir
		}
		fi, err := os.Stat(path)
		if err != nil {
			return "SQLite " + path + " not created yet (gpuvmd creates it at its first start)", doctor.OK, ""
		}
		return fmt.Sprintf("SQLite %s, %.1f MiB (gpuvmd checks its schema version when it opens it, refusing a newer one)", path, float64(fi.Size())/(1<<20)), doctor.OK, ""
	}
}
