package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// A dispatch round places the queued VMs together, through pkg/scheduler
// and pkg/policy: it builds the scheduler's inventory of this host from
// the backends' inventories (in a fleet, of every healthy node, the others
// from their heartbeats: fleet.go), the live allocations and the drains;
// orders the queue by the configured policy; and claims the slots of every
// VM the cycle starts, at the exact places it chose (a MIG instance's start
// slot included). The database's slot keys stay the final arbiter: a claim
// that loses (store.ErrSlotTaken) is tried again next round. Every VM left
// waiting gets its place in the queue and the scheduler's reason.

// PhaseQueued is the phase of a VM that waits for a GPU.
const PhaseQueued = api.PhaseQueued

// usageLookback is how far back ended usage counts: budgets look back a
// calendar month at most (a week may start in the month before), and
// fair share forgets usage by its half-life.
const usageLookback = 40 * 24 * time.Hour

// queued is a queued VM and its create operation, or the start operation
// of a stopped VM that waits for a GPU again (actions.go).
type queued struct {
	vm *store.VM
	op *store.Operation
}

// state is what a round or an admission decides from: the rules, and the
// VMs that hold devices now.
type state struct {
	now     time.Time
	cfg     *config.Config
	engine  *policy.Engine
	running []scheduler.Running
	groups  map[string][]string // user → groups
	// homeHosts is where each user's home lives (store.User.HomeHost),
	// read with the groups by a round, which reads every user (nil for an
	// admission): the home's host a queued VM prefers (homehost.go).
	homeHosts map[string]string

	// Of the hosts placed on (this one; in a fleet every healthy node,
	// fleet.go), for placement only (nil for an admission):
	inv       *scheduler.Inventory
	specs     []scheduler.HostSpec
	allocs    []scheduler.Allocation
	drained   map[string]map[string]store.GPUDrain  // host → GPU address → drain
	slotsHeld map[string]map[string]map[string]bool // host → GPU address → slots of live allocations
	// reservations is the stamp of the reservations the engine holds
	// capacity for (reservations.go: holdBookings, claimBookings).
	reservations string
}

// heldOn is the slots held on a host's GPUs, made on first use.
func (st *state) heldOn(host string) map[string]map[string]bool {
	if st.slotsHeld[host] == nil {
		st.slotsHeld[host] = map[string]map[string]bool{}
	}
	return st.slotsHeld[host]
}

