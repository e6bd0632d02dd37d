package orchestrator

import (
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
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

// driverChanges are the announcements, read once a round
// (DriverChangesFor keeps those ahead that concern each VM).
func (r *round) driverChanges() []api.DriverChange {
	all, err := r.loop.st.DriverChanges(r.ctx)
	if err != nil {
		r.errs = append(r.errs, err)
		return nil
	}
	return all
}

// driverChange tells vm's owner of each announcement that concerns it.
func (r *round) driverChange(vm *store.VM, all []api.DriverChange) {
	for _, dc := range DriverChangesFor(r.cfg.Profiles[vm.Profile], all, r.now) {
		note := ""
		if dc.Note != "" {
			note = " (" + dc.Note + ")"
		}
		offer := fmt.Sprintf("take a snapshot of its disk first: gpuvm snapshot %s --label %s", vm.Name, dc.SnapshotLabel)
		if dc.SnapshotLabel == "" {
			offer = "its disk cannot be snapshotted (it boots a kernel directly)"
		}
		reason := fmt.Sprintf("the hosts' NVIDIA vGPU manager moves to %s at %s%s: the NVIDIA driver inside VM %s must then be one it supports; %s",
			dc.Driver, r.stamp(dc.At), note, vm.Name, offer)
		r.warn(vm, api.VMWarningPayload{Kind: api.WarningDriverChange, Action: api.NoticeNone, At: dc.At, MinutesLeft: minutesUntil(r.now, dc.At), Reason: reason})
	}
}

// DriverChangesFor are the announcements of all still ahead at now (not
// withdrawn) that concern a VM of profile p — one of a vGPU profile,
// time-sliced or MIG-backed — each with the label of the snapshot offered
// first (none when its disk cannot be snapshotted: it boots a kernel
// directly). What the rules tell the VM's owner, and what GET
// /v1/vms/{id} lists.
func DriverChangesFor(p *config.Profile, all []api.DriverChange, now time.Time) []api.VMDriverChange {
	if !DriverChangesConcern(p) {
		return nil
	}
	var out []api.VMDriverChange
	for _, dc := range all {
		if dc.WithdrawnAt != nil || !dc.At.After(now) {
			continue
		}
		n := api.VMDriverChange{ID: dc.ID, Driver: dc.Driver, At: dc.At, Note: dc.Note}
		if p.Disk != nil {
			n.SnapshotLabel = "before-driver-" + dc.Driver
		}
		out = append(out, n)
	}
	return out
}

// DriverChangesConcern says whether the vGPU manager's changes concern the
// VMs of profile p: a vGPU profile, time-sliced or MIG-backed (a
// passed-through GPU runs the data-centre driver, which the vGPU manager
// does not constrain).
func DriverChangesConcern(p *config.Profile) bool {
	return p != nil && p.GPU != nil && (p.GPU.Kind == gpu.KindVGPU || p.GPU.Kind == gpu.KindMIG)
}
