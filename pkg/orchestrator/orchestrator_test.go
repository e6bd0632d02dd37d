package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backend/loader"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
	"github.com/gpuvm/gpuvm/test/testbin"
)

var pluginDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, cleanup, err := testbin.Plugins()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cleanup()
		pluginDir = dir
		return m.Run()
	}())
}

const testProfiles = `
profile "l40s-seat" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
  lease {
    default = "2h"
    max     = "8h"
  }
}
profile "l40s-whole" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind  = "passthrough"
    model = "L40S"
  }
}
profile "h100-mig" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "3g.40gb"
  }
}
profile "h100-vgpu" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind = "vgpu"
    type = "H100-4C"
  }
}
profile "nogpu" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
}
`

// syncBuf collects logs from many goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// env is one test's world: a database, the real backends on a simulated
// host of their own, and libvirt's test driver (shared by the process: each
// env has its own domain prefix).
type env struct {
	t                testing.TB
	st               *store.Store
	l                *loader.Loader
	hv               *hypervisor.Conn
	cfg              *config.Config
	stateDir, preset string
	prefix           string
	logs             *syncBuf
	log              *slog.Logger
}

func newEnv(t testing.TB, preset string) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, preset: preset, stateDir: t.TempDir(), logs: &syncBuf{}}
	e.prefix = "t" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") + "-"
	e.log = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", e.logs.String())
		}
	})
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(testProfiles)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e.cfg = cfg
	st := storetest.New(t, storetest.WithLogger(e.log))
	e.st = st
	for _, u := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: u}); err != nil {
			t.Fatal(err)
		}
	}
	e.l = loader.New(loader.Config{Dir: pluginDir, Logger: e.log,
		Backend: backend.Config{Simulate: preset, StateDir: e.stateDir, NVML: backend.NVMLAuto}})
	t.Cleanup(e.l.Close)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.l.Start(sctx); err != nil {
		t.Fatal(err)
	}
	hv, err := hypervisor.Open(ctx, "test:///default", e.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hv.Close() })
	e.hv = hv
	return e
}

func (e *env) orch(hook func(vmID, point string) error) *Orchestrator {
	return New(Config{
		Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
	}, WithHook(hook))
}

func (e *env) submit(owner, prof, name string) (*store.VM, *store.Operation) {
	e.t.Helper()
	vm := &store.VM{Name: name, Owner: owner, Profile: prof, Hours: 2}
	op, err := e.st.CreateVM(context.Background(), vm, store.CreateVMOptions{RequestedBy: owner})
	if err != nil {
		e.t.Fatal(err)
	}
	return vm, op
}

func (e *env) deleteOp(vm *store.VM) *store.Operation {
	e.t.Helper()
	op := &store.Operation{VMID: vm.ID, Kind: store.OpDelete, RequestedBy: vm.Owner}
	if err := e.st.CreateOperation(context.Background(), op); err != nil {
		e.t.Fatal(err)
	}
	return op
}

