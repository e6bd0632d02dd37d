package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Reservations book GPU capacity ahead for a user or a group (the
// reservations table; pkg/policy's bookings). Each reservation holds exact
// devices, the same for all its occurrences (policy.Pin), so that a course's
// lab is always on the same GPUs:
//
//   - Book checks a reservation against the rules and the capacity, and
//     records it in the same transaction as a re-check (store.BookReservation
//     under the booking lock): of two bookings for the last capacity one is
//     refused, and nothing is ever half-booked.
//   - Every scheduling round gives the policy engine the reservations that
//     have an occurrence left, with their devices (holdBookings): from its
//     start a reservation's devices are its owner's only, an owner's VM
//     takes them first, and no other VM starts if its lease would run into
//     them; it waits with the reason "GPU booked from <time> by <owner>".
//     A claim checks, under the booking lock, that no reservation was made
//     since the round read them (claimBookings).
//   - The devices are kept between rounds (bookingState) and chosen again
//     only when they no longer hold (the GPUs changed), or after a
//     restart: then, where they can, on the devices of the owner's VMs
//     that run in the reservation.
//   - A VM that runs into the devices of a reservation not its owner's
//     (a lease that ran past its own reservation's end, an extension, a
//     restart that had to move the devices) is warned ahead and deleted at
//     the reservation's start, as a preempted VM is (ReservationConflicts;
//     the timed rules call round.reservation): a stopped VM would keep the
//     GPU.
//
// In a fleet the inventory a round places on is every node's
// (placementHosts), so the devices of a reservation may be on any node;
// each node chooses them on its own view, and only the leader's rounds
// place VMs. The reservations table names no host: a reservation is for
// capacity anywhere the round places.

// ByReservation requests the deletes of VMs whose devices a reservation
// takes.
const ByReservation = "reservation"

// bookingState is what the rounds remember of the reservations.
type bookingState struct {
	mu sync.Mutex
	// pins are the devices each reservation holds, one VM's each, as of
	// its version.
	pins map[int64]keptPins
	// problems are the reservations that held nothing in the last round,
	// and why (logged when it changes).
	problems map[int64]string
}

type keptPins struct {
	version int64
	vms     []scheduler.Placement
}

// bookingID and reservationID convert between the store's IDs and the
// policy's.
func bookingID(id int64) string { return strconv.FormatInt(id, 10) }

func reservationID(b string) int64 {
	id, _ := strconv.ParseInt(b, 10, 64)
	return id
}

// OwnerText writes a reservation's owner as the API does: "ann", or
// "group:students".
func OwnerText(kind, name string) string {
	if kind == store.OwnerGroup {
		return "group:" + name
	}
	return name
}

// ReservationNeed is the GPU need of one VM of a reservation: its
// profile's, or its GPU need's (one device per VM).
func ReservationNeed(r *store.Reservation, cfg *config.Config) (scheduler.Need, error) {
	if r.Profile != "" {
		var p *config.Profile
		if cfg != nil {
			p = cfg.Profiles[r.Profile]
		}
		switch {
		case p == nil:
			return scheduler.Need{}, fmt.Errorf("no profile is named %q", r.Profile)
		case p.GPU == nil:
			return scheduler.Need{}, fmt.Errorf("profile %q has no GPU", r.Profile)
		}
		return policy.NeedFromProfile(p.GPU), nil
	}
	n := scheduler.Need{Kind: r.GPUKind, Model: r.GPUModel, Count: 1}
	switch n.Kind {
	case gpu.KindMIG:
		n.Profile = r.GPUType
	case gpu.KindVGPU:
		n.Type = r.GPUType
	case gpu.KindPassthrough:
		if r.GPUType != "" {
			return n, fmt.Errorf("a whole GPU has no type (got %q); name its model", r.GPUType)
		}
	default:
		return n, fmt.Errorf("GPU kind %q is not mig, vgpu or passthrough", r.GPUKind)
	}
	return n, n.Validate()
}

// bookingOf is a reservation as the policy books it.
func bookingOf(r *store.Reservation, cfg *config.Config) (policy.Booking, error) {
	rep, err := policy.ParseRRule(r.RRule, r.RepeatUntil)
	if err != nil {
		return policy.Booking{}, &policy.FieldError{Field: policy.FieldRepeat, Err: err}
	}
	need, err := ReservationNeed(r, cfg)
	if err != nil {
		field := policy.FieldNeed
		if r.Profile != "" {
			field = policy.FieldProfile
		}
		return policy.Booking{}, &policy.FieldError{Field: field, Err: err}
	}
	return policy.Booking{ID: bookingID(r.ID), Owner: policy.Owner{Kind: policy.OwnerKind(r.OwnerKind), Name: r.Owner},
		Profile: r.Profile, Need: need, VMs: r.Count, Start: r.StartAt, End: r.EndAt, Repeat: rep, Note: r.Note}, nil
}

// entitled reports whether a VM may run on a booking's devices: it is the
// owner's (the user's, or a member's of the group) and of the booked
// profile, when the booking names one.
func entitled(b *policy.Booking, r *scheduler.Request) bool {
	return b.Owner.Includes(r) && (b.Profile == "" || b.Profile == r.Profile)
}

// pinReservations makes the policy's bookings of the reservations that have
// an occurrence from now on, each with the devices it holds: those it held
// before (kept) where they still hold, else, when none are known, those of
// the owner's VMs that run in it, else devices chosen afresh (policy.Pin),
// in the order the reservations were made. A reservation that cannot hold
// its devices (its profile is gone, the GPUs changed) holds nothing and is
// reported in problems. It returns the devices to keep for the next round.
func pinReservations(rs []store.Reservation, cfg *config.Config, now time.Time, loc *time.Location, inv *scheduler.Inventory,
	running []scheduler.Running, kept map[int64]keptPins) (bookings []*policy.Booking, next map[int64]keptPins, problems map[int64]error) {
	rs = slices.Clone(rs)
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	next, problems = map[int64]keptPins{}, map[int64]error{}
	type item struct {
		r *store.Reservation
		b policy.Booking
	}
	var items []item
	for i := range rs {
		r := &rs[i]
		b, err := bookingOf(r, cfg)
		if err != nil {
			problems[r.ID] = err
			continue
		}
		items = append(items, item{r, b})
	}
	// Until its turn, a reservation is in the way of the others with the
	// devices it held before.
	provisional := make([]*policy.Booking, len(items))
	for i, it := range items {
		if k, ok := kept[it.r.ID]; ok && k.version == it.r.Version {
			b := it.b
			b.Pinned = scheduler.MergeByHost(k.vms)
			provisional[i] = &b
		}
	}
	for i, it := range items {
		existing := slices.Clone(bookings)
		for _, p := range provisional[i+1:] {
			if p != nil {
				existing = append(existing, p)
			}
		}
		o := policy.BookOptions{Now: now, Location: loc, Inventory: inv, Running: running, Existing: existing}
		if k, ok := kept[it.r.ID]; ok && k.version == it.r.Version {
			o.Prefer = k.vms
		} else {
			for _, vm := range running {
				if entitled(&it.b, &vm.Request) && vm.Need.Key() == it.b.Need.Key() && len(vm.Placement.Devices) > 0 {
					o.Prefer = append(o.Prefer, vm.Placement)
				}
			}
		}
		b, err := policy.Pin(it.b, o)
		if err != nil {
			problems[it.r.ID] = err
			continue
		}
		if len(b.Pinned) == 0 {
			continue // no occurrence left
		}
		bookings = append(bookings, b)
		next[it.r.ID] = keptPins{version: it.r.Version, vms: b.SplitPinned()}
	}
	return bookings, next, problems
}

// heldBookings are the reservations that have an occurrence from a
// round's time on, and the bookings of them (pinReservations) from the
// devices the rounds kept.
type heldBookings struct {
	stamp    string // the reservations' (claimBookings)
	listed   []store.Reservation
	bookings []*policy.Booking
	next     map[int64]keptPins // the devices to keep for the next round
	problems map[int64]error    // the reservations that hold nothing
}

// readBookings reads the reservations of a round at st.now and pins them
// (pinReservations) from the devices the last round kept. It writes
// nothing, and logs nothing.
func (dp *dispatcher) readBookings(ctx context.Context, st *state) (*heldBookings, error) {
	stamp, err := dp.st.ReservationsStamp(ctx)
	if err != nil {
		return nil, fmt.Errorf("reservations: %w", err)
	}
	rs, err := dp.st.ListReservations(ctx, store.ReservationFilter{From: st.now})
	if err != nil {
		return nil, fmt.Errorf("reservations: %w", err)
	}
	dp.bookings.mu.Lock()
	kept := dp.bookings.pins
	dp.bookings.mu.Unlock()
	hb := &heldBookings{stamp: stamp, listed: rs}
	hb.bookings, hb.next, hb.problems = pinReservations(rs, st.cfg, st.now, st.engine.Location(), st.inv, st.running, kept)
	return hb, nil
}

// give gives st's engine the bookings, and notes in st which reservations
// they were (the stamp claims check).
func (hb *heldBookings) give(st *state) {
	st.engine.SetBookings(hb.bookings)
	st.reservations = hb.stamp
}

// holdBookings gives the round's engine the reservations with the devices
// they hold (readBookings, give), and keeps the devices chosen for the
// next round (bookingState), saying which reservations hold nothing (once
// each, while they do). Fleet: st.inv is every node's GPUs
// (placementHosts), so a reservation's devices may be on any node; each
// node keeps its own choice (bookingState) and only the leader's places VMs,
// so a booking made through another node is chosen again by the leader,
// around what runs, on its first round.
func (dp *dispatcher) holdBookings(ctx context.Context, st *state) error {
	hb, err := dp.readBookings(ctx, st)
	if err != nil {
		return err
	}
	if len(hb.listed) > 0 {
		dp.idle.dueBy(st.now) // booked capacity moves with time: every Tick runs (idle.go)
	}
	var listed int64
	for i := range hb.listed {
		listed = max(listed, hb.listed[i].ID)
	}
	next := hb.next
	dp.bookings.mu.Lock()
	for id, k := range dp.bookings.pins {
		if id > listed {
			next[id] = k // booked after the list was read (Book)
		}
	}
	dp.bookings.pins = next
	if dp.bookings.problems == nil {
		dp.bookings.problems = map[int64]string{}
	}
	for id, err := range hb.problems {
		if dp.bookings.problems[id] != err.Error() {
			dp.log.Warn("a reservation holds no GPU now", "reservation", id, "err", err)
		}
	}
	for id := range dp.bookings.problems {
		if _, ok := hb.problems[id]; !ok {
			delete(dp.bookings.problems, id)
		}
	}
	for id, err := range hb.problems {
		dp.bookings.problems[id] = err.Error()
	}
	dp.bookings.mu.Unlock()
	hb.give(st)
	return nil
}

// peekBookings is holdBookings for a reader of the state that is no round
// (the estimates' replay): the same bookings given to st's engine, from
// the devices the rounds kept, and nothing kept, logged or brought forward.
func (dp *dispatcher) peekBookings(ctx context.Context, st *state) error {
	hb, err := dp.readBookings(ctx, st)
	if err != nil {
		return err
	}
	hb.give(st)
	return nil
}

// withBookedKinds adds to kinds the kinds of GPU device the reservations
// that have an occurrence left hold, so that the round's inventory has the
// backends that give them.
func (dp *dispatcher) withBookedKinds(ctx context.Context, cfg *config.Config, kinds []string) []string {
	rs, err := dp.st.ListReservations(ctx, store.ReservationFilter{From: dp.st.Now()})
	if err != nil {
		dp.log.Warn("reservations: list them to know their GPU kinds", "err", err)
		return kinds
	}
	out := slices.Clone(kinds)
	for i := range rs {
		need, err := ReservationNeed(&rs[i], cfg)
		if err != nil {
			continue
		}
		ks := []gpu.Kind{need.Kind}
		if need.Kind == gpu.KindAny {
			ks = need.Kinds
			if len(ks) == 0 {
				ks = []gpu.Kind{gpu.KindVGPU, gpu.KindMIG, gpu.KindPassthrough}
			}
		}
		for _, k := range ks {
			if !slices.Contains(out, string(k)) {
				out = append(out, string(k))
			}
		}
	}
	sort.Strings(out)
	return out
}

// claimBookings runs first in a claim's transaction: it takes the booking
// lock and checks that the reservations are those the round held capacity
// for; a reservation made since makes the claim a conflict (placed again
// next round, with it), so that no VM starts on capacity booked meanwhile.
func claimBookings(ctx context.Context, tx *store.Store, st *state) error {
	if err := tx.LockBookings(ctx); err != nil {
		return err
	}
	stamp, err := tx.ReservationsStamp(ctx)
	if err != nil {
		return err
	}
	if stamp != st.reservations {
		return fmt.Errorf("%w: the reservations changed since the round read them", store.ErrConflict)
	}
	return nil
}

// bookedWhy says which reservation keeps a waiting request off the GPUs:
// "GPU booked from <time> by <owner> (reservation <id>)", the earliest
// occurrence of another's reservation without which it would start now.
// "" when none alone is why.
func bookedWhy(st *state, r *scheduler.Request) string {
	if st.inv == nil || st.engine == nil {
		return ""
	}
	loc := st.engine.Location()
	end := st.now.Add(r.Lease)
	type occ struct {
		b *policy.Booking
		i policy.Interval
	}
	var occs []occ
	for _, b := range st.engine.Bookings() {
		if entitled(b, r) {
			continue
		}
		for _, i := range b.Occurrences(st.now, end, loc) {
			occs = append(occs, occ{b, i})
		}
	}
	sort.SliceStable(occs, func(i, j int) bool { return occs[i].i.Start.Before(occs[j].i.Start) })
	var holds []scheduler.Hold
	for _, o := range occs {
		for _, p := range o.b.Pinned {
			holds = append(holds, scheduler.Hold{ID: o.b.ID, Code: scheduler.CodeReservation, Host: p.Host, Devices: p.Devices, From: o.i.Start, To: o.i.End})
		}
		if _, why := st.inv.Place(r.Need, scheduler.PlaceOptions{Now: st.now, End: end, Holds: holds}); !why.OK() {
			return fmt.Sprintf("GPU booked from %s by %s (reservation %s)", stampIn(o.i.Start, loc), OwnerText(string(o.b.Owner.Kind), o.b.Owner.Name), o.b.ID)
		}
	}
	return ""
}

// errStale: what a booking was decided on changed before it was recorded.
var errStale = errors.New("the reservations or the allocations changed while the booking was checked")

// bookAttempts bounds how often Book decides again when what it decided
// on changed meanwhile.
const bookAttempts = 5

// startSkew is how far in the past a booking's start may be and still be
// taken as now (the time the request took to get here).
const startSkew = time.Minute

// Book books GPU capacity ahead: it checks r against the policy's
// reservation rules (unless admin: an admin's booking is held to the
// capacity only) and the capacity at every occurrence, counting the other
// reservations and, for the first occurrence, the VMs whose leases run past
// its start, and records it. r names its owner, its profile or GPU need,
// count, first occurrence, recurrence (RRule, RepeatUntil), note and
// CreatedBy; Book sets its ID, Version and timestamps.
//
// Errors: what is wrong with r is a *policy.FieldError (several joined with
// errors.Join); capacity that is not there a *policy.CapacityError (which
// time, which kind, how much fits); other errors are the server's.
func (rl *rulesLoop) Book(ctx context.Context, r *store.Reservation, admin bool) error {
	cfg := rl.settings().Config
	loc := cfg.Policy.Location
	if loc == nil {
		loc = time.UTC
	}
	b, err := bookingOf(r, cfg)
	if err != nil {
		return err
	}
	b.ID = "new"
	opts := policy.BookOptions{Rules: cfg.Policy.Reservations, Admin: admin, Location: loc}
	if r.OwnerKind == store.OwnerUser {
		u, err := rl.st.GetUser(ctx, r.Owner)
		if err != nil {
			return fmt.Errorf("book: the owner: %w", err)
		}
		opts.OwnerGroups = u.Groups
	}
	kinds := rl.backends.Names()
	for attempt := 1; ; attempt++ {
		stamp, err := rl.st.BookingStamp(ctx)
		if err != nil {
			return fmt.Errorf("book: %w", err)
		}
		now := rl.st.Now()
		st, err := rl.placement.placementState(ctx, cfg, now, kinds)
		if err != nil {
			return fmt.Errorf("book: %w", err)
		}
		opts.Now, opts.Inventory, opts.Running = now, st.inv, st.running
		if r.StartAt.Before(now) && now.Sub(r.StartAt) <= startSkew {
			opts.Now = r.StartAt // "from now", asked for a moment ago
		}
		opts.Existing = st.engine.Bookings()
		if !admin && opts.Rules != nil && opts.Rules.MaxActive > 0 {
			// Every reservation of the owner counts, also those that hold
			// nothing now.
			if opts.Existing, err = rl.ownerBookings(ctx, r, cfg, opts.Existing); err != nil {
				return fmt.Errorf("book: %w", err)
			}
		}
		pinned, err := policy.Book(b, opts)
		if err != nil {
			return err
		}
		err = rl.st.BookReservation(ctx, r, func(tx *store.Store) error {
			now, err := tx.BookingStamp(ctx)
			if err != nil {
				return err
			}
			if now != stamp {
				return errStale
			}
			return nil
		})
		switch {
		case errors.Is(err, errStale) && attempt < bookAttempts:
			continue
		case errors.Is(err, errStale):
			return fmt.Errorf("book: %w: %v %d times; try again", store.ErrConflict, err, attempt)
		case err != nil:
			return err
		}
		rl.bookings.mu.Lock()
		if rl.bookings.pins == nil {
			rl.bookings.pins = map[int64]keptPins{}
		}
		rl.bookings.pins[r.ID] = keptPins{version: r.Version, vms: pinned.SplitPinned()}
		rl.bookings.mu.Unlock()
		rl.log.Info("reservation booked", "reservation", r.ID, "owner", OwnerText(r.OwnerKind, r.Owner), "need", b.Need.String(),
			"count", r.Count, "start", r.StartAt, "end", r.EndAt, "rrule", r.RRule, "devices", pinned.Pinned)
		rl.wake() // a waiting VM's reason may change
		return nil
	}
}

// ownerBookings adds to existing the owner's reservations it lacks (those
// that held nothing in the round), for the rule of how many an owner may
// hold.
func (rl *rulesLoop) ownerBookings(ctx context.Context, r *store.Reservation, cfg *config.Config, existing []*policy.Booking) ([]*policy.Booking, error) {
	rs, err := rl.st.ListReservations(ctx, store.ReservationFilter{OwnerKind: r.OwnerKind, Owner: r.Owner, From: rl.st.Now()})
	if err != nil {
		return nil, err
	}
	out := slices.Clone(existing)
	for i := range rs {
		id := bookingID(rs[i].ID)
		if slices.ContainsFunc(out, func(b *policy.Booking) bool { return b.ID == id }) {
			continue
		}
		rep, err := policy.ParseRRule(rs[i].RRule, rs[i].RepeatUntil)
		if err != nil {
			continue
		}
		out = append(out, &policy.Booking{ID: id, Owner: policy.Owner{Kind: policy.OwnerKind(rs[i].OwnerKind), Name: rs[i].Owner},
			Start: rs[i].StartAt, End: rs[i].EndAt, Repeat: rep})
	}
	return out, nil
}

// ReservationConflict is a VM that holds devices a reservation not its
// owner's takes before the VM's lease ends.
type ReservationConflict struct {
	VMID        string `json:"vm_id"`
	Reservation int64  `json:"reservation"`
	// Owner is whom the reservation is for: "ann" or "group:students".
	Owner string `json:"owner"`
	// From and To are the occurrence that takes the devices.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// GPUs are the VM's GPUs the reservation takes.
	GPUs []string `json:"gpus"`
}

// ReservationConflicts lists the VMs (running or stopped: both hold their
// devices) whose leases run into devices a reservation not their owner's
// holds, earliest first. The timed rules warn them and delete them at the
// reservation's start (round.reservation).
func (rl *rulesLoop) ReservationConflicts(ctx context.Context) ([]ReservationConflict, error) {
	cfg := rl.settings().Config
	st, err := rl.placement.placementState(ctx, cfg, rl.st.Now(), rl.backends.Names())
	if err != nil {
		return nil, fmt.Errorf("reservation conflicts: %w", err)
	}
	return conflictsOf(st.now, st.inv, st.running, st.engine.Bookings(), st.engine.Location()), nil
}

// conflictsOf finds the VMs of running that hold devices a booking not
// theirs takes before their lease ends. For each occurrence, in time
// order, the VMs on its GPUs are looked at youngest first, and one that
// must make way is taken off (so an older one whose device then fits is
// left alone).
func conflictsOf(now time.Time, inv *scheduler.Inventory, running []scheduler.Running, bookings []*policy.Booking, loc *time.Location) []ReservationConflict {
	if inv == nil {
		return nil
	}
	type occ struct {
		b *policy.Booking
		i policy.Interval
	}
	latest := now
	for _, r := range running {
		if r.End.After(latest) {
			latest = r.End
		}
	}
	var occs []occ
	for _, b := range bookings {
		for _, i := range b.Occurrences(now, latest, loc) {
			occs = append(occs, occ{b, i})
		}
	}
	sort.SliceStable(occs, func(i, j int) bool { return occs[i].i.Start.Before(occs[j].i.Start) })
	vms := slices.Clone(running)
	sort.SliceStable(vms, func(i, j int) bool { return vms[i].Started.After(vms[j].Started) })
	var out []ReservationConflict
	found := map[string]bool{}
	for _, o := range occs {
		booked := map[string]bool{} // host/GPU
		var holds []scheduler.Hold
		for _, p := range o.b.Pinned {
			for _, d := range p.Devices {
				booked[p.Host+"/"+d.GPU] = true
				for _, g := range d.Group {
					booked[p.Host+"/"+g] = true
				}
			}
			holds = append(holds, scheduler.Hold{ID: o.b.ID, Code: scheduler.CodeReservation, Host: p.Host, Devices: p.Devices, From: o.i.Start, To: o.i.End})
		}
		working := inv.Clone()
		for _, vm := range vms {
			if found[vm.ID] || !vm.End.After(o.i.Start) || !vm.End.After(now) || entitled(o.b, &vm.Request) || !working.Holds(vm.ID) {
				continue
			}
			var gpus []string
			for _, d := range vm.Placement.Devices {
				if booked[vm.Placement.Host+"/"+d.GPU] {
					gpus = append(gpus, d.GPU)
				}
			}
			if len(gpus) == 0 {
				continue
			}
			from := o.i.Start
			if from.Before(now) {
				from = now
			}
			to := vm.End
			if o.i.End.Before(to) {
				to = o.i.End
			}
			if why := working.Keep(vm.ID, scheduler.PlaceOptions{Now: from, End: to, Holds: holds}); why.OK() {
				continue
			}
			working.Release(vm.ID)
			found[vm.ID] = true
			out = append(out, ReservationConflict{VMID: vm.ID, Reservation: reservationID(o.b.ID),
				Owner: OwnerText(string(o.b.Owner.Kind), o.b.Owner.Name), From: o.i.Start, To: o.i.End, GPUs: gpus})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].From.Equal(out[j].From) {
			return out[i].From.Before(out[j].From)
		}
		return out[i].VMID < out[j].VMID
	})
	return out
}

