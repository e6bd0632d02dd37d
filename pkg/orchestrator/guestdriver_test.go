package orchestrator

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// driverBackends reports the host driver it is set to in every backend's
// inventory, in place of the simulator's ("simulated"); nil leaves the
// simulator's.
type driverBackends struct {
	Backends
	mu     sync.Mutex
	driver *backend.Driver
}

func (d *driverBackends) set(drv *backend.Driver) { d.mu.Lock(); d.driver = drv; d.mu.Unlock() }

func (d *driverBackends) Backend(name string) (backend.Backend, bool) {
	b, ok := d.Backends.Backend(name)
	if !ok {
		return nil, false
	}
	return &driverBackend{Backend: b, d: d}, true
}

type driverBackend struct {
	backend.Backend
	d *driverBackends
}

func (b *driverBackend) Inventory(ctx context.Context) (backend.Inventory, error) {
	inv, err := b.Backend.Inventory(ctx)
	b.d.mu.Lock()
	if b.d.driver != nil {
		drv := *b.d.driver
		inv.Driver = &drv
	}
	b.d.mu.Unlock()
	return inv, err
}

// diskless creates the domains without their disks: the libvirt test
// driver has no storage pool to put the image's overlay in, and what is
// tested here is the warning, not the disk.
type diskless struct{ Hypervisor }

func (h diskless) CreateVM(ctx context.Context, req hypervisor.VMRequest) (hypervisor.Info, error) {
	req.BaseImage, req.Seed, req.Spec.Disks = "", nil, nil
	return h.Hypervisor.CreateVM(ctx, req)
}

const guestDriverProfiles = `
image "cuda-535" {
  path         = "/images/cuda-535.qcow2"
  guest_driver = "535.183.01"
}
image "cuda-550" {
  path         = "/images/cuda-550.qcow2"
  guest_driver = "550.90.07"
}
image "plain" {
  path = "/images/plain.qcow2"
}
image "cuda-560" {
  path         = "/images/cuda-560.qcow2"
  guest_driver = "560.28.03"
}
`

func guestDriverProfile(name, image, gpuBlock string) string {
	return "profile \"" + name + "\" {\n  vcpus = 1\n  memory = \"512MiB\"\n  network { type = \"none\" }\n  disk { image = \"" + image + "\" }\n" + gpuBlock + "}\n"
}

// A VM holding a vGPU or a MIG-backed vGPU, from an image whose declared
// NVIDIA guest driver is of a vGPU release outside the host's vGPU
// manager's range (or of a branch gpuvm does not know), is created all
// the same, and its owner gets one vm.warning saying so. A matching
// driver, an image that declares none, a passed-through GPU, and the
// simulator's own driver ("simulated": unknown) give no warning.
func TestGuestDriverWarning(t *testing.T) {
	vgpu := "  gpu {\n    kind = \"vgpu\"\n    type = \"H100-4C\"\n  }\n"
	mig := "  gpu {\n    kind = \"mig\"\n    profile = \"3g.40gb\"\n  }\n"
	whole := "  gpu {\n    kind = \"passthrough\"\n    model = \"H100 PCIe 80GB\"\n  }\n"
	src := guestDriverProfiles +
		guestDriverProfile("vgpu-535", "cuda-535", vgpu) + guestDriverProfile("vgpu-550", "cuda-550", vgpu) +
		guestDriverProfile("vgpu-560", "cuda-560", vgpu) + guestDriverProfile("vgpu-plain", "plain", vgpu) +
		guestDriverProfile("mig-535", "cuda-535", mig) + guestDriverProfile("whole-535", "cuda-535", whole)
	e := newEnv(t, "h100x8")
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e.cfg = cfg
	ctx := context.Background()
	db := &driverBackends{Backends: e.l}
	o := New(Config{
		Store: e.st, Backends: db, Hypervisor: diskless{e.hv}, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
	})

	// The simulator's NVML, as it is: its driver names no branch.
	invs, errs := backend.Inventories(ctx, e.l, e.l.Names())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if d := backend.MergeByName(invs).Driver; d == nil || d.Version != sim.DriverVersion {
		t.Fatalf("the simulator's host driver is %+v, want version %q", d, sim.DriverVersion)
	}

	v17 := &backend.Driver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}
	tests := []struct {
		name, profile string
		driver        *backend.Driver // nil: the simulator's
		want          string          // the warning's reason; "": none
	}{
		{"the simulator's driver is unknown", "vgpu-535", nil, ""},
		{"older guest driver, vGPU", "vgpu-535", v17,
			"the image's NVIDIA guest driver 535.183.01 (vGPU 16) is not supported by this host's vGPU manager 550.x (vGPU 17.0–17.3): the vGPU will not work; ask your admin for an image with a matching driver"},
		{"older guest driver, MIG-backed vGPU", "mig-535", v17, "535.183.01 (vGPU 16) is not supported by this host's vGPU manager 550.x"},
		{"a branch gpuvm does not know", "vgpu-560", v17, "branch R560, not one of NVIDIA vGPU software gpuvm knows"},
		{"matching guest driver", "vgpu-550", v17, ""},
		{"a range that takes the older release", "vgpu-535", &backend.Driver{Version: "550.54.16", VGPUMin: "16.0", VGPUMax: "17.3"}, ""},
		{"no guest driver declared", "vgpu-plain", v17, ""},
		{"a passed-through GPU", "whole-535", v17, ""},
		{"not the vGPU manager", "vgpu-535", &backend.Driver{Version: "550.54.14"}, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db.set(tc.driver)
			vm, op := e.submit("ann", tc.profile, "vm"+string(rune('a'+i)))
			o.Drain(ctx)
			got := e.vm(vm.ID)
			if got.State != store.VMRunning {
				t.Fatalf("vm: state %s reason %q (the warning must not refuse it)", got.State, got.StateReason)
			}
			if op := e.op(op.ID); op.State != store.OpDone {
				t.Errorf("create operation: %s %q", op.State, op.Error)
			}
			ws := e.warnings(vm.ID)
			switch {
			case tc.want == "" && len(ws) != 0:
				t.Errorf("warnings %+v, want none", ws)
			case tc.want != "" && len(ws) != 1:
				t.Errorf("warnings %+v, want one", ws)
			case tc.want != "":
				w := ws[0]
				if w.Kind != api.WarningGuestDriver || w.Action != api.NoticeNone || !strings.Contains(w.Reason, tc.want) || !strings.HasSuffix(w.Reason, guestDriverAdvice) {
					t.Errorf("warning %+v, want kind %s, action none, reason with %q", w, api.WarningGuestDriver, tc.want)
				}
				if !strings.Contains(e.logs.String(), "guest_driver=") {
					t.Errorf("no warning logged with its key/values")
				}
			}
			e.deleteOp(e.vm(vm.ID))
			o.Drain(ctx)
			if got := e.vm(vm.ID); got.State != store.VMDeleted {
				t.Fatalf("after delete: %s %q", got.State, got.StateReason)
			}
		})
	}
}
