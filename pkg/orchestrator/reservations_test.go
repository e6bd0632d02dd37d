package orchestrator

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/race"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// berlin is the policy's time zone of the reservation tests.
var berlin = mustLocation("Europe/Berlin")

func mustLocation(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// bookingPolicy lets everyone book up to 30 days ahead, 8 hours at most.
const bookingPolicy = `policy {
  timezone = "Europe/Berlin"
  group "lab" {}
  reservations {
    max_ahead  = "30d"
    max_length = "8h"
  }
}`

// withClock gives the env a store of its own on a settable clock (driver
// "" or store.DriverSQLite: a file; store.DriverPostgres: a fresh schema of
// $GPUVM_TEST_POSTGRES_DSN, or the test is skipped), with the users ann,
// bob and cara (in group lab).
func (e *env) withClock(driver string, clock *clocktest.Clock) {
	e.t.Helper()
	e.st = openClockStore(e.t, driver, "", clock, e)
}

// openClockStore opens a store; dsn "" makes a new database.
func openClockStore(t testing.TB, driver, dsn string, clock *clocktest.Clock, e *env) *store.Store {
	t.Helper()
	ctx := context.Background()
	fresh := dsn == ""
	cfg := store.Config{Driver: driver, DSN: dsn}
	if fresh {
		cfg = storetest.Config(t, driver)
	}
	cfg.Logger, cfg.Now = e.log, clock.Now
	st := storetest.Open(t, cfg)
	if fresh {
		for _, u := range []store.User{{Name: "ann"}, {Name: "bob"}, {Name: "cara", Groups: []string{"lab"}}, {Name: "admin", Admin: true}} {
			if err := st.CreateUser(ctx, &u); err != nil {
				t.Fatal(err)
			}
		}
	}
	return st
}

// clockEnv is an l40sx4 host under the test profiles, its clock at now,
// and its orchestrator.
func clockEnv(t *testing.T, now time.Time) (*env, *clocktest.Clock, *Orchestrator) {
	t.Helper()
	e := newEnv(t, "l40sx4")
	clock := clocktest.New(now)
	e.withClock("", clock)
	return e, clock, e.orch(nil)
}

// bookingEnv is clockEnv under bookingPolicy. The orchestrator reads the
// configuration (e.cfg) at each call, not when it is made: the policy set
// after it is the one its first call reads.
func bookingEnv(t *testing.T, now time.Time) (*env, *clocktest.Clock, *Orchestrator) {
	t.Helper()
	e, clock, o := clockEnv(t, now)
	e.withPolicy(bookingPolicy)
	return e, clock, o
}

// reservation is a one-off reservation of count VMs of a profile.
func reservation(owner, prof string, count int, start, end time.Time) *store.Reservation {
	return &store.Reservation{OwnerKind: store.OwnerUser, Owner: owner, Profile: prof, Count: count, StartAt: start, EndAt: end, CreatedBy: owner}
}

// A reservation for ann from T holds the host's one whole L40S: bob's VM
// whose lease crosses T waits, saying by whom it is booked and from when;
// one that ends before T starts; at T ann's VM starts on it. A second
// booking of the same GPU at that time is refused with the reason.
func TestReservationHoldsGPU(t *testing.T) {
	e, clock, o := bookingEnv(t, time.Date(2026, 12, 1, 10, 0, 0, 0, berlin)) // one GPU for passthrough: 0000:a1:00.0
	ctx := context.Background()
	T := time.Date(2026, 12, 1, 12, 0, 0, 0, berlin)
	r := reservation("ann", "l40s-whole", 1, T, T.Add(2*time.Hour))
	if err := o.Book(ctx, r, false); err != nil {
		t.Fatal(err)
	}
	if r.ID == 0 || r.Version != 1 {
		t.Fatalf("booked %+v", r)
	}
	// Another booking of the only whole GPU at an overlapping time.
	var ce *policy.CapacityError
	err := o.Book(ctx, reservation("bob", "l40s-whole", 1, T.Add(time.Hour), T.Add(3*time.Hour)), false)
	if !errors.As(err, &ce) || ce.Fit != 0 || !strings.Contains(err.Error(), "0 of 1 VMs of a whole L40S fit from Tue 1 Dec 2026 13:00 CET to 15:00; other bookings hold the rest then") {
		t.Fatalf("second booking: %v", err)
	}
	// 10:00: bob's 3h VM would run into the booking; his 1h VM would not.
	long, _ := e.askVM("bob", "l40s-whole", "long", 3)
	o.Drain(ctx)
	want := fmt.Sprintf("GPU booked from Tue 1 Dec 2026 12:00 CET by ann (reservation %d)", r.ID)
	if got := e.vm(long.ID); got.State != store.VMQueued || got.StateReason != want {
		t.Fatalf("bob's long VM: %s %q, want queued %q", got.State, got.StateReason, want)
	}
	short, _ := e.askVM("bob", "l40s-whole", "short", 1)
	o.Drain(ctx)
	if got := e.vm(short.ID); got.State != store.VMRunning {
		t.Fatalf("bob's short VM: %s %q", got.State, got.StateReason)
	}
	e.deleteOp(e.vm(short.ID))
	o.Drain(ctx)
	// 12:00: ann's VM starts on the booked GPU; bob's still waits.
	clock.Set(T)
	ann, annOp := e.askVM("ann", "l40s-whole", "lab", 2)
	o.Drain(ctx)
	e.checkRunning(ann, annOp, o, "type='pci'")
	if allocs, _ := liveAllocations(ctx, o.life.st, ann.ID); len(allocs) != 1 || allocs[0].GPUAddress != "0000:a1:00.0" {
		t.Errorf("ann's VM on %+v", allocs)
	}
	if got := e.vm(long.ID); got.State != store.VMQueued {
		t.Errorf("bob's long VM: %s %q", got.State, got.StateReason)
	}
	// A booking made while a round's view is stale makes its claim a
	// conflict: the claim re-checks the reservations under the lock.
	st := &state{reservations: "stale"}
	err = e.st.Tx(ctx, func(tx *store.Store) error { return claimBookings(ctx, tx, st) })
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("claim on a stale view: %v", err)
	}
}