// reservationConflicts are the round's reservation conflicts by VM (none
// when no reservation is made).
func (r *round) reservationConflicts() (map[string][]ReservationConflict, error) {
	rs, err := r.loop.st.ListReservations(r.ctx, store.ReservationFilter{From: r.now})
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	cs, err := r.loop.ReservationConflicts(r.ctx)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	out := map[string][]ReservationConflict{}
	for _, c := range cs {
		out[c.VMID] = append(out[c.VMID], c)
	}
	return out, nil
}

// reservation warns a VM's owner, the profile's lease.warn_before ahead,
// that a reservation takes the VM's GPU, and deletes the VM when the
// reservation starts (a stop would keep the GPU); it reports whether it
// started an operation.
func (r *round) reservation(vm *store.VM, cs []ReservationConflict) bool {
	warnBefore := r.leaseOf(vm).WarnBefore
	if warnBefore <= 0 {
		warnBefore = config.DefaultLeaseWarning
	}
	for _, c := range cs {
		why := fmt.Sprintf("GPU %s is booked from %s by %s (reservation %d)", strings.Join(c.GPUs, ", "), r.stamp(c.From), c.Owner, c.Reservation)
		if !r.now.Before(c.From) {
			if r.given(vm, api.WarningReservation, noticeAct, c.From) {
				continue
			}
			return r.act(vm, store.OpDelete, ByReservation, api.VMWarningPayload{Kind: api.WarningReservation, Action: api.NoticeDelete, At: c.From,
				Reason: why + "; the VM is deleted to free it"})
		}
		if !r.now.Before(c.From.Add(-warnBefore)) {
			r.warn(vm, api.VMWarningPayload{Kind: api.WarningReservation, Action: api.NoticeDelete, At: c.From, MinutesLeft: minutesUntil(r.now, c.From),
				Reason: fmt.Sprintf("%s, before this VM's lease ends: the VM will be deleted then unless it ends first", why)})
		}
	}
	return false
}

// CheckExtend says whether the sharing policy lets a VM's lease be
// extended to newEnd (policy.Engine.Extend): within its profile's
// lease.max, not into a window that stops or forbids it, and not onto
// devices a reservation holds for someone else then. nil: it may. A VM
// that holds no device (queued) meets no reservation.
func (rl *rulesLoop) CheckExtend(ctx context.Context, vmID string, newEnd time.Time) error {
	cfg := rl.settings().Config
	st, err := rl.placement.placementState(ctx, cfg, rl.st.Now(), rl.backends.Names())
	if err != nil {
		return fmt.Errorf("check the extension of vm %s: %w", vmID, err)
	}
	for _, r := range st.running {
		if r.ID == vmID {
			return st.engine.Extend(r, newEnd, st.inv)
		}
	}
	return nil
}
