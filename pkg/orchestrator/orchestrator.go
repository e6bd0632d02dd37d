// Package orchestrator runs the VM lifecycle of one gpuvmd: it places queued
// VMs on GPU slots, has the backends make their devices and libvirt their
// domains, deletes them again, and reconciles the database with the host
// after a crash. Every host change is preceded by a database row that says
// what is about to happen (intent first), and every step is idempotent, so a
// create or delete interrupted at any point is finished by the next
// Reconcile.
package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Backends gives the running GPU backends (a *loader.Loader).
type Backends interface {
	Names() []string
	Backend(name string) (backend.Backend, bool)
}

// Hypervisor is what the orchestrator asks of libvirt (a *hypervisor.Conn).
type Hypervisor interface {
	CreateVM(ctx context.Context, req hypervisor.VMRequest) (hypervisor.Info, error)
	DeleteVM(ctx context.Context, uuid string, shutdownTimeout time.Duration) error
	Lookup(ctx context.Context, uuid string) (hypervisor.Info, error)
	List(ctx context.Context) ([]hypervisor.Info, error)
	Start(ctx context.Context, uuid string) error
	Shutdown(ctx context.Context, uuid string, timeout time.Duration) (graceful bool, err error)
	Reboot(ctx context.Context, uuid string) error
	// ReplaceHostdevs gives a stopped VM's domain the GPU devices it starts
	// on next, in place of those it had (actions.go).
	ReplaceHostdevs(ctx context.Context, uuid string, hs []domain.Hostdev) error
	// CleanupVM removes what a CreateVM that never finished may have left:
	// the domain, and the VM's disk overlay and seed in pool.
	CleanupVM(ctx context.Context, uuid, name, pool string) error
}

// Steps of the create and delete operations. Each is recorded with
// SetOperationStep before it is done, and the test hook (WithHook) is called
// at each of the points named Hook*.
const (
	StepAllocate     = "allocate GPU"
	StepCreateDevice = "create device"
	StepPrepareDisk  = "prepare disk"
	StepDeleteDomain = "delete domain"
	StepRemoveDevice = "remove devices"
	StepRelease      = "release GPU"

	HookClaimed        = "claimed"         // slots claimed, VM allocating
	HookDeviceCreated  = "device created"  // backend made the device, not yet recorded
	HookDeviceRecorded = "device recorded" // every device recorded, VM not yet creating
	HookDiskPrepared   = "disk prepared"   // VM creating, domain not yet made
	HookDomainCreated  = "domain created"  // domain running, VM not yet running
	HookRunning        = "running"         // VM running, operation not yet finished
	HookDomainDeleted  = "domain deleted"  // delete: domain gone, devices not yet
	HookDevicesRemoved = "devices removed" // delete: devices gone, slots not yet free
)

// CreateHooks and DeleteHooks list the hook points in order.
var (
	CreateHooks = []string{HookClaimed, HookDeviceCreated, HookDeviceRecorded, HookDiskPrepared, HookDomainCreated, HookRunning}
	DeleteHooks = []string{HookDomainDeleted, HookDevicesRemoved}
)

// errAbandoned: the hook stopped the work, as a crash would.
var errAbandoned = errors.New("abandoned at a test hook")

