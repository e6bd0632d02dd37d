package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
	"github.com/gpuvm/gpuvm/plugins/internal/kit"
)

const (
	vmA = "5b9a3bd2-6f1e-4c1a-9d55-0a4c2b7e9f01"
	vmB = "0f4e2a71-3c8d-4e9b-a1f2-7d6c5b4a3e92"
)

// newBackend returns a backend whose log goes nowhere.
func newBackend() *Backend {
	b := New()
	b.log = slog.New(slog.DiscardHandler)
	return b
}

// simBackend configures a backend on a fresh simulated server and opens the
// same server for the test to watch and steer.
func simBackend(t *testing.T, preset string) (*Backend, *sim.Host) {
	t.Helper()
	dir := t.TempDir()
	b := newBackend()
	if err := b.Configure(context.Background(), backend.Config{Simulate: preset, StateDir: dir}); err != nil {
		t.Fatalf("Configure(%s): %v", preset, err)
	}
	h, err := sim.Open(sim.StateDir(dir, preset), preset)
	if err != nil {
		t.Fatal(err)
	}
	return b, h
}

func snapshot(t *testing.T, h *sim.Host) []byte {
	t.Helper()
	s, err := h.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sameHost(t *testing.T, h *sim.Host, before []byte, when string) {
	t.Helper()
	if after := snapshot(t, h); !bytes.Equal(before, after) {
		t.Errorf("%s: the simulated host changed:\nbefore: %s\nafter:  %s", when, before, after)
	}
}

func inventory(t *testing.T, b *Backend) backend.Inventory {
	t.Helper()
	inv, err := b.Inventory(context.Background())
	if err != nil {
		t.Fatalf("Inventory: %v", err)
	}
	return inv
}

func gpuOf(t *testing.T, inv backend.Inventory, addr string) backend.GPU {
	t.Helper()
	for _, g := range inv.GPUs {
		if g.Address == addr {
			return g
		}
	}
	t.Fatalf("inventory lists no GPU %s", addr)
	return backend.GPU{}
}

func ledgerEntries(t *testing.T, b *Backend) []kit.Entry {
	t.Helper()
	env, err := b.state.Get()
	if err != nil {
		t.Fatal(err)
	}
	all, err := env.Ledger.All()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// wantCode fails unless err is a *backend.Error of code.
func wantCode(t *testing.T, what string, err error, code backend.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, code)
	}
	var be *backend.Error
	if !errors.As(err, &be) {
		t.Fatalf("%s: error %v (%T) is not a *backend.Error", what, err, err)
	}
	if got := backend.CodeOf(err); got != code {
		t.Fatalf("%s: code %s (%v), want %s", what, got, err, code)
	}
}

func driverIn(t *testing.T, fsys host.SysFS, addr string) string {
	t.Helper()
	d, err := driverOf(fsys, addr)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestInfo(t *testing.T) {
	t.Parallel()
	info, err := newBackend().Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != backend.NamePassthrough || info.Version != Version || !slices.Equal(info.APIVersions, backend.APIVersions) || info.Description == "" {
		t.Errorf("Info = %+v", info)
	}
}

func TestBeforeConfigure(t *testing.T) {
	t.Parallel()
	b := newBackend()
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Inventory": func() error { _, err := b.Inventory(ctx); return err },
		"Create": func() error {
			_, err := b.Create(ctx, backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA})
			return err
		},
		"Remove": func() error { return b.Remove(ctx, backend.RemoveRequest{ID: "0000:c1:00.0"}) },
		"Health": func() error { _, err := b.Health(ctx); return err },
	} {
		t.Run(name, func(t *testing.T) { wantCode(t, name, call(), backend.CodeUnavailable) })
	}
}

func TestConfigureErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  backend.Config
	}{
		{"no state dir", backend.Config{Simulate: "mixed"}},
		{"unknown preset", backend.Config{Simulate: "nosuch", StateDir: t.TempDir()}},
		{"missing sysfs root", backend.Config{SysFSRoot: filepath.Join(t.TempDir(), "nosuch"), StateDir: t.TempDir()}},
		{"unknown API version", backend.Config{APIVersion: "v99", Simulate: "mixed", StateDir: t.TempDir()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBackend()
			wantCode(t, "Configure", b.Configure(context.Background(), tc.cfg), backend.CodeInvalid)
			_, err := b.Inventory(context.Background())
			wantCode(t, "Inventory after a failed Configure", err, backend.CodeUnavailable)
		})
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	b, _ := simBackend(t, "a40x2")
	h, err := b.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !h.OK || !strings.Contains(h.Detail, "simulated GPU server (preset a40x2)") {
		t.Errorf("Health = %+v", h)
	}
}

// want describes a GPU of a preset; unavailable is a part of the expected
// reason, "" for a GPU that can be passed through.
type want struct {
	addr, model string
	numa        int
	mode        gpu.Mode
	iface       string
	unavailable string
	group       []string
}

