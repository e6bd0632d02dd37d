package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// action queues an action's operation, as the API does.
func (e *env) action(vm *store.VM, kind string) *store.Operation {
	e.t.Helper()
	op := &store.Operation{VMID: vm.ID, Kind: kind, RequestedBy: vm.Owner}
	if err := e.st.CreateOperation(context.Background(), op); err != nil {
		e.t.Fatal(err)
	}
	return op
}

// domainState is the state of a VM's domain.
func (e *env) domainState(vmID string) hypervisor.State {
	e.t.Helper()
	info, err := e.hv.Lookup(context.Background(), vmID)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State
}

// actionResults are the results of the vm.action events of a VM, in order.
func (e *env) actionResults(vmID string) []string {
	e.t.Helper()
	evs, err := e.st.ListEventsSince(context.Background(), 0, store.EventFilter{VMID: vmID, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Type != api.EventVMAction {
			continue
		}
		var p api.VMActionPayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, p.Action+" "+p.Result)
	}
	return out
}

func (e *env) wantOp(id, state, errPart string) {
	e.t.Helper()
	op := e.op(id)
	if op.State != state || !strings.Contains(op.Error, errPart) {
		e.t.Fatalf("operation %s (%s): %s %q, want %s %q", op.ID, op.Kind, op.State, op.Error, state, errPart)
	}
}

func (e *env) wantVM(id, state, reasonPart string) *store.VM {
	e.t.Helper()
	vm := e.vm(id)
	if vm.State != state || !strings.Contains(vm.StateReason, reasonPart) {
		e.t.Fatalf("vm %s: %s (phase %q) %q, want %s %q", vm.Name, vm.State, vm.Phase, vm.StateReason, state, reasonPart)
	}
	return vm
}

// wantGPUGivenBack asserts a VM holds no GPU: no live allocation, no device
// on the host, no open usage record; and that its domain is still defined
// and shut off, with its hostdevs, if any, of devices no longer there.
func (e *env) wantGPUGivenBack(vmID string) {
	e.t.Helper()
	ctx := context.Background()
	allocs, err := e.st.ListAllocations(ctx, vmID)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range allocs {
		if a.State != store.AllocReleased {
			e.t.Errorf("allocation %d (%s on %s) is %s, want released", a.ID, a.Slot, a.GPUAddress, a.State)
		}
	}
	if devs := e.devices()[vmID]; len(devs) != 0 {
		e.t.Errorf("devices left on the host: %+v", devs)
	}
	for _, u := range e.usage(vmID) {
		if u.Open {
			e.t.Errorf("usage record %d on %s is still open", u.Record.ID, u.Record.GPUAddress)
		}
	}
	if s := e.domainState(vmID); s != hypervisor.StateShutoff {
		e.t.Errorf("domain %s, want shut off and defined", s)
	}
}

// usage lists a VM's usage records.
func (e *env) usage(vmID string) []store.UsageSpan {
	e.t.Helper()
	spans, err := e.st.ListUsageSpans(context.Background(), store.UsageQuery{From: time.Unix(0, 0), To: time.Now().Add(100 * 365 * 24 * time.Hour)})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []store.UsageSpan
	for _, s := range spans {
		if s.Record.VMID == vmID {
			out = append(out, s)
		}
	}
	return out
}

