package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// testFleet is a node's fleet: whether it leads, and whom it woke.
type testFleet struct {
	leader atomic.Bool
	mu     sync.Mutex
	woke   []string
}

func (f *testFleet) IsLeader() bool { return f.leader.Load() }
func (f *testFleet) Notify(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.woke = append(f.woke, node)
}
func (f *testFleet) notified() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.woke)
}

// fleetNode is one node of a two-node fleet in one process: its env (its
// own simulated host and backends; the database is the fleet's) and its
// orchestrator.
type fleetNode struct {
	*env
	name  string
	fleet *testFleet
	o     *Orchestrator
}

func newFleetNode(t testing.TB, name, preset string, st *store.Store) *fleetNode {
	e := newEnv(t, preset)
	if st != nil {
		e.st = st
	}
	n := &fleetNode{env: e, name: name, fleet: &testFleet{}}
	n.o = New(Config{Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: name, DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log.With("node", name),
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second, Fleet: n.fleet, HostTimeout: 2 * time.Second})
	return n
}

// newTwoNodeFleet is n1 (of preset, leading) and n2 (l40sx4) on one
// database, both with a fresh heartbeat.
func newTwoNodeFleet(t testing.TB, preset string) (n1, n2 *fleetNode) {
	n1 = newFleetNode(t, "n1", preset, nil)
	n2 = newFleetNode(t, "n2", "l40sx4", n1.st)
	n1.fleet.leader.Store(true)
	n1.beat(t)
	n2.beat(t)
	return n1, n2
}

// beat writes the node's heartbeat as gpuvmd's heartbeater does: its
// inventory with the scheduler's view of its GPUs.
func (n *fleetNode) beat(t testing.TB) { n.beatAs(t, n.name) }