// schedule places what it can of the queued VMs (in dispatch order) and
// returns those it claimed slots for (now allocating) or that need no GPU
// (now creating); the others stay queued with their position and reason.
func (dp *dispatcher) schedule(ctx context.Context, qs []queued) []queued {
	if len(qs) == 0 {
		return nil
	}
	cfg := dp.settings().Config
	entries := map[string]store.QueueEntry{}
	out, gpuQueue := dp.startWithoutGPU(ctx, cfg, qs, entries)
	if len(gpuQueue) == 0 {
		if len(entries) > 0 {
			if _, err := dp.st.SetQueue(ctx, entries); err != nil {
				dp.log.Error("record the queue", "err", err)
				dp.idle.retry()
			}
		}
		return out
	}
	in, err := dp.cycleInputs(ctx, cfg, gpuQueue, dp.withBookedKinds(ctx, cfg, kindsOf(cfg, gpuQueue)), dp.holdBookings, dp.log)
	if err != nil {
		dp.log.Error("scheduling round skipped", "err", err)
		dp.idle.retry()
		return out
	}
	if dp.cycled != nil {
		dp.cycled(in)
	}
	st, reqs := in.st, in.reqs
	byID := make(map[string]queued, len(gpuQueue))
	reqOf := make(map[string]int, len(gpuQueue))
	for i, q := range gpuQueue {
		byID[q.vm.ID] = q
		reqOf[q.vm.ID] = i
	}
	d := scheduler.Cycle(st.now, st.inv, reqs, st.running, st.engine, in.opts)
	// The cycle's window actions (d.Actions) are ApplyRules' to act on, in
	// every round whether VMs wait or not (windows.go); its preemptions are
	// announced here, and carried out when their notice ends (preempt.go).
	dp.announcePreemptions(ctx, cfg, st.now, d.Preempt, byID)

	for _, s := range d.Start {
		q := byID[s.ID]
		if why := dp.life.elsewhere(q, s.Placement.Host); why != "" { // actions.go
			entries[s.ID] = store.QueueEntry{Reason: why, Phase: PhaseQueued}
			continue
		}
		next, err := dp.claim(ctx, q, s, st, reqs[reqOf[s.ID]].PreferHost)
		switch {
		case errors.Is(err, store.ErrSlotTaken), errors.Is(err, store.ErrConflict):
			dp.log.Info("slot taken or VM changed meanwhile; placing again next round", "vm", q.vm.ID, "err", err)
			dp.idle.retry()
		case err != nil:
			if !errors.Is(err, errAbandoned) {
				dp.log.Error("claim the slots the scheduler chose", "vm", q.vm.ID, "err", err)
			}
			dp.idle.retry()
		default:
			out = append(out, queued{next, q.op})
		}
	}
	for _, r := range d.Refused {
		q := byID[r.ID]
		if r.Reason.Code == scheduler.CodeNever {
			// What this host's GPUs can never give may still come (a backend
			// that did not answer, a GPU put in another mode): it waits,
			// saying why, without a place in the queue.
			entries[r.ID] = store.QueueEntry{Reason: r.Reason.Text(), Phase: PhaseQueued}
			continue
		}
		if err := dp.life.refuse(ctx, q, fmt.Errorf("refused by the sharing policy: %s", r.Reason.Text())); err != nil {
			dp.log.Warn("VM refused", "vm", q.vm.ID, "err", err)
		}
	}
	var drainedExplainer *scheduler.Inventory
	for _, id := range d.Order {
		w := d.Waiting[id]
		why := w.Reason.Text()
		if w.Reason.Code == scheduler.CodeDraining {
			if drainedExplainer == nil {
				drainedExplainer = undrained(st, d.Start)
			}
			if s := drainedWhy(drainedExplainer, &reqs[reqOf[id]], st); s != "" {
				why = s
			}
		}
		if w.Reason.Code == scheduler.CodeReservation {
			if s := bookedWhy(st, &reqs[reqOf[id]]); s != "" { // reservations.go
				why = s
			}
		}
		entries[id] = store.QueueEntry{Position: w.Position, Reason: why, Phase: PhaseQueued}
	}
	ranked := len(entries) > 0
	for _, q := range gpuQueue {
		ranked = ranked || q.vm.QueueRank != 0
	}
	for _, q := range qs { // SetQueue need not read the queue again
		if e, ok := entries[q.vm.ID]; ok {
			e.Seen = q.vm
			entries[q.vm.ID] = e
		}
	}
	if ranked { // else no position to write or clear
		if _, err := dp.st.SetQueue(ctx, entries); err != nil {
			dp.log.Error("record the queue", "err", err)
			dp.idle.retry()
		}
	}
	if len(d.Start)+len(d.Waiting) > 0 {
		dp.log.Debug("scheduling round", "queued", len(gpuQueue), "started", len(d.Start), "waiting", len(d.Waiting), "refused", len(d.Refused), "holds", len(d.Holds))
	}
	return out
}

// cycleInputs is what a scheduling cycle decides from: the state
// (placementState, with the preemptions under way marked), the requests
// of the queue in its order, and the scheduler's options. A dispatch
// round places from it, and the estimates replay it (replay.go): one
// place reads both.
type cycleInputs struct {
	st   *state
	reqs []scheduler.Request
	opts scheduler.Options
}

// cycleInputs reads what a cycle places queue (VMs that need a GPU) from,
// on the GPUs of the backends of kinds, the reservations' bookings by book
// (a round's holdBookings; the replay's peekBookings, which keeps nothing),
// warning on log of what it leaves out (a round's dp.log; the replay's
// quietLog: the round warns of the same, once a round).
func (dp *dispatcher) cycleInputs(ctx context.Context, cfg *config.Config, queue []queued, kinds []string, book bookingsStep, log *slog.Logger) (*cycleInputs, error) {
	st, err := dp.readPlacement(ctx, cfg, dp.st.Now(), kinds, book, log)
	if err == nil {
		err = dp.markPreempted(ctx, st) // preempt.go
	}
	if err != nil {
		return nil, err
	}
	reqs := make([]scheduler.Request, 0, len(queue))
	for _, q := range queue {
		reqs = append(reqs, requestOf(cfg, q.vm, st.groups[q.vm.Owner]))
		restartRequest(&reqs[len(reqs)-1], q, st.now) // actions.go
	}
	if set := dp.life.settings(); set.InFleet && set.Homes.Enabled {
		preferHomeHosts(cfg, queue, reqs, st.homeHosts) // homehost.go
	}
	opts := dp.settings().Scheduler
	if opts.Strategy == "" {
		opts.Strategy = scheduler.Pack
	}
	return &cycleInputs{st: st, reqs: reqs, opts: opts}, nil
}

