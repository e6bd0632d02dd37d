package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/profile"
	"github.com/gpuvm/gpuvm/pkg/store"
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

// Stop keeps the GPU (allocation and device) and shuts the domain off;
// start boots it again on the same device; reboot leaves it running. Each
// records its result as a vm.action event, and a delete of the stopped VM
// gives the host back as it was.
func TestStopStartReboot(t *testing.T) {
	for _, tc := range []struct{ preset, profile, xml string }{
		{"l40sx4", "l40s-seat", "type='pci'"},
		{"h100x8", "h100-mig", "type='pci'"},
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
			allocsBefore, _ := o.liveAllocations(ctx, vm.ID)
			lease := e.vm(vm.ID).LeaseEnd

			stop := e.action(e.vm(vm.ID), store.OpStop)
			o.Drain(ctx)
			e.wantOp(stop.ID, store.OpDone, "")
			got := e.wantVM(vm.ID, store.VMStopped, "stopped by ann")
			if got.LeaseEnd == nil || !got.LeaseEnd.Equal(*lease) {
				t.Errorf("the lease changed with the stop: %v, was %v", got.LeaseEnd, lease)
			}
			if s := e.domainState(vm.ID); s != hypervisor.StateShutoff {
				t.Errorf("domain of the stopped VM: %s", s)
			}
			allocs, _ := o.liveAllocations(ctx, vm.ID)
			devs := e.devices()[vm.ID]
			if len(allocs) != 1 || allocs[0].ID != allocsBefore[0].ID || allocs[0].State != store.AllocCreated ||
				len(devs) != 1 || devs[0].ID != allocs[0].DeviceID {
				t.Fatalf("a stopped VM keeps its GPU: allocations %+v, devices %+v", allocs, devs)
			}

			// Reboot needs a running VM.
			reboot := e.action(got, store.OpReboot)
			o.Drain(ctx)
			e.wantOp(reboot.ID, store.OpFailed, "the VM is stopped, not running")

			start := e.action(e.vm(vm.ID), store.OpStart)
			o.Drain(ctx)
			e.wantOp(start.ID, store.OpDone, "")
			e.checkRunning(vm, create, o, tc.xml)
			if s := e.domainState(vm.ID); s != hypervisor.StateRunning {
				t.Errorf("domain of the started VM: %s", s)
			}
			if allocs, _ := o.liveAllocations(ctx, vm.ID); allocs[0].ID != allocsBefore[0].ID || allocs[0].DeviceID != allocsBefore[0].DeviceID {
				t.Errorf("start changed the allocation: %+v, was %+v", allocs, allocsBefore)
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
			if !bytes.Equal(before, e.snapshot()) {
				t.Error("the simulated host differs after the delete")
			}
			if d := e.domains(); len(d) != 0 {
				t.Errorf("domains left: %v", d)
			}
		})
	}
}

// A host reboot removes the devices of stopped VMs: start makes them again,
// the same devices (same UUID, same MIG placement, same GPU).
func TestStartRemakesLostDevice(t *testing.T) {
	for _, tc := range []struct{ preset, profile, xml string }{
		{"l40sx4", "l40s-seat", "type='pci'"},
		{"h100x8", "h100-mig", "type='pci'"},
		{"h100x8", "h100-vgpu", "type='pci'"},
		{"l40sx4", "l40s-whole", "managed='yes'"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			e := newEnv(t, tc.preset)
			ctx := context.Background()
			o := e.orch(nil)
			vm, create := e.submit("ann", tc.profile, "vm1")
			o.Drain(ctx)
			e.action(e.vm(vm.ID), store.OpStop)
			o.Drain(ctx)
			e.wantVM(vm.ID, store.VMStopped, "")
			allocs, _ := o.liveAllocations(ctx, vm.ID)
			b, _ := e.l.Backend(allocs[0].Backend)
			if err := b.Remove(ctx, backend.RemoveRequest{ID: allocs[0].DeviceID, GPU: allocs[0].GPUAddress}); err != nil {
				t.Fatal(err)
			}
			if devs := e.devices()[vm.ID]; len(devs) != 0 {
				t.Fatalf("device still there: %+v", devs)
			}
			start := e.action(e.vm(vm.ID), store.OpStart)
			o.Drain(ctx)
			e.wantOp(start.ID, store.OpDone, "")
			e.checkRunning(vm, create, o, tc.xml)
			if !strings.Contains(e.logs.String(), "making it again") {
				t.Error("the log does not say the device was made again")
			}
		})
	}
}