// Config is what an Orchestrator needs.
type Config struct {
	Store      *store.Store
	Backends   Backends
	Hypervisor Hypervisor
	// Profiles is the configuration in force.
	Profiles func() *config.Config
	// Host names this server in the database (default: the hostname).
	Host string
	// Installation is the ID of the gpuvm installation (the database's,
	// store.Installation), written into every domain made; the reconciler
	// removes nothing that names another (orphans.go). Empty: read from
	// the store.
	Installation string
	// StateDir is gpuvmd's state directory (its --state-dir, which wins
	// over server.state_dir), where read-only shares' views are made;
	// empty: the configuration's.
	StateDir string
	// DomainPrefix starts the name of every domain this orchestrator makes
	// (default "gpuvm-"); the reconciler only ever removes domains that
	// carry gpuvm's metadata and this prefix.
	DomainPrefix string
	// DomainType forces the domain type; empty: the connection's choice.
	DomainType domain.Type
	// DetachSimulatedGPUs leaves the GPU hostdevs out of the domains: a
	// simulated server's devices do not exist, and a real QEMU refuses to
	// start with them. The devices are still made, recorded and removed on
	// the simulated host; the VM boots without a GPU and says why.
	DetachSimulatedGPUs bool
	// Workers bounds the creates and deletes run at once (default 4).
	Workers int
	// Tick is how often queued VMs are retried without a wake-up (default
	// 5s); ReconcileEvery how often Run reconciles (default 1m).
	Tick, ReconcileEvery time.Duration
	// VirtiofsCheck is how often, besides each reconcile, the virtiofs
	// daemons of this host's running VMs are looked at when homes or
	// shares are configured (default 10s; virtiofs.go): a dead one hangs
	// its guest's mounts, which its owner should hear of in seconds.
	VirtiofsCheck time.Duration
	// HomeQuotaEvery is how often the homes' usage is read and their
	// quotas applied again (default HomeQuotaEvery, 5 minutes).
	HomeQuotaEvery time.Duration
	// ShutdownTimeout is how long a deleted or stopped VM gets to shut down
	// before it is forced off (default 30s).
	ShutdownTimeout time.Duration
	// Guests is where a started VM's guest is seen to be up (boot.go): a
	// VM is running in phase "booting" until its guest has an address,
	// or BootTimeout (default 5m) has passed, then "ready"; booting VMs
	// are looked at every BootCheck (default 2s). nil: guests are not
	// watched (libvirt's test driver runs none), and a VM is ready as
	// soon as its domain runs.
	Guests                 Guests
	BootTimeout, BootCheck time.Duration
	// DialGuest connects to a port of a guest (a profile's desktop server,
	// which a booting VM waits for: bootdesktop.go); nil: a net.Dialer.
	DialGuest func(ctx context.Context, network, address string) (net.Conn, error)
	// Scheduler tunes the scheduling cycle that places queued VMs. Zero:
	// pack placement, EASY backfill with the scheduler's lookahead (the
	// largest of the first 16 VMs that cannot start gets the devices it
	// will start on held, and other VMs start only where they do not delay
	// it, or ahead of it in the queue and at least as large), and
	// preemption with the policy's default notice and minimum runtime
	// (preempt.go).
	Scheduler scheduler.Options
	// RulesEvery is how often Run applies the timed rules of sharing
	// (leases.go: lease warnings and ends, idle stop, window ends,
	// preemption; default DefaultRulesEvery). Idle tells how long running
	// VMs' GPUs have been idle (nil: no idle stop); Notifier sends the
	// rules' notices to the policy's webhook (nil: events only); Leader,
	// when several gpuvmds share the database, says whether this one
	// applies the rules (nil: always).
	RulesEvery time.Duration
	Idle       monitor.IdleDetector
	Notifier   Notifier
	Leader     Leader
	Log        *slog.Logger
	// Fleet, when set, makes this orchestrator one node of several that
	// share the database (fleet.go): only the leader places queued VMs,
	// across every healthy node's GPUs, and each node runs the VMs placed
	// on it. nil: one server, always the leader. HostTimeout is how old a
	// node's heartbeat may be before its capacity leaves scheduling
	// (default config.DefaultHeartbeatTimeout).
	Fleet       Fleet
	HostTimeout time.Duration
	// Availability checks, before a VM is made, that what its profile is
	// made of is on this server (its disk image, kernel, initrd,
	// template): a VM that lacks one fails at once with a reason that
	// names no server path (the log has the paths). nil: nothing is
	// checked, and libvirt says what is missing.
	Availability *images.Availability
}