const (
	vfs16 = "16 SR-IOV VFs are enabled for vGPU; disable them (sriov-manage -d"
	vfs32 = "32 SR-IOV VFs are enabled for vGPU; disable them (sriov-manage -d"
)

var presetGPUs = map[string][]want{
	"a100x4": {
		{"0000:17:00.0", "A100 PCIe 40GB", 0, gpu.ModeMIG, "mdev", vfs16, nil},
		{"0000:31:00.0", "A100 PCIe 40GB", 0, gpu.ModeMIG, "mdev", vfs16, nil},
		{"0000:b1:00.0", "A100 PCIe 40GB", 1, gpu.ModeVGPU, "mdev", vfs16, nil},
		{"0000:ca:00.0", "A100 PCIe 40GB", 1, gpu.ModeIdle, "passthrough-only", "", nil},
	},
	"a40x2": {
		{"0000:41:00.0", "A40", 0, gpu.ModeVGPU, "mdev", vfs32, nil},
		{"0000:c1:00.0", "A40", 1, gpu.ModeIdle, "passthrough-only", "", nil},
	},
	"l40sx4": {
		{"0000:01:00.0", "L40S", 0, gpu.ModeVGPU, "vendor-vfio", vfs32, nil},
		{"0000:21:00.0", "L40S", 0, gpu.ModeVGPU, "vendor-vfio", vfs32, nil},
		{"0000:81:00.0", "L40S", 1, gpu.ModeVGPU, "vendor-vfio", vfs32, nil},
		{"0000:a1:00.0", "L40S", 1, gpu.ModeIdle, "passthrough-only", "", nil},
	},
	"h100x8": {
		{"0000:18:00.0", "H100 PCIe 80GB", 0, gpu.ModeMIG, "vendor-vfio", vfs32, nil},
		{"0000:2a:00.0", "H100 PCIe 80GB", 0, gpu.ModeMIG, "vendor-vfio", vfs32, nil},
		{"0000:3a:00.0", "H100 PCIe 80GB", 0, gpu.ModeMIG, "vendor-vfio", vfs32, nil},
		{"0000:5d:00.0", "H100 PCIe 80GB", 0, gpu.ModeMIG, "vendor-vfio", vfs32, nil},
		{"0000:9a:00.0", "H100 PCIe 80GB", 1, gpu.ModeVGPU, "vendor-vfio", vfs32, nil},
		{"0000:ab:00.0", "H100 PCIe 80GB", 1, gpu.ModeVGPU, "vendor-vfio", vfs32, nil},
		{"0000:ba:00.0", "H100 PCIe 80GB", 1, gpu.ModeVGPU, "vendor-vfio", vfs32, nil},
		{"0000:db:00.0", "H100 PCIe 80GB", 1, gpu.ModeIdle, "passthrough-only", "", nil},
	},
	"mixed": {
		{"0000:17:00.0", "A100 PCIe 40GB", 0, gpu.ModeMIG, "mdev", vfs16, nil},
		{"0000:41:00.0", "A40", 0, gpu.ModeVGPU, "mdev", vfs32, nil},
		{"0000:81:00.0", "L40S", 1, gpu.ModeVGPU, "vendor-vfio", vfs32, nil},
		{"0000:9a:00.0", "H100 PCIe 80GB", 1, gpu.ModeMIG, "vendor-vfio", vfs32, nil},
		{"0000:c1:00.0", "GeForce RTX 4090", 1, gpu.ModeIdle, "passthrough-only", "", []string{"0000:c1:00.1"}},
	},
}

func TestPresetsCovered(t *testing.T) {
	t.Parallel()
	for _, p := range sim.Presets() {
		if _, ok := presetGPUs[p]; !ok {
			t.Errorf("preset %s has no expectations in presetGPUs", p)
		}
	}
}

