package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// dispatcher runs the dispatch rounds: it looks at every unfinished
// operation, hands the lifecycle's steps to workers (or runs them inline),
// and places the queued VMs together in one scheduling cycle (schedule.go,
// placer.go, drain.go); it also admits requests (Admit) and tells a stopped
// VM without a GPU whether a quota lets it start.
type dispatcher struct {
	host     string // this server (Config.Host)
	st       dispatchStore
	log      *slog.Logger
	life     *lifecycle
	fleet    *fleetDuties
	notifier Notifier
	busy     *busySet // the VMs a worker is on; the reconciler leaves them
	// roundMu makes dispatch rounds and reconciles run one at a time.
	roundMu *sync.Mutex
	// bookings are the devices each reservation holds (reservations.go).
	bookings *bookingState
	sem      chan struct{} // one per worker
	wg       sync.WaitGroup
	wake     func()
	settings func() dispatchSettings
	// idle is what the last full round saw (idle.go; guarded by roundMu).
	idle idleRound
	// cache is the operations and VMs the last round read (roundcache.go;
	// guarded by roundMu).
	cache roundCache
	// admit is what admissions read of the quotas (admitcache.go).
	admit admitCache
	// cycled, when set (tests), is shown what each round's scheduling
	// cycle decides from, before it runs.
	cycled func(*cycleInputs)
	// observe, when set, is told how long each round that read the
	// operations took (Orchestrator.ObserveRounds).
	observe atomic.Pointer[func(time.Duration)]
}

// dispatchStore is what the dispatch rounds and admission ask of the
// database.
type dispatchStore interface {
	Now() time.Time
	Tx(ctx context.Context, fn func(tx *store.Store) error) error
	ListUnfinishedOperations(ctx context.Context) ([]store.Operation, error)
	ListUnfinishedOperationStamps(ctx context.Context, onHost string) ([]store.OpStamp, map[string]store.VMStamp, error)
	GetOperations(ctx context.Context, ids []string) (map[string]*store.Operation, error)
	SetOperationStep(ctx context.Context, id, step string) error
	GetVMs(ctx context.Context, ids []string) (map[string]*store.VM, error)
	ListVMs(ctx context.Context, f store.VMFilter) (store.VMPage, error)
	UpdateVMState(ctx context.Context, id string, version int64, u store.VMUpdate) (*store.VM, error)
	SetQueue(ctx context.Context, entries map[string]store.QueueEntry) (int, error)
	ListLiveAllocations(ctx context.Context, host string) ([]store.Allocation, error)
	ListEndedUsage(ctx context.Context, since time.Time) ([]store.UsageRecord, error)
	ListUsers(ctx context.Context) ([]store.User, error)
	UserGroups(ctx context.Context, names []string) (map[string][]string, error)
	ListReservations(ctx context.Context, f store.ReservationFilter) ([]store.Reservation, error)
	ReservationsStamp(ctx context.Context) (string, error)
	ListGPUDrains(ctx context.Context, host string) ([]store.GPUDrain, error)
	AppendEvent(ctx context.Context, e *store.Event) error
	ListEventsSince(ctx context.Context, afterID int64, f store.EventFilter) ([]store.Event, error)
	LastEventID(ctx context.Context) (int64, error)
	ListHosts(ctx context.Context) ([]store.Host, error)
	StateStamp(ctx context.Context, hostTimeout time.Duration) (string, error)
	QuotaGeneration() uint64
	ListLiveTaskVMs(ctx context.Context) ([]store.Task, error)
	ListEndedTaskRuns(ctx context.Context, since time.Time, limit int) ([]store.Task, error)
}

// dispatchSettings are the dispatcher's settings, read at each round.
type dispatchSettings struct {
	Scheduler scheduler.Options
	// Config is the configuration in force: profiles, policy, host
	// settings.
	Config *config.Config
}

// wait waits for the workers started.
func (dp *dispatcher) wait() { dp.wg.Wait() }

// busySet is the VMs a worker is on.
type busySet struct {
	mu sync.Mutex
	m  map[string]bool
}