// Orchestrator assembles the jobs of one gpuvmd's VM work and runs their
// loops. Each job is its own type, with the store methods it uses (an
// interface beside it) and its settings, read from the configuration in
// force at each round or operation (so a reload applies to the next):
//
//   - lifecycle (lifecycle.go; create.go, delete.go, actions.go, boot.go):
//     the steps of a create, delete, stop, start and reboot, and their
//     rollback; the watch of booting guests;
//   - dispatcher (dispatch.go; schedule.go, placer.go, drain.go,
//     replay.go): the dispatch round that hands operations to workers and
//     places the queued VMs in one scheduling cycle, admission, and what
//     the estimated starts replay (the round's own inputs);
//   - rulesLoop (rules.go; leases.go, windows.go, preempt.go,
//     reservations.go): the timed rules of sharing, and bookings;
//   - reconciler (reconcile.go, orphans.go): the database against the
//     host, leaks and orphans, libvirt's domain events;
//   - fleetDuties (fleet.go): what one node of a fleet does for the others.
type Orchestrator struct {
	cfg  Config
	log  *slog.Logger
	wake wakeup
	wg   sync.WaitGroup

	life  *lifecycle
	disp  *dispatcher
	rules *rulesLoop
	rec   *reconciler
	fleet *fleetDuties
	// quotas keeps the homes' quotas (homequota.go).
	quotas *HomeQuotas
}

// HomeQuotas keeps the homes' quotas: gpuvmd runs it in a loop and
// exports its usage.
func (o *Orchestrator) HomeQuotas() *HomeQuotas { return o.quotas }

// Option changes what New makes.
type Option func(*options)

type options struct {
	hook        func(vmID, point string) error
	libvirtDirs *homes.LibvirtDirs
}

// WithHook has hook called at each Hook* point with the VM's ID (tests,
// and gpuvmd's test mode); an error stops the work there as if gpuvmd had
// been killed.
func WithHook(hook func(vmID, point string) error) Option {
	return func(o *options) { o.hook = hook }
}

// libvirtDirs are where the reconciler looks for libvirt's virtiofs
// daemons: the system libvirtd's unless WithLibvirtDirs says otherwise.
func libvirtDirs(opt options) homes.LibvirtDirs {
	if opt.libvirtDirs != nil {
		return *opt.libvirtDirs
	}
	return homes.SystemDirs
}

// New returns an Orchestrator; Run runs it.
func New(cfg Config, opts ...Option) *Orchestrator {
	var opt options
	for _, f := range opts {
		f(&opt)
	}
	cfg = withDefaults(cfg)
	// live is the configuration in force, never nil.
	live := func() *config.Config {
		if c := cfg.Profiles(); c != nil {
			return c
		}
		return &config.Config{}
	}
	o := &Orchestrator{cfg: cfg, log: cfg.Log.With("component", "orchestrator"), wake: make(wakeup, 1)}
	// The jobs' settings are read from o.cfg and the configuration in
	// force at each call: a reload applies to the next round.
	set := &o.cfg
	var (
		names    = domainNames(set.DomainPrefix)
		backends = backendSet{set.Backends}
		busy     = &busySet{m: map[string]bool{}}
		roundMu  = &sync.Mutex{}
		bookings = &bookingState{}
	)
	o.fleet = &fleetDuties{host: set.Host, st: set.Store, log: o.log, fleet: set.Fleet, backends: backends, wake: o.wake.Wake,
		spec: o.hostSpec, settings: func() fleetSettings { return fleetSettings{HostTimeout: set.HostTimeout} }}
	o.life = &lifecycle{host: set.Host, installation: set.Installation, st: set.Store, log: o.log, hv: set.Hypervisor, backends: backends, guests: set.Guests,
		names: names, testHook: opt.hook, wake: o.wake.Wake, fleet: o.fleet, avail: set.Availability, dial: set.DialGuest,
		settings: func() lifecycleSettings {
			c := live()
			return lifecycleSettings{DomainType: set.DomainType,
				DetachSimulatedGPUs: set.DetachSimulatedGPUs, ShutdownTimeout: set.ShutdownTimeout,
				BootTimeout: set.BootTimeout, BootCheck: set.BootCheck, Rescan: set.ReconcileEvery, InFleet: set.Fleet != nil,
				Profiles: c.Profiles, Images: c.Images, Libvirt: c.Server.Libvirt, Homes: c.Server.Storage.Homes, Location: c.Policy.Location,
				Shares: c.Server.Storage.Shares, StateDir: cmp.Or(set.StateDir, c.Server.StateDir),
				RenderCloudInit: c.RenderCloudInit, Config: c}
		}}
	o.quotas = newHomeQuotas(set.Store, live, o.log, set.HomeQuotaEvery)
	o.life.quotas = o.quotas
	o.disp = &dispatcher{host: set.Host, st: set.Store, log: o.log, life: o.life, fleet: o.fleet, notifier: set.Notifier,
		busy: busy, roundMu: roundMu, bookings: bookings, sem: make(chan struct{}, set.Workers), wake: o.wake.Wake,
		settings: func() dispatchSettings {
			return dispatchSettings{Scheduler: set.Scheduler, Config: live()}
		}}
	o.life.quota = o.disp
	o.rules = &rulesLoop{st: set.Store, log: o.log, backends: backends, idle: set.Idle, notifier: set.Notifier, leader: set.Leader,
		placement: o.disp, bookings: bookings, wake: o.wake.Wake,
		settings: func() rulesSettings { return rulesSettings{Notice: set.Scheduler.Notice, Config: live()} }}
	o.rec = &reconciler{host: set.Host, installation: set.Installation, st: set.Store, log: o.log, hv: set.Hypervisor, backends: backends, life: o.life,
		names: names, busy: busy, roundMu: roundMu,
		orphans:  orphanState{volumes: volumeNames(set.DomainPrefix)},
		virtiofs: &virtiofsWatch{dirs: libvirtDirs(opt), system: opt.libvirtDirs == nil},
		settings: func() reconcileSettings {
			c := live()
			return reconcileSettings{DomainPrefix: set.DomainPrefix,
				ShutdownTimeout: set.ShutdownTimeout, InFleet: set.Fleet != nil,
				Profiles: c.Profiles, StoragePool: c.Server.Libvirt.StoragePool,
				Virtiofs: c.Server.Storage.Homes.Root != "" || len(c.Server.Storage.Shares) > 0}
		}}
	return o
}

