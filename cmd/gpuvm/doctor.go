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
	"strconv"
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
			pg := &pgConn{dsn: cfg.Server.Database.DSN}
			defer pg.close()
			e := doctor.Env{Sys: sys, Config: cfg, Simulated: preset, Database: databaseProbe(cfg, pg)}
			bp := newBackendProbe(o, preset, o.stateDir, getenv, cmd.ErrOrStderr())
			e.MIGMode, e.Driver = bp.migMode, bp.driver
			e.Schema = schemaProbe(cfg, pg)
			if cfg.Server.Database.Driver == "postgres" {
				e.RemoteClock = pgClock{pg}
			} else {
				e.NoRemoteClock = "SQLite: one server, no database server's clock to compare with (a fleet shares PostgreSQL)"
			}
			if l := cfg.Server.Licensing; l != nil && l.Enabled {
				e.LicenseServer, e.LicenseToken = l.LicenseServer, l.TokenFile
			}
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

// backendProbe reads what only NVML knows the way gpuvm host inventory
// does: from the mig backend binary (NVML on the real host, the
// simulator's NVML on a simulated one), once: MIG mode (else nvidia-smi)
// and the driver's version and vGPU range. A captured tree cannot tell.
type backendProbe struct {
	o           hostOpts
	preset, dir string
	getenv      func(string) string
	stderr      io.Writer
	loaded      bool
	modes       map[string]bool
	drv         *backend.Driver
	why         string
}

func newBackendProbe(o hostOpts, preset, stateDir string, getenv func(string) string, stderr io.Writer) *backendProbe {
	return &backendProbe{o: o, preset: preset, dir: stateDir, getenv: getenv, stderr: stderr}
}