func (e *env) askVM(owner, prof, name string, hours int) (*store.VM, *store.Operation) {
	e.t.Helper()
	vm := &store.VM{Name: name, Owner: owner, Profile: prof, Hours: hours}
	op, err := e.st.CreateVM(context.Background(), vm, store.CreateVMOptions{RequestedBy: owner})
	if err != nil {
		e.t.Fatal(err)
	}
	return vm, op
}

// What is wrong with a booking is a field error; an admin's booking
// is held to the capacity only.
func TestBookRules(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, berlin)
	e, _, o := bookingEnv(t, now)
	ctx := context.Background()
	tests := []struct {
		name  string
		r     *store.Reservation
		field string
	}{
		{"in the past", reservation("ann", "l40s-whole", 1, now.Add(-time.Hour), now.Add(time.Hour)), policy.FieldStart},
		{"too long", reservation("ann", "l40s-whole", 1, now.Add(time.Hour), now.Add(10*time.Hour)), policy.FieldEnd},
		{"too far ahead", reservation("ann", "l40s-whole", 1, now.AddDate(0, 2, 0), now.AddDate(0, 2, 0).Add(time.Hour)), policy.FieldStart},
		{"no such profile", reservation("ann", "nope", 1, now.Add(time.Hour), now.Add(2*time.Hour)), policy.FieldProfile},
		{"profile without GPU", reservation("ann", "nogpu", 1, now.Add(time.Hour), now.Add(2*time.Hour)), policy.FieldProfile},
		{"bad rrule", func() *store.Reservation {
			r := reservation("ann", "l40s-whole", 1, now.Add(time.Hour), now.Add(2*time.Hour))
			r.RRule = "FREQ=HOURLY"
			return r
		}(), policy.FieldRepeat},
		{"overlapping recurrence", func() *store.Reservation {
			r := reservation("ann", "l40s-seat", 1, now.Add(time.Hour), now.Add(8*time.Hour))
			r.RRule, r.RepeatUntil = "FREQ=WEEKLY;BYDAY=TU,WE", ptr(now.AddDate(0, 0, 14))
			r.EndAt = r.StartAt.Add(25 * time.Hour)
			return r
		}(), policy.FieldRepeat},
	}
	for _, tc := range tests {
		err := o.Book(ctx, tc.r, false)
		var fe *policy.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want a field error on %s", tc.name, err, tc.field)
		}
	}
	if rs, _ := e.st.ListReservations(ctx, store.ReservationFilter{}); len(rs) != 0 {
		t.Errorf("refused bookings left %d reservations", len(rs))
	}
	// An admin may book further ahead than the rules.
	if err := o.Book(ctx, reservation("ann", "l40s-whole", 1, now.AddDate(0, 2, 0), now.AddDate(0, 2, 0).Add(time.Hour)), true); err != nil {
		t.Errorf("admin: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// Two bookings for the last capacity at once, by two gpuvmds on one
// database: exactly one is made, the other refused for capacity.
func TestBookConcurrent(t *testing.T) {
	for _, driver := range storetest.Drivers {
		t.Run(driver, func(t *testing.T) {
			e := newEnv(t, "l40sx4")
			e.withPolicy(bookingPolicy)
			clock := clocktest.New(time.Date(2026, 12, 1, 10, 0, 0, 0, berlin))
			dsn := storetest.Config(t, driver).DSN
			e.st = openClockStore(t, driver, dsn, clock, e)
			// Users made by hand on the shared database.
			for _, u := range []store.User{{Name: "ann"}, {Name: "bob"}} {
				if err := e.st.CreateUser(context.Background(), &u); err != nil {
					t.Fatal(err)
				}
			}
			first := e.orch(nil)
			e2 := *e
			e2.st = openClockStore(t, driver, dsn, clock, e)
			second := e2.orch(nil)
			ctx := context.Background()
			for round := range 4 {
				T := clock.Now().Add(time.Duration(round+1) * 24 * time.Hour)
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for i, o := range []*Orchestrator{first, second} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs[i] = o.Book(ctx, reservation([]string{"ann", "bob"}[i], "l40s-whole", 1, T, T.Add(time.Hour)), true)
					}()
				}
				wg.Wait()
				won := 0
				for _, err := range errs {
					var ce *policy.CapacityError
					switch {
					case err == nil:
						won++
					case !errors.As(err, &ce):
						t.Fatalf("round %d: %v", round, err)
					}
				}
				if won != 1 {
					t.Fatalf("round %d: %d bookings made, want 1: %v", round, won, errs)
				}
			}
			if rs, _ := e.st.ListReservations(ctx, store.ReservationFilter{}); len(rs) != 4 {
				t.Errorf("%d reservations, want 4", len(rs))
			}
		})
	}
}