// set marks a VM busy (b) or not; it reports false when the VM was busy
// already.
func (b *busySet) set(id string, busy bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if busy && b.m[id] {
		return false
	}
	if busy {
		b.m[id] = true
	} else {
		delete(b.m, id)
	}
	return true
}

func (b *busySet) is(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[id]
}

// all is the busy VMs now.
func (b *busySet) all() map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.m)
}

// work is what one VM has to have done.
type work struct {
	vmID           string
	create, delete *store.Operation
	others         []store.Operation
}

// groupOps groups unfinished operations (oldest first) by VM: each VM's
// first create and first delete, and its other operations in order. order
// is the VMs in the order of their oldest operation.
func groupOps(ops []store.Operation) (order []string, byVM map[string]*work) {
	byVM = map[string]*work{}
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
	return order, byVM
}

// placedWith is the operation a round carries out for a VM with work w
// that it neither deletes nor runs an action of (dispatchActions): its
// create, or a start that waits for a GPU (waitingStart); a queued VM
// waits for placement with it. nil when there is none, or when the VM is
// to be deleted (the delete goes first).
func placedWith(vm *store.VM, w *work) *store.Operation {
	switch {
	case w.delete != nil:
		return nil
	case w.create != nil:
		return w.create
	}
	return waitingStart(vm, w)
}

// dispatch looks at every unfinished operation, oldest first, and hands the
// slow steps to workers, or runs them inline; it places the queued VMs
// itself, all together after the others, in one scheduling cycle under the
// configured policy (schedule.go), so two placements never race.
func (dp *dispatcher) dispatch(ctx context.Context, inline bool) {
	dp.roundMu.Lock()
	defer dp.roundMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	began := time.Now()
	dp.beginRound(ctx)                                               // idle.go
	ops, vms, err := dp.cache.read(ctx, dp.st, dp.fleet.readsOnly()) // roundcache.go, fleet.go
	if err != nil {
		dp.log.Error("list unfinished operations", "err", err)
		dp.idle.retry()
		return
	}
	if f := dp.observe.Load(); f != nil {
		defer func() { (*f)(time.Since(began)) }()
	}
	runtime.Gosched() // the API's requests before the round's own computing (scheduler.Yielder)
	order, byVM := groupOps(ops)
	var queue []queued
	for _, id := range order {
		if ctx.Err() != nil {
			return
		}
		w := byVM[id]
		if dp.busy.is(id) {
			continue
		}
		vm := vms[id]
		if vm == nil {
			dp.log.Error("an operation's vm does not exist", "vm", id)
			continue
		}
		if !dp.fleet.owns(vm) {
			continue // another node's (fleet.go)
		}
		if dp.dispatchActions(ctx, inline, vm, w) {
			continue
		}
		if w.delete != nil {
			dp.start(ctx, inline, vm.ID, func(ctx context.Context) error { return dp.life.runDelete(ctx, vm, w.delete, w.create) })
			continue
		}
		op := placedWith(vm, w)
		if op == nil {
			continue
		}
		switch vm.State {
		case store.VMQueued:
			if dp.waitingToStart(ctx, vm) {
				continue
			}
			queue = append(queue, queued{vm, op}) // placed together below
		case store.VMAllocating, store.VMCreating:
			dp.start(ctx, inline, vm.ID, func(ctx context.Context) error { return dp.life.runCreate(ctx, vm, op) })
		case store.VMRunning:
			dp.life.finishOp(ctx, op.ID, nil)
		default:
			dp.life.finishOp(ctx, op.ID, fmt.Errorf("the VM is %s", vm.State))
		}
	}
	if ctx.Err() != nil {
		return
	}
	for _, q := range dp.schedule(ctx, queue) {
		if q.vm.Host != dp.host {
			dp.fleet.wakeNode(q.vm.Host) // placed on another node of the fleet: it makes the VM
			continue
		}
		run := dp.life.runCreate
		if q.op.Kind == store.OpStart {
			run = dp.life.runStart // actions.go
		}
		dp.start(ctx, inline, q.vm.ID, func(ctx context.Context) error { return run(ctx, q.vm, q.op) })
	}
}