// wantDomainOnDevices asserts that a VM's domain attaches exactly the
// devices its live allocations recorded, as the backends made them.
func (e *env) wantDomainOnDevices(vmID string) {
	e.t.Helper()
	ctx := context.Background()
	x, err := e.hv.XML(ctx, vmID, false)
	if err != nil {
		e.t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		e.t.Fatal(err)
	}
	allocs, err := e.st.ListLiveAllocations(ctx, "")
	if err != nil {
		e.t.Fatal(err)
	}
	var want []domain.Hostdev
	for _, a := range allocs {
		if a.VMID != vmID {
			continue
		}
		var h backend.Hostdev
		if err := json.Unmarshal([]byte(a.Hostdev), &h); err != nil {
			e.t.Fatalf("allocation %d: %v", a.ID, err)
		}
		if h.Type == backend.HostdevMdev {
			want = append(want, domain.Hostdev{Type: domain.HostdevMdev, UUID: strings.ToLower(h.UUID), Display: h.Display})
			continue
		}
		for _, addr := range h.Addresses {
			want = append(want, domain.Hostdev{Type: domain.HostdevPCI, Addresses: []string{addr}, Managed: h.Managed})
		}
	}
	if got := domain.GPUHostdevs(&d); len(want) == 0 || !reflect.DeepEqual(got, want) {
		e.t.Errorf("the domain attaches %+v, want the recorded devices %+v", got, want)
	}
}

// Stop gives the GPU back (devices removed, slots released, usage ended:
// the simulated host is as it was before the VM) and shuts the domain off,
// keeping it; start queues the VM, places it again and boots the domain on
// its new device; reboot leaves it running. Each records its result as a
// vm.action event, and a delete of the stopped VM removes the domain.
func TestStopStartReboot(t *testing.T) {
	for _, tc := range []struct{ preset, profile, xml string }{
		{"l40sx4", "l40s-seat", "type='pci'"},
		{"h100x8", "h100-mig", "type='pci'"},
		{"h100x8", "h100-vgpu", "type='pci'"},
		{"l40sx4", "l40s-whole", "managed='yes'"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			e := newEnv(t, tc.preset)
			ctx := context.Background()
			before := e.snapshot()
			o := e.orch(nil)
			vm, create := e.submit("ann", tc.profile, "vm1")
			o.Drain(ctx)
			e.checkRunning(vm, create, o, tc.xml)
			e.wantDomainOnDevices(vm.ID)
			allocsBefore, _ := liveAllocations(ctx, o.life.st, vm.ID)
			lease := e.vm(vm.ID).LeaseEnd

			stop := e.action(e.vm(vm.ID), store.OpStop)
			o.Drain(ctx)
			e.wantOp(stop.ID, store.OpDone, "")
			got := e.wantVM(vm.ID, store.VMStopped, "stopped by ann; its GPU was given back")
			if got.LeaseEnd == nil || !got.LeaseEnd.Equal(*lease) {
				t.Errorf("the lease changed with the stop: %v, was %v", got.LeaseEnd, lease)
			}
			e.wantGPUGivenBack(vm.ID)
			if !bytes.Equal(before, e.snapshot()) {
				t.Error("the simulated host differs from before the VM once it is stopped")
			}
			if op := e.op(stop.ID); op.Step != StepRelease {
				t.Errorf("the stop's last step %q, want %q", op.Step, StepRelease)
			}

			// Reboot needs a running VM.
			reboot := e.action(got, store.OpReboot)
			o.Drain(ctx)
			e.wantOp(reboot.ID, store.OpFailed, "the VM is stopped, not running")

			start := e.action(e.vm(vm.ID), store.OpStart)
			o.Drain(ctx)
			e.wantOp(start.ID, store.OpDone, "")
			e.checkRunning(vm, create, o, tc.xml)
			e.wantDomainOnDevices(vm.ID)
			if s := e.domainState(vm.ID); s != hypervisor.StateRunning {
				t.Errorf("domain of the started VM: %s", s)
			}
			allocs, _ := liveAllocations(ctx, o.life.st, vm.ID)
			if allocs[0].ID == allocsBefore[0].ID {
				t.Errorf("the start kept the released allocation %d", allocs[0].ID)
			}
			if us := e.usage(vm.ID); len(us) != 2 || us[0].Open || !us[1].Open {
				t.Errorf("usage records %+v, want the first run's ended and the second's open", us)
			}
			if got := e.vm(vm.ID); got.LeaseEnd == nil || !got.LeaseEnd.Equal(*lease) {
				t.Errorf("the lease changed with the start: %v, was %v", got.LeaseEnd, lease)
			}

			reboot = e.action(e.vm(vm.ID), store.OpReboot)
			o.Drain(ctx)
			e.wantOp(reboot.ID, store.OpDone, "")
			e.wantVM(vm.ID, store.VMRunning, "")

			want := []string{"stop done", "reboot failed", "start done", "reboot done"}
			if got := e.actionResults(vm.ID); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("vm.action events %q, want %q", got, want)
			}

			// A stopped VM is deleted like a running one.
			e.action(e.vm(vm.ID), store.OpStop)
			o.Drain(ctx)
			e.wantVM(vm.ID, store.VMStopped, "")
			e.deleteOp(e.vm(vm.ID))
			o.Drain(ctx)
			e.wantVM(vm.ID, store.VMDeleted, "")
			e.wantAsBefore(before)
		})
	}
}

