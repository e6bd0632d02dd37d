package plugins_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backend/loader"
)

// startPushing starts the real backends on a simulated preset, each
// re-reading the host every resync, and checks once the loader is closed
// that it left no goroutine behind.
func startPushing(t *testing.T, preset string, resync time.Duration) *rig {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // after l.Close
	return startLoader(t, preset, t.TempDir(), loader.Config{MinBackoff: time.Second, MaxBackoff: 2 * time.Second, InventoryResync: resync})
}

// eventually polls f until it returns true, failing the test after d.
func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !f(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
	}
}

// cached is backend name's inventory as the loader holds it.
func (r *rig) cached(t *testing.T, name string) backend.Inventory {
	t.Helper()
	invs, errs := r.l.Inventories(ctx(t), []string{name})
	if len(errs) > 0 {
		t.Fatalf("Inventories: %v", errs)
	}
	return invs[name]
}

// asked is backend name's answer to Inventory.
func (r *rig) asked(t *testing.T, name string) backend.Inventory {
	t.Helper()
	inv, err := r.backend(t, name).Inventory(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// pushedAsAsked waits until backend name's held inventory is fresh and the
// same as its answer to Inventory.
func (r *rig) pushedAsAsked(t *testing.T, name, when string) {
	t.Helper()
	var got, want backend.Inventory
	eventually(t, 30*time.Second, fmt.Sprintf("%s: %s, the pushed inventory is not the backend's: pushed %+v, asked %+v", name, when, got, want), func() bool {
		if !r.l.InventoryStatus(name).Fresh {
			return false
		}
		got, want = r.cached(t, name), r.asked(t, name)
		return reflect.DeepEqual(got, want)
	})
}

func hasDevice(inv backend.Inventory, id, vm string) bool {
	return slices.ContainsFunc(inv.Devices, func(d backend.Device) bool { return d.ID == id && d.VMUUID == vm && d.Managed })
}

const pushVM = "5d1c9c52-8f9e-4a59-9a42-6e5b1d7c2f10"

// Every real backend pushes its full inventory; a Create is in the held
// inventory when it returns, and so is a Remove; the pushes that follow
// are the backend's own reads.
func TestInventoryPushed(t *testing.T) {
	r := startPushing(t, "l40sx4", 0)
	for _, name := range backend.Names {
		r.pushedAsAsked(t, name, "at start")
		if st := r.l.InventoryStatus(name); !st.Pushed || st.Generation == 0 {
			t.Errorf("%s: %+v, want a pushed inventory", name, st)
		}
	}
	b := r.backend(t, backend.NameVGPU)
	before := r.l.InventoryStatus(backend.NameVGPU).Generation
	d, err := b.Create(ctx(t), backend.CreateRequest{GPU: "0000:01:00.0", VMUUID: pushVM, Type: "L40S-12Q"})
	if err != nil {
		t.Fatal(err)
	}
	if inv := r.cached(t, backend.NameVGPU); !hasDevice(inv, d.ID, pushVM) {
		t.Fatalf("device %s not in the inventory read after its Create returned: %+v", d.ID, inv.Devices)
	}
	r.pushedAsAsked(t, backend.NameVGPU, "after a Create")
	if after := r.l.InventoryStatus(backend.NameVGPU).Generation; after <= before {
		t.Errorf("no push after the Create: generation %d, then %d", before, after)
	}
	if err := b.Remove(ctx(t), backend.RemoveRequest{ID: d.ID, GPU: d.GPU}); err != nil {
		t.Fatal(err)
	}
	if inv := r.cached(t, backend.NameVGPU); slices.ContainsFunc(inv.Devices, func(x backend.Device) bool { return x.ID == d.ID }) {
		t.Fatalf("device %s still in the inventory read after its Remove returned", d.ID)
	}
	r.pushedAsAsked(t, backend.NameVGPU, "after a Remove")
}

// A backend killed is restarted, and its new process pushes the full
// inventory again, a device made before the kill included; in between the
// held inventory is stale.
func TestInventoryPushedAfterRestart(t *testing.T) {
	r := startPushing(t, "l40sx4", 0)
	r.pushedAsAsked(t, backend.NameVGPU, "at start")
	d, err := r.backend(t, backend.NameVGPU).Create(ctx(t), backend.CreateRequest{GPU: "0000:01:00.0", VMUUID: pushVM, Type: "L40S-12Q"})
	if err != nil {
		t.Fatal(err)
	}
	before := r.l.InventoryStatus(backend.NameVGPU)
	bin := filepath.Join(pluginDir, backend.BinaryPrefix+backend.NameVGPU)
	out, _ := exec.Command("pgrep", "-f", "^"+bin+"$").Output()
	var pid int
	if _, err := fmt.Sscan(string(out), &pid); err != nil {
		t.Fatalf("find the plugin process: %q", out)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the inventory of a killed backend is not marked stale", func() bool {
		return !r.l.InventoryStatus(backend.NameVGPU).Fresh
	})
	r.pushedAsAsked(t, backend.NameVGPU, "after the restart")
	after := r.l.InventoryStatus(backend.NameVGPU)
	if after.Generation <= before.Generation {
		t.Errorf("generation %d before the kill, %d after the restart", before.Generation, after.Generation)
	}
	if inv := r.cached(t, backend.NameVGPU); !hasDevice(inv, d.ID, pushVM) {
		t.Errorf("the restarted backend's inventory lacks device %s made before the kill: %+v", d.ID, inv.Devices)
	}
}

// A change an admin makes on the host by hand (a GPU bound to vfio-pci)
// reaches the held inventory with the backends' next re-read.
func TestInventoryPushedAfterHostChange(t *testing.T) {
	r := startPushing(t, "a40x2", 100*time.Millisecond)
	const gpu = "0000:c1:00.0"
	driverOf := func() string {
		for _, g := range r.cached(t, backend.NameVGPU).GPUs {
			if g.Address == gpu {
				return g.Driver
			}
		}
		return "missing"
	}
	r.pushedAsAsked(t, backend.NameVGPU, "at start")
	if d := driverOf(); d != "nvidia" {
		t.Fatalf("GPU %s on driver %q at start", gpu, d)
	}
	for _, w := range [][2]string{{"bus/pci/devices/" + gpu + "/driver_override", "vfio-pci"}, {"bus/pci/drivers/nvidia/unbind", gpu}, {"bus/pci/drivers_probe", gpu}} {
		if err := r.host.WriteFile(w[0], []byte(w[1])); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "the GPU bound by hand is not on vfio-pci in the held inventory", func() bool {
		return r.l.InventoryStatus(backend.NameVGPU).Fresh && driverOf() == "vfio-pci"
	})
}

// A GPU one backend takes (passthrough binds it to vfio-pci) reaches the
// other backends' held inventories without waiting for their re-read of
// the host (made an hour here).
func TestInventoryPushedAfterOtherBackend(t *testing.T) {
	r := startPushing(t, "a40x2", time.Hour)
	const gpu = "0000:c1:00.0"
	driverOf := func() string {
		for _, g := range r.cached(t, backend.NameVGPU).GPUs {
			if g.Address == gpu {
				return g.Driver
			}
		}
		return "missing"
	}
	r.pushedAsAsked(t, backend.NameVGPU, "at start")
	if d := driverOf(); d != "nvidia" {
		t.Fatalf("GPU %s on driver %q at start", gpu, d)
	}
	d, err := r.backend(t, backend.NamePassthrough).Create(ctx(t), backend.CreateRequest{GPU: gpu, VMUUID: pushVM})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the vgpu backend's held inventory does not show the GPU passed through", func() bool {
		return r.l.InventoryStatus(backend.NameVGPU).Fresh && driverOf() == "vfio-pci"
	})
	if err := r.backend(t, backend.NamePassthrough).Remove(ctx(t), backend.RemoveRequest{ID: d.ID, GPU: gpu}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the vgpu backend's held inventory does not show the GPU given back", func() bool {
		return r.l.InventoryStatus(backend.NameVGPU).Fresh && driverOf() == "nvidia"
	})
}
