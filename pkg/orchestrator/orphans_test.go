package orchestrator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// openStore opens another, empty database (another installation, or this
// one's restored from before its VMs were made).
func (e *env) openStore(installation string) *store.Store {
	e.t.Helper()
	ctx := context.Background()
	st := storetest.New(e.t, storetest.WithLogger(e.log))
	if installation != "" {
		if err := st.JoinInstallation(ctx, installation); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := st.CreateUser(ctx, &store.User{Name: "cy"}); err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *env) orchOn(st *store.Store) *Orchestrator {
	return New(Config{
		Store: st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
	})
}

func orphansByKind(o *Orchestrator) map[string][]api.Orphan {
	items, _ := o.Orphans()
	out := map[string][]api.Orphan{}
	for _, it := range items {
		out[it.Kind] = append(out[it.Kind], it)
	}
	return out
}

// A reconciler never removes what it cannot prove is its own: a second
// installation on the same host sees the first one's running VM (domain and
// MIG device) as orphans and leaves them; the first installation's VM keeps
// running. The same installation with its VM's row lost (an older backup)
// sees the domain as adoptable; adopting it makes it a VM again, with its
// GPU slots recorded, and nothing is an orphan then.
func TestOrphansAreLeftAndAdopted(t *testing.T) {
	e := newEnv(t, "h100x8")
	ctx := context.Background()
	a := e.orch(nil)
	vm := &store.VM{Name: "vm1", Owner: "ann", Profile: "h100-mig", Hours: 2, DisplayPassword: "pw-4a7c"}
	if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	a.Drain(ctx)
	if got := e.vm(vm.ID); got.State != store.VMRunning {
		t.Fatalf("vm1: %s %q", got.State, got.StateReason)
	}
	hostBefore, domsBefore := e.snapshot(), e.domains()
	allocs, err := e.st.ListAllocations(ctx, vm.ID)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocations %+v, %v", allocs, err)
	}

	// Another installation: everything of A's is an orphan, left alone.
	other := e.openStore("")
	b := e.orchOn(other)
	for range 2 {
		rep, err := b.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.LeakedDevices)+len(rep.LeakedDomains)+len(rep.Vanished) != 0 || rep.Orphans != 2 {
			t.Fatalf("installation B's reconcile: %+v", rep)
		}
	}
	got := orphansByKind(b)
	if len(got[api.OrphanDomain]) != 1 || len(got[api.OrphanDevice]) != 1 {
		t.Fatalf("B's orphans %+v", got)
	}
	dom := got[api.OrphanDomain][0]
	if dom.VMID != vm.ID || dom.Installation != a.Installation() || dom.Adoptable || !strings.Contains(dom.Reason, "another gpuvm installation") {
		t.Errorf("A's domain as B sees it: %+v", dom)
	}
	if _, err := b.AdoptOrphan(ctx, dom.ID, api.AdoptRequest{Owner: "cy"}, "admin"); !errors.Is(err, ErrNotAdoptable) {
		t.Errorf("B adopting A's domain: %v, want ErrNotAdoptable", err)
	}
	if alerts, err := other.ListAlerts(ctx, store.AlertFilter{State: store.AlertFiring}); err != nil || len(alerts) != 1 || alerts[0].Rule != OrphanAlertRule || alerts[0].Value != 2 {
		t.Errorf("B's firing alerts %+v, %v", alerts, err)
	}
	if n := b.OrphanCounts(); n[api.OrphanDomain] != 1 || n[api.OrphanDevice] != 1 || n[api.OrphanVolume] != 0 {
		t.Errorf("orphan counts %v", n)
	}
	if !sameBytes(hostBefore, e.snapshot()) || len(e.domains()) != len(domsBefore) {
		t.Fatal("installation B changed the host")
	}
	if got := e.vm(vm.ID); got.State != store.VMRunning {
		t.Fatalf("A's VM after B's reconcile: %s", got.State)
	}
	if rep, err := a.Reconcile(ctx); err != nil || rep.Orphans != 0 || len(rep.LeakedDomains)+len(rep.LeakedDevices) != 0 {
		t.Fatalf("A's own reconcile: %+v, %v", rep, err)
	}

	// A's installation with an older database (no row for vm1).
	restored := e.openStore(a.Installation())
	c := e.orchOn(restored)
	if rep, err := c.Reconcile(ctx); err != nil || rep.Orphans != 2 || len(rep.LeakedDevices)+len(rep.LeakedDomains) != 0 {
		t.Fatalf("restored reconcile: %+v, %v", rep, err)
	}
	got = orphansByKind(c)
	dom = got[api.OrphanDomain][0]
	if !dom.Adoptable || dom.Owner != "ann" || dom.Profile != "h100-mig" || !strings.Contains(dom.Reason, "database has no VM") {
		t.Fatalf("the domain as the restored installation sees it: %+v", dom)
	}
	for _, tc := range []struct {
		req  api.AdoptRequest
		want error
	}{
		{api.AdoptRequest{Owner: "nobody"}, store.ErrInvalid},
		{api.AdoptRequest{Owner: "cy", Profile: "no-such-profile"}, store.ErrInvalid},
	} {
		if _, err := c.AdoptOrphan(ctx, dom.ID, tc.req, "admin"); !errors.Is(err, tc.want) {
			t.Errorf("adopt %+v: %v, want %v", tc.req, err, tc.want)
		}
	}
	if _, err := c.AdoptOrphan(ctx, "domain-000000000000", api.AdoptRequest{Owner: "cy"}, "admin"); !errors.Is(err, ErrNoOrphan) {
		t.Errorf("adopt an unknown orphan: %v", err)
	}
	adopted, err := c.AdoptOrphan(ctx, dom.ID, api.AdoptRequest{Owner: "cy", Name: "back"}, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if adopted.ID != vm.ID || adopted.State != store.VMRunning || adopted.Owner != "cy" || adopted.Name != "back" || adopted.LeaseEnd == nil || adopted.DisplayPassword != "pw-4a7c" {
		t.Errorf("adopted VM %+v", adopted)
	}
	held, err := restored.ListAllocations(ctx, vm.ID)
	if err != nil || len(held) != 1 || held[0].State != store.AllocCreated || held[0].Slot != allocs[0].Slot || held[0].DeviceID != allocs[0].DeviceID {
		t.Fatalf("adopted allocations %+v (A had %+v), %v", held, allocs, err)
	}
	if rep, err := c.Reconcile(ctx); err != nil || rep.Orphans != 0 || len(rep.LeakedDevices)+len(rep.LeakedDomains)+len(rep.Vanished) != 0 {
		t.Fatalf("reconcile after adoption: %+v, %v", rep, err)
	}
	if !sameBytes(hostBefore, e.snapshot()) {
		t.Fatal("adoption changed the host")
	}
	if alerts, err := restored.ListAlerts(ctx, store.AlertFilter{Rule: OrphanAlertRule}); err != nil || len(alerts) != 1 || alerts[0].State != store.AlertResolved {
		t.Errorf("the restored installation's orphan alert %+v, %v", alerts, err)
	}

}