// On a GPU whose vGPUs sit on VFs the backend picks the VF: when two stopped
// VMs lost theirs and the second starts first, it would get the first's VF.
// Its start fails without leaving a device behind, and once the first has
// started the second starts on its own VF.
func TestStartRefusesAnotherDevice(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	o := e.orch(nil)
	vm1, c1 := e.submit("ann", "l40s-seat", "vm1")
	vm2, c2 := e.submit("ann", "l40s-seat", "vm2")
	o.Drain(ctx)
	var recorded []store.Allocation
	for _, vm := range []*store.VM{vm1, vm2} {
		e.action(e.vm(vm.ID), store.OpStop)
		o.Drain(ctx)
		e.wantVM(vm.ID, store.VMStopped, "")
		allocs, _ := o.liveAllocations(ctx, vm.ID)
		recorded = append(recorded, allocs[0])
		b, _ := e.l.Backend(allocs[0].Backend)
		if err := b.Remove(ctx, backend.RemoveRequest{ID: allocs[0].DeviceID, GPU: allocs[0].GPUAddress}); err != nil {
			t.Fatal(err)
		}
	}
	if recorded[0].GPUAddress != recorded[1].GPUAddress || recorded[0].DeviceID == recorded[1].DeviceID {
		t.Fatalf("want two VFs of one GPU: %+v", recorded)
	}
	start2 := e.action(e.vm(vm2.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start2.ID, store.OpFailed, "could not be made as it was: the backend made "+recorded[0].DeviceID+" instead of "+recorded[1].DeviceID)
	e.wantVM(vm2.ID, store.VMStopped, "start failed")
	if devs := e.devices(); len(devs) != 0 {
		t.Fatalf("the refused device was left: %+v", devs)
	}
	e.action(e.vm(vm1.ID), store.OpStart)
	o.Drain(ctx)
	e.checkRunning(vm1, c1, o, "type='pci'")
	if allocs, _ := o.liveAllocations(ctx, vm1.ID); allocs[0].DeviceID != recorded[0].DeviceID {
		t.Errorf("vm1 runs on %s, not its own %s", allocs[0].DeviceID, recorded[0].DeviceID)
	}
	start2 = e.action(e.vm(vm2.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start2.ID, store.OpDone, "")
	e.checkRunning(vm2, c2, o, "type='pci'")
	if got := e.vm(vm2.ID); got.StateReason != "" {
		t.Errorf("the reason of the failed start stayed: %q", got.StateReason)
	}
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
	mu                    sync.Mutex
	shutdownErr, startErr error
	forced                bool
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

func (e *env) orchWith(hv Hypervisor) *Orchestrator {
	return New(Config{
		Store: e.st, Backends: e.l, Hypervisor: hv, Profiles: func() *profile.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
	})
}

// A shutdown that fails leaves the VM running and says why; a guest forced
// off is stopped, and the reason says so; a start that fails leaves the VM
// stopped; a stop or start of a VM whose domain vanished fails the VM and
// frees its GPU.
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

	f.startErr = errors.New("no memory")
	start := e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpFailed, "start the domain: no memory")
	e.wantVM(vm.ID, store.VMStopped, "start failed: start the domain: no memory")
	if len(e.devices()[vm.ID]) != 1 {
		t.Error("a failed start lost the device")
	}

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

// gpuvmd killed at each step of a stop, start and reboot: a fresh
// orchestrator's Reconcile finishes the action.
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
	for _, p := range StartHooks {
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
			if devs := e.devices()[vm.ID]; len(devs) != 1 {
				t.Errorf("devices %+v", devs)
			}
		})
	}
}

// useClock replaces the env's store with one whose clock is now.
func (e *env) useClock(now func() time.Time) {
	e.t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DSN: filepath.Join(e.t.TempDir(), "clock.db"), Logger: e.log, Now: now})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
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