// beatAs writes the node's heartbeat as if it were the node named name.
func (n *fleetNode) beatAs(t testing.TB, name string) {
	t.Helper()
	ctx := context.Background()
	invs, errs := n.o.life.backends.inventoriesOf(ctx, n.l.Names())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	hi := mergedInventory(invs)
	spec := n.o.HostSpec(hi)
	b, err := json.Marshal(HeartbeatInventory{HostInventory: hi, Spec: &spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.st.Heartbeat(ctx, name, string(b)); err != nil {
		if err := n.st.RegisterHost(ctx, &store.Host{Name: name, APIURL: "http://" + name, Inventory: string(b)}); err != nil {
			t.Fatal(err)
		}
	}
}

// The leader places on every healthy node's GPUs and wakes the node it
// placed on; that node makes the VM with its own backends and libvirt; a
// node that does not lead neither places nor runs another's VMs. A node
// silent past the timeout offers nothing, and what was placed there but
// not begun goes back to the queue; a drained node takes nothing new.
func TestFleetPlacement(t *testing.T) {
	ctx := context.Background()
	n1, n2 := newTwoNodeFleet(t, "h100x8")

	// One VM only n2's L40S can hold, one only n1's H100s.
	l40s, l40sOp := n1.submit("ann", "l40s-seat", "on-l40s")
	h100, h100Op := n1.submit("bob", "h100-mig", "on-h100")

	// n2 does not lead: it places nothing, and its rounds do not even
	// read the queue, which is the leader's (issue #26: ten thousand
	// waiting, read by every node's every round).
	n2.o.Drain(ctx)
	if vm := n1.vm(l40s.ID); vm.State != store.VMQueued || vm.Host != "" {
		t.Fatalf("a node that does not lead placed %s: %s on %q", vm.Name, vm.State, vm.Host)
	}
	if read := n2.o.disp.cache.vms; len(read) != 0 {
		t.Errorf("n2's round read the queue's VMs %v; want none", slices.Collect(maps.Keys(read)))
	}
	// n1 leads: both placed, n1's made at once, n2 woken for its own.
	n1.o.Drain(ctx)
	n1.checkRunning(h100, h100Op, n1.o, "type='pci'")
	if vm := n1.vm(h100.ID); vm.Host != "n1" {
		t.Errorf("%s is on %q", vm.Name, vm.Host)
	}
	vm := n1.vm(l40s.ID)
	allocs, err := n1.st.ListAllocations(ctx, l40s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != store.VMAllocating || vm.Host != "n2" || len(allocs) != 1 || allocs[0].Host != "n2" || allocs[0].State != store.AllocReserved {
		t.Fatalf("%s: %s on %q, allocations %+v", vm.Name, vm.State, vm.Host, allocs)
	}
	if !slices.Contains(n1.fleet.notified(), "n2") {
		t.Errorf("n1 woke %v, not n2", n1.fleet.notified())
	}
	if devs := n1.devices(); len(devs[l40s.ID]) != 0 {
		t.Errorf("n1 made a device for a VM placed on n2: %v", devs[l40s.ID])
	}
	// n2 makes it; n1's rounds leave it alone.
	n1.o.Drain(ctx)
	n2.o.Drain(ctx)
	n2.checkRunning(l40s, l40sOp, n2.o, "type='pci'")
	if devs := n1.devices(); len(devs[l40s.ID]) != 0 || len(n2.devices()[h100.ID]) != 0 {
		t.Error("a node holds a device of a VM placed on the other")
	}
	if len(n1.domains()) != 1 || len(n2.domains()) != 1 {
		t.Errorf("domains: n1 %v, n2 %v", n1.domains(), n2.domains())
	}

	// The leader places on n2 (fresh heartbeat) a VM n2 never gets to.
	n2.beat(t)
	pending, pendingOp := n1.submit("ann", "l40s-seat", "never-made")
	n1.o.Drain(ctx)
	if vm := n1.vm(pending.ID); vm.State != store.VMAllocating || vm.Host != "n2" {
		t.Fatalf("%s: %s on %q", vm.Name, vm.State, vm.Host)
	}
	// n2 stops beating: past the timeout its capacity leaves scheduling.
	time.Sleep(2500 * time.Millisecond)
	n1.beat(t)
	late, _ := n1.submit("bob", "l40s-seat", "too-late")
	n1.o.Drain(ctx)
	if vm := n1.wantVM(late.ID, store.VMQueued, ""); vm.Host != "" || vm.StateReason == "" {
		t.Errorf("with n2 down, %s: on %q, reason %q", vm.Name, vm.Host, vm.StateReason)
	}
	// What n2 never began goes back to the queue, free; what runs there stays.
	requeued, err := n1.o.RequeueFromDownHosts(ctx, []string{"n2"})
	if err != nil || len(requeued) != 1 || requeued[0] != pending.ID {
		t.Fatalf("requeued %v, %v; want %s", requeued, err, pending.ID)
	}
	if vm := n1.wantVM(pending.ID, store.VMQueued, "node n2 went down"); vm.Host != "" {
		t.Errorf("requeued VM still on %q", vm.Host)
	}
	if live, _ := n1.st.ListLiveAllocations(ctx, "n2"); len(live) != 1 || live[0].VMID != l40s.ID {
		t.Errorf("live allocations on n2: %+v", live)
	}
	if op := n1.op(pendingOp.ID); op.Finished() {
		t.Errorf("the requeued VM's create is %s", op.State)
	}
	n1.wantVM(l40s.ID, store.VMRunning, "")
	if again, _ := n1.o.RequeueFromDownHosts(ctx, []string{"n2"}); len(again) != 0 {
		t.Errorf("requeued again: %v", again)
	}

	// n2 returns, drained: still nothing new on it, and the queue says why.
	n2.beat(t)
	if _, err := n1.st.SetHostDraining(ctx, "n2", true); err != nil {
		t.Fatal(err)
	}
	n1.o.Drain(ctx)
	for _, id := range []string{pending.ID, late.ID} {
		if vm := n1.wantVM(id, store.VMQueued, ""); !strings.Contains(vm.StateReason, "node n2 is drained") {
			t.Errorf("%s waits with reason %q", vm.Name, vm.StateReason)
		}
	}
	// Undrained, the leader places them both on n2, which makes them.
	if _, err := n1.st.SetHostDraining(ctx, "n2", false); err != nil {
		t.Fatal(err)
	}
	n1.o.Drain(ctx)
	n2.o.Drain(ctx)
	for _, id := range []string{pending.ID, late.ID} {
		if vm := n1.wantVM(id, store.VMRunning, ""); vm.Host != "n2" {
			t.Errorf("%s runs on %q", vm.Name, vm.Host)
		}
	}
	if got := len(n2.devices()); got != 3 {
		t.Errorf("n2 holds devices of %d VMs, want 3", got)
	}

	// A delete of n2's VM is n2's: the leader leaves it, n2 does it and
	// tells the leader it freed capacity.
	del := n1.deleteOp(n1.vm(l40s.ID))
	n1.o.Drain(ctx)
	if op := n1.op(del.ID); op.Finished() {
		t.Fatalf("the leader ran the delete of a VM on n2: %s", op.State)
	}
	n2.o.Drain(ctx)
	n1.wantOp(del.ID, store.OpDone, "")
	n1.wantVM(l40s.ID, store.VMDeleted, "")
	if !slices.Contains(n2.fleet.notified(), "") {
		t.Errorf("n2 did not tell the leader it freed capacity: %v", n2.fleet.notified())
	}
	if len(n2.devices()[l40s.ID]) != 0 || len(n2.domains()) != 2 {
		t.Errorf("after the delete n2 holds %v, domains %v", n2.devices()[l40s.ID], n2.domains())
	}
}

// A node's reconcile removes its devices and domains of VMs placed
// elsewhere, and leaves the other nodes' alone.
func TestFleetReconcileOwnHostOnly(t *testing.T) {
	ctx := context.Background()
	n1, n2 := newTwoNodeFleet(t, "l40sx4")
	a, _ := n1.submit("ann", "l40s-seat", "a")
	n1.o.Drain(ctx)
	if vm := n1.wantVM(a.ID, store.VMRunning, ""); vm.Host != "n1" {
		t.Fatalf("a runs on %q", vm.Host)
	}
	// n2's reconcile must not touch n1's VM: it is not on n2.
	if rep, err := n2.o.Reconcile(ctx); err != nil || len(rep.LeakedDevices)+len(rep.LeakedDomains)+len(rep.Vanished) != 0 {
		t.Fatalf("n2's reconcile: %+v, %v", rep, err)
	}
	n1.wantVM(a.ID, store.VMRunning, "")
	// The database moves the VM to n2 (as a requeue and a placement on n2
	// would): n1's device and domain are leaked now, and n1 removes them.
	nowhere := "n2"
	vm := n1.vm(a.ID)
	if _, err := n1.st.UpdateVMState(ctx, a.ID, vm.Version, store.VMUpdate{State: store.VMCreating, Host: &nowhere}); err != nil {
		t.Fatal(err)
	}
	rep, err := n1.o.rec.reconcileHost(ctx)
	if err != nil || len(rep.LeakedDevices) != 1 || len(rep.LeakedDomains) != 1 {
		t.Fatalf("n1's reconcile: %+v, %v", rep, err)
	}
	if len(n1.devices()) != 0 || len(n1.domains()) != 0 {
		t.Errorf("n1 still holds %v, %v", n1.devices(), n1.domains())
	}
}

// The leader queues again a VM of a node it takes for down while that
// node, which read the VM as its own just before, is about to make its
// device: the node sees its slots released and makes nothing (without the
// shared lock it made a device that no allocation recorded, left on the
// host for good; found by test/fleet's PostgreSQL restart under load).
func TestRequeueAndDeviceStepExcludeEachOther(t *testing.T) {
	ctx := context.Background()
	n1, n2 := newTwoNodeFleet(t, "h100x8")
	vm, op := n1.submit("ann", "l40s-seat", "raced")
	n1.o.Drain(ctx)
	placed := n1.vm(vm.ID)
	if placed.State != store.VMAllocating || placed.Host != "n2" {
		t.Fatalf("%s: %s on %q", placed.Name, placed.State, placed.Host)
	}
	alloc := n1.liveAllocation(vm.ID) // what n2 read before the leader acted
	requeued, err := n1.o.RequeueFromDownHosts(ctx, []string{"n2"})
	if err != nil || len(requeued) != 1 {
		t.Fatalf("requeued %v, %v", requeued, err)
	}
	// n2, past its read of the allocations, begins the device step.
	if err := n2.o.life.beginDeviceStep(ctx, vm.ID, op.ID, alloc.ID); !errors.Is(err, errSlotsGone) {
		t.Fatalf("n2 beginning the device of a requeued VM: %v; want errSlotsGone", err)
	}
	if got := n1.op(op.ID); got.Step == StepCreateDevice {
		t.Error("the refused step was recorded")
	}
	if deviceErr, err := n2.o.life.makeDevices(ctx, vm.ID, n1.op(op.ID)); deviceErr != nil || err != nil {
		t.Fatalf("n2's makeDevices after the requeue: %v, %v", deviceErr, err)
	}
	if devs := n2.devices(); len(devs) != 0 {
		t.Errorf("n2 made devices %v for slots the leader gave away", devs)
	}
	// The other order: n2 began (its step is recorded), so the leader
	// leaves the VM where it is.
	n1.o.Drain(ctx)
	again := n1.vm(vm.ID)
	if again.State != store.VMAllocating || again.Host != "n2" { // only n2's L40S can hold it
		t.Fatalf("placed again: %s on %q", again.State, again.Host)
	}
	if err := n2.o.life.beginDeviceStep(ctx, vm.ID, op.ID, n1.liveAllocation(vm.ID).ID); err != nil {
		t.Fatal(err)
	}
	if requeued, err := n1.o.RequeueFromDownHosts(ctx, []string{"n2"}); err != nil || len(requeued) != 0 {
		t.Errorf("the leader queued again a VM whose node began: %v, %v", requeued, err)
	}
}

func (e *env) liveAllocation(vmID string) store.Allocation {
	e.t.Helper()
	as, err := e.st.ListAllocations(context.Background(), vmID)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range as {
		if a.State != store.AllocReleased {
			return a
		}
	}
	e.t.Fatalf("vm %s has no live allocation", vmID)
	return store.Allocation{}
}
