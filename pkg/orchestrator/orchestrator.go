// Package orchestrator runs the VM lifecycle of one gpuvmd: it places queued
// VMs on GPU slots, has the backends make their devices and libvirt their
// domains, deletes them again, and reconciles the database with the host
// after a crash. Every host change is preceded by a database row that says
// what is about to happen (intent first), and every step is idempotent, so a
// create or delete interrupted at any point is finished by the next
// Reconcile.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
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

// InventoryCache is what a Backends may offer besides (a *loader.Loader
// does): the backends' inventories as they last pushed them, with every
// Create and Remove that returned reflected, read without calling them.
// The create path and the dispatch rounds read it when it is there; the
// reconciler always asks the backends (inventoriesOf).
type InventoryCache interface {
	// Inventories returns the inventory of each named backend that runs;
	// one that fails is reported and left out.
	Inventories(ctx context.Context, names []string) (map[string]backend.Inventory, []error)
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
// SetOperationStep before it is done, and the hook (Config.Hook) is called
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
	// Hook, for tests, is called at each Hook* point with the VM's ID; an
	// error stops the work there as if gpuvmd had been killed.
	Hook func(vmID, point string) error
}

// Orchestrator runs VM operations.
type Orchestrator struct {
	cfg  Config
	st   *store.Store
	log  *slog.Logger
	wake chan struct{}
	sem  chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	busy map[string]bool // VMs a worker is on
	// roundMu makes dispatch rounds and reconciles run one at a time.
	roundMu sync.Mutex
	boots   bootWatch // the booting VMs (boot.go)
	rules   rules     // the notices given (leases.go)

	// bookings are the devices each reservation holds (reservations.go).
	bookings bookingState

	// remote is the fleet's other nodes as last read (fleet.go).
	remote remoteHosts

	// orphans are what the last reconcile found that looks like gpuvm's
	// but is not provably this installation's (orphans.go).
	orphans orphanState
}

// New returns an Orchestrator; Run runs it.
func New(cfg Config) *Orchestrator {
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
	return &Orchestrator{
		cfg: cfg, st: cfg.Store, log: cfg.Log.With("component", "orchestrator"),
		wake: make(chan struct{}, 1), sem: make(chan struct{}, cfg.Workers), busy: map[string]bool{},
		orphans: orphanState{volumes: volumeNames(cfg.DomainPrefix)},
	}
}

// Host is the host name VMs of this orchestrator are placed on.
func (o *Orchestrator) Host() string { return o.cfg.Host }

// DomainName is the libvirt name of a VM's domain.
func (o *Orchestrator) DomainName(vmID string) string {
	short := vmID
	if len(short) > 12 {
		short = short[len(short)-12:] // the random end of a UUID v7
	}
	return o.cfg.DomainPrefix + short
}

// Wake tells the worker loop there is new work (a VM to create or delete).
func (o *Orchestrator) Wake() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Run processes operations until ctx ends, then waits for the workers it
// started: on every wake-up, every Tick, and it reconciles every
// ReconcileEvery; it applies the timed rules every RulesEvery. Alongside, it watches booting VMs until their guests are
// up (boot.go). Reconcile once before Run at start-up.
func (o *Orchestrator) Run(ctx context.Context) {
	tick := time.NewTicker(o.cfg.Tick)
	defer tick.Stop()
	rec := time.NewTicker(o.cfg.ReconcileEvery)
	defer rec.Stop()
	rules := time.NewTicker(o.cfg.RulesEvery)
	defer rules.Stop()
	defer o.wg.Wait()
	o.wg.Add(1)
	go func() { defer o.wg.Done(); o.watchBoots(ctx) }()
	o.wg.Add(1)
	go func() { defer o.wg.Done(); o.watchDomains(ctx) }()
	o.dispatch(ctx, false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.wake:
		case <-tick.C:
		case <-rec.C:
			if rep, err := o.reconcileHost(ctx); err != nil {
				o.log.Error("reconcile failed", "err", err)
			} else {
				rep.log(o.log)
			}
		case <-rules.C:
			o.applyRules(ctx)
		}
		o.dispatch(ctx, false)
	}
}

// Drain processes every unfinished operation once, in the calling
// goroutine: queued VMs that cannot be placed stay queued. Tests use it to
// run an orchestrator without its loop.
func (o *Orchestrator) Drain(ctx context.Context) { o.dispatch(ctx, true) }

func (o *Orchestrator) hook(vmID, point string) error {
	if o.cfg.Hook == nil {
		return nil
	}
	if err := o.cfg.Hook(vmID, point); err != nil {
		return fmt.Errorf("%w %q: %v", errAbandoned, point, err)
	}
	return nil
}

func (o *Orchestrator) setBusy(id string, b bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b && o.busy[id] {
		return false
	}
	if b {
		o.busy[id] = true
	} else {
		delete(o.busy, id)
	}
	return true
}

func (o *Orchestrator) isBusy(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.busy[id]
}

// work is what one VM has to have done.
type work struct {
	vmID           string
	create, delete *store.Operation
	others         []store.Operation
}

