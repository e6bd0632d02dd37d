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
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/profile"
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
	Profiles func() *profile.Config
	// Host names this server in the database (default: the hostname).
	Host string
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
	// Scheduler tunes the scheduling cycle that places queued VMs. Zero:
	// pack placement and plain EASY backfill (the first VM that cannot
	// start gets the devices it will start on held, and later ones start
	// only where they do not delay it), no preemption. The cycle's
	// lookahead (holds for the largest of the first blocked requests) is
	// off: it lets a later VM overtake an earlier one of the same size.
	Scheduler scheduler.Options
	Log       *slog.Logger
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
	if cfg.Scheduler == (scheduler.Options{}) {
		cfg.Scheduler = scheduler.Options{Strategy: scheduler.Pack, Reserve: scheduler.DefaultReserve}
	}
	if cfg.Profiles == nil {
		cfg.Profiles = func() *profile.Config { return &profile.Config{} }
	}
	return &Orchestrator{
		cfg: cfg, st: cfg.Store, log: cfg.Log.With("component", "orchestrator"),
		wake: make(chan struct{}, 1), sem: make(chan struct{}, cfg.Workers), busy: map[string]bool{},
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
// ReconcileEvery. Reconcile once before Run at start-up.
func (o *Orchestrator) Run(ctx context.Context) {
	tick := time.NewTicker(o.cfg.Tick)
	defer tick.Stop()
	rec := time.NewTicker(o.cfg.ReconcileEvery)
	defer rec.Stop()
	defer o.wg.Wait()
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
		if o.dispatchActions(ctx, inline, vm, w) {
			continue
		}
		if w.delete != nil {
			o.start(ctx, inline, vm.ID, func(ctx context.Context) error { return o.runDelete(ctx, vm, w.delete, w.create) })
			continue
		}
		op := w.create
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
		o.start(ctx, inline, q.vm.ID, func(ctx context.Context) error { return o.runCreate(ctx, q.vm, q.op) })
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
	default:
		o.log.Error("vm operation failed", "vm", vmID, "err", err)
	}
}

func (o *Orchestrator) finishOp(ctx context.Context, id string, opErr error) {
	if err := o.st.FinishOperation(ctx, id, opErr); err != nil && !errors.Is(err, store.ErrConflict) {
		o.log.Error("finish operation", "operation", id, "err", err)
	}
}

func (o *Orchestrator) profile(name string) *profile.Profile {
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
