package orchestrator

import (
	"context"
	"slices"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// guestDriverAdvice ends the warning of a guest driver the host's vGPU
// manager does not take.
const guestDriverAdvice = ": the vGPU will not work; ask your admin for an image with a matching driver"

// warnGuestDriver warns a VM's owner, once its create has made its
// devices, when the VM holds a vGPU (time-sliced or MIG-backed), its
// profile's disk image declares the NVIDIA guest driver it carries
// (image.guest_driver), and the host's vGPU manager, as the backends read
// it through NVML, supports no vGPU release of that driver's branch. The
// VM is created all the same: the warning is a log line and a vm.warning
// event of kind guest_driver. A host without the vGPU manager's range
// (no NVML, the simulator's "simulated" driver) is not checked. Nothing
// here fails the create: what it cannot read or record is logged.
func (lc *lifecycle) warnGuestDriver(ctx context.Context, vm *store.VM, p *config.Profile) {
	if p == nil || p.Disk == nil || p.Disk.Image == "" {
		return
	}
	img := lc.settings().Images[p.Disk.Image]
	if img == nil || img.GuestDriver == "" {
		return
	}
	allocs, err := liveAllocations(ctx, lc.st, vm.ID)
	if err != nil {
		lc.log.Warn("the guest driver is not checked: reading the VM's allocations failed", "vm", vm.ID, "err", err)
		return
	}
	var names []string
	for _, a := range allocs {
		if (a.Kind == gpu.KindVGPU || a.Kind == gpu.KindMIG) && !slices.Contains(names, a.Backend) {
			names = append(names, a.Backend)
		}
	}
	if len(names) == 0 {
		return // no vGPU: a passed-through GPU takes the guest driver of any branch
	}
	invs, errs := lc.backends.currentInventoriesOf(ctx, names)
	if len(invs) == 0 {
		lc.log.Warn("the guest driver is not checked: no inventory of the VM's backends", "vm", vm.ID, "backends", names, "errs", errs)
		return
	}
	host := mergedInventory(invs).Driver
	m := gpu.CheckGuestDriver(img.GuestDriver, host)
	if !m.Checked || m.Supported {
		return
	}
	reason := m.Reason + guestDriverAdvice
	lc.log.Warn("the image's NVIDIA guest driver does not match the host's vGPU manager",
		"vm", vm.ID, "owner", vm.Owner, "profile", p.Name, "image", img.Name, "guest_driver", img.GuestDriver,
		"guest_vgpu_release", m.Release, "host_driver", host.Version, "vgpu_min", host.VGPUMin, "vgpu_max", host.VGPUMax)
	n := api.VMWarningPayload{Kind: api.WarningGuestDriver, Action: api.NoticeNone, At: lc.st.Now(), Reason: reason}
	if err := lc.st.AppendEvent(ctx, warningEvent(vm, n)); err != nil {
		lc.log.Warn("recording the guest driver warning failed", "vm", vm.ID, "err", err)
	}
}