// start runs fn for a VM, inline or on a free worker; with no free worker
// it leaves the VM for a later round.
func (dp *dispatcher) start(ctx context.Context, inline bool, vmID string, fn func(context.Context) error) {
	if inline {
		if !dp.busy.set(vmID, true) {
			return
		}
		defer dp.busy.set(vmID, false)
		report(dp.log, vmID, fn(ctx))
		return
	}
	select {
	case dp.sem <- struct{}{}:
	default:
		return
	}
	if !dp.busy.set(vmID, true) {
		<-dp.sem
		return
	}
	dp.wg.Add(1)
	go func() {
		defer dp.wg.Done()
		defer func() { <-dp.sem; dp.busy.set(vmID, false); dp.wake() }()
		report(dp.log, vmID, fn(ctx))
	}()
}

func report(log *slog.Logger, vmID string, err error) {
	switch {
	case err == nil:
	case errors.Is(err, errAbandoned):
		log.Warn("work abandoned", "vm", vmID, "err", err)
	case errors.Is(err, context.Canceled):
		log.Info("work interrupted; the reconciler resumes it", "vm", vmID, "err", err)
	case errors.Is(err, errSlotsGone):
		log.Info("create left to the leader: the VM was queued again", "vm", vmID, "err", err)
	default:
		log.Error("vm operation failed", "vm", vmID, "err", err)
	}
}

// waitingToStart keeps a queued VM whose start time has not come out of
// placement, saying so in its reason, and reports whether it did.
func (dp *dispatcher) waitingToStart(ctx context.Context, vm *store.VM) bool {
	if vm.StartAt == nil || !dp.st.Now().Before(*vm.StartAt) {
		return false
	}
	dp.idle.dueBy(*vm.StartAt) // the round that places it (idle.go)
	reason := StartAtReason(*vm.StartAt)
	if vm.StateReason != reason || vm.Phase != PhaseStartAt {
		_, err := dp.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMQueued, Phase: PhaseStartAt, StateReason: reason})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			dp.log.Error("record the start time of a queued VM", "vm", vm.ID, "err", err)
		}
	}
	return true
}

// dispatchActions handles the start, stop and reboot operations of a VM:
// a delete cancels them (and goes on), an unfinished create makes them
// wait, else the oldest runs. A start that needs a GPU queues the VM here,
// in the round (queueStart, which updates vm in place), and leaves it to
// the round's scheduling like a queued create (dispatch, waitingStart). It
// reports whether it took the VM this round.
func (dp *dispatcher) dispatchActions(ctx context.Context, inline bool, vm *store.VM, w *work) bool {
	if len(w.others) == 0 {
		return false
	}
	if w.delete != nil {
		for i := range w.others {
			dp.life.finishAction(ctx, vm, &w.others[i], errDeleting)
		}
		return false
	}
	if w.create != nil {
		return false
	}
	op := w.others[0]
	if op.Kind == store.OpStart {
		switch {
		case vm.State == store.VMQueued:
			if err := dp.life.leaseOver(vm); err != nil {
				// It ended while the VM waited: it goes back to stopped.
				dp.start(ctx, inline, vm.ID, func(ctx context.Context) error { return dp.life.startFailed(ctx, vm, &op, err) })
				return true
			}
			return false // placed with the queue
		case vm.State == store.VMStopped && dp.life.needsGPU(vm):
			next, ok := dp.life.queueStart(ctx, vm, &op)
			if !ok {
				return true // refused, or interrupted: nothing to place this round
			}
			*vm = *next
			return false
		}
	}
	dp.start(ctx, inline, vm.ID, func(ctx context.Context) error { return dp.life.runAction(ctx, vm, &op) })
	return true
}

// waitingStart is the start operation of a VM that waits in the queue for
// a GPU to start on; nil for any other VM.
func waitingStart(vm *store.VM, w *work) *store.Operation {
	if vm.State != store.VMQueued || w.create != nil || w.delete != nil || len(w.others) == 0 || w.others[0].Kind != store.OpStart {
		return nil
	}
	return &w.others[0]
}
