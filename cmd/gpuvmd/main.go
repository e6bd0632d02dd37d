// Command gpuvmd is the gpuvm daemon of one GPU server. In this first cut it
// starts and supervises the GPU backends and serves the host's GPU inventory
// and health over HTTP; the VM API, scheduler and libvirt layer build on it.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gpuvm/gpuvm/pkg/alert"
	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backend/loader"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/heartbeat"
	"github.com/gpuvm/gpuvm/pkg/hostmount"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/task"
	"github.com/gpuvm/gpuvm/pkg/usage"
	"github.com/gpuvm/gpuvm/pkg/webhook"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// gcPercent is gpuvmd's garbage collection target when GOGC does not set
// one: a collection when the heap has grown half over what was live, not
// Go's default of doubling. gpuvmd keeps a small heap (tens of MB with
// 10,000 VMs queued) and makes large short-lived ones (a dispatch round,
// the estimates' replay of the whole queue); at 100 the heap's peak
// between collections set its resident memory (212 MB with 10,000
// queued, test/bench's scale harness), at 50 182 MB for the same rate of
// creates (issue #26).
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpuvmd:", err)
		os.Exit(1)
	}
}

type options struct {
	config, listen, debugListen, stateDir, simulate, sysfsRoot, pluginDir, nvml, backends, database, libvirtURI string
	db                                                                                                          profileDB
	ready                                                                                                       func(addr string)
	stdout                                                                                                      io.Writer
	bootTimeout, homeQuotaEvery                                                                                 time.Duration
	test                                                                                                        testSeams
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "migrate-db":
			return runMigrateDB(ctx, args[1:], stdout, stderr) // migrate.go
		case "backup":
			return runBackup(ctx, args[1:], getenv, stdout, stderr) // backup.go
		case "restore":
			return runRestore(ctx, args[1:], getenv, stdout, stderr)
		case "join-installation":
			return runJoinInstallation(ctx, args[1:], getenv, stdout, stderr) // join.go
		}
	}
	return runOpts(ctx, args, getenv, stdout, stderr, nil)
}

// runWithReady runs gpuvmd with a clean environment and calls ready with the
// address it serves on; tests use it.
func runWithReady(ctx context.Context, args []string, logs io.Writer, ready func(string)) error {
	return runOpts(ctx, args, func(string) string { return "" }, io.Discard, logs, ready)
}

func runOpts(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ready func(string)) error {
	fs := flag.NewFlagSet("gpuvmd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{ready: ready, stdout: stdout}
	o.stateFlags(fs)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to serve HTTP on")
	fs.StringVar(&o.debugListen, "debug-listen", "", "serve Go's profiles (/debug/pprof/) on this loopback address, without sign-in")
	fs.StringVar(&o.simulate, "simulate", "", "serve a simulated GPU server of this preset (a100x4, a40x2, l40sx4, h100x8, mixed)")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "", "read sysfs from this directory instead of /sys")
	fs.StringVar(&o.pluginDir, "plugin-dir", "", "directory of the gpuvm-backend-* binaries (default: next to gpuvmd)")
	fs.StringVar(&o.nvml, "nvml", "auto", "use NVML: auto or none")
	fs.StringVar(&o.backends, "backends", "", "comma-separated backends to start (default: all)")
	fs.StringVar(&o.libvirtURI, "libvirt-uri", "", "libvirt connection URI (default: the configuration's libvirt uri, else qemu:///system; test:///default runs without libvirtd)")
	fs.DurationVar(&o.bootTimeout, "boot-timeout", orchestrator.DefaultBootTimeout, "a started VM is booting until its guest has an address, at most this long; then it is ready")
	fs.DurationVar(&o.homeQuotaEvery, "home-quota-every", orchestrator.HomeQuotaEvery, "how often the homes' usage is read, their quotas applied again and people near theirs warned")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Fprintf(stdout, "gpuvmd %s (database schema %d)\n", version, store.SchemaVersion())
		return nil
	}
	if o.bootTimeout <= 0 {
		return fmt.Errorf("--boot-timeout must be positive, not %s", o.bootTimeout)
	}
	if o.homeQuotaEvery < time.Second {
		return fmt.Errorf("--home-quota-every must be a second or more, not %s", o.homeQuotaEvery)
	}
	if o.nvml != "auto" && o.nvml != "none" {
		return fmt.Errorf("--nvml must be auto or none, not %q", o.nvml)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := o.loadConfigFiles(fs, getenv, stderr)
	if err != nil {
		return err
	}
	if o.libvirtURI == "" {
		o.libvirtURI = "qemu:///system"
	}
	if o.pluginDir == "" {
		o.pluginDir = getenv("GPUVM_PLUGIN_DIR")
	}
	if o.pluginDir == "" {
		o.pluginDir = loader.DefaultDir()
	}
	seams, err := readTestSeams(getenv, o.libvirtURI)
	if err != nil {
		return err
	}
	o.test = seams
	return serve(ctx, o, cfg, log)
}