// dispatch looks at every unfinished operation, oldest first, and hands the
// slow steps to workers, or runs them inline; it places the queued VMs
// itself, all together after the others, in one scheduling cycle under the
// configured policy (schedule.go), so two placements never race.
func (o *Orchestrator) dispatch(ctx context.Context, inline bool) {
	o.roundMu.Lock()
	defer o.roundMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	ops, err := o.st.ListUnfinishedOperations(ctx)
	if err != nil {
		o.log.Error("list unfinished operations", "err", err)
		return
	}
	var order []string
	byVM := map[string]*work{}
	for i := range ops {
		op := &ops[i]
		w := byVM[op.VMID]
		if w == nil {
			w = &work{vmID: op.VMID}
			byVM[op.VMID] = w
			order = append(order, op.VMID)
		}
		switch {
		case op.Kind == store.OpCreate && w.create == nil:
			w.create = op
		case op.Kind == store.OpDelete && w.delete == nil:
			w.delete = op
		default:
			w.others = append(w.others, *op)
		}
	}
	vms, err := o.st.GetVMs(ctx, order)
	if err != nil {
		o.log.Error("read the vms of the operations", "err", err)
		return
	}
	var queue []queued
	for _, id := range order {
		if ctx.Err() != nil {
			return
		}
		w := byVM[id]
		if o.isBusy(id) {
			continue
		}
		vm := vms[id]
		if vm == nil {
			o.log.Error("an operation's vm does not exist", "vm", id)
			continue
		}
		if !o.owns(vm) {
			continue // another node's (fleet.go)
		}
		if o.dispatchActions(ctx, inline, vm, w) {
			continue
		}
		if w.delete != nil {
			o.start(ctx, inline, vm.ID, func(ctx context.Context) error { return o.runDelete(ctx, vm, w.delete, w.create) })
			continue
		}
		op := w.create
		if op == nil {
			op = waitingStart(vm, w) // actions.go: a start that waits for a GPU
		}
		if op == nil {
			continue
		}
		switch vm.State {
		case store.VMQueued:
			if o.waitingToStart(ctx, vm) {
				continue
			}
			queue = append(queue, queued{vm, op}) // placed together below
		case store.VMAllocating, store.VMCreating:
			o.start(ctx, inline, vm.ID, func(ctx context.Context) error { return o.runCreate(ctx, vm, op) })
		case store.VMRunning:
			o.finishOp(ctx, op.ID, nil)
		default:
			o.finishOp(ctx, op.ID, fmt.Errorf("the VM is %s", vm.State))
		}
	}
	if ctx.Err() != nil {
		return
	}
	for _, q := range o.schedule(ctx, queue) {
		if q.vm.Host != o.cfg.Host {
			o.wakeNode(q.vm.Host) // placed on another node of the fleet: it makes the VM
			continue
		}
		run := o.runCreate
		if q.op.Kind == store.OpStart {
			run = o.runStart // actions.go
		}
		o.start(ctx, inline, q.vm.ID, func(ctx context.Context) error { return run(ctx, q.vm, q.op) })
	}
}

// start runs fn for a VM, inline or on a free worker; with no free worker
// it leaves the VM for a later round.
func (o *Orchestrator) start(ctx context.Context, inline bool, vmID string, fn func(context.Context) error) {
	if inline {
		if !o.setBusy(vmID, true) {
			return
		}
		defer o.setBusy(vmID, false)
		o.report(vmID, fn(ctx))
		return
	}
	select {
	case o.sem <- struct{}{}:
	default:
		return
	}
	if !o.setBusy(vmID, true) {
		<-o.sem
		return
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		defer func() { <-o.sem; o.setBusy(vmID, false); o.Wake() }()
		o.report(vmID, fn(ctx))
	}()
}

func (o *Orchestrator) report(vmID string, err error) {
	switch {
	case err == nil:
	case errors.Is(err, errAbandoned):
		o.log.Warn("work abandoned", "vm", vmID, "err", err)
	case errors.Is(err, context.Canceled):
		o.log.Info("work interrupted; the reconciler resumes it", "vm", vmID, "err", err)
	case errors.Is(err, errSlotsGone):
		o.log.Info("create left to the leader: the VM was queued again", "vm", vmID, "err", err)
	default:
		o.log.Error("vm operation failed", "vm", vmID, "err", err)
	}
}

func (o *Orchestrator) finishOp(ctx context.Context, id string, opErr error) {
	if err := o.st.FinishOperation(ctx, id, opErr); err != nil && !errors.Is(err, store.ErrConflict) {
		o.log.Error("finish operation", "operation", id, "err", err)
	}
}

func (o *Orchestrator) profile(name string) *config.Profile {
	cfg := o.cfg.Profiles()
	if cfg == nil {
		return nil
	}
	return cfg.Profiles[name]
}

// cleanupVolumes removes the disk overlay and seed a create may have made
// before gpuvmd stopped and before the domain that lists them was defined:
// DeleteVM finds no domain then, and would leave them.
func (o *Orchestrator) cleanupVolumes(ctx context.Context, vmID string) error {
	pool := ""
	if cfg := o.cfg.Profiles(); cfg != nil {
		pool = cfg.Server.Libvirt.StoragePool
	}
	return o.cfg.Hypervisor.CleanupVM(ctx, vmID, o.DomainName(vmID), pool)
}
