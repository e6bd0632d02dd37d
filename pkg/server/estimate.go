package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/estimate"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The estimated start of queued VMs (GET /v1/vms/{id}) and the next free
// device of a profile (GET /v1/profiles): pkg/estimate replays, from what
// the server reads of the database (the hosts that are up, as their
// heartbeats store their GPUs; the VMs that hold devices and their leases;
// the queue; the reservations) and the configuration in force, the queue
// forward through the scheduler the dispatcher runs. The replay runs in
// the background once per change of the state (estimatework.go); requests
// read the last one.

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
	now := s.Store.Now()
	sn := &estimateSnap{taken: now, cfg: cfg, opts: estimate.Options{Horizon: estimateHorizon}}
	st, groups, err := s.schedulerState(ctx, cfg, now)
	if err != nil {
		sn.err = fmt.Errorf("read what the scheduler sees: %w", err)
		return sn
	}
	if len(cfg.Policy.Windows) > 0 || len(st.Policy.(*policy.Engine).Bookings()) > 0 {
		sn.opts.Tick = estimateTick
	}
	sn.state, sn.groups = st, groups
	sn.vms = estimate.Queue(st, sn.opts)
	return sn
}

// schedulerState is what a dispatch round would place from now: the GPUs
// of the hosts that are up (draining ones take nothing new), the VMs that
// hold devices on them, the queue and the rules with the reservations.
func (s *Server) schedulerState(ctx context.Context, cfg *config.Config, now time.Time) (estimate.State, map[string][]string, error) {
	var st estimate.State
	users, err := s.Store.ListUsers(ctx)
	if err != nil {
		return st, nil, fmt.Errorf("list users: %w", err)
	}
	groups := make(map[string][]string, len(users))
	for _, u := range users {
		groups[u.Name] = u.Groups
	}
	hosts, err := s.Store.ListHosts(ctx)
	if err != nil {
		return st, nil, fmt.Errorf("list hosts: %w", err)
	}
	drains, err := s.Store.ListGPUDrains(ctx, "")
	if err != nil {
		return st, nil, fmt.Errorf("list drained GPUs: %w", err)
	}
	drained := map[string]bool{}
	for _, d := range drains {
		drained[d.Host+"/"+d.GPUAddress] = true
	}
	holding, err := s.vmsInStates(ctx, []string{store.VMAllocating, store.VMCreating, store.VMRunning, store.VMStopping})
	if err != nil {
		return st, nil, err
	}
	ids := make([]string, 0, len(holding))
	byID := make(map[string]*store.VM, len(holding))
	for i := range holding {
		ids = append(ids, holding[i].ID)
		byID[holding[i].ID] = &holding[i]
	}
	allocs, err := s.Store.ListAllocationsForVMs(ctx, ids)
	if err != nil {
		return st, nil, fmt.Errorf("list the VMs' allocations: %w", err)
	}
	var specs []scheduler.HostSpec
	var held []scheduler.Allocation
	started := map[string]time.Time{}
	for i := range hosts {
		h := &hosts[i]
		state := s.hostState(h, now)
		if state == store.HostDown || h.Inventory == "" {
			continue
		}
		var stored storedInventory
		if err := json.Unmarshal([]byte(h.Inventory), &stored); err != nil {
			s.log.Warn("a host's stored inventory is not valid JSON; its GPUs are left out of the estimates", "host", h.Name, "err", err)
			continue
		}
		spec, devices := scheduler.FromHost(h.Name, stored.HostInventory, nil)
		if stored.Spec != nil {
			spec = *stored.Spec
			spec.Name = h.Name
		}
		spec.GPUs = slices.Clone(spec.GPUs)
		spec.Draining = spec.Draining || state == store.HostDraining
		for j := range spec.GPUs {
			if drained[h.Name+"/"+spec.GPUs[j].Address] {
				spec.GPUs[j].Draining = true
			}
		}
		known := map[string]bool{}
		for _, id := range ids {
			for _, a := range allocs[id] {
				if a.Host != h.Name || a.State == store.AllocReleased {
					continue
				}
				known[id] = true
				sa := scheduler.Allocation{ID: id, Host: a.Host, GPU: a.GPUAddress, Kind: a.Kind, End: leaseEndOf(byID[id], now)}
				switch a.Kind {
				case gpu.KindMIG:
					sa.Profile, sa.Start = a.Profile, a.PlacementStart
				case gpu.KindVGPU:
					sa.Type = a.Profile
				}
				held = append(held, sa)
				if t, ok := started[id]; !ok || a.CreatedAt.Before(t) {
					started[id] = a.CreatedAt
				}
			}
		}
		// Devices the host reports that the database has no allocation
		// for: a VM's that holds devices (an allocation not yet written,
		// or an older gpuvmd's) until its lease ends; any other (leaked,
		// made by hand) holds its capacity with no end.
		for _, d := range devices {
			if known[d.ID] {
				continue
			}
			if vm := byID[d.ID]; vm != nil {
				d.End = leaseEndOf(vm, now)
			}
			held = append(held, d)
		}
		specs = append(specs, spec)
	}
	inv, err := scheduler.NewInventory(specs, held)
	if err != nil {
		return st, nil, fmt.Errorf("model the GPUs: %w", err)
	}
	eng, err := policy.New(policy.Config{Policy: &cfg.Policy, Profiles: cfg.Profiles})
	if err != nil {
		return st, nil, fmt.Errorf("policy: %w", err)
	}
	st = estimate.State{Now: now, Inventory: inv, Policy: eng, NotBefore: map[string]time.Time{}, Rank: map[string]int{},
		Options: scheduler.DefaultOptions(policy.DefaultNotice, policy.DefaultMinRuntime)}
	for _, id := range ids {
		p, ok := inv.PlacementOf(id)
		if !ok {
			continue // on a host that is down, or holds no device
		}
		vm := byID[id]
		st.Running = append(st.Running, scheduler.Running{Request: requestOf(cfg, vm, groups[vm.Owner]), Placement: p, Started: started[id], End: leaseEndOf(vm, now)})
	}
	st.Extendable = func(r *scheduler.Running) bool {
		p := cfg.Profiles[r.Profile]
		return p == nil || p.Lease.Max <= 0 || r.Lease < p.Lease.Max
	}
	queued, err := s.vmsInStates(ctx, []string{store.VMQueued})
	if err != nil {
		return st, nil, err
	}
	for i := range queued {
		vm := &queued[i]
		if p := cfg.Profiles[vm.Profile]; p == nil || p.GPU == nil {
			continue
		}
		st.Queue = append(st.Queue, requestOf(cfg, vm, groups[vm.Owner]))
		if vm.QueueRank > 0 { // the order only
			st.Rank[vm.ID] = vm.QueueRank
		}
		if vm.StartAt != nil && vm.StartAt.After(now) {
			st.NotBefore[vm.ID] = *vm.StartAt
		}
	}
	if order := eng.Order(); order != config.OrderFIFO {
		st.Overtake = "requests asked later may go first (the queue is in " + order + " order)"
	}
	bookings, err := s.pinnedBookings(ctx, cfg, now, eng.Location(), inv, st.Running)
	if err != nil {
		return st, nil, err
	}
	eng.SetBookings(bookings)
	return st, groups, nil
}