func serve(ctx context.Context, o options, cfg *liveConfig, log *slog.Logger) error {
	if cfg != nil {
		stop := cfg.reloadOnSIGHUP(ctx, log)
		defer stop()
	}
	if o.debugListen != "" {
		if err := serveDebug(ctx, o.debugListen, log); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.stateDir, 0o755); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	// The database first: its installation ID goes into everything the
	// backends and the hypervisor make, and the reconciler removes only
	// what carries it. It is closed last, after the loops that use it.
	st, err := openStore(ctx, o, log)
	if err != nil {
		return err
	}
	defer st.Close()
	inst, err := st.Installation(ctx)
	if err != nil {
		return err
	}
	log.Info("installation", "id", inst.ID, "since", inst.CreatedAt)
	l, err := startBackends(ctx, o, inst.ID, log)
	if err != nil {
		return err
	}
	defer l.Close()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	// This gpuvmd's name and heartbeat; on PostgreSQL, a node of the
	// fleet sharing the database (fleet.go).
	apiURL := server.ListenURL("http", ln.Addr().String())
	nd, err := openNode(ctx, o, cfg, st, apiURL, log)
	if err != nil {
		return err
	}
	tokenPath, created, err := server.EnsureAdmin(ctx, st, o.stateDir)
	if err != nil {
		return err
	}
	if created {
		log.Info("created the admin user; its token is in the state directory", "token_file", tokenPath)
	}
	var hvOpts []hypervisor.Option
	if o.test.diskDir != "" {
		log.Warn("test seam set: the test driver's disk overlays are files of a directory in the disk snapshots", "env", envTestDiskDir, "dir", o.test.diskDir)
		hvOpts = append(hvOpts, hypervisor.WithTestDiskDir(o.test.diskDir))
	}
	hv, err := hypervisor.Open(ctx, o.libvirtURI, log, hvOpts...)
	if err != nil {
		return fmt.Errorf("open libvirt (--libvirt-uri test:///default runs gpuvmd without libvirtd): %w", err)
	}
	defer hv.Close()
	// The storage pool of overlays and seeds, made when missing (pool.go).
	keepPool(ctx, &poolKeeper{hv: hv, log: log}, cfg)
	profiles := func() *config.Config { return &config.Config{} }
	if cfg != nil {
		profiles = cfg.Load
	}
	// The timed rules of sharing (leases, idle stop, window ends,
	// preemption) send their notices to the policy's webhook.
	notices := webhook.New(nil, nil, nil, log)
	defer notices.Close()
	orch := newOrchestrator(ctx, o, st, l, hv, nd, profiles, notices, inst.ID, log)
	// GPU sampling, sample retention, alert rules and /metrics.
	src, noSource, closeSource := monitor.OpenSource(monitor.SourceOptions{Simulate: o.simulate, StateDir: o.stateDir,
		SysFSRoot: o.sysfsRoot, NoNVML: o.nvml == string(backend.NVMLNone)})
	defer closeSource()
	mon := monitor.New(monitor.Config{Host: orch.Host(), Store: st, Source: src, NoSource: noSource, Settings: profiles().Server.Monitor, Log: log})
	// The alert rules, evaluated after each round, notify their webhooks.
	alertHooks := webhook.New(nil, st, nil, log)
	defer alertHooks.Close()
	mon.Observe(alert.NewEvaluator(alert.Config{Host: orch.Host(), Store: st, Rules: func() []*config.Alert { return profiles().Policy.Alerts },
		Idle: mon.Idle(), Backends: alert.LoaderHealth(l), Notifier: alertHooks, Log: log, Interval: mon.Settings().Interval}))
	mon.Exporter().ExportOrphans(orch.OrphanCounts)
	orch.ObserveRounds(mon.Exporter().ObserveDispatchRound)
	// The homes' usage, read every few minutes by the home quotas' loop.
	mon.Exporter().ExportVolumes(api.VolumeHome, orch.HomeQuotas().Usage)
	// This host's row in the hosts table: registered now, then a heartbeat
	// with the inventory every node interval.
	hb := &heartbeat.Beater{Store: st, Host: orch.Host(), APIURL: apiURL, Version: version, Log: log,
		Inventory: func(ctx context.Context) gpu.HostInventory { hi, _ := server.CollectInventory(ctx, l, log); return hi },
		Every:     nd.interval, Publish: nd.publish(orch)}
	ledger := usage.NewLedger(st)
	// The loops run until serve returns, after the HTTP server has shut
	// down (deferred after everything they use, so they stop first).
	loopCtx, stopLoops := context.WithCancel(ctx)
	var loops errgroup.Group
	defer func() { stopLoops(); _ = loops.Wait() }()
	if err := runLoops(loopCtx, &loops, o, cfg, st, orch, nd, hb, mon, ledger, profiles, log); err != nil {
		return err
	}
	// Tasks (pkg/task): their runners followed, their output kept under
	// the state directory, their VMs deleted when the commands end.
	taskLogs := filepath.Join(o.stateDir, "tasks")
	var launcher atomic.Pointer[server.Server]
	sup, err := newTaskSupervisor(st, hv, orch, nd, taskLogs, &launcher, log)
	if err != nil {
		return err
	}
	loops.Go(func() error { sup.Run(loopCtx); return nil })
	deps := server.Deps{Auth: st, Backends: l, Log: log, Store: st, Worker: nd.waker(orch), Admission: orch,
		Fleet: nd.serverFleet(), HostTimeout: nd.timeout, Bookings: orch, Host: orch.Host(),
		Metrics: mon.Exporter(), MetricsAuth: profiles().Server.Monitor.MetricsAuth, Ledger: ledger, Orphans: orch,
		HTTP: server.LimitsOf(profiles().Server.HTTP), Version: version, EventPoll: nd.eventPoll(), TaskLogs: taskLogs, Tasks: sup}
	if cfg != nil {
		deps.Config = cfg
	}
	deps.Volumes = orch                // data disks: made, grown and deleted on this host (volumes.go)
	deps.HomeUsage = orch.HomeQuotas() // the homes' used bytes and quotas, as last read
	deps.Consoles = hv                 // the console and tunnel proxies find displays and guest addresses here
	// What VMs' state allows: the host's versions and NVML, read once
	// (capabilities.go).
	deps.Capabilities = hostFacts(ctx, o, hv, log)
	// The stored disk images: import, publish, uploads (images.go).
	deps.Images = openImages(ctx, o, cfg, st, hv, orch, profiles, log)
	// A profile whose image, kernel or template is missing is marked
	// unavailable, and its VMs refused (pkg/images.Availability).
	deps.Availability = availability(st, hv)
	// Unattended Windows installs (pkg/server/windowsinstall.go).
	deps.Windows = &server.WindowsInstalls{Host: hv, Pool: profiles().Server.Libvirt.StoragePool, Installation: inst.ID}
	// Password sign-in and the directory's sync (auth.go).
	dir, err := openDirectory(profiles(), log)
	if err != nil {
		return err
	}
	if dir != nil {
		deps.SignIn = dir
	}
	if op := openOIDC(profiles(), log); op != nil {
		deps.OIDC = op
	}
	srv := server.New(deps)
	launcher.Store(srv)
	srv.StartEstimates() // the first answers find the queue's estimates made
	nd.relayEvents(st, srv.NudgeEvents)
	if a := profiles().Server.Auth; dir != nil && a.LDAP.SyncEvery > 0 {
		loops.Go(func() error { syncDirectory(loopCtx, dir, st, srv, a.LDAP.SyncEvery, log); return nil })
	}
	return serveHTTP(ctx, o, cfg, srv, ln, tokenPath, l.Names(), profiles, log)
}

