package server

import (
	"context"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/estimate"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The estimated start of queued VMs (GET /v1/vms/{id}) and the next free
// device of a profile (GET /v1/profiles): pkg/estimate replays the queue
// forward through the scheduler the dispatcher runs, from the very state a
// dispatch round places from, which the orchestrator reads
// (Booker.ReplayInputs: the GPUs, the VMs that hold devices and their
// leases, the reservations, the rules, the queue and its order, the tasks
// and what tasks use of their time). The replay runs in the background
// once per change of the state (estimatework.go); requests read the last
// one. Without an orchestrator (Deps.Bookings nil) there is no estimate.

// estimateHorizon is how far ahead a replay looks.
const estimateHorizon = 7 * 24 * time.Hour

// estimateTick: with time windows or reservations the rules change with
// the time, and the replay runs a cycle at least this often.
const estimateTick = 15 * time.Minute

// estimateSnap is one computation: the state it started from, the queued
// VMs' estimates, the next-free probes asked for, and what of each
// profile is free. Published, it is never changed (a probe added makes a
// new one).
type estimateSnap struct {
	taken    time.Time // the server's clock when the state was read
	computed time.Time // the wall clock when it was published
	gen      uint64    // the changes it has seen (estimates.gen)
	cfg      *config.Config
	state    estimate.State
	opts     estimate.Options
	groups   map[string][]string
	vms      map[string]estimate.Estimate
	err      error
	// probes are NextFree by probeKey. oldProbes are those of them carried
	// over from an earlier snapshot (not asked for since it was made): they
	// are redone when asked for again.
	probes    map[string]estimate.Estimate
	oldProbes map[string]bool
	// never and free are each profile's unservable reason and free
	// counts (hostModels), by name.
	never map[string]string
	free  map[string]*api.ProfileFree
}

func firstOf(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[0]
}

// replayQueue reads the state and replays it.
func (s *Server) replayQueue(ctx context.Context) *estimateSnap {
	cfg := s.Config.Load()
	sn := &estimateSnap{taken: s.Store.Now(), cfg: cfg, opts: estimate.Options{Horizon: estimateHorizon}}
	if s.Bookings == nil {
		return sn // no replay: no VM has an estimate, no probe a time
	}
	in, err := s.Bookings.ReplayInputs(ctx)
	if err != nil {
		sn.err = err
		return sn
	}
	sn.taken, sn.cfg = in.State.Now, in.Config
	if len(in.Config.Policy.Windows) > 0 || len(in.Bookings()) > 0 {
		sn.opts.Tick = estimateTick
	}
	sn.state, sn.groups = in.State, in.Groups
	sn.vms = estimate.Queue(in.State, sn.opts)
	return sn
}

// requestOf is the scheduler's request for a VM, as the dispatcher makes
// it (orchestrator requestOf).
func requestOf(cfg *config.Config, vm *store.VM, groups []string) scheduler.Request {
	return policy.RequestOf(cfg, vm.ID, vm.Owner, vm.Group, groups, vm.Profile, vm.Hours, vm.CreatedAt)
}

// estimateNote is the note of a queued VM whose estimate is not computed
// yet (made since the last replay, which is under way).
const estimateNote = "the estimated start is being computed; ask again in a moment"

// vmEstimate fills in the estimated start of a queued VM from the last
// replay: when there is none to show (no GPU, the state could not be
// read), nothing. A VM the last replay has not seen waits for the next one
// (estimateWait at most; then the note says it is being computed).
func (s *Server) vmEstimate(ctx context.Context, vm *store.VM, out *api.VM) {
	if vm.State != store.VMQueued || s.Config == nil || s.Bookings == nil {
		return
	}
	if p := s.Config.Load().Profiles[vm.Profile]; p == nil || p.GPU == nil {
		return // not replayed
	}
	sn, stale := s.awaitEstimates(ctx, estimateWait, true, func(sn *estimateSnap) bool { _, ok := sn.vms[vm.ID]; return ok })
	if sn == nil {
		out.EstimatedStartNote = estimateNote
		return
	}
	if sn.err != nil {
		return // logged by the worker
	}
	at := sn.taken.UTC()
	out.EstimateComputedAt = &at
	out.EstimateStale = stale || vm.UpdatedAt.After(sn.taken)
	est, ok := sn.vms[vm.ID]
	if !ok {
		out.EstimatedStartNote, out.EstimateStale = estimateNote, true
		return
	}
	out.EstimatedStartNote = est.Reason
	if !est.Known() {
		return
	}
	start, unc := est.At.UTC(), est.Uncertain
	out.EstimatedStart, out.EstimatedStartUncertain = &start, &unc
}