// A weekly lab at 14:00 Berlin time stays at 14:00 across the change to
// summer time (29 March 2026): 13:00 UTC before, 12:00 UTC after; in the
// week after the change bob's VM that would run into it waits, citing
// 14:00 CEST.
func TestWeeklyReservationAcrossDST(t *testing.T) {
	e, clock, o := bookingEnv(t, time.Date(2026, 3, 16, 9, 0, 0, 0, berlin))
	ctx := context.Background()
	first := time.Date(2026, 3, 17, 14, 0, 0, 0, berlin) // a Tuesday
	r := reservation("cara", "l40s-whole", 1, first, first.Add(2*time.Hour))
	r.OwnerKind, r.Owner = store.OwnerGroup, "lab"
	r.RRule, r.RepeatUntil = "FREQ=WEEKLY;BYDAY=TU", ptr(first.AddDate(0, 0, 21))
	if err := o.Book(ctx, r, true); err != nil {
		t.Fatal(err)
	}
	b, err := bookingOf(r, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	occ := b.Occurrences(clock.Now(), first.AddDate(0, 1, 0), berlin)
	var utc []string
	for _, o := range occ {
		utc = append(utc, o.Start.UTC().Format("01-02 15:04")+"–"+o.End.UTC().Format("15:04"))
	}
	if fmt.Sprint(utc) != "[03-17 13:00–15:00 03-24 13:00–15:00 03-31 12:00–14:00]" {
		t.Errorf("occurrences (UTC) %v", utc)
	}
	// Tuesday 31 March, 11:00 CEST: a 4h VM of bob's runs into the lab.
	clock.Set(time.Date(2026, 3, 31, 11, 0, 0, 0, berlin))
	vm, _ := e.askVM("bob", "l40s-whole", "bob", 4)
	o.Drain(ctx)
	want := fmt.Sprintf("GPU booked from Tue 31 Mar 2026 14:00 CEST by group:lab (reservation %d)", r.ID)
	if got := e.vm(vm.ID); got.State != store.VMQueued || got.StateReason != want {
		t.Errorf("bob's VM: %s %q, want %q", got.State, got.StateReason, want)
	}
	// 14:00 CEST: a member of the lab starts on it.
	clock.Set(time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC))
	lab, labOp := e.askVM("cara", "l40s-whole", "cara", 2)
	o.Drain(ctx)
	e.checkRunning(lab, labOp, o, "type='pci'")
}

