package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/estimate"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The estimated starts (pkg/estimate, served by pkg/server) replay the
// queue from what a dispatch round places from: ReplayInputs reads it
// through the round's own cycleInputs (the GPUs of every backend and, in a
// fleet, of every healthy node; the live allocations and drains; the VMs
// that hold devices, preemptions under way marked; the rules with the
// usage they count and the reservations they hold, which it reads and
// keeps nothing of: peekBookings; the queue's requests and the
// scheduler's options), and adds what only the replay needs: the
// queue order the last round gave, the VMs asked to start later, whether
// leases may be extended, and which VMs are tasks with what tasks use of
// the time they ask for.

// Bounds of the ended tasks read for the ratios of used to asked time.
const (
	taskHistoryLookback = 30 * 24 * time.Hour
	taskHistoryMost     = 2000
)

// ReplayInputs is what the estimates replay: the scheduler's state as a
// dispatch round reads it, the groups of every user, and the
// configuration it was read under.
type ReplayInputs struct {
	State  estimate.State
	Groups map[string][]string
	Config *config.Config
}

// quietLog is where the replay's read of the round's inputs, and the rules'
// readers' (placementState), warn: nowhere.
// The round reads the same and warns of it (a backend that did not answer,
// a node's unusable inventory, a GPU it cannot account for), once a round;
// the replay runs again at every estimate read after a change, and would
// repeat it each time.
var quietLog = slog.New(slog.DiscardHandler)

// ReplayInputs reads the state the estimates replay (dispatcher.replayInputs).
func (o *Orchestrator) ReplayInputs(ctx context.Context) (*ReplayInputs, error) {
	return o.disp.replayInputs(ctx)
}

// replayInputs reads every queued VM that needs a GPU, and what a round
// that places them reads, on the GPUs of every backend.
func (dp *dispatcher) replayInputs(ctx context.Context) (*ReplayInputs, error) {
	cfg := dp.settings().Config
	queue, err := dp.queuedForGPU(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// Between rounds, never in the middle of one: the bookings' devices as
	// a whole round left them. The replay only reads them (peekBookings):
	// what a round keeps of them, and its idle state, are the round's own.
	dp.roundMu.Lock()
	in, err := dp.cycleInputs(ctx, cfg, queue, dp.fleet.backends.Names(), dp.peekBookings, quietLog)
	dp.roundMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("read what the scheduler sees: %w", err)
	}
	st := in.st
	s := estimate.State{Now: st.now, Inventory: st.inv, Running: st.running, Queue: in.reqs, Policy: st.engine, Options: in.opts,
		NotBefore: map[string]time.Time{}, Rank: map[string]int{}}
	for _, q := range queue {
		if q.vm.QueueRank > 0 { // the order only
			s.Rank[q.vm.ID] = q.vm.QueueRank
		}
		if q.vm.StartAt != nil && q.vm.StartAt.After(st.now) {
			s.NotBefore[q.vm.ID] = *q.vm.StartAt
		}
	}
	s.Extendable = func(r *scheduler.Running) bool {
		p := cfg.Profiles[r.Profile]
		return p == nil || p.Lease.Max <= 0 || r.Lease < p.Lease.Max
	}
	if order := st.engine.Order(); order != config.OrderFIFO {
		s.Overtake = "requests asked later may go first (the queue is in " + order + " order)"
	}
	if s.Tasks, s.TaskRatio, err = dp.taskEnds(ctx, st.now); err != nil {
		return nil, err
	}
	return &ReplayInputs{State: s, Groups: st.groups, Config: cfg}, nil
}

// queuedForGPU is every queued VM whose profile asks for a GPU and that a
// dispatch round would place now, by ID, each with the operation it is
// placed with: the round's own grouping of the operations (groupOps) and
// choice of that operation (placedWith: a create, or the start of a
// stopped VM, restartRequest). A VM to be deleted is not placed, nor one
// without such an operation, nor a start after the lease ended
// (dispatchActions fails it).
func (dp *dispatcher) queuedForGPU(ctx context.Context, cfg *config.Config) ([]queued, error) {
	ops, err := dp.st.ListUnfinishedOperations(ctx)
	if err != nil {
		return nil, fmt.Errorf("list unfinished operations: %w", err)
	}
	_, byVM := groupOps(ops)
	vms, err := store.AllVMs(ctx, dp.st, store.VMFilter{States: []string{store.VMQueued}})
	if err != nil {
		return nil, fmt.Errorf("list the queued VMs: %w", err)
	}
	var out []queued
	for i := range vms {
		vm := &vms[i]
		if p := cfg.Profiles[vm.Profile]; p == nil || p.GPU == nil {
			continue
		}
		w := byVM[vm.ID]
		if w == nil {
			continue // no operation: no round places it
		}
		op := placedWith(vm, w)
		if op == nil || op.Kind == store.OpStart && dp.life.leaseOver(vm) != nil {
			continue
		}
		out = append(out, queued{vm, op})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].vm.ID < out[j].vm.ID })
	return out, nil
}

// taskEnds are the VMs that serve a task, with the time each asked for,
// and what the tasks ended lately used of theirs (estimate.TaskRatios).
// A task in its owner's own VM is not one: the VM outlives it.
func (dp *dispatcher) taskEnds(ctx context.Context, now time.Time) (map[string]time.Duration, map[string]float64, error) {
	live, err := dp.st.ListLiveTaskVMs(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list the tasks: %w", err)
	}
	tasks := map[string]time.Duration{}
	for _, t := range live {
		tasks[t.VMID] = time.Duration(t.TimeLimitS) * time.Second
	}
	if len(tasks) == 0 {
		return nil, nil, nil
	}
	ended, err := dp.st.ListEndedTaskRuns(ctx, now.Add(-taskHistoryLookback), taskHistoryMost)
	if err != nil {
		return nil, nil, fmt.Errorf("list the ended tasks: %w", err)
	}
	runs := make([]estimate.TaskRun, 0, len(ended))
	for _, t := range ended {
		runs = append(runs, estimate.TaskRun{User: t.Owner, Asked: time.Duration(t.TimeLimitS) * time.Second, Used: t.EndedAt.Sub(*t.StartedAt)})
	}
	return tasks, estimate.TaskRatios(runs, estimate.MinTaskRuns), nil
}

// Bookings are the reservations the state's rules hold capacity for.
func (in *ReplayInputs) Bookings() []*policy.Booking {
	if e, ok := in.State.Policy.(*policy.Engine); ok {
		return e.Bookings()
	}
	return nil
}
