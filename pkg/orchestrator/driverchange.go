package orchestrator

import (
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// An announced change of the hosts' NVIDIA vGPU manager (api.DriverChange,
// made by an admin through POST /v1/admin/driver-changes): a VM that holds
// a vGPU, time-sliced or MIG-backed, then needs a guest driver the new
// manager supports, which its owner installs inside it. Each round of the
// rules tells the owner of every running or stopped VM of a vGPU profile,
// once per announcement (a vm.warning of kind driver_change, deduplicated
// as every notice is, by its time), until the change's time; the notice
// offers a snapshot of the VM's disk first (docs/snapshots.md, "Before a
// driver change"). A withdrawn announcement tells nobody more. A VM with
// a passed-through GPU runs the data-centre driver, which the vGPU
// manager does not constrain: it is not told.

// driverChanges are the announcements still ahead, not withdrawn, read
// once a round.
func (r *round) driverChanges() []api.DriverChange {
	all, err := r.loop.st.DriverChanges(r.ctx)
	if err != nil {
		r.errs = append(r.errs, err)
		return nil
	}
	var ahead []api.DriverChange
	for _, dc := range all {
		if dc.WithdrawnAt == nil && dc.At.After(r.now) {
			ahead = append(ahead, dc)
		}
	}
	return ahead
}

// driverChange tells vm's owner of each announcement that concerns it.
func (r *round) driverChange(vm *store.VM, ahead []api.DriverChange) {
	p := r.cfg.Profiles[vm.Profile]
	if len(ahead) == 0 || p == nil || p.GPU == nil || (p.GPU.Kind != gpu.KindVGPU && p.GPU.Kind != gpu.KindMIG) {
		return
	}
	for _, dc := range ahead {
		note := ""
		if dc.Note != "" {
			note = " (" + dc.Note + ")"
		}
		offer := fmt.Sprintf("take a snapshot of its disk first: gpuvm snapshot %s --label before-driver-%s", vm.Name, dc.Driver)
		if p.Disk == nil {
			offer = "its disk cannot be snapshotted (it boots a kernel directly)"
		}
		reason := fmt.Sprintf("the hosts' NVIDIA vGPU manager moves to %s at %s%s: the NVIDIA driver inside VM %s must then be one it supports; %s",
			dc.Driver, r.stamp(dc.At), note, vm.Name, offer)
		r.warn(vm, api.VMWarningPayload{Kind: api.WarningDriverChange, Action: api.NoticeNone, At: dc.At, MinutesLeft: minutesUntil(r.now, dc.At), Reason: reason})
	}
}