func TestInventoryPresets(t *testing.T) {
	t.Parallel()
	for _, preset := range sim.Presets() {
		t.Run(preset, func(t *testing.T) {
			t.Parallel()
			b, h := simBackend(t, preset)
			before := snapshot(t, h)
			inv := inventory(t, b)
			sameHost(t, h, before, "Inventory")
			if inv.Backend != backend.NamePassthrough || !inv.Simulated || !strings.Contains(inv.Host, preset) {
				t.Errorf("inventory header: backend %q, simulated %v, host %q", inv.Backend, inv.Simulated, inv.Host)
			}
			if len(inv.Devices) != 0 {
				t.Errorf("fresh host lists devices: %+v", inv.Devices)
			}
			var addrs []string
			for _, g := range inv.GPUs {
				addrs = append(addrs, g.Address)
			}
			var wantAddrs []string
			for _, w := range presetGPUs[preset] {
				wantAddrs = append(wantAddrs, w.addr)
			}
			if !slices.Equal(addrs, wantAddrs) {
				t.Fatalf("GPUs %v, want %v", addrs, wantAddrs)
			}
			for _, w := range presetGPUs[preset] {
				g := gpuOf(t, inv, w.addr)
				if w.unavailable == "" && g.Unavailable != "" {
					t.Errorf("%s: unavailable (%s), want available", w.addr, g.Unavailable)
				}
				if w.unavailable != "" && !strings.Contains(g.Unavailable, w.unavailable) {
					t.Errorf("%s: Unavailable %q, want it to say %q", w.addr, g.Unavailable, w.unavailable)
				}
				if g.Model != w.model || g.NUMANode != w.numa || g.Mode != w.mode || g.Interface != w.iface {
					t.Errorf("%s: model %q numa %d mode %s interface %s, want %q %d %s %s", w.addr, g.Model, g.NUMANode, g.Mode, g.Interface, w.model, w.numa, w.mode, w.iface)
				}
				if g.Driver != "nvidia" || g.IOMMUGroup == "" || !strings.HasPrefix(g.DeviceID, "10de:") || g.Memory == 0 {
					t.Errorf("%s: driver %q group %q device ID %q memory %d", w.addr, g.Driver, g.IOMMUGroup, g.DeviceID, g.Memory)
				}
				if !slices.Equal(g.GroupDevices, w.group) {
					t.Errorf("%s: group devices %v, want %v", w.addr, g.GroupDevices, w.group)
				}
				if g.MIGEnabled != (w.mode == gpu.ModeMIG) {
					t.Errorf("%s: MIGEnabled %v in mode %s", w.addr, g.MIGEnabled, w.mode)
				}
			}
		})
	}
}

// TestCreateRemoveEveryAvailableGPU passes every available GPU of every
// preset through and back, and wants the host byte-identical afterwards.
func TestCreateRemoveEveryAvailableGPU(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, preset := range sim.Presets() {
		for _, w := range presetGPUs[preset] {
			if w.unavailable != "" {
				continue
			}
			t.Run(preset+"/"+w.addr, func(t *testing.T) {
				t.Parallel()
				b, h := simBackend(t, preset)
				before := snapshot(t, h)
				dev, err := b.Create(ctx, backend.CreateRequest{GPU: w.addr, VMUUID: vmA})
				if err != nil {
					t.Fatalf("Create: %v", err)
				}
				fns := append([]string{w.addr}, w.group...)
				wantDev := backend.Device{ID: w.addr, Kind: gpu.KindPassthrough, GPU: w.addr, VMUUID: vmA, Managed: true,
					Hostdev: backend.Hostdev{Type: backend.HostdevPCI, Addresses: fns, Managed: true}}
				if fmt.Sprint(dev) != fmt.Sprint(wantDev) {
					t.Errorf("Create = %+v\nwant     %+v", dev, wantDev)
				}
				if bytes.Equal(before, snapshot(t, h)) {
					t.Error("Create did not change the simulated host")
				}
				for _, f := range fns {
					if d := driverIn(t, h, f); d != "vfio-pci" {
						t.Errorf("after Create %s is bound to %q, want vfio-pci", f, d)
					}
				}
				entries := ledgerEntries(t, b)
				if len(entries) != 1 || entries[0].State != kit.Created || len(entries[0].Functions) != len(fns) {
					t.Errorf("ledger after Create: %+v", entries)
				}
				inv := inventory(t, b)
				g := gpuOf(t, inv, w.addr)
				if g.Mode != gpu.ModePassthrough || g.Driver != "vfio-pci" || g.Unavailable != "passed through to VM "+vmA {
					t.Errorf("GPU after Create: mode %s driver %s unavailable %q", g.Mode, g.Driver, g.Unavailable)
				}
				if len(inv.Devices) != 1 || fmt.Sprint(inv.Devices[0]) != fmt.Sprint(wantDev) {
					t.Errorf("devices after Create: %+v", inv.Devices)
				}

				if err := b.Remove(ctx, backend.RemoveRequest{ID: w.addr}); err != nil {
					t.Fatalf("Remove: %v", err)
				}
				sameHost(t, h, before, "Create then Remove")
				if inv := inventory(t, b); len(inv.Devices) != 0 || gpuOf(t, inv, w.addr).Unavailable != "" {
					t.Errorf("after Remove: devices %+v, GPU %+v", inv.Devices, gpuOf(t, inv, w.addr))
				}
				if err := b.Remove(ctx, backend.RemoveRequest{ID: w.addr}); err != nil {
					t.Errorf("second Remove: %v", err)
				}
				if err := b.Remove(ctx, backend.RemoveRequest{GPU: w.addr}); err != nil {
					t.Errorf("Remove by GPU: %v", err)
				}
				sameHost(t, h, before, "Remove twice")
				if e := ledgerEntries(t, b); len(e) != 0 {
					t.Errorf("ledger after Remove: %+v", e)
				}
			})
		}
	}
}