// startWithoutGPU starts the queued VMs that need no GPU, at once unless a
// quota keeps them waiting (they count against it, the vms quota, as every
// VM does; entries gets why), and refuses those whose profile is gone: on
// this host, or in a fleet on the node their owner's home lives on
// (withoutGPUHost), which dispatch wakes to make them. It returns those it
// started (now creating) and the VMs that need a GPU.
func (dp *dispatcher) startWithoutGPU(ctx context.Context, cfg *config.Config, qs []queued, entries map[string]store.QueueEntry) (out, gpuQueue []queued) {
	var plain *state
	var taking map[string]bool // in a fleet with homes, the nodes that take VMs (withoutGPUHost)
	plainSkipped := false
	for _, q := range qs {
		p := cfg.Profiles[q.vm.Profile]
		switch {
		case p == nil:
			if err := dp.life.refuse(ctx, q, fmt.Errorf("profile %q no longer exists", q.vm.Profile)); err != nil {
				dp.log.Warn("VM failed", "vm", q.vm.ID, "err", err)
			}
		case p.GPU == nil:
			if plain == nil && !plainSkipped {
				var err error
				if plain, err = dp.quotaState(ctx, cfg, dp.st.Now(), nil); err != nil {
					dp.log.Error("VMs without a GPU wait this round: their quotas could not be read", "err", err)
					plainSkipped = true
				}
				if set := dp.life.settings(); set.InFleet && set.Homes.Enabled {
					taking = dp.fleet.takingVMs(ctx, dp.log) // fleet.go
				}
			}
			if plain == nil {
				continue
			}
			r := requestOf(cfg, q.vm, plain.groups[q.vm.Owner])
			if why, refuse := plain.engine.AdmitWithoutGPU(plain.now, plain.running, &r); !why.OK() {
				if refuse {
					if err := dp.life.refuse(ctx, q, fmt.Errorf("refused by the sharing policy: %s", why.Text())); err != nil {
						dp.log.Warn("VM refused", "vm", q.vm.ID, "err", err)
					}
					continue
				}
				entries[q.vm.ID] = store.QueueEntry{Reason: why.Text(), Phase: PhaseQueued}
				continue
			}
			host := dp.withoutGPUHost(p, q.vm, plain.homeHosts, taking) // homehost.go
			next, err := dp.st.UpdateVMState(ctx, q.vm.ID, q.vm.Version, store.VMUpdate{State: store.VMCreating, Phase: api.PhasePreparingDisk, Host: &host})
			if err == nil {
				err = dp.st.SetOperationStep(ctx, q.op.ID, StepAllocate)
			}
			if err != nil {
				dp.log.Error("start a VM without GPU", "vm", q.vm.ID, "err", err)
				continue
			}
			plain.engine.AddWithoutGPU(r)
			out = append(out, queued{next, q.op})
		default:
			gpuQueue = append(gpuQueue, q)
		}
	}
	return out, gpuQueue
}

// kindsOf lists the backends the queued VMs' GPU needs may use.
func kindsOf(cfg *config.Config, qs []queued) []string {
	var out []string
	for _, q := range qs {
		g := cfg.Profiles[q.vm.Profile].GPU
		kinds := []gpu.Kind{g.Kind}
		if g.Kind == gpu.KindAny {
			kinds = g.Kinds
			if len(kinds) == 0 {
				kinds = []gpu.Kind{gpu.KindVGPU, gpu.KindMIG, gpu.KindPassthrough}
			}
		}
		for _, k := range kinds {
			if !slices.Contains(out, string(k)) {
				out = append(out, string(k))
			}
		}
	}
	sort.Strings(out)
	return out
}