func sameBytes(a, b []byte) bool { return string(a) == string(b) }

// A running VM whose domain is undefined behind gpuvm's back is noticed
// from libvirt's lifecycle events, not by a reconcile (none runs here): failed, its GPU given back, its owner told by an event.
func TestVanishedDomainNoticedFromEvents(t *testing.T) {
	e := newEnv(t, "h100x8")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := e.snapshot()
	o := New(Config{
		Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: time.Hour, ReconcileEvery: time.Hour, RulesEvery: time.Hour, ShutdownTimeout: time.Second,
	})
	vm, _ := e.submit("ann", "h100-mig", "vm1")
	o.Drain(ctx)
	if got := e.vm(vm.ID); got.State != store.VMRunning {
		t.Fatalf("vm1: %s %q", got.State, got.StateReason)
	}
	// What Run does, with the subscription made before the domain goes.
	events := o.rec.subscribeDomains(ctx)
	if events == nil {
		t.Fatal("no lifecycle events from libvirt's test driver")
	}
	done := make(chan struct{})
	go func() { o.rec.followDomains(ctx, events); close(done) }()
	defer func() { cancel(); <-done }()
	if err := e.hv.Destroy(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.hv.Undefine(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for e.vm(vm.ID).State != store.VMFailed {
		if time.Now().After(deadline) {
			t.Fatalf("vm1 still %s after its domain was undefined", e.vm(vm.ID).State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if live, _ := e.st.ListLiveAllocations(ctx, ""); len(live) != 0 {
		t.Errorf("the vanished VM still holds %+v", live)
	}
	evs, err := e.st.ListEventsSince(ctx, 0, store.EventFilter{VMID: vm.ID, Type: api.EventVMState, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || !strings.Contains(string(evs[len(evs)-1].Payload), "vanished") {
		t.Errorf("the owner was not told: %+v", evs)
	}
	if !sameBytes(before, e.snapshot()) {
		t.Error("the vanished VM's device is still on the host")
	}
}

// A running VM's device that none of its allocations recorded (made by an
// attempt whose slots went elsewhere) is removed by the reconciler; the
// device its allocation recorded stays.
func TestReconcileRemovesUnrecordedDeviceOfLiveVM(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	o := e.orch(nil)
	vm, _ := e.submit("ann", "l40s-seat", "vm1")
	o.Drain(ctx)
	if got := e.vm(vm.ID); got.State != store.VMRunning {
		t.Fatalf("vm1: %s", got.State)
	}
	b, _ := e.l.Backend("vgpu")
	extra, err := b.Create(ctx, backend.CreateRequest{GPU: "0000:21:00.0", Type: "L40S-12Q", VMUUID: vm.ID})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := o.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.LeakedDevices) != 1 || rep.LeakedDevices[0] != "vgpu/"+extra.ID || rep.Orphans != 0 {
		t.Fatalf("report %+v, want the extra device %s removed", rep, extra.ID)
	}
	allocs, _ := e.st.ListAllocations(ctx, vm.ID)
	devs := e.devices()[vm.ID]
	if len(devs) != 1 || len(allocs) != 1 || devs[0].ID != allocs[0].DeviceID {
		t.Errorf("vm1's devices %v, its allocation %+v", devs, allocs)
	}
	if got := e.vm(vm.ID); got.State != store.VMRunning {
		t.Errorf("vm1 after the reconcile: %s", got.State)
	}
}