func (p *backendProbe) load(ctx context.Context) {
	if p.loaded {
		return
	}
	p.loaded = true
	if p.o.sysfsRoot != "" {
		p.why = "not in a captured sysfs tree"
		return
	}
	dir := p.getenv("GPUVM_PLUGIN_DIR")
	if dir == "" {
		dir = loader.DefaultDir()
	}
	tmp := p.dir
	if tmp == "" {
		t, err := os.MkdirTemp("", "gpuvm-doctor-")
		if err != nil {
			p.why = err.Error()
			return
		}
		defer os.RemoveAll(t)
		tmp = t
	}
	log := slog.New(slog.NewTextHandler(p.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	l := loader.New(loader.Config{Dir: dir, Enabled: []string{"mig"}, Logger: log,
		Backend: backend.Config{Simulate: p.preset, StateDir: tmp, NVML: backend.NVMLAuto}})
	defer l.Close()
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = l.Start(startCtx)
	b, ok := l.Backend("mig")
	if !ok {
		p.why = "the mig backend did not start from " + dir
		return
	}
	inv, err := b.Inventory(startCtx)
	if err != nil {
		p.why = "the mig backend's inventory: " + err.Error()
		return
	}
	p.modes = map[string]bool{}
	for _, g := range backend.Merge([]backend.Inventory{inv}).GPUs {
		p.modes[g.Address] = g.MIGEnabled
	}
	p.drv = inv.Driver
	if p.drv == nil {
		p.why = "the mig backend has no NVML: " + strings.Join(inv.Notes, "; ")
	}
}

// driver is the host driver as the mig backend read it through NVML.
func (p *backendProbe) driver(ctx context.Context) (doctor.Driver, bool, string) {
	p.load(ctx)
	if p.drv == nil {
		return doctor.Driver{}, false, orText(p.why, "NVML did not say")
	}
	return doctor.Driver{Version: p.drv.Version, VGPUMin: p.drv.VGPUMin, VGPUMax: p.drv.VGPUMax}, true, ""
}

// migMode is MIG mode from the mig backend, else nvidia-smi.
func (p *backendProbe) migMode(ctx context.Context, addr string) (bool, bool, string) {
	if p.o.sysfsRoot != "" {
		return false, false, "MIG mode is not in a captured sysfs tree"
	}
	p.load(ctx)
	if on, ok := p.modes[addr]; ok {
		return on, true, ""
	}
	if p.preset != "" {
		return false, false, orText(p.why, "the mig backend does not know "+addr)
	}
	out, err := exec.CommandContext(ctx, "nvidia-smi", "-i", addr, "--query-gpu=mig.mode.current", "--format=csv,noheader").Output()
	if err != nil {
		return false, false, orText(p.why, "no mig backend") + "; nvidia-smi: " + err.Error()
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

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// pgConn is the doctor's one connection to the configured PostgreSQL
// server, made at its first use; err is kept, so an unreachable server is
// tried once.
type pgConn struct {
	dsn  string
	conn *pgx.Conn
	err  error
}

func (p *pgConn) get(ctx context.Context) (*pgx.Conn, error) {
	if p.conn == nil && p.err == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		p.conn, p.err = pgx.Connect(cctx, p.dsn)
	}
	return p.conn, p.err
}

func (p *pgConn) close() {
	if p.conn != nil {
		_ = p.conn.Close(context.Background())
	}
}

// schemaVersion is MAX(version) of schema_migrations; -1 when there is no
// gpuvm schema yet.
func (p *pgConn) schemaVersion(ctx context.Context) (int, error) {
	conn, err := p.get(ctx)
	if err != nil {
		return -1, err
	}
	var v *int64
	if err := conn.QueryRow(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&v); err != nil || v == nil {
		return -1, nil
	}
	return int(*v), nil
}

// pgClock is the PostgreSQL server's clock (doctor.RemoteClock).
type pgClock struct{ pg *pgConn }

func (c pgClock) Describe() string {
	if cfg, err := pgx.ParseConfig(c.pg.dsn); err == nil {
		return fmt.Sprintf("PostgreSQL at %s:%d", cfg.Host, cfg.Port)
	}
	return "PostgreSQL"
}

func (c pgClock) Now(ctx context.Context) (time.Time, error) {
	conn, err := c.pg.get(ctx)
	if err != nil {
		return time.Time{}, err
	}
	var t time.Time
	err = conn.QueryRow(ctx, "SELECT now()").Scan(&t)
	return t, err
}

// databaseProbe checks the configured database: PostgreSQL is asked for its
// schema version; a SQLite file (which this pure-Go CLI cannot open) is
// looked for, and gpuvmd checks its schema when it opens it.
func databaseProbe(cfg *config.Config, pg *pgConn) func(context.Context) (string, doctor.Severity, string) {
	db := cfg.Server.Database
	stateDir := stateDirOf(cfg)
	return func(ctx context.Context) (string, doctor.Severity, string) {
		if db.Driver == "postgres" {
			if _, err := pg.get(ctx); err != nil {
				return "PostgreSQL unreachable: " + err.Error(), doctor.Error, "check database { dsn } in /etc/gpuvm and that the server accepts this host (pg_hba.conf)"
			}
			n, _ := pg.schemaVersion(ctx)
			if n < 0 {
				return "PostgreSQL reachable, no gpuvm schema yet (gpuvmd creates it at its first start)", doctor.OK, ""
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
		return fmt.Sprintf("SQLite %s, %.1f MiB", path, float64(fi.Size())/(1<<20)), doctor.OK, ""
	}
}

func stateDirOf(cfg *config.Config) string {
	if cfg.Server.StateDir != "" {
		return cfg.Server.StateDir
	}
	return "/var/lib/gpuvm"
}

// schemaProbe reads the database's schema version (PostgreSQL's
// schema_migrations; for SQLite, which this pure-Go CLI cannot open, the
// version gpuvmd recorded in its state directory when it last opened it)
// and the newest one the installed gpuvmd knows (gpuvmd --version).
func schemaProbe(cfg *config.Config, pg *pgConn) func(context.Context) (doctor.SchemaVersions, string) {
	return func(ctx context.Context) (doctor.SchemaVersions, string) {
		v := doctor.SchemaVersions{Database: -1, Binary: -1}
		var why []string
		bin := "gpuvmd"
		if p, err := exec.LookPath(bin); err == nil {
			bin = p
		} else if _, err := os.Stat("/usr/bin/gpuvmd"); err == nil {
			bin = "/usr/bin/gpuvmd"
		}
		out, err := exec.CommandContext(ctx, bin, "--version").Output()
		if err != nil {
			why = append(why, bin+" --version: "+err.Error())
		} else if n, name, ok := parseGpuvmdVersion(string(out)); ok {
			v.Binary, v.BinaryFrom = n, name+" ("+bin+")"
		} else {
			why = append(why, fmt.Sprintf("%s --version names no database schema: %q", bin, strings.TrimSpace(string(out))))
		}
		if cfg.Server.Database.Driver == "postgres" {
			n, err := pg.schemaVersion(ctx)
			switch {
			case err != nil:
				why = append(why, "PostgreSQL unreachable")
			case n < 0:
				why = append(why, "PostgreSQL has no gpuvm schema")
			default:
				v.Database, v.DatabaseFrom = n, "PostgreSQL"
			}
			return v, strings.Join(why, "; ")
		}
		file := filepath.Join(stateDirOf(cfg), "schema-version")
		b, err := os.ReadFile(file)
		if err != nil {
			why = append(why, "SQLite: "+file+" not written yet (gpuvmd writes it when it opens the database)")
			return v, strings.Join(why, "; ")
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			v.Database, v.DatabaseFrom = n, file+", as gpuvmd last opened the SQLite database"
		} else {
			why = append(why, fmt.Sprintf("%s holds %q, not a number", file, strings.TrimSpace(string(b))))
		}
		return v, strings.Join(why, "; ")
	}
}

// parseGpuvmdVersion reads "gpuvmd 1.2.0 (database schema 9)".
func parseGpuvmdVersion(out string) (schema int, name string, ok bool) {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	head, rest, found := strings.Cut(line, " (database schema ")
	if !found {
		return 0, "", false
	}
	n, err := strconv.Atoi(strings.TrimSuffix(rest, ")"))
	if err != nil {
		return 0, "", false
	}
	return n, head, true
}