// requestOf is the scheduler's request for a VM. Whether the owner may use
// the profile was settled when the VM was asked for (admins may use any).
func requestOf(cfg *config.Config, vm *store.VM, groups []string) scheduler.Request {
	return policy.RequestOf(cfg, vm.ID, vm.Owner, vm.Group, groups, vm.Profile, vm.Hours, vm.CreatedAt)
}

// claim records a start: the slots of every device and the usage records,
// with the VM moved to allocating, in one transaction. home is the host of
// the owner's home the VM mounts ("" for none): placed elsewhere, the
// leader logs it (homehost.go).
func (dp *dispatcher) claim(ctx context.Context, q queued, s scheduler.Start, st *state, home string) (*store.VM, error) {
	claims, err := claimsOf(s.Placement, st.slotsHeld[s.Placement.Host])
	if err != nil {
		return nil, err
	}
	host := s.Placement.Host
	var next *store.VM
	err = dp.st.Tx(ctx, func(tx *store.Store) error {
		if err := claimBookings(ctx, tx, st); err != nil { // reservations.go
			return err
		}
		if _, err := tx.ClaimAllocation(ctx, q.vm.ID, claims); err != nil {
			return err
		}
		var err error
		next, err = tx.UpdateVMState(ctx, q.vm.ID, q.vm.Version, store.VMUpdate{State: store.VMAllocating, Phase: api.PhaseAllocating, Host: &host})
		if err != nil {
			return err
		}
		for _, u := range usageOf(q.vm, s.Placement, st.now) {
			if err := tx.InsertUsageRecord(ctx, &u); err != nil {
				return err
			}
		}
		// The step too: one commit per claim (a fleet's leader claims for
		// every node, one after the other).
		return tx.SetOperationStep(ctx, q.op.ID, StepAllocate)
	})
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		if keys, err := c.SlotKeys(); err == nil {
			for _, k := range keys {
				held(st.heldOn(c.Host), c.GPUAddress)[k] = true
			}
		}
	}
	dp.log.Info("VM placed", "vm", q.vm.ID, "name", q.vm.Name, "host", host, "placement", s.Placement.String())
	if home != "" && home != host {
		dp.log.Info("VM placed away from its owner's home: its host could not serve it now", "vm", q.vm.ID, "owner", q.vm.Owner, "host", host, "home_host", home)
	}
	if err := dp.life.hook(q.vm.ID, HookClaimed); err != nil {
		return nil, err
	}
	return next, nil
}

// placementState reads everything a round places from: the rules and the
// VMs that hold devices (policyState), and the GPUs of the hosts it places
// on (placementHosts: this host's as the backends of kinds report them;
// in a fleet every healthy node's too), with the live allocations and the
// drains; and the reservations' bookings. Its readers are the rules'
// (Book, Capacity, CheckExtend, ReservationConflicts), outside any round
// and without roundMu: they read the bookings only (peekBookings); the
// round keeps them (holdBookings, in its own cycleInputs). They warn of
// nothing (quietLog): they read as often as people ask, and the round
// warns of the same, once a round.
func (dp *dispatcher) placementState(ctx context.Context, cfg *config.Config, now time.Time, kinds []string) (*state, error) {
	return dp.readPlacement(ctx, cfg, now, kinds, dp.peekBookings, quietLog)
}

// bookingsStep gives a state's engine the reservations' bookings
// (holdBookings, peekBookings).
type bookingsStep func(ctx context.Context, st *state) error

