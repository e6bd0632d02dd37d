package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/estimate"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// TestReplayInputsAreTheRounds: what the estimates replay is what a
// dispatch round's scheduling cycle decides from, on a mixed state (VMs
// running on whole GPUs and vGPUs, both kinds queued, a reservation that
// holds a GPU): the same time, GPUs and devices held, running VMs with
// their ends, queued requests, bookings, rules and options.
func TestReplayInputsAreTheRounds(t *testing.T) {
	e, clock, o := bookingEnv(t, time.Date(2026, 12, 1, 10, 0, 0, 0, berlin))
	ctx := context.Background()
	now := clock.Now()
	if err := o.Book(ctx, reservation("ann", "l40s-whole", 1, now.Add(3*time.Hour), now.Add(5*time.Hour)), false); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e.askVM("bob", "l40s-whole", fmt.Sprint("w", i), 1+i)
	}
	for i := range 14 {
		e.askVM([]string{"ann", "cara"}[i%2], "l40s-seat", fmt.Sprint("s", i), 1+i%3)
	}
	o.Drain(ctx)

	want, err := o.ReplayInputs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got *cycleInputs
	o.disp.cycled = func(in *cycleInputs) { got = in }
	o.Drain(ctx)
	if got == nil {
		t.Fatal("no round ran a scheduling cycle")
	}
	ws := want.State
	if len(ws.Running) == 0 || len(ws.Queue) == 0 || len(want.Bookings()) == 0 {
		t.Fatalf("not a mixed state: %d running, %d queued, %d bookings", len(ws.Running), len(ws.Queue), len(want.Bookings()))
	}
	kinds := map[string]bool{}
	for _, r := range ws.Queue {
		kinds[string(r.Need.Kind)] = true
	}
	if len(kinds) < 2 {
		t.Fatalf("the queue is of one kind: %v", kinds)
	}
	byID := func(rs []scheduler.Request) []scheduler.Request {
		return slices.SortedFunc(slices.Values(rs), func(a, b scheduler.Request) int { return strings.Compare(a.ID, b.ID) })
	}
	running := func(rs []scheduler.Running) []scheduler.Running {
		return slices.SortedFunc(slices.Values(rs), func(a, b scheduler.Running) int { return strings.Compare(a.ID, b.ID) })
	}
	eng, ok := ws.Policy.(*policy.Engine)
	if !ok {
		t.Fatalf("the replay's rules are a %T", ws.Policy)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"now", got.st.now, ws.Now},
		{"devices held", got.st.inv.Allocations(), ws.Inventory.Allocations()},
		{"GPUs", got.st.inv.Stats(), ws.Inventory.Stats()},
		{"running", running(got.st.running), running(ws.Running)},
		{"queue", byID(got.reqs), byID(ws.Queue)},
		{"bookings", got.st.engine.Bookings(), eng.Bookings()},
		{"order", got.st.engine.Order(), eng.Order()},
		{"options", got.opts, ws.Options},
		{"groups", got.st.groups, want.Groups},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: the round has\n%+v\nthe replay\n%+v", c.what, c.got, c.want)
		}
	}
	for _, h := range ws.Inventory.HostNames() {
		gf, _ := got.st.inv.Free(h)
		wf, _ := ws.Inventory.Free(h)
		if !reflect.DeepEqual(gf, wf) {
			t.Errorf("free on %s: the round has %+v, the replay %+v", h, gf, wf)
		}
	}
	// What only the replay needs: the queue order the round gave.
	for _, r := range ws.Queue {
		if vm := e.vm(r.ID); vm.State != store.VMQueued || ws.Rank[r.ID] != vm.QueueRank || vm.QueueRank == 0 {
			t.Errorf("%s: %s, rank %d, the replay's %d", r.ID, vm.State, vm.QueueRank, ws.Rank[r.ID])
		}
	}
}