// startBackends starts the backend plugins; gpuvmd needs at least one.
func startBackends(ctx context.Context, o options, installation string, log *slog.Logger) (*loader.Loader, error) {
	var enabled []string
	if o.backends != "" {
		enabled = strings.Split(o.backends, ",")
	}
	l := loader.New(loader.Config{
		Dir: o.pluginDir, Enabled: enabled, Logger: log,
		Backend: backend.Config{SysFSRoot: o.sysfsRoot, Simulate: o.simulate, StateDir: o.stateDir, NVML: backend.NVMLMode(o.nvml), Installation: installation},
	})
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := l.Start(startCtx)
	cancel()
	if err != nil {
		log.Warn("some backends did not start", "err", err)
	}
	if len(l.Names()) == 0 {
		l.Close()
		return nil, fmt.Errorf("no backend started from %s", o.pluginDir)
	}
	if o.simulate != "" {
		log.Warn("serving a SIMULATED GPU server: no real GPU is used", "preset", o.simulate)
	}
	return l, nil
}

// newOrchestrator makes the VM lifecycle of this host, and its fleet node
// knows whether it leads before the first round.
// newTaskSupervisor is the task supervisor (pkg/task) of this gpuvmd. The
// VMs of tasks made before them (an array's elements, retries) are made as
// the server makes a task's, once launcher holds it.
func newTaskSupervisor(st *store.Store, hv *hypervisor.Conn, orch *orchestrator.Orchestrator, nd *node, taskLogs string,
	launcher *atomic.Pointer[server.Server], log *slog.Logger) (*task.Supervisor, error) {
	launch := func(ctx context.Context, t *store.Task) error {
		if srv := launcher.Load(); srv != nil {
			return srv.LaunchTask(ctx, t)
		}
		return fmt.Errorf("task %s waits: gpuvmd starts: %w", t.ID, store.ErrConflict)
	}
	// A task in its owner's own VM (--in) moves it to the task's profile
	// and back as the owner's resize would; the profiles were checked for
	// the owner when the task was submitted.
	resize := func(ctx context.Context, vm *store.VM, profile string, t *store.Task) error {
		by := orchestrator.ResizeBy{Name: t.Owner, Admin: true}
		if t.VMGroup != "" {
			by.Groups = []string{t.VMGroup}
		}
		_, _, _, err := orch.QueueResize(ctx, vm, profile, by)
		return err
	}
	return task.New(task.Config{Store: st, Log: log, LogDir: taskLogs, Host: orch.Host(), Wake: nd.waker(orch).Wake, Launch: launch, Resize: resize,
		Withdraw: orch.WithdrawStart, Leader: nd.leader(),
		Channel: func(ctx context.Context, vmID string) (string, error) {
			x, err := hv.XML(ctx, vmID, false)
			if err != nil {
				return "", err
			}
			return domain.TaskChannelPath(x)
		}})
}