func (e *env) snapshot() []byte {
	e.t.Helper()
	h, err := sim.Open(sim.StateDir(e.stateDir, e.preset), e.preset)
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := h.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// domains lists this env's domains by name.
// wantAsBefore checks that the simulated host is as its snapshot before,
// and that no domain and no live allocation is left.
func (e *env) wantAsBefore(before []byte) {
	e.t.Helper()
	if after := e.snapshot(); !bytes.Equal(before, after) {
		e.t.Errorf("the simulated host differs:\nbefore %s\nafter  %s", before, after)
	}
	if d := e.domains(); len(d) != 0 {
		e.t.Errorf("domains left: %v", d)
	}
	if live, _ := e.st.ListLiveAllocations(context.Background(), ""); len(live) != 0 {
		e.t.Errorf("live allocations left: %+v", live)
	}
}

func (e *env) domains() map[string]hypervisor.Info {
	e.t.Helper()
	all, err := e.hv.List(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]hypervisor.Info{}
	for _, d := range all {
		if strings.HasPrefix(d.Name, e.prefix) {
			out[d.Name] = d
		}
	}
	return out
}

// devices lists the managed devices the backends report, by VM.
func (e *env) devices() map[string][]backend.Device {
	e.t.Helper()
	out := map[string][]backend.Device{}
	for _, n := range e.l.Names() {
		b, _ := e.l.Backend(n)
		inv, err := b.Inventory(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		for _, d := range inv.Devices {
			if d.Managed {
				out[d.VMUUID] = append(out[d.VMUUID], d)
			}
		}
	}
	return out
}

func (e *env) vm(id string) *store.VM {
	e.t.Helper()
	vm, err := e.st.GetVM(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return vm
}

func (e *env) op(id string) *store.Operation {
	e.t.Helper()
	op, err := e.st.GetOperation(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return op
}

// checkRunning asserts a VM is running with one recorded device that the
// backend has and its domain's XML attaches.
func (e *env) checkRunning(vm *store.VM, createOp *store.Operation, o *Orchestrator, wantXML string) {
	e.t.Helper()
	ctx := context.Background()
	got := e.vm(vm.ID)
	if got.State != store.VMRunning || got.Phase != "ready" || got.LeaseEnd == nil {
		e.t.Fatalf("vm %s: state %s phase %q reason %q lease %v", vm.Name, got.State, got.Phase, got.StateReason, got.LeaseEnd)
	}
	if op := e.op(createOp.ID); op.State != store.OpDone {
		e.t.Errorf("create operation %s: %s %q", op.ID, op.State, op.Error)
	}
	allocs, err := liveAllocations(ctx, o.life.st, vm.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	devs := e.devices()[vm.ID]
	if len(allocs) != 1 || allocs[0].State != store.AllocCreated || len(devs) != 1 || devs[0].ID != allocs[0].DeviceID {
		e.t.Fatalf("allocations %+v, devices %+v", allocs, devs)
	}
	xml, err := e.hv.XML(ctx, vm.ID, false)
	if err != nil {
		e.t.Fatal(err)
	}
	if !strings.Contains(xml, "<hostdev") || !strings.Contains(xml, wantXML) {
		e.t.Errorf("domain XML lacks the hostdev %q:\n%s", wantXML, xml)
	}
	hd := devs[0].Hostdev
	for _, want := range append([]string{hd.UUID}, hd.Addresses...) {
		if want == "" {
			continue
		}
		// PCI addresses appear split into domain/bus/slot/function.
		if hd.Type == backend.HostdevPCI {
			var dom, bus, slot, fn int
			fmt.Sscanf(want, "%x:%x:%x.%x", &dom, &bus, &slot, &fn)
			want = fmt.Sprintf("bus='0x%02x' slot='0x%02x' function='0x%x'", bus, slot, fn)
		}
		if !strings.Contains(xml, want) {
			e.t.Errorf("domain XML lacks %q of the device:\n%s", want, xml)
		}
	}
}

func TestCreateAndDeleteEachKind(t *testing.T) {
	tests := []struct {
		preset, profile, xml string
	}{
		{"l40sx4", "l40s-seat", "type='pci'"},
		{"l40sx4", "l40s-whole", "managed='yes'"},
		{"h100x8", "h100-mig", "type='pci'"},
		{"h100x8", "h100-vgpu", "type='pci'"},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			e := newEnv(t, tc.preset)
			ctx := context.Background()
			before := e.snapshot()
			o := e.orch(nil)
			vm, op := e.submit("ann", tc.profile, "vm1")
			o.Drain(ctx)
			e.checkRunning(vm, op, o, tc.xml)
			if after := e.snapshot(); bytes.Equal(before, after) {
				t.Error("the simulated host did not change")
			}
			if len(e.domains()) != 1 {
				t.Errorf("domains %v", e.domains())
			}
			del := e.deleteOp(e.vm(vm.ID))
			o.Drain(ctx)
			if got := e.vm(vm.ID); got.State != store.VMDeleted {
				t.Fatalf("after delete: %s %q", got.State, got.StateReason)
			}
			if op := e.op(del.ID); op.State != store.OpDone {
				t.Errorf("delete operation: %s %q", op.State, op.Error)
			}
			e.wantAsBefore(before)
		})
	}
}

func TestNoGPUAndQueueReason(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	o := e.orch(nil)
	vm, _ := e.submit("ann", "nogpu", "plain")
	// l40sx4 has one GPU for passthrough: the second waits.
	w1, _ := e.submit("ann", "l40s-whole", "w1")
	w2, _ := e.submit("bob", "l40s-whole", "w2")
	o.Drain(ctx)
	if got := e.vm(vm.ID); got.State != store.VMRunning {
		t.Errorf("no-GPU VM: %s %q", got.State, got.StateReason)
	}
	if got := e.vm(w1.ID); got.State != store.VMRunning {
		t.Errorf("first whole-GPU VM: %s %q", got.State, got.StateReason)
	}
	got := e.vm(w2.ID)
	if got.State != store.VMQueued || got.StateReason != "no GPU has room for a whole L40S now" {
		t.Errorf("second whole-GPU VM: %s %q", got.State, got.StateReason)
	}
	// Deleting the first lets the second run.
	e.deleteOp(e.vm(w1.ID))
	o.Drain(ctx)
	o.Drain(ctx)
	if got := e.vm(w2.ID); got.State != store.VMRunning {
		t.Errorf("second whole-GPU VM after the first left: %s %q", got.State, got.StateReason)
	}
	// Deleting a queued VM needs nothing from the host.
	w3, w3op := e.submit("bob", "l40s-whole", "w3")
	o.Drain(ctx)
	e.deleteOp(e.vm(w3.ID))
	o.Drain(ctx)
	if got := e.vm(w3.ID); got.State != store.VMDeleted {
		t.Errorf("queued VM after delete: %s", got.State)
	}
	if op := e.op(w3op.ID); op.State != store.OpFailed || !strings.Contains(op.Error, "cancelled") {
		t.Errorf("create of a VM deleted while queued: %s %q", op.State, op.Error)
	}
}

// 50 VMs asked for at once, 8 slots (3g.40gb: two on each of four MIG GPUs):
// 8 run, 42 wait, no slot is given twice and SQLite never says it is locked.
func TestConcurrentCreates(t *testing.T) {
	e := newEnv(t, "h100x8")
	ctx, cancel := context.WithCancel(context.Background())
	o := e.orch(nil)
	done := make(chan struct{})
	go func() { o.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	var wg sync.WaitGroup
	ids := make([]string, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := []string{"ann", "bob"}[i%2]
			vm := &store.VM{Name: fmt.Sprintf("vm%d", i), Owner: owner, Profile: "h100-mig", Hours: 1}
			if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{}); err != nil {
				t.Error(err)
				return
			}
			ids[i] = vm.ID
			o.Wake()
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	var states map[string]int
	for {
		states = map[string]int{}
		for _, id := range ids {
			states[e.vm(id).State]++
		}
		if states[store.VMRunning] == 8 && states[store.VMQueued] == 42 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("states %v", states)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	live, err := e.st.ListLiveAllocations(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range live {
		k := a.GPUAddress + " " + a.Slot
		if seen[k] {
			t.Errorf("slot %s given twice", k)
		}
		seen[k] = true
	}
	if len(live) != 8 {
		t.Errorf("%d live allocations, want 8", len(live))
	}
	devs := 0
	for vm, ds := range e.devices() {
		if vm == "" {
			t.Errorf("devices of no VM: %+v", ds)
		}
		devs += len(ds)
	}
	if devs != 8 || len(e.domains()) != 8 {
		t.Errorf("%d devices and %d domains, want 8 of each", devs, len(e.domains()))
	}
	for _, id := range ids {
		if vm := e.vm(id); vm.State == store.VMQueued && vm.StateReason != "no GPU has room for MIG 3g.40gb now" {
			t.Errorf("queued VM reason %q", vm.StateReason)
		}
	}
	if strings.Contains(e.logs.String(), "database is locked") {
		t.Error("SQLite said the database is locked")
	}
}

var errCrash = errors.New("killed")

// gpuvmd killed at each step of a create, then of a delete: a fresh
// orchestrator's Reconcile finishes the work, with nothing leaked and no
// slot given twice.
func TestCrashAtEachStep(t *testing.T) {
	for _, point := range CreateHooks {
		t.Run("create at "+point, func(t *testing.T) {
			e := newEnv(t, "l40sx4")
			ctx := context.Background()
			before := e.snapshot()
			crashed := false
			a := e.orch(func(_, p string) error {
				if p == point {
					crashed = true
					return errCrash
				}
				return nil
			})
			vm, op := e.submit("ann", "l40s-seat", "vm1")
			a.Drain(ctx)
			if !crashed {
				t.Fatalf("never reached %q", point)
			}
			if got := e.vm(vm.ID); point != HookRunning && got.State == store.VMRunning {
				t.Fatalf("running although killed at %q", point)
			}
			b := e.orch(nil)
			rep, err := b.Reconcile(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Resumed) != 1 || len(rep.LeakedDevices)+len(rep.LeakedDomains)+len(rep.Vanished) != 0 {
				t.Errorf("report %+v", rep)
			}
			e.checkRunning(vm, op, b, "type='pci'")
			// And the delete, killed once its domain is gone.
			e.deleteOp(e.vm(vm.ID))
			c := e.orch(func(_, p string) error {
				if p == HookDomainDeleted {
					return errCrash
				}
				return nil
			})
			c.Drain(ctx)
			if got := e.vm(vm.ID); got.State != store.VMDeleting {
				t.Fatalf("killed delete: %s", got.State)
			}
			if _, err := e.orch(nil).Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if got := e.vm(vm.ID); got.State != store.VMDeleted {
				t.Fatalf("after reconcile: %s", got.State)
			}
			e.wantAsBefore(before)
		})
	}
	for _, point := range DeleteHooks {
		t.Run("delete at "+point, func(t *testing.T) {
			e := newEnv(t, "h100x8")
			ctx := context.Background()
			before := e.snapshot()
			o := e.orch(nil)
			vm, _ := e.submit("ann", "h100-mig", "vm1")
			o.Drain(ctx)
			e.deleteOp(e.vm(vm.ID))
			e.orch(func(_, p string) error {
				if p == point {
					return errCrash
				}
				return nil
			}).Drain(ctx)
			if _, err := e.orch(nil).Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if got := e.vm(vm.ID); got.State != store.VMDeleted {
				t.Fatalf("after reconcile: %s", got.State)
			}
			e.wantAsBefore(before)
		})
	}
}

// The reconciler marks a VM whose domain vanished as failed and frees its
// GPU, removes devices and domains of VMs of this installation that are not
// live, and leaves a device whose VM the database does not know as an
// orphan until an admin deletes it.
func TestReconcileVanishedAndLeaks(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	before := e.snapshot()
	o := e.orch(nil)
	vm, _ := e.submit("ann", "l40s-seat", "vm1")
	leak, _ := e.submit("ann", "l40s-seat", "vm2")
	o.Drain(ctx)
	if err := e.hv.DeleteVM(ctx, vm.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	// vm2's row disappears from the live set as if it were deleted, but
	// its device and domain stay.
	l := e.vm(leak.ID)
	if _, err := e.st.UpdateVMState(ctx, l.ID, l.Version, store.VMUpdate{State: store.VMFailed, StateReason: "test"}); err != nil {
		t.Fatal(err)
	}
	// And a device made for a VM the database does not know.
	b, _ := e.l.Backend("vgpu")
	stranger := uuid.NewString()
	if _, err := b.Create(ctx, backend.CreateRequest{GPU: "0000:21:00.0", Type: "L40S-12Q", VMUUID: stranger}); err != nil {
		t.Fatal(err)
	}
	rep, err := o.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Vanished) != 1 || rep.Vanished[0] != vm.ID || len(rep.LeakedDevices) != 1 || len(rep.LeakedDomains) != 1 || rep.Orphans != 1 {
		t.Errorf("report %+v", rep)
	}
	if got := e.vm(vm.ID); got.State != store.VMFailed || !strings.Contains(got.StateReason, "vanished") || !strings.Contains(got.StateReason, "disk is kept") {
		t.Errorf("vanished VM: %s %q", got.State, got.StateReason)
	}
	orphans, _ := o.Orphans()
	if len(orphans) != 1 || orphans[0].Kind != api.OrphanDevice || orphans[0].VMID != stranger || orphans[0].Adoptable {
		t.Fatalf("orphans %+v", orphans)
	}
	// A second pass leaves it too; then an admin deletes it.
	if rep, err := o.Reconcile(ctx); err != nil || rep.Orphans != 1 || len(rep.LeakedDevices) != 0 {
		t.Fatalf("second reconcile: %+v, %v", rep, err)
	}
	if _, err := o.DeleteOrphan(ctx, orphans[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := o.DeleteOrphan(ctx, orphans[0].ID); !errors.Is(err, ErrNoOrphan) {
		t.Errorf("deleting it again: %v, want ErrNoOrphan", err)
	}
	// vm2's slot is still recorded as live (its row says failed, the test
	// did not release it): release, then the host is as before.
	if _, err := e.st.ReleaseAllocations(ctx, leak.ID); err != nil {
		t.Fatal(err)
	}
	e.wantAsBefore(before)
}

// With a simulated server and a real hypervisor the device is made on the
// simulator but the domain gets no hostdev, and its title says why.
func TestDetachSimulatedGPUs(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	o := New(Config{
		Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second, DetachSimulatedGPUs: true,
	})
	vm, _ := e.submit("ann", "l40s-seat", "vm1")
	o.Drain(ctx)
	got := e.vm(vm.ID)
	if got.State != store.VMRunning {
		t.Fatalf("state %s %q", got.State, got.StateReason)
	}
	if devs := e.devices(); len(devs) == 0 {
		t.Error("no device was made on the simulated host")
	}
	xml, err := e.hv.XML(ctx, vm.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(xml, "<hostdev") || !strings.Contains(xml, "[simulated GPU, not attached]") {
		t.Errorf("domain XML:\n%s", xml)
	}
	e.deleteOp(got)
	o.Drain(ctx)
	if devs := e.devices(); len(devs) != 0 {
		t.Errorf("devices left: %v", devs)
	}
}

// A create killed inside CreateVM, after the disk overlay and seed were made
// and before the domain that lists them was defined, leaves them in the
// pool: deleting the VM removes them too.
func TestDeleteRemovesVolumesOfAnUnfinishedCreate(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	cfg := *e.cfg
	cfg.Server.Libvirt.StoragePool = "default-pool" // the test driver's pool
	e.cfg = &cfg
	o := e.orch(nil)
	vm, _ := e.submit("ann", "nogpu", "half")
	name := o.DomainName(vm.ID)
	for _, vol := range []string{hypervisor.OverlayName(name), hypervisor.SeedName(name)} {
		// The test driver takes the format and size as given: no base file is read.
		if _, err := e.hv.CreateOverlay(ctx, hypervisor.Overlay{Pool: "default-pool", Name: vol, Base: "/base.img", BaseFormat: "raw", SizeBytes: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	e.deleteOp(vm)
	o.Drain(ctx)
	if got := e.vm(vm.ID); got.State != store.VMDeleted {
		t.Fatalf("VM is %s (%s)", got.State, got.StateReason)
	}
	for _, vol := range []string{hypervisor.OverlayName(name), hypervisor.SeedName(name)} {
		if ok, err := e.hv.VolumeExists(ctx, "default-pool", vol); err != nil || ok {
			t.Errorf("volume %s left: %v %v", vol, ok, err)
		}
	}
}
