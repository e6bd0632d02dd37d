package orchestrator

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The profiles of the kinds the presets of testProfiles do not cover: MIG
// on an A100 (a MIG-backed vGPU as an mdev on a VF) and a time-sliced vGPU
// as an mdev on an A40.
const inventoryProfiles = `
profile "a100-mig" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "3g.20gb"
  }
}
profile "a40-seat" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind = "vgpu"
    type = "A40-8Q"
  }
}
`

// bareType is a type shown by its number, not its name.
var bareType = regexp.MustCompile(`(?i)^(type )?\d+$|\(ID \d+\)`)

// A running VM of every kind of GPU — a whole GPU, a MIG instance (a
// MIG-backed vGPU on a VF through the vendor-specific VFIO framework, or an
// mdev on an Ampere VF), a time-sliced vGPU (either interface) — is in the
// host's inventory once, as its VM's, by the name of its type; and no
// placement round, whatever kinds it asks the backends of, finds on its
// GPU something gpuvm cannot account for. (The vgpu backend used to list a
// MIG-backed vGPU it did not make as "type 2316" of no VM: a phantom
// holder, and a GPU shut off from the rounds that did not ask the mig
// backend.)
func TestInventoryShowsEachRunningVMOnce(t *testing.T) {
	tests := []struct {
		preset, profile string
		kind            gpu.Kind
	}{
		{"l40sx4", "l40s-whole", gpu.KindPassthrough},
		{"h100x8", "h100-mig", gpu.KindMIG},
		{"a100x4", "a100-mig", gpu.KindMIG},
		{"l40sx4", "l40s-seat", gpu.KindVGPU},
		{"a40x2", "a40-seat", gpu.KindVGPU},
	}
	for _, tc := range tests {
		t.Run(tc.preset+"/"+tc.profile, func(t *testing.T) {
			e := newEnv(t, tc.preset)
			cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(testProfiles + inventoryProfiles)})
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			e.cfg = cfg
			ctx := context.Background()
			o := e.orch(nil)
			vm, _ := e.submit("ann", tc.profile, "seen-once")
			o.Drain(ctx)
			if got := e.vm(vm.ID); got.State != store.VMRunning {
				t.Fatalf("vm: %s %q", got.State, got.StateReason)
			}

			invs := map[string]backend.Inventory{}
			for _, n := range e.l.Names() {
				b, _ := e.l.Backend(n)
				inv, err := b.Inventory(ctx)
				if err != nil {
					t.Fatal(err)
				}
				invs[n] = inv
			}
			hi := mergedInventory(invs)
			if len(hi.Devices) != 1 {
				t.Fatalf("the host lists %d devices, want the VM's alone: %+v", len(hi.Devices), hi.Devices)
			}
			d := hi.Devices[0]
			if d.VMUUID != vm.ID || d.Kind != tc.kind || !d.Managed {
				t.Errorf("the device: %+v; want the VM's (%s), of kind %s, made by gpuvm", d, vm.ID, tc.kind)
			}
			if tc.kind != gpu.KindPassthrough && (d.Type == "" || bareType.MatchString(d.Type)) {
				t.Errorf("the device's type %q is not a name", d.Type)
			}
			// Each backend on its own: only the one that made the device
			// lists it (a round asks only the backends of its kinds).
			for n, inv := range invs {
				for _, x := range inv.Devices {
					if x.VMUUID != vm.ID {
						t.Errorf("backend %s lists device %s (type %q) of no VM of gpuvm's", n, x.ID, x.Type)
					}
				}
			}

			for _, kinds := range [][]string{{"vgpu"}, {"mig"}, {"passthrough"}, {"mig", "passthrough", "vgpu"}} {
				st, err := o.disp.placementState(ctx, e.cfg, e.st.Now(), kinds)
				if err != nil {
					t.Fatalf("round of %v: %v", kinds, err)
				}
				if _, problems := buildInventory(st.specs, st.allocs); len(problems) > 0 {
					t.Errorf("round of %v: %v", kinds, problems)
				}
				var mine int
				for _, a := range st.allocs {
					if a.ID != vm.ID {
						t.Errorf("round of %v counts a holder %s (type %q) besides the VM", kinds, a.ID, a.Type)
					}
					mine++
				}
				// Once when the round's backends serve its GPU; a round
				// that does not see the GPU places nothing on it.
				want := 0
				for _, g := range st.specs[0].GPUs {
					if g.Address == d.GPU {
						want = 1
					}
				}
				if mine != want {
					t.Errorf("round of %v counts the VM's device %d times, want %d", kinds, mine, want)
				}
			}
			if logs := e.logs.String(); strings.Contains(logs, "cannot account for") {
				t.Errorf("a warning of what gpuvm cannot account for:\n%s", logs)
			}
		})
	}
}