func newOrchestrator(ctx context.Context, o options, st *store.Store, l *loader.Loader, hv *hypervisor.Conn, nd *node,
	profiles func() *config.Config, notices *webhook.Notifier, installation string, log *slog.Logger) *orchestrator.Orchestrator {
	// A simulated server's GPUs cannot reach a real QEMU; libvirt's test
	// driver takes the hostdevs as they are.
	detach := o.simulate != "" && !strings.EqualFold(hv.Driver(), "test")
	if detach {
		log.Warn("simulated GPU server with a real hypervisor: VMs boot without their (simulated) GPU", "libvirt", o.libvirtURI)
	}
	// The timed rules of sharing are the fleet's work: they see every
	// host's VMs, so their idle detector does too.
	idleSettings := profiles().Server.Monitor
	idle := monitor.NewIdle(st, "", cmp.Or(idleSettings.IdleThreshold, config.DefaultIdleThreshold),
		cmp.Or(idleSettings.Interval, config.DefaultMonitorInterval), nil)
	// A started VM is booting until its guest has an address (DHCP
	// leases, then the guest agent); libvirt's test driver runs no guest.
	var guests orchestrator.Guests = hv
	if strings.EqualFold(hv.Driver(), "test") {
		guests = nil
		log.Info("libvirt's test driver runs no guest: VMs are ready as soon as their domain runs", "libvirt", o.libvirtURI)
	}
	orch := orchestrator.New(orchestrator.Config{Store: st, Backends: l, Hypervisor: hv, Profiles: profiles, Log: log, DetachSimulatedGPUs: detach,
		Guests: guests, BootTimeout: o.bootTimeout, HomeQuotaEvery: o.homeQuotaEvery, Installation: installation, StateDir: o.stateDir,
		Idle: idle, Notifier: notices,
		DomainPrefix: o.test.domainPrefix, Host: nd.name, Fleet: nd.orchestratorFleet(), Leader: nd.leader(), HostTimeout: nd.timeout,
		Availability: availability(st, hv)},
		orchestrator.WithHook(o.test.hook(ctx, log)))
	// Where the shares' read-only views and image homes are mounted
	// (pkg/hostmount): said once, a warning where the VMs may not see them.
	switch where := hostmount.Detect(); {
	case where.Unseen:
		log.Warn(where.Why)
	case where.ViaSystemd:
		log.Info(where.Why)
	}
	if err := orch.ReleaseShareViews(ctx); err != nil { // read-only views of shares no longer declared
		log.Warn("could not remove the read-only views of shares no longer declared", "err", err)
	}
	nd.start(ctx, orch)
	return orch
}