// A VM whose lease runs into another's reservation is found, warned the
// profile's warn_before ahead, and deleted at the reservation's start.
func TestReservationConflictRule(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, berlin)
	e, clock, o := bookingEnv(t, now)
	ctx := context.Background()
	// bob's VM runs on the whole GPU until 12:00.
	vm, op := e.askVM("bob", "l40s-whole", "bob", 2)
	o.Drain(ctx)
	e.checkRunning(vm, op, o, "type='pci'")
	// ann books it from 12:00; then bob's lease is extended past it (an
	// admin's hand: the extension rules are not this test's).
	T := now.Add(2 * time.Hour)
	r := reservation("ann", "l40s-whole", 1, T, T.Add(2*time.Hour))
	if err := o.Book(ctx, r, false); err != nil {
		t.Fatal(err)
	}
	cur := e.vm(vm.ID)
	later := T.Add(time.Hour)
	if _, err := e.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: cur.State, Phase: cur.Phase, LeaseEnd: &later}); err != nil {
		t.Fatal(err)
	}
	cs, err := o.ReservationConflicts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].VMID != vm.ID || cs[0].Reservation != r.ID || cs[0].Owner != "ann" || !cs[0].From.Equal(T) || cs[0].GPUs[0] != "0000:a1:00.0" {
		t.Fatalf("conflicts %+v", cs)
	}
	rule := func() RulesReport {
		t.Helper()
		rd := &round{loop: o.rules, ctx: ctx, cfg: e.cfg, now: clock.Now(), busy: map[string]bool{}}
		byVM, err := rd.reservationConflicts()
		if err != nil {
			t.Fatal(err)
		}
		rd.reservation(e.vm(vm.ID), byVM[vm.ID])
		if len(rd.errs) > 0 {
			t.Fatal(rd.errs)
		}
		return rd.rep
	}
	// 10:00: too early to warn (warn_before is 30 minutes).
	if rep := rule(); !rep.Empty() {
		t.Errorf("10:00: %+v", rep)
	}
	// 11:40: warned, once.
	clock.Set(T.Add(-20 * time.Minute))
	if rep := rule(); len(rep.Warned) != 1 {
		t.Errorf("11:40: %+v", rep)
	}
	if rep := rule(); !rep.Empty() {
		t.Errorf("11:40 again: %+v", rep)
	}
	ns, _ := notices(ctx, o.rules.st, vm.ID)
	if len(ns) != 1 || ns[0].Kind != api.WarningReservation || ns[0].Action != api.NoticeDelete || ns[0].MinutesLeft != 20 ||
		!strings.Contains(ns[0].Reason, "booked from Tue 1 Dec 2026 12:00 CET by ann") {
		t.Errorf("notices %+v", ns)
	}
	// 12:00: deleted.
	clock.Set(T)
	if rep := rule(); len(rep.Deleted) != 1 {
		t.Errorf("12:00: %+v", rep)
	}
	ops, _ := e.st.ListOperations(ctx, vm.ID)
	if last := ops[len(ops)-1]; last.Kind != store.OpDelete || last.RequestedBy != ByReservation {
		t.Errorf("last operation %+v", last)
	}
}