// TestReplayInputsTasks: the replay knows which queued and running VMs
// serve a task, with the time each asked for, and what the tasks that
// ended used of theirs: a person's median with enough of theirs,
// everyone's otherwise.
func TestReplayInputsTasks(t *testing.T) {
	e, clock, o := clockEnv(t, time.Date(2026, 12, 1, 10, 0, 0, 0, berlin))
	ctx := context.Background()
	task := func(owner, id string, limit time.Duration) *store.VM {
		t.Helper()
		vm := &store.VM{Name: "task-" + id, Owner: owner, Profile: "l40s-whole", Hours: int((limit + time.Hour - 1) / time.Hour), Spec: "{}"}
		tk := &store.Task{ID: id, Owner: owner, Profile: "l40s-whole", Command: `["true"]`, TimeLimitS: int64(limit / time.Second), KillWaitS: 30}
		if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: owner, Task: tk}); err != nil {
			t.Fatal(err)
		}
		return vm
	}
	ended := func(owner, id string, limit, used time.Duration) {
		t.Helper()
		vm := task(owner, id, limit)
		start := clock.Now().Add(-used)
		if err := e.st.UpdateTask(ctx, id, nil, store.TaskUpdate{State: api.TaskRunning, StartedAt: &start}); err != nil {
			t.Fatal(err)
		}
		if err := e.st.UpdateTask(ctx, id, nil, store.TaskUpdate{State: api.TaskCompleted}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMDeleted}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range estimate.MinTaskRuns {
		ended("ann", fmt.Sprint("a", i), time.Hour, time.Duration(20+5*i)*time.Minute) // 1/3 … 2/3: median 1/2
	}
	ended("bob", "b0", time.Hour, time.Hour)
	pending := task("bob", "b1", 90*time.Minute)
	in, err := o.ReplayInputs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]time.Duration{pending.ID: 90 * time.Minute}; !reflect.DeepEqual(in.State.Tasks, want) {
		t.Errorf("tasks %v, want %v", in.State.Tasks, want)
	}
	// Everyone's six: five of ann's and bob's one whole hour (bob has too
	// few of his own).
	if want := map[string]float64{"ann": 0.5, "": (0.5 + float64(35*time.Minute)/float64(time.Hour)) / 2}; !reflect.DeepEqual(in.State.TaskRatio, want) {
		t.Errorf("ratios %v, want %v", in.State.TaskRatio, want)
	}
}

// TestReplayQueueIsTheRounds: the replay estimates the queued VMs a round
// would place, as the round groups their operations: not one to be
// deleted (its delete goes first), nor one with no operation that places
// it.
func TestReplayQueueIsTheRounds(t *testing.T) {
	e, clock, o := clockEnv(t, time.Date(2026, 12, 1, 10, 0, 0, 0, berlin))
	ctx := context.Background()
	waits, _ := e.askVM("bob", "l40s-whole", "waits", 1)
	deleted, _ := e.askVM("bob", "l40s-whole", "deleted", 1)
	e.deleteOp(deleted)
	// A queued VM whose create ended (no operation places it), and two
	// queued again by a start: one whose lease has time left, one whose
	// lease ended (the round fails its start).
	created := func(name string) *store.VM {
		vm, op := e.askVM("bob", "l40s-whole", name, 1)
		if err := e.st.FinishOperation(ctx, op.ID, fmt.Errorf("gone")); err != nil {
			t.Fatal(err)
		}
		return vm
	}
	orphan := created("orphan")
	started := func(name string, leaseEnd time.Time) *store.VM {
		vm := created(name)
		if err := e.st.CreateOperation(ctx, &store.Operation{VMID: vm.ID, Kind: store.OpStart, RequestedBy: "bob"}); err != nil {
			t.Fatal(err)
		}
		next, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMQueued, LeaseEnd: &leaseEnd})
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	restarts := started("restarts", clock.Now().Add(time.Hour))
	late := started("late", clock.Now().Add(-time.Minute))
	in, err := o.ReplayInputs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var queue []string
	for _, r := range in.State.Queue {
		queue = append(queue, r.ID)
	}
	want := []string{waits.ID, restarts.ID}
	slices.Sort(want)
	if !slices.Equal(queue, want) {
		t.Errorf("the replay's queue %v, want %v (not %s, to be deleted, nor %s, with no operation, nor %s, its lease ended)",
			queue, want, deleted.ID, orphan.ID, late.ID)
	}
	es := estimate.Queue(in.State, estimate.Options{})
	if e, ok := es[deleted.ID]; ok {
		t.Errorf("the VM to be deleted is estimated: %+v", e)
	}
}

// writeCounter counts the writes of a dispatcher's store.
type writeCounter struct {
	dispatchStore
	writes []string
}