// runLoops reconciles once, registers the host, and starts in loops what
// runs until ctx ends: the orchestrator, the fleet node, the heartbeat, the
// monitor, the audit log's pruner, scheduled backups and the usage ledger's
// warm-up.
func runLoops(ctx context.Context, loops *errgroup.Group, o options, cfg *liveConfig, st *store.Store, orch *orchestrator.Orchestrator,
	nd *node, hb *heartbeat.Beater, mon *monitor.Monitor, ledger *usage.Ledger, profiles func() *config.Config, log *slog.Logger) error {
	if rep, err := orch.Reconcile(ctx); err != nil {
		log.Error("start-up reconcile incomplete; it is retried every minute", "err", err, "fixed", !rep.Empty())
	}
	loop := func(run func(context.Context)) { loops.Go(func() error { run(ctx); return nil }) }
	loop(orch.Run)
	loop(nd.run)
	if err := hb.Register(ctx); err != nil {
		return fmt.Errorf("register this host in the database: %w", err)
	}
	loop(hb.Run)
	loop(mon.Run)
	// The homes' quotas: applied again, usage read, owners warned near
	// their quota (orchestrator/homequota.go).
	loop(orch.HomeQuotas().Run)
	// The audit log's retention (server.audit.retention, read at each
	// round so that a reload applies).
	pruner := &auditPruner{st: st, every: auditPruneInterval, log: log.With("component", "audit"),
		retention: func() time.Duration {
			if cfg == nil {
				return config.DefaultAuditRetention
			}
			return cfg.Load().Server.Audit.Retention
		}}
	loop(pruner.run)
	// Scheduled backups (server.backup): a copy of the live database and
	// the ledgers every so often, the oldest pruned (backup.go).
	if b := newBackupScheduler(o, profiles, log, mon.Exporter().ObserveBackup); b != nil {
		loop(b.run)
	}
	// The usage ledger keeps past hours' utilisation in memory: read the
	// last 90 days now, in the background, so the first usage query after a
	// start is as quick as the others.
	loop(func(ctx context.Context) {
		start := time.Now()
		if err := ledger.Warm(ctx, 90*24*time.Hour); err != nil && ctx.Err() == nil {
			log.Warn("usage ledger: could not read past utilisation; the first usage query reads it", "err", err)
			return
		}
		log.Debug("usage ledger warm", "took", time.Since(start))
	})
	return nil
}