func TestCreateUnavailableGPU(t *testing.T) {
	t.Parallel()
	for _, preset := range sim.Presets() {
		t.Run(preset, func(t *testing.T) {
			t.Parallel()
			b, h := simBackend(t, preset)
			before := snapshot(t, h)
			n := 0
			for _, w := range presetGPUs[preset] {
				if w.unavailable == "" {
					continue
				}
				n++
				_, err := b.Create(context.Background(), backend.CreateRequest{GPU: w.addr, VMUUID: vmA})
				wantCode(t, "Create on "+w.addr, err, backend.CodeConflict)
				if !strings.Contains(err.Error(), w.addr) || !strings.Contains(err.Error(), w.unavailable) {
					t.Errorf("Create on %s: %q, want it to name the GPU and say %q", w.addr, err, w.unavailable)
				}
			}
			if n == 0 {
				t.Skip("no unavailable GPU in this preset")
			}
			sameHost(t, h, before, "refused Creates")
			if e := ledgerEntries(t, b); len(e) != 0 {
				t.Errorf("ledger after refused Creates: %+v", e)
			}
		})
	}
}

func TestCreateRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  backend.CreateRequest
		code backend.Code
		says string
	}{
		{"path escape", backend.CreateRequest{GPU: "../../etc", VMUUID: vmA}, backend.CodeInvalid, "PCI address"},
		{"not hex", backend.CreateRequest{GPU: "zz", VMUUID: vmA}, backend.CodeInvalid, "PCI address"},
		{"empty", backend.CreateRequest{VMUUID: vmA}, backend.CodeInvalid, "PCI address"},
		{"trailing path", backend.CreateRequest{GPU: "0000:c1:00.0/../../x", VMUUID: vmA}, backend.CodeInvalid, "PCI address"},
		{"vGPU type", backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA, Type: "A40-8Q"}, backend.CodeInvalid, "no vGPU type"},
		{"MIG profile", backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA, Profile: "1g.10gb"}, backend.CodeInvalid, "no MIG profile"},
		{"placement", backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA, Placement: 2}, backend.CodeInvalid, "no MIG profile"},
		{"device UUID", backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA, DeviceUUID: vmB}, backend.CodeInvalid, "no device UUID"},
		{"audio function", backend.CreateRequest{GPU: "0000:c1:00.1", VMUUID: vmA}, backend.CodeInvalid, "not an NVIDIA GPU (class 0x040300"},
		{"SR-IOV VF", backend.CreateRequest{GPU: "0000:17:00.4", VMUUID: vmA}, backend.CodeInvalid, "virtual function of 0000:17:00.0"},
		{"absent", backend.CreateRequest{GPU: "0000:99:00.0", VMUUID: vmA}, backend.CodeNotFound, "no such PCI device"},
		{"short form of an unavailable GPU", backend.CreateRequest{GPU: "41:00.0", VMUUID: vmA}, backend.CodeConflict, "GPU 0000:41:00.0: 32 SR-IOV VFs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, h := simBackend(t, "mixed")
			before := snapshot(t, h)
			_, err := b.Create(context.Background(), tc.req)
			wantCode(t, "Create", err, tc.code)
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Create: %q, want it to say %q", err, tc.says)
			}
			sameHost(t, h, before, "refused Create")
			if e := ledgerEntries(t, b); len(e) != 0 {
				t.Errorf("ledger after a refused Create: %+v", e)
			}
		})
	}
}

func TestRemoveRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  backend.RemoveRequest
	}{
		{"path escape", backend.RemoveRequest{ID: "../../etc"}},
		{"not hex", backend.RemoveRequest{ID: "zz"}},
		{"nothing", backend.RemoveRequest{}},
		{"an mdev UUID", backend.RemoveRequest{ID: vmA}},
		{"GPU other than the ID", backend.RemoveRequest{ID: "0000:c1:00.0", GPU: "0000:41:00.0"}},
		{"bad GPU", backend.RemoveRequest{GPU: "../x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, h := simBackend(t, "mixed")
			before := snapshot(t, h)
			wantCode(t, "Remove", b.Remove(context.Background(), tc.req), backend.CodeInvalid)
			sameHost(t, h, before, "refused Remove")
		})
	}
}

func TestRemoveUnknownIsNoop(t *testing.T) {
	t.Parallel()
	b, h := simBackend(t, "mixed")
	before := snapshot(t, h)
	for _, id := range []string{"0000:c1:00.0", "0000:41:00.0", "0000:99:00.0", "c1:00.0"} {
		if err := b.Remove(context.Background(), backend.RemoveRequest{ID: id}); err != nil {
			t.Errorf("Remove(%s) of a device gpuvm never made: %v", id, err)
		}
	}
	sameHost(t, h, before, "Remove of unknown devices")
}

func TestDoubleCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, h := simBackend(t, "a100x4")
	before := snapshot(t, h)
	if _, err := b.Create(ctx, backend.CreateRequest{GPU: "0000:ca:00.0", VMUUID: vmA}); err != nil {
		t.Fatal(err)
	}
	created := snapshot(t, h)
	for _, vm := range []string{vmA, vmB} {
		_, err := b.Create(ctx, backend.CreateRequest{GPU: "0000:ca:00.0", VMUUID: vm})
		wantCode(t, "second Create for "+vm, err, backend.CodeConflict)
		if !strings.Contains(err.Error(), "passed through to VM "+vmA) {
			t.Errorf("second Create: %q, want it to name VM %s", err, vmA)
		}
		sameHost(t, h, created, "second Create")
	}
	if e := ledgerEntries(t, b); len(e) != 1 || e[0].Device.VMUUID != vmA {
		t.Errorf("ledger: %+v", e)
	}
	for range 2 {
		if err := b.Remove(ctx, backend.RemoveRequest{ID: "0000:ca:00.0"}); err != nil {
			t.Fatal(err)
		}
	}
	sameHost(t, h, before, "Create, Create, Remove, Remove")
}

// TestConcurrentCreates races several Creates for one GPU: the host lock lets
// exactly one through.
func TestConcurrentCreates(t *testing.T) {
	t.Parallel()
	b, h := simBackend(t, "mixed")
	before := snapshot(t, h)
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = b.Create(context.Background(), backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: fmt.Sprintf("vm-%d", i)})
		})
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case backend.CodeOf(err) != backend.CodeConflict:
			t.Errorf("Create %d: %v, want success or conflict", i, err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d Creates succeeded, want 1: %v", ok, errs)
	}
	if err := b.Remove(context.Background(), backend.RemoveRequest{ID: "0000:c1:00.0"}); err != nil {
		t.Fatal(err)
	}
	sameHost(t, h, before, "racing Creates then Remove")
}

// TestCreateRevertsWhenTheKernelRefuses makes the simulated kernel refuse a
// step (a device held open refuses unbind) and wants everything done before
// it undone.
func TestCreateRevertsWhenTheKernelRefuses(t *testing.T) {
	t.Parallel()
	for _, busy := range []string{"0000:c1:00.0", "0000:c1:00.1"} {
		t.Run(busy, func(t *testing.T) {
			t.Parallel()
			b, h := simBackend(t, "mixed")
			if err := h.SetInUse(busy, true); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, h)
			_, err := b.Create(context.Background(), backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA})
			wantCode(t, "Create", err, backend.CodeConflict) // EBUSY
			if !strings.Contains(err.Error(), "GPU 0000:c1:00.0") || !strings.Contains(err.Error(), "move "+busy+" to vfio-pci") {
				t.Errorf("Create: %q, want it to name the GPU and the function", err)
			}
			sameHost(t, h, before, "refused Create")
			if e := ledgerEntries(t, b); len(e) != 0 {
				t.Errorf("ledger after a reverted Create: %+v", e)
			}
			if g := gpuOf(t, inventory(t, b), "0000:c1:00.0"); g.Unavailable != "" {
				t.Errorf("GPU after a reverted Create: %q", g.Unavailable)
			}
			if err := h.SetInUse(busy, false); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Create(context.Background(), backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA}); err != nil {
				t.Fatalf("Create once released: %v", err)
			}
		})
	}
}

// faultyFS fails the failAt-th write (counting from 1) with EIO.
type faultyFS struct {
	host.SysFS
	mu     sync.Mutex
	writes int
	failAt int
	failed string
}

func (f *faultyFS) WriteFile(name string, data []byte) error {
	f.mu.Lock()
	f.writes++
	fail := f.writes == f.failAt
	if fail {
		f.failed = fmt.Sprintf("%q to %s", data, name)
	}
	f.mu.Unlock()
	if fail {
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EIO}
	}
	return f.SysFS.WriteFile(name, data)
}

// TestCreateRevertsAtEveryStep fails each sysfs write of a Create in turn and
// wants the host exactly as before every time.
func TestCreateRevertsAtEveryStep(t *testing.T) {
	t.Parallel()
	b, h := simBackend(t, "mixed")
	env, _ := b.state.Get()
	inner := env.SysFS
	before := snapshot(t, h)
	for n := 1; ; n++ {
		// Each failed Create must leave the host as it was, so one host
		// serves every step.
		ffs := &faultyFS{SysFS: inner, failAt: n}
		env.SysFS = ffs
		_, err := b.Create(context.Background(), backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA})
		if err == nil {
			if n < 6 { // two functions: override, unbind, probe each
				t.Fatalf("Create made only %d writes", n-1)
			}
			return
		}
		wantCode(t, fmt.Sprintf("Create failing write %d (%s)", n, ffs.failed), err, backend.CodeHost)
		if !strings.Contains(err.Error(), "GPU 0000:c1:00.0") || !strings.Contains(err.Error(), "input/output error") {
			t.Errorf("write %d: %q does not name the GPU and the kernel's answer", n, err)
		}
		sameHost(t, h, before, fmt.Sprintf("Create failing write %d (%s)", n, ffs.failed))
		if e := ledgerEntries(t, b); len(e) != 0 {
			t.Errorf("write %d: ledger after a reverted Create: %+v", n, e)
		}
		if n > 20 {
			t.Fatal("Create never succeeds")
		}
	}
}