// A stopped VM's GPU goes to the next VM in the queue at once. Started
// again, the stopped VM waits in the queue like any VM, with its position
// and reason, its domain kept (a reconcile leaves it), until a GPU frees
// up: it then starts on that one, another than it had, and its domain
// attaches the new device.
func TestStopGivesTheGPUToTheQueue(t *testing.T) {
	e := newEnv(t, "h100x8") // four H100 in MIG mode: four 7g.80gb
	e.withPolicy(`profile "h100-7g" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "7g.80gb"
  }
}`)
	ctx := context.Background()
	o := e.orch(nil)
	var vms []*store.VM
	for _, name := range []string{"a", "b", "c", "d"} {
		vm, _ := e.submit("ann", "h100-7g", name)
		vms = append(vms, vm)
	}
	o.Drain(ctx)
	gpuOf := func(vmID string) string {
		t.Helper()
		allocs, err := liveAllocations(ctx, o.life.st, vmID)
		if err != nil || len(allocs) != 1 {
			t.Fatalf("allocations of %s: %+v, %v", vmID, allocs, err)
		}
		return allocs[0].GPUAddress
	}
	was := gpuOf(vms[0].ID)
	waiter, waiterCreate := e.submit("bob", "h100-7g", "waiter")
	o.Drain(ctx)
	e.wantVM(waiter.ID, store.VMQueued, "no GPU has room")

	// a stops: the waiter takes its GPU in the same round.
	e.action(e.vm(vms[0].ID), store.OpStop)
	o.Drain(ctx)
	e.wantVM(vms[0].ID, store.VMStopped, "its GPU was given back")
	e.wantGPUGivenBack(vms[0].ID)
	e.checkRunning(waiter, waiterCreate, o, "type='pci'")
	if g := gpuOf(waiter.ID); g != was {
		t.Errorf("the waiter got %s, not the GPU a gave back (%s)", g, was)
	}

	// a starts again: no GPU is free, it waits.
	start := e.action(e.vm(vms[0].ID), store.OpStart)
	o.Drain(ctx)
	if op := e.op(start.ID); op.Finished() {
		t.Fatalf("the start is %s, want it waiting", op.State)
	}
	got := e.wantVM(vms[0].ID, store.VMQueued, "no GPU has room")
	if got.Phase != PhaseQueued || got.QueuePosition != 1 {
		t.Errorf("waiting: phase %q, position %d", got.Phase, got.QueuePosition)
	}
	if op := e.op(start.ID); op.Step != StepQueue {
		t.Errorf("the start's step %q, want %q", op.Step, StepQueue)
	}
	rep, err := o.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.LeakedDomains)+len(rep.LeakedDevices)+len(rep.Vanished) != 0 {
		t.Fatalf("a reconcile while the VM waits: %+v", rep)
	}
	e.wantGPUGivenBack(vms[0].ID)

	// b is deleted: a starts on b's GPU.
	freed := gpuOf(vms[1].ID)
	e.deleteOp(e.vm(vms[1].ID))
	o.Drain(ctx)
	e.wantVM(vms[1].ID, store.VMDeleted, "")
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	got = e.wantVM(vms[0].ID, store.VMRunning, "")
	if got.QueuePosition != 0 || got.Phase != "ready" {
		t.Errorf("running: phase %q, position %d", got.Phase, got.QueuePosition)
	}
	if g := gpuOf(vms[0].ID); g != freed || g == was {
		t.Errorf("a started on %s, want the freed %s (it had %s)", g, freed, was)
	}
	e.wantDomainOnDevices(vms[0].ID)
	if want := []string{"stop done", "start done"}; strings.Join(e.actionResults(vms[0].ID), ",") != strings.Join(want, ",") {
		t.Errorf("vm.action events %q, want %q", e.actionResults(vms[0].ID), want)
	}
}