// readPlacement is placementState with the bookings given by book, and
// its warnings (a backend that did not answer, a node's unusable
// inventory, a GPU's holders it cannot account for) on log.
func (dp *dispatcher) readPlacement(ctx context.Context, cfg *config.Config, now time.Time, kinds []string, book bookingsStep, log *slog.Logger) (*state, error) {
	live, err := dp.st.ListLiveAllocations(ctx, "")
	if err != nil {
		return nil, err
	}
	drained, err := drainsOf(ctx, dp.st)
	if err != nil {
		return nil, fmt.Errorf("list drained gpus: %w", err)
	}
	hosts, err := dp.fleet.placementHosts(ctx, cfg, kinds, log)
	if err != nil {
		return nil, err
	}
	vms, err := dp.liveVMs(ctx, live)
	if err != nil {
		return nil, err
	}
	st := &state{now: now, cfg: cfg, drained: drained, slotsHeld: map[string]map[string]map[string]bool{}}
	known := map[string]bool{}
	for _, a := range live {
		known[a.VMID] = true
	}
	for _, h := range hosts {
		st.addHost(h.spec, h.devices, live, vms, known)
	}
	inv, problems := buildInventory(st.specs, st.allocs)
	for _, p := range problems {
		log.Warn("inventory: a GPU holds what gpuvm cannot account for; nothing is placed on it", "err", p)
	}
	if inv == nil {
		return nil, fmt.Errorf("build the inventory of %s: %w", dp.host, errors.Join(problems...))
	}
	st.inv = inv
	if err := dp.policyState(ctx, st, live, vms, nil); err != nil {
		return nil, err
	}
	// The reservations: capacity held for their owners (reservations.go).
	if err := book(ctx, st); err != nil {
		return nil, err
	}
	return st, nil
}

// addHost adds a host to a round: its GPUs (drained ones marked), the live
// allocations on it and the devices it reports for none.
func (st *state) addHost(spec scheduler.HostSpec, devices []scheduler.Allocation, live []store.Allocation, vms map[string]*store.VM, known map[string]bool) {
	spec.GPUs = slices.Clone(spec.GPUs)
	for i := range spec.GPUs {
		if _, ok := st.drained[spec.Name][spec.GPUs[i].Address]; ok {
			spec.GPUs[i].Draining = true
		}
	}
	first := len(st.allocs)
	offered := make(map[string]bool, len(spec.GPUs))
	for _, g := range spec.GPUs {
		offered[g.Address] = true
	}
	for _, a := range live {
		if a.Host != spec.Name {
			continue
		}
		held(st.heldOn(a.Host), a.GPUAddress)[a.Slot] = true
		if !offered[a.GPUAddress] {
			// A GPU the backends of this round's kinds do not serve (an
			// L40S to a round of MIG profiles) is not in the round: nothing
			// is placed on it, and its VMs are counted as estimated.
			continue
		}
		sa := scheduler.Allocation{ID: a.VMID, Host: a.Host, GPU: a.GPUAddress, Kind: a.Kind}
		switch a.Kind {
		case gpu.KindMIG:
			sa.Profile, sa.Start = a.Profile, a.PlacementStart
		case gpu.KindVGPU:
			sa.Type = a.Profile
		}
		if vm := vms[a.VMID]; vm != nil {
			sa.End = leaseEnd(vm, st.now)
		}
		st.allocs = append(st.allocs, sa)
	}
	// Devices the backends report for no live allocation (leaked ones the
	// reconciler will remove, or made by hand) hold their capacity too.
	for _, d := range devices {
		if !known[d.ID] {
			st.allocs = append(st.allocs, d)
		}
	}
	// A GPU that holds devices may be unusable to every backend because of
	// them ("passed through to VM …"): the scheduler knows it is full, and
	// saying it is unavailable would hide the reason VMs wait for it.
	occupied := map[string]bool{}
	for _, a := range st.allocs[first:] {
		occupied[a.GPU] = true
	}
	for i := range spec.GPUs {
		if g := &spec.GPUs[i]; g.Unavailable != "" && occupied[g.Address] {
			g.Unavailable = ""
		}
	}
	st.specs = append(st.specs, spec)
}

// liveVMs reads the VMs that hold live allocations.
func (dp *dispatcher) liveVMs(ctx context.Context, live []store.Allocation) (map[string]*store.VM, error) {
	var ids []string
	for _, a := range live {
		if len(ids) == 0 || ids[len(ids)-1] != a.VMID {
			ids = append(ids, a.VMID)
		}
	}
	slices.Sort(ids)
	return dp.st.GetVMs(ctx, slices.Compact(ids))
}

// leaseEnd is when a VM's lease ends: its recorded end, else (not yet
// running) its hours from now.
func leaseEnd(vm *store.VM, now time.Time) time.Time {
	if vm.LeaseEnd != nil {
		return *vm.LeaseEnd
	}
	return now.Add(time.Duration(max(vm.Hours, 1)) * time.Hour)
}