// serveHTTP serves the API on ln until ctx ends (or the server fails), then
// shuts it down: event streams first, so that Shutdown need not wait for
// them.
func serveHTTP(ctx context.Context, o options, cfg *liveConfig, api *server.Server, ln net.Listener, tokenPath string, backends []string,
	profiles func() *config.Config, log *slog.Logger) error {
	if cfg != nil {
		// A reload on SIGHUP is a change too: the audit log records it
		// as it records POST /v1/admin/reload.
		recordReload := func(err error, diagnostics string) {
			e := &store.AuditEntry{Action: "config.reload", Target: "config", Source: "SIGHUP", Outcome: store.AuditOK}
			if err != nil {
				e.Outcome, e.Detail = store.AuditRefused, err.Error()
				if first, _, _ := strings.Cut(diagnostics, "\n"); first != "" {
					e.Detail += ": " + first
				}
			}
			api.RecordAudit(ctx, e)
		}
		cfg.sighup.Store(&recordReload)
		defer cfg.sighup.Store(nil)
	}
	// Header, body, write and idle timeouts, and connections per IP
	// (pkg/server/limits.go).
	srv := api.HTTPServer()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(api.LimitListener(ln)) }()
	log.Info("gpuvmd ready", "listen", ln.Addr().String(), "backends", backends, "state_dir", o.stateDir,
		"admin_token_file", tokenPath)
	var unavailable func(p *config.Profile) string
	if api.Availability != nil {
		unavailable = func(p *config.Profile) string { return api.Availability.Unavailable(ctx, profiles(), p) }
	}
	fmt.Fprint(o.stdout, readyHelp(tokenPath, ln.Addr().String(), profiles(), unavailable))
	if o.ready != nil {
		o.ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve HTTP: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	api.Close() // event streams end, so Shutdown need not wait for them
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shut down HTTP: %w", err)
	}
	return nil
}

// profileDB is the database section of the configuration.
type profileDB struct{ driver, path, dsn string }

// stateFlags are the flags that say where gpuvmd's state is: the same for
// serving, gpuvmd backup and gpuvmd restore.
func (o *options) stateFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.config, "config", "", "configuration directory (default $GPUVM_CONFIG, else /etc/gpuvm if it exists)")
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/gpuvm", "state directory")
	fs.StringVar(&o.database, "database", "", "database: a SQLite file path, or a postgres:// DSN (default: STATE_DIR/gpuvm.db)")
}

// loadConfigFiles finds the configuration (--config, $GPUVM_CONFIG,
// /etc/gpuvm), loads it and fills the options the command line did not
// set from its server block; nil without a configuration.
func (o *options) loadConfigFiles(fs *flag.FlagSet, getenv func(string) string, stderr io.Writer) (*liveConfig, error) {
	if o.config == "" {
		o.config = getenv("GPUVM_CONFIG")
	}
	if o.config == "" {
		if fi, err := os.Stat("/etc/gpuvm"); err == nil && fi.IsDir() {
			o.config = "/etc/gpuvm"
		}
	}
	if o.config == "" {
		return nil, nil
	}
	c, err := loadConfig(o.config, stderr)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.fromConfig(c.Load().Server, set) // flags override the files
	return c, nil
}