// A VM without a GPU starts at once, as before.
func TestStartWithoutGPU(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	o := e.orch(nil)
	vm, _ := e.submit("ann", "nogpu", "plain")
	o.Drain(ctx)
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	got := e.wantVM(vm.ID, store.VMStopped, "stopped by ann")
	if strings.Contains(got.StateReason, "GPU") {
		t.Errorf("a VM without a GPU gave one back: %q", got.StateReason)
	}
	start := e.action(got, store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMRunning, "")
	if op := e.op(start.ID); op.Step != StepStartDomain {
		t.Errorf("the start's last step %q, want %q", op.Step, StepStartDomain)
	}
}

// A VM stopped before stops gave GPUs back still holds its device and
// slot: its start gives them back, then places it like any other.
func TestStartOfAVMThatKeptItsGPU(t *testing.T) {
	e := newEnv(t, "h100x8")
	ctx := context.Background()
	before := e.snapshot()
	o := e.orch(nil)
	vm, create := e.submit("ann", "h100-mig", "old")
	o.Drain(ctx)
	old, _ := liveAllocations(ctx, o.life.st, vm.ID)
	// Stopped the way it used to be: the domain off, the GPU kept.
	if _, err := e.hv.Shutdown(ctx, vm.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	cur := e.vm(vm.ID)
	if _, err := e.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: store.VMStopped, StateReason: "stopped by ann"}); err != nil {
		t.Fatal(err)
	}
	start := e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	e.checkRunning(vm, create, o, "type='pci'")
	e.wantDomainOnDevices(vm.ID)
	all, _ := e.st.ListAllocations(ctx, vm.ID)
	if len(all) != 2 || all[0].ID != old[0].ID || all[0].State != store.AllocReleased || all[1].State != store.AllocCreated {
		t.Errorf("allocations %+v: want the kept one released and a new one", all)
	}
	e.deleteOp(e.vm(vm.ID))
	o.Drain(ctx)
	if !bytes.Equal(before, e.snapshot()) {
		t.Error("the simulated host differs after the delete")
	}
}

// A start after the lease ended is refused, the VM staying stopped with
// nothing claimed; once the lease is extended the VM starts. A lease that
// ends while the VM waits for a GPU ends the start too.
func TestStartAfterTheLeaseEnded(t *testing.T) {
	e := newEnv(t, "l40sx4")
	var mu sync.Mutex
	now := time.Date(2030, 5, 1, 9, 0, 0, 0, time.UTC)
	e.useClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	ctx := context.Background()
	o := e.orch(nil)
	vm, _ := e.submit("ann", "l40s-seat", "vm1") // 2 hours
	o.Drain(ctx)
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMStopped, "")
	mu.Lock()
	now = now.Add(3 * time.Hour)
	mu.Unlock()

	start := e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpFailed, "the lease ended at Wed 1 May 2030 11:00 UTC: extend it to start the VM")
	e.wantVM(vm.ID, store.VMStopped, "its GPU was given back")
	e.wantGPUGivenBack(vm.ID)

	cur := e.vm(vm.ID)
	end := now.Add(time.Hour)
	if _, err := e.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: store.VMStopped, StateReason: cur.StateReason, LeaseEnd: &end}); err != nil {
		t.Fatal(err)
	}
	start = e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMRunning, "")

	// A lease that ends while the VM waits for a GPU sends it back to
	// stopped.
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	for _, gpu := range []string{"0000:01:00.0", "0000:21:00.0", "0000:81:00.0", "0000:a1:00.0"} {
		if err := e.st.DrainGPU(ctx, &store.GPUDrain{Host: "test-host", GPUAddress: gpu, Reason: "maintenance", DrainedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	start = e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMQueued, "drained")
	mu.Lock()
	now = end.Add(time.Minute)
	mu.Unlock()
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpFailed, "the lease ended at Wed 1 May 2030 13:00 UTC")
	e.wantVM(vm.ID, store.VMStopped, "start failed: the lease ended at Wed 1 May 2030 13:00 UTC")
	e.wantGPUGivenBack(vm.ID)
}