// policyState fills in the rules (the engine, with the ended usage its fair
// share and budgets count) and the VMs that hold devices, placed as st.inv
// knows them or, on other hosts, as their profile's need estimates. The
// groups of owners are read (st.groups), with those of the VMs counted;
// owners nil reads every user's (a round orders the whole queue).
func (dp *dispatcher) policyState(ctx context.Context, st *state, live []store.Allocation, vms map[string]*store.VM, owners []string) error {
	plainVMs, err := dp.withoutGPU(ctx, st.cfg, live)
	if err != nil {
		return err
	}
	if err := dp.readGroups(ctx, st, owners, vms, plainVMs); err != nil {
		return err
	}
	halfLife := st.cfg.Policy.Queue.HalfLife
	if halfLife <= 0 {
		halfLife = config.DefaultHalfLife
	}
	records, err := dp.st.ListEndedUsage(ctx, st.now.Add(-max(usageLookback, 10*halfLife)))
	if err != nil {
		return err
	}
	usage, ledger := policy.NewUsage(halfLife), &policy.Ledger{}
	for _, r := range records {
		usage.Charge(r.User, r.Share, r.StartedAt, *r.EndedAt)
		ledger.Add(policy.Record{User: r.User, Group: r.Group, Share: r.Share, Start: r.StartedAt, End: *r.EndedAt})
	}
	st.engine, err = policy.New(policy.Config{Policy: &st.cfg.Policy, Usage: usage, Ledger: ledger, Profiles: st.cfg.Profiles})
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	plain := make([]scheduler.Request, 0, len(plainVMs))
	for _, vm := range plainVMs {
		plain = append(plain, requestOf(st.cfg, vm, st.groups[vm.Owner]))
	}
	st.engine.SetWithoutGPU(plain)
	byVM := map[string][]store.Allocation{}
	var ids []string
	for _, a := range live {
		if _, ok := byVM[a.VMID]; !ok {
			ids = append(ids, a.VMID)
		}
		byVM[a.VMID] = append(byVM[a.VMID], a)
	}
	sort.Strings(ids)
	for _, id := range ids {
		vm := vms[id]
		if vm == nil {
			continue // released meanwhile
		}
		as := byVM[id]
		r := scheduler.Running{Request: requestOf(st.cfg, vm, st.groups[vm.Owner]), End: leaseEnd(vm, st.now), Started: as[0].CreatedAt}
		for _, a := range as {
			if a.CreatedAt.Before(r.Started) {
				r.Started = a.CreatedAt
			}
		}
		if p, ok := st.placedOf(id); ok {
			r.Placement = p
		} else {
			r.Placement = estimated(as, r.Need)
		}
		st.running = append(st.running, r)
	}
	return nil
}

// readGroups reads into st.groups the groups of owners and of the owners of
// vms and plain; owners nil reads every user's, and where their homes live
// (st.homeHosts) in the same read. An admission counts the few VMs that
// hold something: reading every user for each (hundreds, with their
// groups) was most of a create's time (issue #26).
func (dp *dispatcher) readGroups(ctx context.Context, st *state, owners []string, vms map[string]*store.VM, plain []*store.VM) error {
	if owners == nil {
		users, err := dp.st.ListUsers(ctx)
		if err != nil {
			return err
		}
		st.groups = make(map[string][]string, len(users))
		st.homeHosts = map[string]string{}
		for _, u := range users {
			st.groups[u.Name] = u.Groups
			if u.HomeHost != nil && *u.HomeHost != "" {
				st.homeHosts[u.Name] = *u.HomeHost
			}
		}
		return nil
	}
	names := slices.Clone(owners)
	for _, vm := range vms {
		names = append(names, vm.Owner)
	}
	for _, vm := range plain {
		names = append(names, vm.Owner)
	}
	slices.Sort(names)
	groups, err := dp.st.UserGroups(ctx, slices.Compact(names))
	if err != nil {
		return err
	}
	st.groups = groups
	return nil
}

func (st *state) placedOf(id string) (scheduler.Placement, bool) {
	if st.inv == nil {
		return scheduler.Placement{}, false
	}
	return st.inv.PlacementOf(id)
}