// TestCreateKeepsRecordWhenUndoFails fails a write and every write after it:
// the host cannot be put back, so the ledger keeps the entry for Remove.
func TestCreateKeepsRecordWhenUndoFails(t *testing.T) {
	t.Parallel()
	b, h := simBackend(t, "mixed")
	env, _ := b.state.Get()
	inner := env.SysFS
	env.SysFS = &brokenAfter{SysFS: inner, ok: 4} // GPU moved, audio override written
	before := snapshot(t, h)
	_, err := b.Create(context.Background(), backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA})
	if err == nil || !strings.Contains(err.Error(), "undoing it failed too") {
		t.Fatalf("Create: %v, want a failure whose undo failed", err)
	}
	if e := ledgerEntries(t, b); len(e) != 1 || e[0].State != kit.Creating {
		t.Fatalf("ledger: %+v, want the intent kept", e)
	}
	env.SysFS = inner
	if err := b.Remove(context.Background(), backend.RemoveRequest{ID: "0000:c1:00.0"}); err != nil {
		t.Fatalf("Remove of the half-made device: %v", err)
	}
	sameHost(t, h, before, "half-made Create then Remove")
	if e := ledgerEntries(t, b); len(e) != 0 {
		t.Errorf("ledger after Remove: %+v", e)
	}
}

// brokenAfter lets the first ok writes through and fails every later one.
type brokenAfter struct {
	host.SysFS
	mu sync.Mutex
	ok int
}

func (f *brokenAfter) WriteFile(name string, data []byte) error {
	f.mu.Lock()
	f.ok--
	fail := f.ok < 0
	f.mu.Unlock()
	if fail {
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EIO}
	}
	return f.SysFS.WriteFile(name, data)
}

func TestRemoveInUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, h := simBackend(t, "mixed")
	before := snapshot(t, h)
	if _, err := b.Create(ctx, backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA}); err != nil {
		t.Fatal(err)
	}
	if err := h.SetInUse("0000:c1:00.0", true); err != nil {
		t.Fatal(err)
	}
	held := snapshot(t, h)
	err := b.Remove(ctx, backend.RemoveRequest{ID: "0000:c1:00.0"})
	wantCode(t, "Remove of a GPU in use", err, backend.CodeConflict)
	if !strings.Contains(err.Error(), "GPU 0000:c1:00.0") || !strings.Contains(err.Error(), "busy") {
		t.Errorf("Remove: %q, want it to name the GPU and the kernel's answer", err)
	}
	sameHost(t, h, held, "refused Remove")
	if e := ledgerEntries(t, b); len(e) != 1 {
		t.Fatalf("ledger after a refused Remove: %+v, want the entry kept", e)
	}
	if inv := inventory(t, b); len(inv.Devices) != 1 {
		t.Errorf("devices after a refused Remove: %+v", inv.Devices)
	}
	if err := h.SetInUse("0000:c1:00.0", false); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, backend.RemoveRequest{ID: "0000:c1:00.0"}); err != nil {
		t.Fatalf("Remove once released: %v", err)
	}
	sameHost(t, h, before, "Create, refused Remove, Remove")
}