func (w *writeCounter) Tx(ctx context.Context, fn func(tx *store.Store) error) error {
	w.writes = append(w.writes, "Tx")
	return w.dispatchStore.Tx(ctx, fn)
}

func (w *writeCounter) SetOperationStep(ctx context.Context, id, step string) error {
	w.writes = append(w.writes, "SetOperationStep")
	return w.dispatchStore.SetOperationStep(ctx, id, step)
}

func (w *writeCounter) UpdateVMState(ctx context.Context, id string, version int64, u store.VMUpdate) (*store.VM, error) {
	w.writes = append(w.writes, "UpdateVMState")
	return w.dispatchStore.UpdateVMState(ctx, id, version, u)
}

func (w *writeCounter) SetQueue(ctx context.Context, entries map[string]store.QueueEntry) (int, error) {
	w.writes = append(w.writes, "SetQueue")
	return w.dispatchStore.SetQueue(ctx, entries)
}

func (w *writeCounter) AppendEvent(ctx context.Context, e *store.Event) error {
	w.writes = append(w.writes, "AppendEvent")
	return w.dispatchStore.AppendEvent(ctx, e)
}

// TestReplayReadsBookingsOnly: the replay reads the reservations' bookings
// as a round makes them, and writes nothing: not to the store, not the
// devices the rounds keep for each reservation nor the reservations that
// hold nothing (nor a warning about them), not the rounds' idle state; nor
// do the rules' readers of the bookings (ReservationConflicts, Capacity,
// CheckExtend), which run beside the rounds without their lock. A round
// after them keeps what it chose.
func TestReplayReadsBookingsOnly(t *testing.T) {
	e, clock, o := bookingEnv(t, time.Date(2026, 12, 1, 10, 0, 0, 0, berlin))
	ctx := context.Background()
	now := clock.Now()
	booked := reservation("ann", "l40s-whole", 1, now.Add(3*time.Hour), now.Add(5*time.Hour))
	if err := o.Book(ctx, booked, false); err != nil {
		t.Fatal(err)
	}
	gone := reservation("ann", "gone", 1, now.Add(time.Hour), now.Add(2*time.Hour)) // its profile is not configured
	if err := e.st.CreateReservation(ctx, gone); err != nil {
		t.Fatal(err)
	}
	e.askVM("bob", "l40s-whole", "waits", 4)
	// As after a restart: no devices are kept, and no round has run. A
	// round would choose the reservation's devices and keep them.
	dp := o.disp
	dp.bookings.mu.Lock()
	dp.bookings.pins = nil
	pins, problems := maps.Clone(dp.bookings.pins), maps.Clone(dp.bookings.problems)
	dp.bookings.mu.Unlock()
	idle := dp.idle
	logged := len(e.logs.String())
	w := &writeCounter{dispatchStore: dp.st}
	dp.st = w

	in, err := o.ReplayInputs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bs := in.Bookings(); len(bs) != 1 || bs[0].ID != bookingID(booked.ID) || len(bs[0].Pinned) == 0 {
		t.Fatalf("the replay's bookings %+v, want reservation %d's with its devices", bs, booked.ID)
	}
	// The rules' readers of the bookings, too, run outside any round (and
	// without its lock): they read only.
	ask := reservation("bob", "l40s-whole", 1, now.Add(3*time.Hour), now.Add(4*time.Hour))
	readers := []struct {
		name string
		read func() error
	}{
		{"the replay", func() error { return nil }}, // read above
		{"ReservationConflicts", func() error { _, err := o.ReservationConflicts(ctx); return err }},
		{"Capacity", func() error {
			_, err := o.Capacity(ctx, ask, []policy.Interval{{Start: ask.StartAt, End: ask.EndAt}}, 1)
			return err
		}},
		{"CheckExtend", func() error { return o.CheckExtend(ctx, "no-such-vm", now.Add(time.Hour)) }},
	}
	for _, r := range readers {
		if err := r.read(); err != nil && r.name != "CheckExtend" {
			t.Fatalf("%s: %v", r.name, err)
		}
		if len(w.writes) > 0 {
			t.Errorf("%s wrote to the store: %v", r.name, w.writes)
		}
		dp.bookings.mu.Lock()
		if !maps.EqualFunc(dp.bookings.pins, pins, func(a, b keptPins) bool { return reflect.DeepEqual(a, b) }) {
			t.Errorf("%s changed the kept devices: %+v, were %+v", r.name, dp.bookings.pins, pins)
		}
		if !maps.Equal(dp.bookings.problems, problems) {
			t.Errorf("%s changed the reservations that hold nothing: %v, were %v", r.name, dp.bookings.problems, problems)
		}
		dp.bookings.mu.Unlock()
		if dp.idle != idle {
			t.Errorf("%s changed the rounds' idle state: %+v, was %+v", r.name, dp.idle, idle)
		}
		if got := e.logs.String()[logged:]; strings.Contains(got, "level=WARN") {
			t.Errorf("%s warned:\n%s", r.name, got)
		}
	}

	// A round chooses the same devices, keeps them, and says that the
	// other reservation holds nothing.
	dp.st = w.dispatchStore
	o.Drain(ctx)
	dp.bookings.mu.Lock()
	k, ok := dp.bookings.pins[booked.ID]
	_, noted := dp.bookings.problems[gone.ID]
	dp.bookings.mu.Unlock()
	if !ok || !reflect.DeepEqual(scheduler.MergeByHost(k.vms), in.Bookings()[0].Pinned) {
		t.Errorf("a round kept %+v (%v), the replay read %+v", k, ok, in.Bookings()[0].Pinned)
	}
	if !noted || !strings.Contains(e.logs.String()[logged:], "a reservation holds no GPU now") {
		t.Errorf("a round did not note that reservation %d holds nothing", gone.ID)
	}
}