// faultyBackends makes the next device create fail as a full GPU does.
type faultyBackends struct {
	Backends
	mu   sync.Mutex
	full int // creates left to fail
}

func (f *faultyBackends) Backend(name string) (backend.Backend, bool) {
	b, ok := f.Backends.Backend(name)
	if !ok {
		return nil, false
	}
	return &fullBackend{Backend: b, f: f}, true
}

type fullBackend struct {
	backend.Backend
	f *faultyBackends
}

func (b *fullBackend) Create(ctx context.Context, req backend.CreateRequest) (backend.Device, error) {
	b.f.mu.Lock()
	full := b.f.full > 0
	if full {
		b.f.full--
	}
	b.f.mu.Unlock()
	if full {
		return backend.Device{}, backend.Errorf(backend.CodeExhausted, req.GPU, "injected: the GPU has no room")
	}
	return b.Backend.Create(ctx, req)
}

// A start whose device the backend cannot make on a full GPU waits in the
// queue again, its start pending and its slot released; the next round
// starts it.
func TestStartQueuedAgainWhenTheGPUIsFull(t *testing.T) {
	e := newEnv(t, "h100x8")
	ctx := context.Background()
	fb := &faultyBackends{Backends: e.l}
	o := New(Config{
		Store: e.st, Backends: fb, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
	})
	vm, create := e.submit("ann", "h100-mig", "vm1")
	o.Drain(ctx)
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	fb.full = 1
	start := e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	if op := e.op(start.ID); op.Finished() {
		t.Fatalf("the start is %s, want it waiting", op.State)
	}
	e.wantVM(vm.ID, store.VMQueued, "injected: the GPU has no room")
	e.wantGPUGivenBack(vm.ID)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	e.checkRunning(vm, create, o, "type='pci'")
	e.wantDomainOnDevices(vm.ID)
}

// Actions wait for an unfinished create, and a delete cancels them.
func TestActionOrdering(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	o := e.orch(nil)
	vm, create := e.submit("ann", "l40s-seat", "vm1")
	stop := e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	e.checkRunning(vm, create, o, "type='pci'")
	e.wantOp(stop.ID, store.OpPending, "")
	o.Drain(ctx)
	e.wantOp(stop.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMStopped, "")

	start := e.action(e.vm(vm.ID), store.OpStart)
	del := e.deleteOp(e.vm(vm.ID))
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpFailed, "cancelled: the VM is being deleted")
	e.wantOp(del.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMDeleted, "")

	// The API refuses actions the state does not allow; one that slips
	// through (two requests at once) is done when the VM is already as
	// asked, and fails otherwise, changing nothing.
	w, _ := e.submit("bob", "nogpu", "w")
	o.Drain(ctx)
	for _, tc := range []struct{ kind, state, err string }{
		{store.OpStart, store.OpDone, ""},
		{store.OpExtend, store.OpFailed, `does not carry out "extend" operations`},
	} {
		op := e.action(e.vm(w.ID), tc.kind)
		o.Drain(ctx)
		e.wantOp(op.ID, tc.state, tc.err)
		e.wantVM(w.ID, store.VMRunning, "")
	}
}