// TestRemoveAfterVMStop finds the functions handed back to the host drivers
// (as libvirt's managed='yes' may do at VM stop) and still cleans up.
func TestRemoveAfterVMStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, h := simBackend(t, "mixed")
	before := snapshot(t, h)
	if _, err := b.Create(ctx, backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"0000:c1:00.0", "0000:c1:00.1"} { // what libvirt does at VM stop
		for _, w := range [][2]string{{"bus/pci/drivers/vfio-pci/unbind", f}, {overridePath(f), "\n"}, {"bus/pci/drivers_probe", f}} {
			if err := h.WriteFile(w[0], []byte(w[1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	sameHost(t, h, before, "libvirt's reattach")
	if g := gpuOf(t, inventory(t, b), "0000:c1:00.0"); g.Unavailable != "passed through to VM "+vmA || g.Mode != gpu.ModePassthrough {
		t.Errorf("GPU reserved by the ledger: mode %s, unavailable %q", g.Mode, g.Unavailable)
	}
	if err := b.Remove(ctx, backend.RemoveRequest{ID: "0000:c1:00.0"}); err != nil {
		t.Fatal(err)
	}
	sameHost(t, h, before, "Remove")
	if e := ledgerEntries(t, b); len(e) != 0 {
		t.Errorf("ledger: %+v", e)
	}
}

// TestVFIOOutsideGPUVM binds a GPU to vfio-pci by hand, as an admin would.
func TestVFIOOutsideGPUVM(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, h := simBackend(t, "a40x2")
	const addr = "0000:c1:00.0"
	for _, w := range [][2]string{{overridePath(addr), "vfio-pci"}, {"bus/pci/drivers/nvidia/unbind", addr}, {"bus/pci/drivers_probe", addr}} {
		if err := h.WriteFile(w[0], []byte(w[1])); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, h)
	g := gpuOf(t, inventory(t, b), addr)
	if g.Unavailable != "bound to vfio-pci outside gpuvm" && !strings.Contains(g.Unavailable, "it is bound to vfio-pci outside gpuvm") {
		t.Errorf("Unavailable = %q", g.Unavailable)
	}
	if g.Mode != gpu.ModePassthrough || g.Driver != "vfio-pci" {
		t.Errorf("mode %s driver %s", g.Mode, g.Driver)
	}
	_, err := b.Create(ctx, backend.CreateRequest{GPU: addr, VMUUID: vmA})
	wantCode(t, "Create", err, backend.CodeConflict)
	err = b.Remove(ctx, backend.RemoveRequest{ID: addr})
	wantCode(t, "Remove", err, backend.CodeConflict)
	if !strings.Contains(err.Error(), "not created by gpuvm; left alone") {
		t.Errorf("Remove: %q", err)
	}
	sameHost(t, h, before, "refused Create and Remove")

	// A driver_override someone else set is someone else's plan.
	b2, h2 := simBackend(t, "a40x2")
	if err := h2.WriteFile(overridePath(addr), []byte("vfio-pci")); err != nil {
		t.Fatal(err)
	}
	_, err = b2.Create(ctx, backend.CreateRequest{GPU: addr, VMUUID: vmA})
	wantCode(t, "Create with a foreign driver_override", err, backend.CodeConflict)
	if !strings.Contains(err.Error(), "driver_override") {
		t.Errorf("Create: %q", err)
	}
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	b, h := simBackend(t, "mixed")
	before := snapshot(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Inventory(ctx)
	if !errors.Is(err, context.Canceled) || backend.CodeOf(err) != backend.CodeUnavailable {
		t.Errorf("Inventory: %v", err)
	}
	if _, err := b.Create(ctx, backend.CreateRequest{GPU: "0000:c1:00.0", VMUUID: vmA}); err == nil {
		t.Error("Create with a cancelled context succeeded")
	}
	if err := b.Remove(ctx, backend.RemoveRequest{ID: "0000:c1:00.0"}); err == nil {
		t.Error("Remove with a cancelled context succeeded")
	}
	sameHost(t, h, before, "cancelled calls")
	if e := ledgerEntries(t, b); len(e) != 0 {
		t.Errorf("ledger: %+v", e)
	}
}

// Captured trees (pkg/host/testdata/sysfs/*.txtar, built as
// pkg/host/testdata_test.go does).

const treeDir = "../../pkg/host/testdata/sysfs"

// buildTree writes a txtar sysfs tree into a new directory: "-- NAME --" a
// file, "-- NAME -> TARGET --" a link, "-- NAME/ --" a directory.
func buildTree(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(treeDir, name+".txtar"))
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no captured tree %s", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var cur *os.File
	closeCur := func() {
		if cur != nil {
			if err := cur.Close(); err != nil {
				t.Fatal(err)
			}
			cur = nil
		}
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		s := strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(s, "-- ") && strings.HasSuffix(s, " --") && len(s) > 6 {
			closeCur()
			hdr := s[3 : len(s)-3]
			n, target, isLink := strings.Cut(hdr, " -> ")
			if path.IsAbs(n) || strings.HasPrefix(path.Clean(n), "..") {
				t.Fatalf("%s: entry %q leaves the tree", name, n)
			}
			p := filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(n, "/")))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			switch {
			case isLink:
				err = os.Symlink(filepath.FromSlash(target), p)
			case strings.HasSuffix(n, "/"):
				err = os.MkdirAll(p, 0o755)
			default:
				cur, err = os.Create(p)
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		if cur != nil {
			if _, err := cur.WriteString(line); err != nil {
				t.Fatal(err)
			}
		}
	}
	closeCur()
	return root
}

// treeHash digests every file, link and directory under root.
func treeHash(t *testing.T, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(h, "%s %v\n", rel, d.Type())
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "-> %s\n", target)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func treeBackend(t *testing.T, root string) *Backend {
	t.Helper()
	b := newBackend()
	if err := b.Configure(context.Background(), backend.Config{SysFSRoot: root, StateDir: t.TempDir(), NVML: backend.NVMLNone}); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCapturedTrees(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tree, gpu string
		model     string
		mode      gpu.Mode
		iface     string
		group     []string
		says      []string // parts of Unavailable
		code      backend.Code
		prepare   func(t *testing.T, root string)
	}{
		{tree: "shared-group", gpu: "0000:05:00.0", model: "NVIDIA 2882", mode: gpu.ModeIdle, iface: "passthrough-only",
			group: []string{"0000:03:00.0", "0000:04:00.0", "0000:04:01.0", "0000:05:00.1", "0000:06:00.0"},
			says:  []string{"IOMMU group 7", "0000:06:00.0 (class 0x010802, vendor 0x144d)", "neither a PCI bridge nor a function of this card"},
			code:  backend.CodeUnsupported},
		{tree: "shared-group", gpu: "0000:05:00.0", model: "NVIDIA 2882", mode: gpu.ModeIdle, iface: "passthrough-only",
			says: []string{"no IOMMU group: the IOMMU is off; boot with intel_iommu=on or amd_iommu=on"}, code: backend.CodeUnsupported,
			prepare: func(t *testing.T, root string) { // the same host booted without an IOMMU
				var links []string
				err := filepath.WalkDir(filepath.Join(root, "devices"), func(p string, d fs.DirEntry, err error) error {
					if err == nil && d.Name() == "iommu_group" {
						links = append(links, p)
					}
					return err
				})
				if err != nil || len(links) == 0 {
					t.Fatalf("no iommu_group links found (%v)", err)
				}
				for _, l := range links {
					if err := os.Remove(l); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.RemoveAll(filepath.Join(root, "kernel", "iommu_groups")); err != nil {
					t.Fatal(err)
				}
			}},
		{tree: "rtx4090-group", gpu: "0000:01:00.0", model: "GeForce RTX 4090", mode: gpu.ModePassthrough, iface: "passthrough-only",
			group: []string{"0000:00:01.0", "0000:01:00.1"}, says: []string{"bound to vfio-pci outside gpuvm"}, code: backend.CodeConflict},
		{tree: "t4", gpu: "0000:3b:00.0", model: "T4", mode: gpu.ModeVGPU, iface: "mdev",
			says: []string{"1 vGPU mdev exist"}, code: backend.CodeConflict},
		{tree: "a40-vfs", gpu: "0000:41:00.0", model: "A40", mode: gpu.ModeVGPU, iface: "mdev",
			says: []string{"4 SR-IOV VFs are enabled for vGPU"}, code: backend.CodeConflict},
		{tree: "l40s-vfio", gpu: "0000:c1:00.0", model: "L40S", mode: gpu.ModeVGPU, iface: "vendor-vfio",
			says: []string{"4 SR-IOV VFs are enabled for vGPU"}, code: backend.CodeConflict},
	} {
		name := tc.tree
		if tc.prepare != nil {
			name += "/no-iommu"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := buildTree(t, tc.tree)
			if tc.prepare != nil {
				tc.prepare(t, root)
			}
			b := treeBackend(t, root)
			before := treeHash(t, root)
			inv := inventory(t, b)
			if len(inv.GPUs) != 1 {
				t.Fatalf("GPUs %+v, want only %s", inv.GPUs, tc.gpu)
			}
			if inv.Simulated || !strings.Contains(inv.Host, root) || !slices.ContainsFunc(inv.Notes, func(n string) bool { return strings.Contains(n, "NVML") }) {
				t.Errorf("inventory header: simulated %v host %q notes %q", inv.Simulated, inv.Host, inv.Notes)
			}
			g := gpuOf(t, inv, tc.gpu)
			for _, s := range tc.says {
				if !strings.Contains(g.Unavailable, s) {
					t.Errorf("Unavailable %q does not say %q", g.Unavailable, s)
				}
			}
			if g.Model != tc.model || g.Mode != tc.mode || g.Interface != tc.iface || !slices.Equal(g.GroupDevices, tc.group) {
				t.Errorf("GPU %+v: want model %q mode %s interface %s group %v", g, tc.model, tc.mode, tc.iface, tc.group)
			}
			_, err := b.Create(context.Background(), backend.CreateRequest{GPU: tc.gpu, VMUUID: vmA})
			wantCode(t, "Create", err, tc.code)
			if err := b.Remove(context.Background(), backend.RemoveRequest{ID: tc.gpu}); tc.mode == gpu.ModePassthrough {
				wantCode(t, "Remove of a GPU on vfio-pci outside gpuvm", err, backend.CodeConflict)
			} else if err != nil {
				t.Errorf("Remove of a device gpuvm never made: %v", err)
			}
			if after := treeHash(t, root); after != before {
				t.Error("the captured tree changed")
			}
			if e := ledgerEntries(t, b); len(e) != 0 {
				t.Errorf("ledger: %+v", e)
			}
		})
	}
}

func TestSameCard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"0000:c1:00.0", "0000:c1:00.1", true},
		{"0000:c1:00.0", "0000:c1:01.0", false},
		{"0000:c1:00.0", "0001:c1:00.1", false},
		{"0000:c1:00.0", "0000:c2:00.0", false},
		{"", "", false},
	} {
		if got := sameCard(tc.a, tc.b); got != tc.want {
			t.Errorf("sameCard(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}
