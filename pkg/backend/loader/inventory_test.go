package loader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// noLeaks checks, once the test's loader is closed, that it left no
// goroutine behind (subscriptions included). Call it before h.start.
func noLeaks(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
}

func deviceIDs(inv backend.Inventory) []string {
	var ids []string
	for _, d := range inv.Devices {
		ids = append(ids, d.ID)
	}
	return ids
}

// inventories reads the loader's inventories, failing the test on any error.
func inventories(t *testing.T, l *Loader, names ...string) map[string]backend.Inventory {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	invs, errs := l.Inventories(ctx, names)
	if len(errs) > 0 {
		t.Fatalf("Inventories: %v", errors.Join(errs...))
	}
	return invs
}

// A backend of API v1.1 pushes its inventory: Inventories answers from
// what it pushed, even while the plugin cannot answer, and a Create or
// Remove that returned is in the next read. A v1 backend is asked.
func TestInventoriesPushed(t *testing.T) {
	noLeaks(t)
	h := newHarness(t)
	h.install(t, "vgpu", "watch", 0o755)
	h.install(t, "mig", "normal", 0o755)
	l, err := h.start(t, Config{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "vgpu's inventory never pushed", func() bool { return l.InventoryStatus("vgpu").Fresh })
	if st := l.InventoryStatus("mig"); st.Pushed || st.Fresh || st.Generation != 0 {
		t.Errorf("mig, a v1 backend: %+v, want it polled", st)
	}
	if st := l.InventoryStatus("nosuch"); st != (InventoryStatus{}) {
		t.Errorf("status of a backend not running: %+v", st)
	}

	// A stopped process answers no call: what Inventories returns of it
	// was pushed before.
	pid := h.pids("vgpu")[0]
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	invs, errs := l.Inventories(ctx, []string{"vgpu"})
	cancel()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 || !slices.Equal(invs["vgpu"].Notes, []string{"api v1.1", fmt.Sprint("pid ", pid)}) {
		t.Fatalf("Inventories of a stopped plugin: %+v, %v; want the pushed inventory of pid %d", invs, errs, pid)
	}

	for _, name := range []string{"vgpu", "mig"} {
		b, _ := l.Backend(name)
		for i, want := range [][]string{{"dev-a"}, {"dev-a", "dev-b"}} {
			if _, err := b.Create(t.Context(), backend.CreateRequest{GPU: "0000:41:00.0", DeviceUUID: want[i]}); err != nil {
				t.Fatal(err)
			}
			if got := deviceIDs(inventories(t, l, name)[name]); !slices.Equal(got, want) {
				t.Errorf("%s: devices after Create of %s: %v, want %v", name, want[i], got, want)
			}
		}
		if err := b.Remove(t.Context(), backend.RemoveRequest{ID: "dev-a"}); err != nil {
			t.Fatal(err)
		}
		if got := deviceIDs(inventories(t, l, name)[name]); !slices.Equal(got, []string{"dev-b"}) {
			t.Errorf("%s: devices after Remove: %v, want [dev-b]", name, got)
		}
	}
	// The caller's copy is its own.
	invs = inventories(t, l, "vgpu", "mig", "nosuch")
	invs["vgpu"].Devices[0].ID = "changed"
	if got := deviceIDs(inventories(t, l, "vgpu")["vgpu"]); !slices.Equal(got, []string{"dev-b"}) {
		t.Errorf("a caller changed the cache: %v", got)
	}
	if len(invs) != 2 {
		t.Errorf("Inventories of vgpu, mig and a backend not running: %d inventories", len(invs))
	}
}

// A killed backend's inventory is stale until its new process has pushed
// its own; meanwhile Inventories, past InventoryWait, asks the backend,
// which fails as a backend that is down does.
func TestInventoryAcrossRestart(t *testing.T) {
	noLeaks(t)
	h := newHarness(t)
	h.install(t, "vgpu", "watch", 0o755)
	l, err := h.start(t, Config{MinBackoff: time.Second, MaxBackoff: 2 * time.Second, InventoryWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "inventory never pushed", func() bool { return l.InventoryStatus("vgpu").Fresh })
	before := l.InventoryStatus("vgpu")
	first := h.pids("vgpu")[0]
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "inventory of a killed backend not stale", func() bool { return !l.InventoryStatus("vgpu").Fresh })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	invs, errs := l.Inventories(ctx, []string{"vgpu"})
	cancel()
	switch {
	case len(errs) == 1 && errors.Is(errs[0], backend.ErrUnavailable):
	case len(errs) == 0 && invs["vgpu"].Notes[1] != fmt.Sprint("pid ", first): // the restart won the race
	default:
		t.Errorf("Inventories while the backend is down: %+v, %v; want CodeUnavailable", invs, errs)
	}

	eventually(t, 30*time.Second, "restarted backend's inventory never pushed", func() bool { return l.InventoryStatus("vgpu").Fresh })
	after := l.InventoryStatus("vgpu")
	if after.Generation <= before.Generation || !after.At.After(before.At) {
		t.Errorf("status before the kill %+v, after the restart %+v: want a later generation", before, after)
	}
	pids := h.pids("vgpu")
	if got := inventories(t, l, "vgpu")["vgpu"].Notes; len(pids) != 2 || !slices.Equal(got, []string{"api v1.1", fmt.Sprint("pid ", pids[1])}) {
		t.Errorf("inventory after the restart: %v; plugin pids %v", got, pids)
	}
}

// counted is a backend whose change count a test sets.
type counted struct {
	backend.Mock
	n uint64
}

func (c *counted) WatchInventory(ctx context.Context, _ backend.WatchOptions, _ func(backend.Inventory, uint64)) error {
	<-ctx.Done()
	return ctx.Err()
}

func (c *counted) InventoryChanges() uint64 { return c.n }

// Between a Create or Remove and the push that covers it, the held
// inventory shows the call's result; a push read before the call does not
// undo it; a failed call makes the inventory stale until a push covers it.
func TestInventoryPatches(t *testing.T) {
	c := &counted{}
	inst := &instance{impl: c, watched: true}
	h := &handle{name: "vgpu", inst: inst}
	const addr = "0000:41:00.0"
	pushed := backend.Inventory{GPUs: []backend.GPU{{Address: addr, Mode: gpu.ModeIdle,
		VGPUTypes: []backend.VGPUType{{Name: "L40S-12Q", MaxInstances: 4, Available: 4}, {Name: "L40S-24Q", MaxInstances: 2, Available: 2}}}}}
	view := func() (backend.Inventory, bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		inv, ok := h.fresh()
		if !ok {
			return backend.Inventory{}, false
		}
		return inv.Clone(), true
	}
	h.push(inst, pushed.Clone(), 0)

	c.n = 1
	h.applied(inst, patch{create: &backend.Device{ID: "dev-a", Kind: gpu.KindVGPU, GPU: addr, Type: "L40S-12Q"}}, nil)
	h.push(inst, pushed.Clone(), 0) // read before the Create finished
	inv, ok := view()
	if !ok || !slices.Equal(deviceIDs(inv), []string{"dev-a"}) || inv.GPUs[0].VGPUTypes[0].Available != 3 || inv.GPUs[0].Mode != gpu.ModeVGPU {
		t.Fatalf("after Create: fresh %v, %+v; want dev-a listed, 3 L40S-12Q left, mode vgpu", ok, inv)
	}

	c.n = 2
	h.applied(inst, patch{remove: "dev-a"}, nil)
	if inv, ok := view(); !ok || len(inv.Devices) != 0 || inv.GPUs[0].VGPUTypes[0].Available != 4 {
		t.Fatalf("after Remove: fresh %v, %+v; want no device, 4 L40S-12Q left", ok, inv)
	}

	c.n = 3
	h.applied(inst, patch{create: &backend.Device{ID: "dev-b", Kind: gpu.KindVGPU, GPU: addr, Type: "L40S-12Q"}}, errors.New("the driver refused"))
	if _, ok := view(); ok {
		t.Fatal("fresh after a failed Create, before a push covers it")
	}
	covering := pushed.Clone()
	covering.Notes = []string{"read after change 3"}
	h.push(inst, covering, 3)
	if inv, ok := view(); !ok || len(inv.Devices) != 0 || !slices.Equal(inv.Notes, covering.Notes) || len(inst.patches) != 0 {
		t.Fatalf("after the covering push: fresh %v, %+v, patches %d; want the push alone", ok, inv, len(inst.patches))
	}
}

func TestPatchMIG(t *testing.T) {
	const addr = "0000:41:00.0"
	inv := backend.Inventory{GPUs: []backend.GPU{{Address: addr, Mode: gpu.ModeMIG,
		MIGProfiles: []backend.MIGProfile{
			{Name: "1g.10gb", Size: 1, FreeStarts: []int{0, 1, 2, 3, 4, 5, 6}},
			{Name: "3g.40gb", Size: 4, FreeStarts: []int{0, 4}},
			{Name: "7g.80gb", Size: 8, FreeStarts: []int{0}},
		},
		VGPUTypes: []backend.VGPUType{{Name: "A100D-3-40C", MIGProfile: "3g.40gb", Available: 2}}}}}
	patch{create: &backend.Device{ID: "mig-1", Kind: gpu.KindMIG, GPU: addr, Profile: "3g.40gb", Placement: 4}}.apply(&inv)
	g := inv.GPUs[0]
	if !slices.Equal(g.MIGProfiles[0].FreeStarts, []int{0, 1, 2, 3}) || !slices.Equal(g.MIGProfiles[1].FreeStarts, []int{0}) ||
		len(g.MIGProfiles[2].FreeStarts) != 0 || g.VGPUTypes[0].Available != 0 || !slices.Equal(deviceIDs(inv), []string{"mig-1"}) {
		t.Errorf("after a 3g.40gb at 4: %+v", inv)
	}
}

// A push read while a MIG-backed vGPU was being made lists the backend's
// intent, keyed by the device UUID; the device made (keyed by its VF)
// replaces it, so that the VM is not shown two devices until the next push.
func TestPatchReplacesIntent(t *testing.T) {
	const addr = "0000:41:00.0"
	intent := backend.Device{ID: "6b0f5a4e-0000-5000-8000-000000000001", Kind: gpu.KindMIG, GPU: addr, VMUUID: "vm-1",
		Profile: "3g.40gb", Placement: 4, GPUInstance: -1, ComputeInstance: -1, Managed: true}
	other := backend.Device{ID: "0000:41:00.5", Kind: gpu.KindMIG, GPU: addr, VMUUID: "vm-2", Profile: "3g.40gb", Managed: true}
	inv := backend.Inventory{GPUs: []backend.GPU{{Address: addr, Mode: gpu.ModeMIG}}, Devices: []backend.Device{intent, other}}
	made := backend.Device{ID: "0000:41:00.4", Kind: gpu.KindMIG, GPU: addr, VMUUID: "vm-1", Profile: "3g.40gb", Placement: 4, Managed: true}
	patch{create: &made, intent: intent.ID}.apply(&inv)
	if !slices.Equal(deviceIDs(inv), []string{"0000:41:00.5", "0000:41:00.4"}) {
		t.Errorf("devices after the create: %v", deviceIDs(inv))
	}
}

func TestPatchPassthroughRemove(t *testing.T) {
	const addr, vm = "0000:c1:00.0", "5d1c9c52-8f9e-4a59-9a42-6e5b1d7c2f10"
	inv := backend.Inventory{
		GPUs:    []backend.GPU{{Address: addr, Mode: gpu.ModePassthrough, Unavailable: "passed through to VM " + vm}, {Address: "0000:c2:00.0", Unavailable: "no IOMMU group"}},
		Devices: []backend.Device{{ID: addr, Kind: gpu.KindPassthrough, GPU: addr, VMUUID: vm}},
	}
	patch{remove: addr}.apply(&inv)
	if len(inv.Devices) != 0 || inv.GPUs[0].Unavailable != "" || inv.GPUs[1].Unavailable != "no IOMMU group" {
		t.Errorf("after the Remove: %+v", inv)
	}
	patch{remove: "not-listed"}.apply(&inv) // nothing to give back
	if inv.GPUs[1].Unavailable != "no IOMMU group" {
		t.Errorf("a Remove of a device not listed changed %+v", inv)
	}
}