// The database (*store.Store) is every job's store; each job names the
// methods it uses beside it.
var (
	_ lifecycleStore = (*store.Store)(nil)
	_ dispatchStore  = (*store.Store)(nil)
	_ rulesStore     = (*store.Store)(nil)
	_ reconcileStore = (*store.Store)(nil)
	_ fleetStore     = (*store.Store)(nil)
)

// withDefaults fills in what cfg leaves out, and stands a do-nothing
// implementation in for each optional dependency whose absence means
// "nothing to do" (Notifier, Leader, Idle), so that the jobs need no nil
// checks.
func withDefaults(cfg Config) Config {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
		if cfg.Host == "" {
			cfg.Host = "localhost"
		}
	}
	if cfg.DomainPrefix == "" {
		cfg.DomainPrefix = "gpuvm-"
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 5 * time.Second
	}
	if cfg.ReconcileEvery <= 0 {
		cfg.ReconcileEvery = time.Minute
	}
	if cfg.VirtiofsCheck <= 0 {
		cfg.VirtiofsCheck = 10 * time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = DefaultBootTimeout
	}
	if cfg.BootCheck <= 0 {
		cfg.BootCheck = DefaultBootCheck
	}
	if cfg.Scheduler == (scheduler.Options{}) {
		cfg.Scheduler = scheduler.DefaultOptions(policy.DefaultNotice, policy.DefaultMinRuntime)
	}
	if cfg.RulesEvery <= 0 {
		cfg.RulesEvery = DefaultRulesEvery
	}
	if cfg.Profiles == nil {
		cfg.Profiles = func() *config.Config { return &config.Config{} }
	}
	if cfg.Notifier == nil {
		cfg.Notifier = noNotifier{}
	}
	if cfg.Leader == nil {
		cfg.Leader = alwaysLeader{}
	}
	if cfg.Idle == nil {
		cfg.Idle = noIdle{}
	}
	if cfg.Installation == "" && cfg.Store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		inst, err := cfg.Store.Installation(ctx)
		cancel()
		if err != nil {
			// Without its ID the reconciler would take every domain
			// that names an installation for another's: safe, but say so.
			cfg.Log.Error("cannot read the installation ID: every domain and device that names one is treated as another installation's", "err", err)
		}
		cfg.Installation = inst.ID
	}
	return cfg
}

// The stand-ins for the optional dependencies (withDefaults).
type (
	noNotifier   struct{}
	alwaysLeader struct{}
	noIdle       struct{}
)

func (noNotifier) Notify(string, api.AlertNotification)          {}
func (alwaysLeader) IsLeader() bool                              { return true }
func (noIdle) IdleVMs(context.Context) ([]monitor.VMIdle, error) { return nil, nil }