// vmsInStates lists every VM in the states, all pages.
func (s *Server) vmsInStates(ctx context.Context, states []string) ([]store.VM, error) {
	out, err := store.AllVMs(ctx, s.Store, store.VMFilter{States: states})
	if err != nil {
		return nil, fmt.Errorf("list the VMs %v: %w", states, err)
	}
	return out, nil
}

// pinnedBookings are the reservations with an occurrence from now on, as
// the policy holds them: each on the devices policy.Pin chooses, in the
// order they were made. One that cannot hold its devices holds nothing.
func (s *Server) pinnedBookings(ctx context.Context, cfg *config.Config, now time.Time, loc *time.Location, inv *scheduler.Inventory, running []scheduler.Running) ([]*policy.Booking, error) {
	rs, err := s.Store.ListReservations(ctx, store.ReservationFilter{From: now})
	if err != nil {
		return nil, fmt.Errorf("list reservations: %w", err)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	var out []*policy.Booking
	for i := range rs {
		b, err := bookingOfReservation(&rs[i], cfg)
		if err != nil {
			continue
		}
		p, err := policy.Pin(b, policy.BookOptions{Now: now, Location: loc, Inventory: inv, Running: running, Existing: out})
		if err != nil || len(p.Pinned) == 0 {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// bookingOfReservation is a reservation as the policy books it (as the
// orchestrator's rounds make it).
func bookingOfReservation(r *store.Reservation, cfg *config.Config) (policy.Booking, error) {
	rep, err := policy.ParseRRule(r.RRule, r.RepeatUntil)
	if err != nil {
		return policy.Booking{}, err
	}
	var need scheduler.Need
	if r.Profile != "" {
		p := cfg.Profiles[r.Profile]
		if p == nil || p.GPU == nil {
			return policy.Booking{}, fmt.Errorf("profile %q is gone or has no GPU", r.Profile)
		}
		need = policy.NeedFromProfile(p.GPU)
	} else {
		need = scheduler.Need{Kind: r.GPUKind, Model: r.GPUModel, Count: 1}
		switch r.GPUKind {
		case gpu.KindMIG:
			need.Profile = r.GPUType
		case gpu.KindVGPU:
			need.Type = r.GPUType
		}
		if err := need.Validate(); err != nil {
			return policy.Booking{}, err
		}
	}
	return policy.Booking{ID: strconv.FormatInt(r.ID, 10), Owner: policy.Owner{Kind: policy.OwnerKind(r.OwnerKind), Name: r.Owner},
		Profile: r.Profile, Need: need, VMs: r.Count, Start: r.StartAt, End: r.EndAt, Repeat: rep, Note: r.Note}, nil
}

// requestOf is the scheduler's request for a VM, as the dispatcher makes
// it (orchestrator requestOf).
func requestOf(cfg *config.Config, vm *store.VM, groups []string) scheduler.Request {
	return policy.RequestOf(cfg, vm.ID, vm.Owner, vm.Group, groups, vm.Profile, vm.Hours, vm.CreatedAt)
}

// leaseEndOf is when a VM's lease ends: its recorded end, else its hours
// from now (as the dispatcher counts a VM not yet running).
func leaseEndOf(vm *store.VM, now time.Time) time.Time {
	if vm == nil {
		return time.Time{}
	}
	if vm.LeaseEnd != nil {
		return *vm.LeaseEnd
	}
	return now.Add(time.Duration(max(vm.Hours, 1)) * time.Hour)
}

// estimateNote is the note of a queued VM whose estimate is not computed
// yet (made since the last replay, which is under way).
const estimateNote = "the estimated start is being computed; ask again in a moment"

// vmEstimate fills in the estimated start of a queued VM from the last
// replay: when there is none to show (no GPU, the state could not be
// read), nothing. A VM the last replay has not seen waits for the next one
// (estimateWait at most; then the note says it is being computed).
func (s *Server) vmEstimate(ctx context.Context, vm *store.VM, out *api.VM) {
	if vm.State != store.VMQueued || s.Config == nil {
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