// hv wraps libvirt's test driver with faults.
type faultyHV struct {
	*hypervisor.Conn
	mu                                sync.Mutex
	shutdownErr, startErr, replaceErr error
	forced                            bool
}

func (f *faultyHV) Shutdown(ctx context.Context, uuid string, timeout time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shutdownErr != nil {
		return false, f.shutdownErr
	}
	if f.forced {
		return false, f.Conn.Destroy(ctx, uuid)
	}
	return f.Conn.Shutdown(ctx, uuid, timeout)
}

func (f *faultyHV) Start(ctx context.Context, uuid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return f.startErr
	}
	return f.Conn.Start(ctx, uuid)
}

func (f *faultyHV) ReplaceHostdevs(ctx context.Context, uuid string, hs []domain.Hostdev) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replaceErr != nil {
		return f.replaceErr
	}
	return f.Conn.ReplaceHostdevs(ctx, uuid, hs)
}

func (e *env) orchWith(hv Hypervisor) *Orchestrator {
	return New(Config{
		Store: e.st, Backends: e.l, Hypervisor: hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
	})
}

// A shutdown that fails leaves the VM running and says why; a guest forced
// off is stopped, and the reason says so; a start that fails (the domain
// does not take its new devices, or does not start) leaves the VM stopped,
// saying why, with the GPU it had been given back; a stop or start of a VM
// whose domain vanished fails the VM and frees its GPU.
func TestActionFailures(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	f := &faultyHV{Conn: e.hv}
	o := e.orchWith(f)
	vm, _ := e.submit("ann", "l40s-seat", "vm1")
	o.Drain(ctx)

	f.shutdownErr = errors.New("libvirt said no")
	stop := e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	e.wantOp(stop.ID, store.OpFailed, "shut down the domain: libvirt said no")
	e.wantVM(vm.ID, store.VMRunning, "stop failed: shut down the domain: libvirt said no")

	f.shutdownErr, f.forced = nil, true
	stop = e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	e.wantOp(stop.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMStopped, "forced off: the guest did not power off within 1s")

	e.wantGPUGivenBack(vm.ID)

	f.replaceErr = errors.New("XML refused")
	start := e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpFailed, "give the domain its GPU devices: XML refused")
	e.wantVM(vm.ID, store.VMStopped, "start failed: give the domain its GPU devices: XML refused")
	e.wantGPUGivenBack(vm.ID)

	f.replaceErr, f.startErr = nil, errors.New("no memory")
	start = e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpFailed, "start the domain: no memory")
	e.wantVM(vm.ID, store.VMStopped, "start failed: start the domain: no memory")
	e.wantGPUGivenBack(vm.ID)

	// The domain vanishes under a stopped VM.
	f.startErr = nil
	if err := e.hv.DeleteVM(ctx, vm.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	start = e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpFailed, "domain vanished")
	e.wantVM(vm.ID, store.VMFailed, "domain vanished")
	if live, _ := e.st.ListLiveAllocations(ctx, ""); len(live) != 0 || len(e.devices()) != 0 {
		t.Errorf("a vanished VM kept its GPU: %+v %+v", live, e.devices())
	}

	// And under a running one being stopped.
	vm2, _ := e.submit("ann", "l40s-seat", "vm2")
	o.Drain(ctx)
	if err := e.hv.DeleteVM(ctx, vm2.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	stop = e.action(e.vm(vm2.ID), store.OpStop)
	o.Drain(ctx)
	e.wantOp(stop.ID, store.OpFailed, "domain vanished")
	e.wantVM(vm2.ID, store.VMFailed, "domain vanished")
}