// wakeup tells the loop there is new work; a wake-up while one is pending
// is one.
type wakeup chan struct{}

// Wake wakes the loop.
func (w wakeup) Wake() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// domainNames names the domains of this orchestrator's VMs: its prefix,
// then the random end of the VM's ID.
type domainNames string

func (p domainNames) of(vmID string) string {
	short := vmID
	if len(short) > 12 {
		short = short[len(short)-12:] // the random end of a UUID v7
	}
	return string(p) + short
}

// backendSet is the running backends, and their inventories.
type backendSet struct{ Backends }

// currentInventoriesOf is the named backends' inventories as the backends
// keep them current (backend.InventoryCache), without calling them; asked
// of them when the Backends keep none.
func (b backendSet) currentInventoriesOf(ctx context.Context, names []string) (map[string]backend.Inventory, []error) {
	return backend.CurrentInventories(ctx, b.Backends, names)
}

// inventoriesOf asks the named backends for their inventories; a backend
// that is not running or fails is reported and left out.
func (b backendSet) inventoriesOf(ctx context.Context, names []string) (map[string]backend.Inventory, []error) {
	return backend.Inventories(ctx, b.Backends, names)
}

// Host is the host name VMs of this orchestrator are placed on.
func (o *Orchestrator) Host() string { return o.cfg.Host }

// DomainName is the libvirt name of a VM's domain.
func (o *Orchestrator) DomainName(vmID string) string {
	return domainNames(o.cfg.DomainPrefix).of(vmID)
}

// Wake tells the worker loop there is new work (a VM to create or delete).
func (o *Orchestrator) Wake() { o.wake.Wake() }

// Run processes operations until ctx ends, then waits for the workers it
// started: on every wake-up, and every Tick unless nothing changed since
// the last round (idle.go); it reconciles every
// ReconcileEvery; it applies the timed rules every RulesEvery. Alongside,
// it watches booting VMs until their guests are up (boot.go), libvirt's
// domain events (reconcile.go) and the virtiofs daemons (virtiofs.go). Reconcile once before Run at start-up.
func (o *Orchestrator) Run(ctx context.Context) {
	tick := time.NewTicker(o.cfg.Tick)
	defer tick.Stop()
	rec := time.NewTicker(o.cfg.ReconcileEvery)
	defer rec.Stop()
	rules := time.NewTicker(o.cfg.RulesEvery)
	defer rules.Stop()
	defer o.disp.wait()
	defer o.wg.Wait()
	o.wg.Add(1)
	go func() { defer o.wg.Done(); o.life.watchBoots(ctx) }()
	o.wg.Add(1)
	go func() { defer o.wg.Done(); o.rec.watchDomains(ctx) }()
	o.wg.Add(1)
	go func() { defer o.wg.Done(); o.rec.watchVirtiofs(ctx, o.cfg.VirtiofsCheck) }()
	o.life.resumeVolumes(ctx) // volumes.go: what a killed gpuvmd left half-made
	o.disp.dispatch(ctx, false)
	var took time.Duration // the last round's
	for {
		woken := false
		select {
		case <-ctx.Done():
			return
		case <-o.wake:
			if !pace(ctx, took) {
				return
			}
			woken = true
		case <-tick.C:
		case <-rec.C:
			if rep, err := o.rec.reconcileHost(ctx); err != nil {
				o.log.Error("reconcile failed", "err", err)
			} else {
				rep.log(o.log)
			}
		case <-rules.C:
			o.rules.applyRules(ctx)
		}
		start := time.Now()
		if woken {
			o.disp.dispatch(ctx, false)
		} else if !o.disp.dispatchIfChanged(ctx) { // idle.go
			continue
		}
		took = time.Since(start)
	}
}

// maxPace bounds how long a wake-up waits after a slow round (pace).
const maxPace = time.Second

// paceRest is how many times the last round's duration a wake-up waits.
const paceRest = 2

