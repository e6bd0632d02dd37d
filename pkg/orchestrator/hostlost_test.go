package orchestrator

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backend/loader"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// reboot is a host reboot as gpuvm sees one: the backends stop, every
// domain is shut off (libvirt keeps their definitions), and the simulated
// server comes back with the same GPUs and none of the devices (its state
// directory gone: a fresh simulated host). The backends' ledgers, in the
// state directory like /var/lib/gpuvm, stay.
func (e *env) reboot() {
	e.t.Helper()
	ctx := context.Background()
	e.l.Close()
	for _, d := range e.domains() {
		if d.Active() {
			if err := e.hv.Destroy(ctx, d.UUID); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	if err := os.RemoveAll(sim.StateDir(e.stateDir, e.preset)); err != nil {
		e.t.Fatal(err)
	}
	e.l = loader.New(loader.Config{Dir: pluginDir, Logger: e.log,
		Backend: backend.Config{Simulate: e.preset, StateDir: e.stateDir, NVML: backend.NVMLAuto}})
	e.t.Cleanup(e.l.Close)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.l.Start(sctx); err != nil {
		e.t.Fatal(err)
	}
}

// lostDevices are the devices the backends report absent, by VM.
func (e *env) lostDevices() map[string][]backend.Device {
	out := map[string][]backend.Device{}
	for vm, ds := range e.devices() {
		for _, d := range ds {
			if d.Absent != "" {
				out[vm] = append(out[vm], d)
			}
		}
	}
	return out
}

// After a host reboot the running VMs' devices are made again as they were
// (same ID, same hostdev, same MIG placement) and their domains started.
func TestHostRebootRecreatesDevices(t *testing.T) {
	tests := []struct {
		preset   string
		profiles []string
	}{
		{"l40sx4", []string{"l40s-seat", "l40s-seat"}},           // vendor-VFIO vGPUs on VFs
		{"h100x8", []string{"h100-mig", "h100-mig", "h100-mig"}}, // MIG instances at their placements
		{"h100x8", []string{"h100-vgpu"}},
	}
	for _, tc := range tests {
		t.Run(tc.preset+"-"+tc.profiles[0], func(t *testing.T) {
			e := newEnv(t, tc.preset)
			ctx := context.Background()
			o := e.orch(nil)
			var vms []*store.VM
			for i, p := range tc.profiles {
				vm, _ := e.submit("ann", p, "vm"+string(rune('a'+i)))
				vms = append(vms, vm)
			}
			o.Drain(ctx)
			before := map[string]store.Allocation{}
			for _, vm := range vms {
				if got := e.vm(vm.ID); got.State != store.VMRunning {
					t.Fatalf("%s: %s %q", vm.Name, got.State, got.StateReason)
				}
				allocs, err := liveAllocations(ctx, e.st, vm.ID)
				if err != nil || len(allocs) != 1 {
					t.Fatalf("%s: allocations %+v, %v", vm.Name, allocs, err)
				}
				before[vm.ID] = allocs[0]
			}
			devsBefore := e.devices()

			e.reboot()
			if lost := e.lostDevices(); len(lost) != len(vms) {
				t.Fatalf("after the reboot the backends report lost devices of %d VMs, want %d: %+v", len(lost), len(vms), lost)
			}
			o = e.orch(nil) // gpuvmd starts again
			rep, err := o.Reconcile(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Restarted) != len(vms) || len(rep.Requeued) != 0 || len(rep.LeakedDevices) != 0 || len(rep.Vanished) != 0 {
				t.Fatalf("report %+v", rep)
			}
			if lost := e.lostDevices(); len(lost) != 0 {
				t.Errorf("still lost: %+v", lost)
			}
			devs := e.devices()
			for _, vm := range vms {
				got := e.vm(vm.ID)
				if got.State != store.VMRunning || got.StateReason != RestartedReason {
					t.Errorf("%s: %s %q", vm.Name, got.State, got.StateReason)
				}
				allocs, _ := liveAllocations(ctx, e.st, vm.ID)
				if len(allocs) != 1 || allocs[0].ID != before[vm.ID].ID || allocs[0].DeviceID != before[vm.ID].DeviceID || allocs[0].Hostdev != before[vm.ID].Hostdev {
					t.Errorf("%s: allocations %+v, before %+v", vm.Name, allocs, before[vm.ID])
				}
				if len(devs[vm.ID]) != 1 || len(devsBefore[vm.ID]) != 1 {
					t.Fatalf("%s: devices %+v (before %+v)", vm.Name, devs[vm.ID], devsBefore[vm.ID])
				}
				d, was := devs[vm.ID][0], devsBefore[vm.ID][0]
				if d.ID != was.ID || d.GPU != was.GPU || d.Placement != was.Placement || d.Profile != was.Profile || d.Hostdev.UUID != was.Hostdev.UUID ||
					strings.Join(d.Hostdev.Addresses, ",") != strings.Join(was.Hostdev.Addresses, ",") {
					t.Errorf("%s: device made again as %+v, was %+v", vm.Name, d, was)
				}
				info, err := e.hv.Lookup(ctx, vm.ID)
				if err != nil || !info.Active() {
					t.Errorf("%s: domain %+v, %v; want it running", vm.Name, info, err)
				}
			}
			// A second reconcile finds nothing more to do.
			if rep, err := o.Reconcile(ctx); err != nil || len(rep.Restarted)+len(rep.Requeued)+len(rep.LeakedDevices) != 0 {
				t.Errorf("second reconcile: %+v, %v", rep, err)
			}
		})
	}
}

// A lost MIG device whose placement was taken before gpuvmd came back is not
// made elsewhere, nor half made: the VM gives its GPU back and waits in the
// queue with the reason, a start pending, and the next round starts it on
// a free placement.
func TestHostRebootPlacementTaken(t *testing.T) {
	e := newEnv(t, "h100x8")
	ctx := context.Background()
	o := e.orch(nil)
	vm, _ := e.submit("ann", "h100-mig", "vma")
	o.Drain(ctx)
	allocs, err := liveAllocations(ctx, e.st, vm.ID)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocations %+v, %v", allocs, err)
	}
	a := allocs[0]

	e.reboot()
	// Someone takes the placement first.
	mig, _ := e.l.Backend("mig")
	stranger := uuid.NewString()
	if _, err := mig.Create(ctx, backend.CreateRequest{GPU: a.GPUAddress, VMUUID: stranger, Profile: a.Profile, Placement: a.PlacementStart}); err != nil {
		t.Fatal(err)
	}
	o = e.orch(nil)
	rep, err := o.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Requeued) != 1 || rep.Requeued[0] != vm.ID || len(rep.Restarted) != 0 {
		t.Fatalf("report %+v", rep)
	}
	got := e.vm(vm.ID)
	if got.State != store.VMQueued || !strings.Contains(got.StateReason, "could not be made again") || !strings.Contains(got.StateReason, a.DeviceID) {
		t.Fatalf("vm: %s %q", got.State, got.StateReason)
	}
	if live, _ := liveAllocations(ctx, e.st, vm.ID); len(live) != 0 {
		t.Errorf("live allocations left: %+v", live)
	}
	if devs := e.devices()[vm.ID]; len(devs) != 0 {
		t.Errorf("devices of the VM left: %+v", devs)
	}
	if devs := e.devices()[stranger]; len(devs) != 1 || devs[0].Absent != "" {
		t.Errorf("the device on the placement was touched: %+v", devs)
	}
	if info, err := e.hv.Lookup(ctx, vm.ID); err != nil || info.Active() {
		t.Errorf("domain %+v, %v: want it kept, off", info, err)
	}
	ops, err := e.st.ListUnfinishedOperations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pending := 0
	for _, op := range ops {
		if op.VMID == vm.ID && op.Kind == store.OpStart && op.RequestedBy == ByHostRestart {
			pending++
		}
	}
	if pending != 1 {
		t.Fatalf("pending start operations %+v", ops)
	}

	// The next round places it again and starts it.
	o.Drain(ctx)
	got = e.vm(vm.ID)
	if got.State != store.VMRunning {
		t.Fatalf("after the next round: %s %q", got.State, got.StateReason)
	}
	now, _ := liveAllocations(ctx, e.st, vm.ID)
	if len(now) != 1 || now[0].GPUAddress == a.GPUAddress && now[0].PlacementStart == a.PlacementStart {
		t.Errorf("placed on %+v; the old placement is taken", now)
	}
	if info, err := e.hv.Lookup(ctx, vm.ID); err != nil || !info.Active() {
		t.Errorf("domain %+v, %v: want it running", info, err)
	}
}
