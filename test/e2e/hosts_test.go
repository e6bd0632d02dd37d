package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

// gpuProfile is a profile of one GPU need, on a kernel that libvirt's test
// driver never reads.
func gpuProfile(name, gpu string) string {
	return fmt.Sprintf(`
profile %q {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    %s
  }
}
`, name, gpu)
}

// VMs of every kind a simulated host offers are asked for over the API,
// reach running with their device's hostdev in their domain (libvirt's test
// driver keeps hostdevs as they are), and once deleted leave the simulated
// host and libvirt exactly as before. One gpuvmd per preset, in parallel.
func TestVMsOnSimulatedHosts(t *testing.T) {
	hv := libvirt(t, testDriverURI)
	hosts := []struct {
		preset   string
		profiles map[string]string // name: gpu block
	}{
		{"h100x8", map[string]string{
			"h100-mig":  `kind = "mig"` + "\n    profile = \"3g.40gb\"",
			"h100-vgpu": `kind = "vgpu"` + "\n    type = \"H100-4C\"",
			"h100-gpu":  `kind = "passthrough"` + "\n    model = \"H100\"",
		}},
		{"l40sx4", map[string]string{
			"l40s-vgpu": `kind = "vgpu"` + "\n    type = \"L40S-12Q\"",
			"l40s-gpu":  `kind = "passthrough"` + "\n    model = \"L40S\"",
		}},
	}
	for _, h := range hosts {
		t.Run(h.preset, func(t *testing.T) {
			t.Parallel()
			var hcl strings.Builder
			for name, gpu := range h.profiles {
				hcl.WriteString(gpuProfile(name, gpu))
			}
			w := newWorld(t, worldConfig{preset: h.preset, uri: testDriverURI, pool: testDriverPool, profiles: hcl.String()})
			w.start()
			hostBefore, lvBefore := w.simHost(), w.libvirtState(hv)
			begin := time.Now()
			var ids []string
			for name := range h.profiles {
				ids = append(ids, w.create(name, name+"-vm").ID)
			}
			live := map[string]api.VM{}
			for _, id := range ids {
				vm := w.waitState(id, client.StateRunning, time.Minute)
				if len(vm.GPUs) != 1 || vm.GPUs[0].Device == "" {
					t.Errorf("VM %s (%s) holds %+v", vm.Name, vm.Profile, vm.GPUs)
				}
				live[id] = vm
			}
			running := time.Since(begin)
			w.checkHost(hv, live, true)
			if allocs := w.checkSlots(); len(allocs) != len(ids) {
				t.Errorf("%d live allocations for %d VMs", len(allocs), len(ids))
			}
			for _, id := range ids {
				w.deleteVM(id)
			}
			w.sameHost(hostBefore, w.simHost())
			w.sameLibvirt(lvBefore, w.libvirtState(hv))
			if allocs := w.checkSlots(); len(allocs) != 0 {
				t.Errorf("%d live allocations once every VM is deleted: %+v", len(allocs), allocs)
			}
			w.noErrors()
			t.Logf("%s: %d VMs running %v after their creates", h.preset, len(ids), running.Round(time.Millisecond))
		})
	}
}