// estimated is the placement of a VM this host's inventory does not know
// (on another host, or counted at an admission): its allocations, each
// with its part of the profile's estimated memory and share.
func estimated(as []store.Allocation, need scheduler.Need) scheduler.Placement {
	f := policy.NeedFootprint(need)
	p := scheduler.Placement{Host: as[0].Host}
	n := float64(len(as))
	for _, a := range as {
		d := scheduler.Device{GPU: a.GPUAddress, Kind: a.Kind, Profile: a.Profile, Start: a.PlacementStart, Size: a.PlacementSize,
			Memory: f.Memory / uint64(len(as)), Share: f.Share / n}
		if a.Kind == gpu.KindVGPU {
			d.Type, d.Profile = a.Profile, ""
		}
		p.Devices = append(p.Devices, d)
	}
	return p
}

// buildInventory builds the scheduler's inventory of the hosts. An
// allocation it cannot take (a device gpuvm cannot account for, on slots
// the rules say cannot hold it) makes its GPU unavailable instead of
// failing the whole round; the problems are returned. It returns nil only
// when the hosts themselves cannot be modelled.
func buildInventory(specs []scheduler.HostSpec, allocs []scheduler.Allocation) (*scheduler.Inventory, []error) {
	if inv, err := scheduler.NewInventory(specs, allocs); err == nil {
		return inv, nil
	}
	empty, err := scheduler.NewInventory(specs, nil)
	if err != nil {
		return nil, []error{err}
	}
	byVM := map[string][]scheduler.Allocation{}
	var ids []string
	for _, a := range allocs {
		if _, ok := byVM[a.ID]; !ok {
			ids = append(ids, a.ID)
		}
		byVM[a.ID] = append(byVM[a.ID], a)
	}
	sort.Strings(ids)
	var problems []error
	bad := map[string]string{} // host/GPU → why
	var good []scheduler.Allocation
	for _, id := range ids {
		as := byVM[id]
		p := scheduler.Placement{Host: as[0].Host}
		end := time.Time{}
		for _, a := range as {
			p.Devices = append(p.Devices, scheduler.Device{GPU: a.GPU, Kind: a.Kind, Type: a.Type, Profile: a.Profile, Start: a.Start})
			if a.End.After(end) {
				end = a.End
			}
		}
		if err := empty.Allocate(id, p, end); err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", id, err))
			for _, a := range as {
				bad[a.Host+"/"+a.GPU] = err.Error()
			}
			continue
		}
		good = append(good, as...)
	}
	specs = slices.Clone(specs)
	for h := range specs {
		specs[h].GPUs = slices.Clone(specs[h].GPUs)
		for i := range specs[h].GPUs {
			if why, ok := bad[specs[h].Name+"/"+specs[h].GPUs[i].Address]; ok {
				specs[h].GPUs[i].Unavailable = "it holds devices gpuvm cannot account for (" + why + ")"
			}
		}
	}
	kept := good[:0]
	for _, a := range good {
		if _, ok := bad[a.Host+"/"+a.GPU]; !ok {
			kept = append(kept, a)
		}
	}
	inv, err := scheduler.NewInventory(specs, kept)
	if err != nil {
		return nil, append(problems, err)
	}
	return inv, problems
}

// configuredMode gives each GPU's mode as the configuration's gpu blocks
// set it (config.Host.Settings).
func configuredMode(cfg *config.Config) func(address, model string) gpu.Mode {
	return func(address, model string) gpu.Mode {
		if m := cfg.Server.Host.Settings(address, modelOf(model)).Mode; m != "" {
			return m
		}
		return gpu.ModeAuto
	}
}

// modelOf finds the board of a GPU by PCI ID ("10de:2331") or name.
func modelOf(model string) gpu.Model {
	if id, ok := strings.CutPrefix(strings.ToLower(model), "10de:"); ok {
		if n, err := gpu.ParseDeviceID("0x" + id); err == nil {
			if m, ok := gpu.ModelByID(n); ok {
				return m
			}
		}
	}
	m, _ := gpu.ModelByName(model)
	return m
}