// gpuvmd killed at each step of a stop, start and reboot (a start's also at
// the create's points it passes: the claim and the device made): a fresh
// orchestrator's Reconcile finishes the action, with nothing leaked. A
// stopped VM holds no GPU; a started one the device its domain attaches.
func TestActionCrashAtEachStep(t *testing.T) {
	type crashCase struct {
		kind, point     string
		from, wantState string
		wantDomain      hypervisor.State
	}
	var cases []crashCase
	for _, p := range StopHooks {
		cases = append(cases, crashCase{store.OpStop, p, store.VMRunning, store.VMStopped, hypervisor.StateShutoff})
	}
	for _, p := range slices.Concat(StartHooks[:1], []string{HookClaimed, HookDeviceCreated}, StartHooks[1:]) {
		cases = append(cases, crashCase{store.OpStart, p, store.VMStopped, store.VMRunning, hypervisor.StateRunning})
	}
	for _, p := range RebootHooks {
		cases = append(cases, crashCase{store.OpReboot, p, store.VMRunning, store.VMRunning, hypervisor.StateRunning})
	}
	for _, tc := range cases {
		t.Run(tc.kind+" at "+tc.point, func(t *testing.T) {
			e := newEnv(t, "h100x8")
			ctx := context.Background()
			o := e.orch(nil)
			vm, _ := e.submit("ann", "h100-mig", "vm1")
			o.Drain(ctx)
			if tc.from == store.VMStopped {
				e.action(e.vm(vm.ID), store.OpStop)
				o.Drain(ctx)
				e.wantVM(vm.ID, store.VMStopped, "")
			}
			op := e.action(e.vm(vm.ID), tc.kind)
			crashed := false
			e.orch(func(_, p string) error {
				if p == tc.point {
					crashed = true
					return errCrash
				}
				return nil
			}).Drain(ctx)
			if !crashed {
				t.Fatalf("never reached %q", tc.point)
			}
			if got := e.op(op.ID); got.Finished() {
				t.Fatalf("killed at %q, the operation is %s", tc.point, got.State)
			}
			rep, err := e.orch(nil).Reconcile(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Resumed) != 1 || len(rep.LeakedDevices)+len(rep.LeakedDomains)+len(rep.Vanished) != 0 {
				t.Errorf("report %+v", rep)
			}
			e.wantOp(op.ID, store.OpDone, "")
			e.wantVM(vm.ID, tc.wantState, "")
			if s := e.domainState(vm.ID); s != tc.wantDomain {
				t.Errorf("domain %s, want %s", s, tc.wantDomain)
			}
			if tc.wantState == store.VMStopped {
				e.wantGPUGivenBack(vm.ID)
				return
			}
			if devs := e.devices()[vm.ID]; len(devs) != 1 {
				t.Errorf("devices %+v", devs)
			}
			if live, _ := e.st.ListLiveAllocations(ctx, ""); len(live) != 1 {
				t.Errorf("live allocations %+v", live)
			}
			e.wantDomainOnDevices(vm.ID)
		})
	}
}

// useClock replaces the env's store with one whose clock is now.
func (e *env) useClock(now func() time.Time) {
	e.t.Helper()
	ctx := context.Background()
	st := storetest.New(e.t, storetest.WithClock(now), storetest.WithLogger(e.log))
	for _, u := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: u}); err != nil {
			e.t.Fatal(err)
		}
	}
	e.st = st
}