// openStore opens the database of storeConfig.
func openStore(ctx context.Context, o options, log *slog.Logger) (*store.Store, error) {
	st, err := store.Open(ctx, o.storeConfig(log))
	if err != nil {
		return nil, fmt.Errorf("open the database: %w", err)
	}
	if err := recordSchemaVersion(ctx, st, o.stateDir); err != nil {
		log.Warn("record the database's schema version (the package's preinst reads it to refuse a downgrade)", "err", err)
	}
	return st, nil
}

// SchemaVersionFile, in the state directory, holds the schema version of
// the database gpuvmd last opened: the package's preinst reads it to refuse
// a downgrade over a newer schema, and gpuvm admin doctor to report it.
const SchemaVersionFile = "schema-version"

// recordSchemaVersion writes the database's schema version to the state
// directory's SchemaVersionFile, replacing it whole.
func recordSchemaVersion(ctx context.Context, st *store.Store, stateDir string) error {
	v, err := st.CurrentSchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	path := filepath.Join(stateDir, SchemaVersionFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// storeConfig is the database: --database, else the configuration's, else
// SQLite in the state directory.
func (o options) storeConfig(log *slog.Logger) store.Config {
	cfg := store.Config{Driver: store.DriverSQLite, DSN: filepath.Join(o.stateDir, "gpuvm.db"), Logger: log}
	switch {
	case o.database != "":
		cfg.DSN = o.database
		if strings.HasPrefix(o.database, "postgres://") || strings.HasPrefix(o.database, "postgresql://") {
			cfg.Driver = store.DriverPostgres
		}
	case o.db.driver == "postgres":
		cfg.Driver, cfg.DSN = store.DriverPostgres, o.db.dsn
	case o.db.path != "":
		cfg.DSN = o.db.path
	}
	return cfg
}

// Test seams: environment variables that only the end-to-end tests
// (test/e2e) set, to run the real gpuvmd process in ways a test needs. They
// are not configuration: gpuvmd ignores them unless they are set, and no
// deployment should set them.
const (
	// envTestPauseAt names an orchestrator hook point (orchestrator.PausePoints:
	// a create's, a delete's, a stop's, a start's, a reboot's, a data disk's
	// creation). Every VM operation (or disk creation) that reaches it logs
	// pauseMessage (with point and vm) and blocks there until gpuvmd stops, so
	// that a test can SIGKILL gpuvmd at exactly that step.
	envTestPauseAt = "GPUVM_TEST_PAUSE_AT"
	// envTestDomainPrefix replaces the "gpuvm-" that starts the name of
	// every domain gpuvmd makes and the only domains its reconciler removes:
	// tests that share one libvirtd give each gpuvmd its own.
	envTestDomainPrefix = "GPUVM_TEST_DOMAIN_PREFIX"
	// envTestDiskDir, on libvirt's test driver only, is the directory of
	// the qcow2 files that stand for the VMs' disk overlays in the disk
	// snapshots (hypervisor.WithTestDiskDir): a snapshot or restore of a
	// stopped VM then runs the real qemu-img without a guest. gpuvmd
	// refuses to start with it on a libvirt URI of another driver
	// (isTestDriverURI), so a production host cannot be pointed at it by
	// mistake.
	envTestDiskDir = "GPUVM_TEST_DISK_DIR"
	pauseMessage   = "GPUVM_TEST_PAUSE_AT: paused at a hook point until gpuvmd stops"
)

var testDomainPrefix = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)

type testSeams struct {
	pauseAt, domainPrefix, diskDir string
}

// readTestSeams reads the test seams from the environment, for a gpuvmd
// on libvirtURI, and refuses a value they cannot honour.
func readTestSeams(getenv func(string) string, libvirtURI string) (testSeams, error) {
	s := testSeams{pauseAt: getenv(envTestPauseAt), domainPrefix: getenv(envTestDomainPrefix), diskDir: getenv(envTestDiskDir)}
	if s.diskDir != "" && !filepath.IsAbs(s.diskDir) {
		return s, fmt.Errorf("$%s=%q: want an absolute directory", envTestDiskDir, s.diskDir)
	}
	if s.diskDir != "" && !isTestDriverURI(libvirtURI) {
		return s, fmt.Errorf("$%s is set, but the libvirt URI is %q: it is a test seam for libvirt's test driver (test:///…, test+unix:///…) only; unset it", envTestDiskDir, libvirtURI)
	}
	if s.pauseAt != "" && !slices.Contains(orchestrator.PausePoints(), s.pauseAt) {
		return s, fmt.Errorf("$%s=%q is not a hook point; they are %q", envTestPauseAt, s.pauseAt, orchestrator.PausePoints())
	}
	if s.domainPrefix != "" && !testDomainPrefix.MatchString(s.domainPrefix) {
		return s, fmt.Errorf("$%s=%q: a domain prefix is a lower-case letter, then up to 30 letters, digits and dashes", envTestDomainPrefix, s.domainPrefix)
	}
	return s, nil
}

// isTestDriverURI says whether uri names libvirt's test driver: test:///…
// in this process, or test+TRANSPORT://… through a libvirtd.
func isTestDriverURI(uri string) bool {
	scheme, _, ok := strings.Cut(uri, "://")
	driver, _, _ := strings.Cut(scheme, "+")
	return ok && driver == "test"
}

// hook is the orchestrator's hook: nil unless a pause point is set.
func (s testSeams) hook(ctx context.Context, log *slog.Logger) func(vmID, point string) error {
	if s.pauseAt == "" {
		return nil
	}
	log.Warn("test seam set: VM operations pause at a hook point", "env", envTestPauseAt, "point", s.pauseAt)
	return func(vmID, point string) error {
		if point != s.pauseAt {
			return nil
		}
		log.Warn(pauseMessage, "point", point, "vm", vmID)
		<-ctx.Done()
		return fmt.Errorf("paused at %q when gpuvmd stopped", point)
	}
}

// readyHelp is what gpuvmd prints once it serves: where the admin token is
// and two curl lines to try, the second creating a VM from the first
// profile that is available (unavailable says why one is not, "" when it
// is; nil: all are), then each profile that is not, and why.
func readyHelp(tokenPath, addr string, cfg *config.Config, unavailable func(*config.Profile) string) string {
	auth := fmt.Sprintf("-H \"Authorization: Bearer $(cat %s)\"", tokenPath)
	var b strings.Builder
	fmt.Fprintf(&b, "gpuvmd is ready on http://%s\n  admin token: %s\n", addr, tokenPath)
	fmt.Fprintf(&b, "  the GPUs:    curl -s %s http://%s/v1/gpus\n", auth, addr)
	var first *config.Profile
	var not []string
	for _, p := range cfg.SortedProfiles() {
		why := ""
		if unavailable != nil {
			why = unavailable(p)
		}
		switch {
		case why != "":
			not = append(not, fmt.Sprintf("  unavailable: profile %s: %s\n", p.Name, why))
		case first == nil:
			first = p
		}
	}
	if first != nil {
		fmt.Fprintf(&b, "  create a VM: curl -s %s -H 'Content-Type: application/json' -d '{\"profile\":\"%s\"}' http://%s/v1/vms\n",
			auth, first.Name, addr)
	}
	fmt.Fprintf(&b, "  or the CLI:  gpuvm login http://%s < %s\n", addr, tokenPath)
	for _, n := range not {
		b.WriteString(n)
	}
	return b.String()
}