// What a round reads and leaves out it warns of, once a round; the
// replay, which reads the same through the round's own code at every
// estimate read after a change, warns of none of it: before a round and
// after one, with the round's warning between them.
func TestReplayInputsDoNotRepeatTheRoundsWarnings(t *testing.T) {
	tests := []struct {
		name, warning string
		heartbeat     func(t *testing.T, n2 *fleetNode) string // n2's inventory
	}{
		{"a node's inventory unusable", "a node's published inventory is unusable",
			func(*testing.T, *fleetNode) string { return "{not json" }},
		{"a GPU's holders not accounted for", "a GPU holds what gpuvm cannot account for",
			func(t *testing.T, n2 *fleetNode) string {
				// Two whole-GPU devices of no VM the database knows on n2's
				// first GPU, which is in vGPU mode: nothing gpuvm can
				// account for.
				invs, errs := n2.o.life.backends.inventoriesOf(context.Background(), n2.l.Names())
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				hi := mergedInventory(invs)
				spec := n2.o.HostSpec(hi)
				for _, id := range []string{"ghost-a", "ghost-b"} {
					hi.Devices = append(hi.Devices, gpu.HostDevice{ID: id, VMUUID: id, GPU: spec.GPUs[0].Address, Kind: gpu.KindPassthrough})
				}
				b, err := json.Marshal(HeartbeatInventory{HostInventory: hi, Spec: &spec})
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			n1, n2 := newTwoNodeFleet(t, "l40sx4")
			if err := n1.st.Heartbeat(ctx, "n2", tc.heartbeat(t, n2)); err != nil {
				t.Fatal(err)
			}
			n1.submit("ann", "l40s-whole", "waits") // a round reads the GPUs for it
			replay := func(when string) {
				t.Helper()
				logged := len(n1.logs.String())
				if _, err := n1.o.ReplayInputs(ctx); err != nil {
					t.Fatal(err)
				}
				// The rules' readers (Book, Capacity, CheckExtend,
				// ReservationConflicts) read the same, as often as people ask.
				if _, err := n1.o.disp.placementState(ctx, n1.cfg, n1.st.Now(), n1.l.Names()); err != nil {
					t.Fatal(err)
				}
				if got := n1.logs.String()[logged:]; strings.Contains(got, tc.warning) {
					t.Errorf("the replay or the rules' read %s warned:\n%s", when, got)
				}
			}
			replay("before a round")
			logged := len(n1.logs.String())
			n1.o.Drain(ctx)
			if got := n1.logs.String()[logged:]; !strings.Contains(got, tc.warning) {
				t.Errorf("the round did not warn %q:\n%s", tc.warning, got)
			}
			replay("after a round")
		})
	}
}