// Admit applies the sharing policy to a VM a user asks for, before it is
// queued: Refuse is true when a rule means it can never start (over a
// quota on its own, a lease no budget or window allows), and the Reason
// names the rule; otherwise the Reason says what keeps it from starting now
// (none if nothing in the rules does), and the VM is queued. A VM of a profile without a
// GPU counts against the quotas as one VM (it takes CPU, memory and disk),
// and the GPU rules (slices, GPUs, GPU memory and hours, windows) do not
// apply to it.
func (dp *dispatcher) Admit(ctx context.Context, user string, groups []string, profileName string, hours int) (scheduler.Admission, error) {
	cfg := dp.settings().Config
	p := cfg.Profiles[profileName]
	if p == nil {
		return scheduler.Admission{Reason: scheduler.Reason{Code: scheduler.CodeInvalid, Detail: fmt.Sprintf("no profile is named %q", profileName)}, Refuse: true}, nil
	}
	now := dp.st.Now()
	group := ""
	if len(groups) > 0 {
		group = groups[0]
	}
	r := requestOf(cfg, &store.VM{ID: "admission", Owner: user, Group: group, Profile: profileName, Hours: hours, CreatedAt: now}, groups)
	var a scheduler.Admission
	err := dp.withQuotaState(ctx, cfg, now, func(st *state) {
		if p.GPU == nil {
			a.Reason, a.Refuse = st.engine.AdmitWithoutGPU(now, st.running, &r)
		} else {
			a.Reason, a.Refuse = st.engine.Begin(now, st.running).Admit(&r)
		}
	})
	if err != nil {
		return scheduler.Admission{}, fmt.Errorf("admission: %w", err)
	}
	if a.Reason.OK() {
		return scheduler.Admission{}, nil
	}
	return a, nil
}

// quotaState reads what the quotas count, without the GPUs: the rules, the
// VMs that hold devices (policyState) and those that hold none; the groups
// of owners and of the owners of those VMs (owners nil: every user's).
func (dp *dispatcher) quotaState(ctx context.Context, cfg *config.Config, now time.Time, owners []string) (*state, error) {
	live, err := dp.st.ListLiveAllocations(ctx, "")
	if err != nil {
		return nil, err
	}
	vms, err := dp.liveVMs(ctx, live)
	if err != nil {
		return nil, err
	}
	st := &state{now: now, cfg: cfg}
	if err := dp.policyState(ctx, st, live, vms, owners); err != nil {
		return nil, err
	}
	return st, nil
}

// withoutGPUStates are the states in which a VM that needs no GPU counts
// against the quotas, as a VM with one does while it holds its devices
// (from its placement until it is stopped or deleted).
var withoutGPUStates = []string{store.VMAllocating, store.VMCreating, store.VMRunning, store.VMStopping}

// withoutGPU lists the VMs of every host that count against the quotas but
// hold no device: in withoutGPUStates, without a live allocation, of a
// profile that asks for no GPU (or is gone).
func (dp *dispatcher) withoutGPU(ctx context.Context, cfg *config.Config, live []store.Allocation) ([]*store.VM, error) {
	holds := make(map[string]bool, len(live))
	for _, a := range live {
		holds[a.VMID] = true
	}
	var out []*store.VM
	vms, err := store.AllVMs(ctx, dp.st, store.VMFilter{States: withoutGPUStates})
	if err != nil {
		return nil, fmt.Errorf("list the VMs without a GPU: %w", err)
	}
	for i := range vms {
		vm := &vms[i]
		if holds[vm.ID] {
			continue
		}
		if p := cfg.Profiles[vm.Profile]; p != nil && p.GPU != nil {
			continue // counted when it holds its devices
		}
		out = append(out, vm)
	}
	return out, nil
}

// mergedInventory merges the backends' inventories, in name order.
func mergedInventory(invs map[string]backend.Inventory) gpu.HostInventory {
	return backend.MergeByName(invs)
}

// startQuota says why a stopped VM without a GPU may not start now: a
// quota of its owner (or group) that the VMs running already fill. nil: it
// may start.
func (dp *dispatcher) startQuota(ctx context.Context, vm *store.VM) error {
	cfg := dp.settings().Config
	st, err := dp.quotaState(ctx, cfg, dp.st.Now(), []string{vm.Owner})
	if err != nil {
		return fmt.Errorf("read what the quotas count: %w", err)
	}
	r := requestOf(cfg, vm, st.groups[vm.Owner])
	if why, _ := st.engine.AdmitWithoutGPU(st.now, st.running, &r); !why.OK() {
		return fmt.Errorf("refused by the sharing policy: %s", why.Text())
	}
	return nil
}