// pinReservations keeps each reservation's devices from round to round,
// and a reservation whose profile is gone holds nothing, with the reason.
func TestPinReservationsKeeps(t *testing.T) {
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(testProfiles + schedProfiles)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	inv := migInventory(t, 2)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, berlin)
	rs := []store.Reservation{
		{ID: 1, Version: 1, OwnerKind: store.OwnerUser, Owner: "ann", Profile: "h100-mig", Count: 2, StartAt: now.Add(time.Hour), EndAt: now.Add(3 * time.Hour)},
		{ID: 2, Version: 1, OwnerKind: store.OwnerUser, Owner: "bob", Profile: "h100-1g", Count: 3, StartAt: now.Add(2 * time.Hour), EndAt: now.Add(4 * time.Hour)},
		{ID: 3, Version: 1, OwnerKind: store.OwnerUser, Owner: "bob", Profile: "gone", Count: 1, StartAt: now.Add(2 * time.Hour), EndAt: now.Add(4 * time.Hour)},
	}
	b1, kept, problems := pinReservations(rs, cfg, now, berlin, inv, nil, nil)
	if len(b1) != 2 || len(problems) != 1 || problems[3] == nil || !strings.Contains(problems[3].Error(), `no profile is named "gone"`) {
		t.Fatalf("bookings %d, problems %v", len(b1), problems)
	}
	// The next round, with a VM of cara's where it fits around them, the
	// devices stay.
	p, why := inv.Place(scheduler.Need{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1}, scheduler.PlaceOptions{Now: now, End: now.Add(8 * time.Hour), Holds: holdsOf(b1)})
	if !why.OK() {
		t.Fatal(why)
	}
	if err := inv.Allocate("cara", p, now.Add(8*time.Hour)); err != nil {
		t.Fatal(err)
	}
	running := []scheduler.Running{{Request: scheduler.Request{ID: "cara", User: "cara", Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "1g.10gb"}}, Placement: p, End: now.Add(8 * time.Hour)}}
	b2, _, problems := pinReservations(rs[:2], cfg, now.Add(30*time.Minute), berlin, inv, running, kept)
	if len(problems) != 0 || fmt.Sprint(b2[0].Pinned) != fmt.Sprint(b1[0].Pinned) || fmt.Sprint(b2[1].Pinned) != fmt.Sprint(b1[1].Pinned) {
		t.Errorf("moved: %v → %v (%v)", b1, b2, problems)
	}
}

func holdsOf(bs []*policy.Booking) []scheduler.Hold {
	var out []scheduler.Hold
	for _, b := range bs {
		for _, p := range b.Pinned {
			out = append(out, scheduler.Hold{ID: b.ID, Code: scheduler.CodeReservation, Host: p.Host, Devices: p.Devices, From: b.Start, To: b.End})
		}
	}
	return out
}

// migInventory is an inventory of specOf(n).
func migInventory(t testing.TB, n int) *scheduler.Inventory {
	t.Helper()
	inv, err := scheduler.NewInventory([]scheduler.HostSpec{specOf(n)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// The property, over random bookings and VM requests on a simulated host
// hour by hour for two weeks (seeded): no reservation's capacity is ever
// given to someone else (every booking accepted holds its devices in every
// round, none of them held by another's VM while it runs, and its owner's
// VMs asked for at each start all start then), and capacity never goes
// negative (the VMs that run always fit the GPUs together).
var propertyNeeds = []scheduler.Need{
	{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1},
	{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1},
	{Kind: gpu.KindMIG, Profile: "7g.80gb", Count: 1},
	{Kind: gpu.KindPassthrough, Model: "L40S", Count: 1},
}

func TestReservationProperty(t *testing.T) {
	if race.Enabled {
		t.Skip("one goroutine's computation, ten times slower under -race: make test runs it without")
	}
	needs := propertyNeeds
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			propertyRun(t, uint64(seed), needs)
		})
	}
}