// A VM asked for ahead stays queued, saying when it starts, while VMs
// asked for later are placed; once the clock passes its time it is placed.
func TestStartAt(t *testing.T) {
	e := newEnv(t, "l40sx4")
	var mu sync.Mutex
	now := time.Date(2030, 5, 1, 9, 0, 0, 0, time.UTC)
	e.useClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	ctx := context.Background()
	o := e.orch(nil)
	at := now.Add(90 * time.Minute)
	later := &store.VM{Name: "later", Owner: "ann", Profile: "l40s-whole", Hours: 2, StartAt: &at}
	if _, err := e.st.CreateVM(ctx, later, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	soon, _ := e.submit("bob", "nogpu", "soon")
	o.Drain(ctx)
	got := e.wantVM(later.ID, store.VMQueued, "starts at 2030-05-01T10:30:00Z")
	if got.Phase != PhaseStartAt {
		t.Errorf("phase %q", got.Phase)
	}
	e.wantVM(soon.ID, store.VMRunning, "")
	version := got.Version
	o.Drain(ctx)
	if v := e.vm(later.ID).Version; v != version {
		t.Errorf("every round rewrites the waiting VM: version %d → %d", version, v)
	}

	mu.Lock()
	now = at.Add(time.Second)
	mu.Unlock()
	o.Drain(ctx)
	got = e.wantVM(later.ID, store.VMRunning, "")
	if want := now.Add(2 * time.Hour); got.LeaseEnd == nil || !got.LeaseEnd.Equal(want) {
		t.Errorf("lease end %v, want %v (the lease starts when the VM runs)", got.LeaseEnd, want)
	}
}

// A start the scheduling round refuses (the profile is gone) leaves the VM
// stopped, saying why, with its domain and disk: a create would fail the
// VM, but a stopped VM's disk is its owner's.
func TestStartRefusedKeepsTheDisk(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	o := e.orch(nil)
	vm, _ := e.submit("ann", "l40s-seat", "vm1")
	o.Drain(ctx)
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	cfg := *e.cfg
	cfg.Profiles = maps.Clone(e.cfg.Profiles)
	delete(cfg.Profiles, "l40s-seat")
	e.cfg = &cfg
	start := e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpFailed, `profile "l40s-seat" no longer exists`)
	e.wantVM(vm.ID, store.VMStopped, `start failed: profile "l40s-seat" no longer exists`)
	e.wantGPUGivenBack(vm.ID)
}

// fleetOf is a fleet whose leader this node is.
type fleetOf struct{}

func (fleetOf) IsLeader() bool { return true }
func (fleetOf) Notify(string)  {}

// A VM queued by a start asks the scheduler as of when its start was asked
// for, for what is left of its lease; in a fleet it starts only on the node
// that holds its domain and disk.
func TestRestartRequest(t *testing.T) {
	now := time.Date(2030, 5, 1, 9, 0, 0, 0, time.UTC)
	end := now.Add(90 * time.Minute)
	created := now.Add(-48 * time.Hour)
	asked := now.Add(-time.Minute)
	vm := &store.VM{ID: "v", Host: "node-a", Hours: 8, CreatedAt: created, LeaseEnd: &end}
	for _, tc := range []struct {
		name      string
		q         queued
		fleet     Fleet
		host      string
		submitted time.Time
		lease     time.Duration
		elsewhere string
	}{
		{"create", queued{vm, &store.Operation{Kind: store.OpCreate, CreatedAt: asked}}, fleetOf{}, "node-b", created, 8 * time.Hour, ""},
		{"start", queued{vm, &store.Operation{Kind: store.OpStart, CreatedAt: asked}}, nil, "node-b", asked, 90 * time.Minute, ""},
		{"start in a fleet, its node", queued{vm, &store.Operation{Kind: store.OpStart, CreatedAt: asked}}, fleetOf{}, "node-a", asked, 90 * time.Minute, ""},
		{"start in a fleet, another node", queued{vm, &store.Operation{Kind: store.OpStart, CreatedAt: asked}}, fleetOf{}, "node-b", asked, 90 * time.Minute,
			"its disk is on node-a: it starts only on a GPU there (the scheduler chose node-b)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := requestOf(&config.Config{}, tc.q.vm, nil)
			restartRequest(&r, tc.q, now)
			if !r.Submitted.Equal(tc.submitted) || r.Lease != tc.lease {
				t.Errorf("submitted %v, lease %v; want %v, %v", r.Submitted, r.Lease, tc.submitted, tc.lease)
			}
			o := New(Config{Fleet: tc.fleet, Host: "node-a"})
			if got := o.life.elsewhere(tc.q, tc.host); got != tc.elsewhere {
				t.Errorf("elsewhere %q, want %q", got, tc.elsewhere)
			}
		})
	}
}