// pace holds a wake-up back twice as long as the last round took (at most
// maxPace): a round reads every unfinished operation and places the whole
// queue, so with thousands queued and creates arriving hundreds a second
// (each a wake-up) rounds would otherwise run back to back, and the API's
// requests, on this node and on the database, would wait behind them for
// the cores (issue #26). The worker then takes at most about a third of a
// core while wake-ups keep coming; a VM that can start waits at most two
// rounds' time longer. It reports false when ctx ended.
func pace(ctx context.Context, took time.Duration) bool {
	if took <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(min(paceRest*took, maxPace))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Drain processes every unfinished operation once, in the calling
// goroutine: queued VMs that cannot be placed stay queued. Tests use it to
// run an orchestrator without its loop.
func (o *Orchestrator) Drain(ctx context.Context) { o.disp.dispatch(ctx, true) }

// ObserveRounds has f told how long each dispatch round took (gpuvmd: the
// gpuvm_dispatch_round_seconds metric); nil stops it.
func (o *Orchestrator) ObserveRounds(f func(time.Duration)) {
	if f == nil {
		o.disp.observe.Store(nil)
		return
	}
	o.disp.observe.Store(&f)
}

// The jobs' services, for the server and gpuvmd.

// ApplyRules applies the timed rules of sharing once (rulesLoop.ApplyRules).
func (o *Orchestrator) ApplyRules(ctx context.Context) (RulesReport, error) {
	return o.rules.ApplyRules(ctx)
}

// Admit says whether a request may be queued (dispatcher.Admit).
func (o *Orchestrator) Admit(ctx context.Context, user string, groups []string, profileName string, hours int) (scheduler.Admission, error) {
	return o.disp.Admit(ctx, user, groups, profileName, hours)
}

// Book checks and records a reservation (rulesLoop.Book).
func (o *Orchestrator) Book(ctx context.Context, r *store.Reservation, admin bool) error {
	return o.rules.Book(ctx, r, admin)
}

// ReservationConflicts lists the running VMs in the way of a reservation
// (rulesLoop.ReservationConflicts).
func (o *Orchestrator) ReservationConflicts(ctx context.Context) ([]ReservationConflict, error) {
	return o.rules.ReservationConflicts(ctx)
}

// CheckExtend says whether a VM's lease may end at newEnd
// (rulesLoop.CheckExtend).
func (o *Orchestrator) CheckExtend(ctx context.Context, vmID string, newEnd time.Time) error {
	return o.rules.CheckExtend(ctx, vmID, newEnd)
}

// RequeueFromDownHosts queues again the VMs of nodes that went down
// (fleetDuties.RequeueFromDownHosts).
func (o *Orchestrator) RequeueFromDownHosts(ctx context.Context, hosts []string) ([]string, error) {
	return o.fleet.RequeueFromDownHosts(ctx, hosts)
}

// Installation is the installation ID written into every domain made.
func (o *Orchestrator) Installation() string { return o.cfg.Installation }

// Orphans is what the last reconcile found that looks like gpuvm's but is
// not provably this installation's (reconciler.Orphans).
func (o *Orchestrator) Orphans() ([]api.Orphan, time.Time) { return o.rec.Orphans() }

// CheckOrphans looks for orphans now (reconciler.CheckOrphans).
func (o *Orchestrator) CheckOrphans(ctx context.Context) ([]api.Orphan, time.Time, error) {
	return o.rec.CheckOrphans(ctx)
}

// OrphanCounts counts the orphans by kind (reconciler.OrphanCounts).
func (o *Orchestrator) OrphanCounts() map[string]int { return o.rec.OrphanCounts() }

// DeleteOrphan removes an orphan (reconciler.DeleteOrphan).
func (o *Orchestrator) DeleteOrphan(ctx context.Context, id string) (api.Orphan, error) {
	return o.rec.DeleteOrphan(ctx, id)
}

// AdoptOrphan makes an orphan domain a VM of this installation
// (reconciler.AdoptOrphan).
func (o *Orchestrator) AdoptOrphan(ctx context.Context, id string, req api.AdoptRequest, by string) (*store.VM, error) {
	return o.rec.AdoptOrphan(ctx, id, req, by)
}

// AdoptVolume makes an orphaned data disk a person's volume again
// (reconciler.AdoptVolume).
func (o *Orchestrator) AdoptVolume(ctx context.Context, req api.AdoptVolumeRequest, by string) (*store.Volume, error) {
	return o.rec.AdoptVolume(ctx, req, by)
}