func propertyRun(t *testing.T, seed uint64, needs []scheduler.Need) {
	rng := mrand.New(mrand.NewPCG(seed, 0x9e3779b9))
	spec := specOf(2)
	inv := migInventory(t, 2)
	t0 := time.Date(2026, 3, 23, 0, 0, 0, 0, berlin) // the DST change is on the 29th
	engine, err := policy.New(policy.Config{Policy: &config.Policy{Location: berlin}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		rs       []store.Reservation
		kept     map[int64]keptPins
		running  []scheduler.Running
		queue    []scheduler.Request
		nextID   int64
		vmSeq    int
		accepted int
		refused  int
		started  int
	)
	groups := map[string][]string{"o2": {"lab"}, "o3": {"lab"}}
	request := func(user string, need scheduler.Need, lease time.Duration, now time.Time) scheduler.Request {
		vmSeq++
		return scheduler.Request{ID: fmt.Sprintf("vm%04d", vmSeq), User: user, Groups: groups[user], Need: need, Lease: lease, Submitted: now}
	}
	for step := range 14 * 24 {
		now := t0.Add(time.Duration(step) * time.Hour)
		// VMs whose lease ended go.
		running = slices.DeleteFunc(running, func(r scheduler.Running) bool {
			if !r.End.After(now) {
				inv.Release(r.ID)
				return true
			}
			return false
		})
		// This round's bookings, as holdBookings makes them.
		bookings, next, problems := pinReservations(rs, nil, now, berlin, inv, running, kept)
		kept = next
		for id, err := range problems {
			t.Fatalf("step %d: reservation %d holds nothing: %v", step, id, err)
		}
		// Sometimes a new booking, as Book checks it.
		if rng.IntN(3) == 0 {
			owner := []string{"o1", "o2", "g:lab"}[rng.IntN(3)]
			start := now.Add(time.Duration(1+rng.IntN(48)) * time.Hour)
			length := time.Duration(1+rng.IntN(4)) * time.Hour
			r := store.Reservation{ID: nextID + 1, Version: 1, OwnerKind: store.OwnerUser, Owner: owner, Count: 1 + rng.IntN(2), StartAt: start, EndAt: start.Add(length)}
			if g, ok := strings.CutPrefix(owner, "g:"); ok {
				r.OwnerKind, r.Owner = store.OwnerGroup, g
			}
			n := needs[rng.IntN(len(needs))]
			r.GPUKind, r.GPUType, r.GPUModel = n.Kind, n.Profile, n.Model
			switch rng.IntN(4) {
			case 0:
				r.RRule, r.RepeatUntil = "FREQ=WEEKLY", ptr(start.AddDate(0, 0, 15))
			case 1:
				r.RRule, r.RepeatUntil = "FREQ=DAILY", ptr(start.AddDate(0, 0, 4))
			}
			b, err := bookingOf(&r, nil)
			if err != nil {
				t.Fatal(err)
			}
			b.ID = "new"
			pinned, err := policy.Book(b, policy.BookOptions{Now: now, Admin: true, Location: berlin, Inventory: inv, Running: running, Existing: bookings})
			var ce *policy.CapacityError
			switch {
			case err == nil:
				nextID++
				rs = append(rs, r)
				kept[r.ID] = keptPins{version: 1, vms: pinned.SplitPinned()}
				accepted++
				// It holds from this round on.
				before := bookings
				bookings, kept, problems = pinReservations(rs, nil, now, berlin, inv, running, kept)
				if len(problems) > 0 {
					for _, b := range before {
						t.Logf("before %s %s %v %v %s %v", b.ID, b.Need, b.Start, b.End, b.Repeat.RRule(), b.Pinned)
					}
					t.Logf("new %v", pinned.Pinned)
					for _, b := range bookings {
						t.Logf("after %s %v", b.ID, b.Pinned)
					}
					for _, r := range running {
						t.Logf("running %s %v until %v", r.ID, r.Placement, r.End)
					}
					t.Logf("now %v", now)
					t.Fatalf("step %d: a new booking holds nothing: %v", step, problems)
				}
			case errors.As(err, &ce):
				refused++
			default:
				t.Fatalf("step %d: book: %v", step, err)
			}
		}
		// Others ask for VMs.
		for range rng.IntN(3) {
			user := []string{"u1", "u2", "u3", "u4"}[rng.IntN(4)]
			queue = append(queue, request(user, needs[rng.IntN(len(needs))], time.Duration(1+rng.IntN(6))*time.Hour, now))
		}
		// Owners ask for what they booked at each start, until its end.
		var due []string
		for _, b := range bookings {
			for _, o := range b.Occurrences(now, now.Add(time.Minute), berlin) {
				if !o.Start.Equal(now) {
					continue
				}
				user := b.Owner.Name
				if b.Owner.Kind == policy.OwnerGroup {
					user = "o3"
				}
				for range b.VMs {
					r := request(user, b.Need, o.End.Sub(now), now)
					queue = append(queue, r)
					due = append(due, r.ID)
				}
			}
		}
		engine.SetBookings(bookings)
		d := scheduler.Cycle(now, inv, queue, running, engine, scheduler.Options{Strategy: scheduler.Pack, Reserve: 1})
		startedNow := map[string]bool{}
		for _, s := range d.Start {
			i := slices.IndexFunc(queue, func(r scheduler.Request) bool { return r.ID == s.ID })
			r := queue[i]
			end := now.Add(r.Lease)
			running = append(running, scheduler.Running{Request: r, Placement: s.Placement, Started: now, End: end, Booking: s.Booking})
			startedNow[s.ID] = true
			started++
		}
		queue = slices.DeleteFunc(queue, func(r scheduler.Request) bool {
			_, refusedNow := func() (scheduler.Refusal, bool) {
				for _, x := range d.Refused {
					if x.ID == r.ID {
						return x, true
					}
				}
				return scheduler.Refusal{}, false
			}()
			return startedNow[r.ID] || refusedNow
		})
		for _, id := range due {
			if !startedNow[id] {
				for _, b := range bookings {
					t.Logf("booking %s %s owner %s vms %d %v–%v %s pins %v", b.ID, b.Need, b.Owner, b.VMs, b.Start, b.End, b.Repeat.RRule(), b.Pinned)
				}
				for _, r := range running {
					t.Logf("running %s %s %v %v–%v booking %q", r.ID, r.User, r.Placement, r.Started, r.End, r.Booking)
				}
				for _, q := range queue {
					t.Logf("queue %s %s %s", q.ID, q.User, q.Need)
				}
				t.Fatalf("step %d (%s): the owner's booked VM %s did not start: %+v", step, now, id, d.Waiting[id])
			}
		}
		// Capacity never negative: what runs fits the GPUs together.
		if _, err := scheduler.NewInventory([]scheduler.HostSpec{spec}, inv.Allocations()); err != nil {
			t.Fatalf("step %d: the allocations overlap: %v", step, err)
		}
		if len(inv.Allocations()) < len(running) {
			t.Fatalf("step %d: %d allocations for %d VMs", step, len(inv.Allocations()), len(running))
		}
		// No booked device is another's while its booking runs.
		for _, b := range bookings {
			if len(b.Occurrences(now, now.Add(time.Second), berlin)) == 0 {
				continue
			}
			trial := inv.Clone()
			for _, r := range running {
				if entitled(b, &r.Request) {
					trial.Release(r.ID)
				}
			}
			for i, p := range b.SplitPinned() {
				if err := trial.Allocate(fmt.Sprintf("check%d", i), p, now.Add(time.Hour)); err != nil {
					t.Fatalf("step %d: booking %s (%s) lost %s to another's VM: %v", step, b.ID, b.Owner, p, err)
				}
			}
		}
		// Bookings that overlap never hold the same devices.
		empty, _ := scheduler.NewInventory([]scheduler.HostSpec{spec}, nil)
		for _, b := range bookings {
			if len(b.Occurrences(now, now.Add(time.Second), berlin)) == 0 {
				continue
			}
			for i, p := range b.SplitPinned() {
				if err := empty.Allocate(fmt.Sprintf("%s/%d", b.ID, i), p, now.Add(time.Hour)); err != nil {
					t.Fatalf("step %d: bookings share devices: %v", step, err)
				}
			}
		}
	}
	if accepted == 0 || refused == 0 || started == 0 {
		t.Errorf("a run that tested little: %d bookings made, %d refused, %d VMs started", accepted, refused, started)
	}
	t.Logf("seed %d: %d bookings made, %d refused, %d VMs started", seed, accepted, refused, started)
}

// specOf is host "h" of n H100s in MIG mode and two L40S for
// passthrough.
func specOf(n int) scheduler.HostSpec {
	spec := scheduler.HostSpec{Name: "h"}
	for i := range n {
		spec.GPUs = append(spec.GPUs, scheduler.GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", 0x18+i), Model: "H100 PCIe 80GB", Allow: gpu.ModeMIG})
	}
	for i := range 2 {
		spec.GPUs = append(spec.GPUs, scheduler.GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", 0xa1+i), Model: "L40S", Allow: gpu.ModePassthrough})
	}
	return spec
}

// conflictsOf takes off, of VMs sharing a GPU with a booking, only as many
// as the booking needs, youngest first.
func TestConflictsOfYoungestFirst(t *testing.T) {
	inv := migInventory(t, 1)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, berlin)
	T := now.Add(time.Hour)
	addr := "0000:18:00.0"
	// Two 3g.40gb of others fill the H100, both past T.
	var running []scheduler.Running
	for i, start := range []int{0, 4} {
		p := scheduler.Placement{Host: "h", Devices: []scheduler.Device{{GPU: addr, Kind: gpu.KindMIG, Profile: "3g.40gb", Start: start}}}
		if err := inv.Allocate(fmt.Sprintf("v%d", i), p, T.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		running = append(running, scheduler.Running{Request: scheduler.Request{ID: fmt.Sprintf("v%d", i), User: "bob", Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb"}},
			Placement: p, Started: now.Add(-time.Duration(2-i) * time.Hour), End: T.Add(time.Hour)})
	}
	// ann's booking holds the slice at 4 from T.
	b := &policy.Booking{ID: "7", Owner: policy.Owner{Kind: policy.OwnerUser, Name: "ann"}, Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, VMs: 1,
		Start: T, End: T.Add(2 * time.Hour), Pinned: []scheduler.Placement{running[1].Placement}}
	cs := conflictsOf(now, inv, running, []*policy.Booking{b}, berlin)
	if len(cs) != 1 || cs[0].VMID != "v1" || cs[0].Reservation != 7 || !cs[0].From.Equal(T) {
		t.Errorf("conflicts %+v", cs)
	}
	// A VM of the owner's is entitled: no conflict.
	running[1].User = "ann"
	if cs := conflictsOf(now, inv, running, []*policy.Booking{b}, berlin); len(cs) != 0 {
		t.Errorf("the owner's VM: %+v", cs)
	}
	// A VM that ends by T is none either.
	running[1].User, running[1].End = "bob", T
	if cs := conflictsOf(now, inv, running, []*policy.Booking{b}, berlin); len(cs) != 0 {
		t.Errorf("ends at T: %+v", cs)
	}
}

// A lease may be extended up to another's reservation of its GPU, not
// into it.
func TestCheckExtend(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, berlin)
	e, _, o := bookingEnv(t, now)
	ctx := context.Background()
	vm, op := e.askVM("bob", "l40s-whole", "bob", 2)
	o.Drain(ctx)
	e.checkRunning(vm, op, o, "type='pci'")
	T := now.Add(3 * time.Hour)
	if err := o.Book(ctx, reservation("ann", "l40s-whole", 1, T, T.Add(2*time.Hour)), false); err != nil {
		t.Fatal(err)
	}
	if err := o.CheckExtend(ctx, vm.ID, T); err != nil {
		t.Errorf("up to ann's reservation: %v", err)
	}
	if err := o.CheckExtend(ctx, vm.ID, T.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "0000:a1:00.0 is held for someone else") {
		t.Errorf("into ann's reservation: %v", err)
	}
	// A VM that holds no device meets no reservation.
	if err := o.CheckExtend(ctx, "not-a-vm", T.Add(time.Hour)); err != nil {
		t.Errorf("a VM without devices: %v", err)
	}
}
