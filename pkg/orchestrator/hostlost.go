package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Devices the host lost. mdevs, VF vGPUs and MIG GPU and compute instances
// do not survive a host reboot (MIG mode does, and gpuvm-host-prep.service
// enables the SR-IOV VFs again at boot, before gpuvmd starts). libvirt
// keeps the domains, defined and shut off, but their hostdevs name devices
// that are gone, so they cannot start. A backend reports such a device of
// its ledger with Device.Absent.
//
// The reconciler, at gpuvmd's start and at every reconcile, takes the
// running VMs of this host with a recorded device a backend reports absent
// and a domain that is not running, oldest VM first, and for each one:
// makes every device again as it was (backend.CreateRequest.Recreate: the
// same mdev UUID, the same VF, the same MIG placement; a MIG device is its
// GPU instance at its placement, then its compute instance, then its vGPU),
// then starts the domain: the VM runs again, in phase booting. A device
// that cannot be made again (its placement or VF taken meanwhile, MIG mode
// off, the backend down) undoes what that VM got back, gives its GPU back
// and queues the VM for a GPU with the reason, a start pending (actions.go),
// so that it starts when the scheduler finds it one: never half made.
//
// This is gpuvmd's work, not gpuvm-host-prep's: which VMs should run is in
// the database, and devices are made by the backends under the host lock
// with their ledger; host-prep runs before gpuvmd, without either.

// RestartedReason is the state reason of a VM whose devices were made again
// after the host lost them, and whose domain was started again.
const RestartedReason = "started again after the host restarted: its GPU devices were made again as they were"

// LostDeviceReason is the state reason of a VM queued because a device the
// host lost could not be made again.
func LostDeviceReason(cause error) string {
	return "the host restarted and its GPU device could not be made again (" + cause.Error() + "): queued for a GPU to start on"
}

// ByHostRestart requests the start of a VM queued after the host lost its
// devices.
const ByHostRestart = "host restart"

// restoreLost makes again the lost devices of the running VMs of this host
// whose domain is off, and starts their domains (see above). It returns
// the VMs started again and those queued.
func (rc *reconciler) restoreLost(ctx context.Context) (restarted, queued []string, errs []error) {
	invs, invErrs := rc.backends.currentInventoriesOf(ctx, rc.backends.Names())
	errs = append(errs, invErrs...)
	lost := map[string]bool{} // backend/device
	for name, inv := range invs {
		for _, d := range inv.Devices {
			if d.Managed && d.Absent != "" {
				lost[name+"/"+d.ID] = true
			}
		}
	}
	if len(lost) == 0 {
		return nil, nil, errs
	}
	held, err := rc.st.ListLiveAllocations(ctx, rc.host)
	if err != nil {
		return nil, nil, append(errs, err)
	}
	byVM := map[string][]store.Allocation{}
	hit := map[string]bool{}
	for _, a := range held {
		byVM[a.VMID] = append(byVM[a.VMID], a)
		if a.DeviceID != "" && lost[a.Backend+"/"+a.DeviceID] {
			hit[a.VMID] = true
		}
	}
	running, err := store.AllVMs(ctx, rc.st, store.VMFilter{States: []string{store.VMRunning}, Host: rc.host})
	if err != nil {
		return nil, nil, append(errs, err)
	}
	sort.SliceStable(running, func(i, j int) bool { return running[i].CreatedAt.Before(running[j].CreatedAt) })
	for _, vm := range running {
		if !hit[vm.ID] || rc.busy.is(vm.ID) {
			continue
		}
		info, err := rc.hv.Lookup(ctx, vm.ID)
		switch {
		case hypervisor.IsNotFound(err):
			continue // vanished: the reconciler fails it
		case err != nil:
			errs = append(errs, fmt.Errorf("look up the domain of vm %s: %w", vm.ID, err))
			continue
		case info.Active():
			// Running without its devices: not a reboot; left to an admin.
			rc.log.Warn("a running domain's GPU device is not on the host; left as it is", "vm", vm.ID, "name", vm.Name)
			continue
		}
		ok, err := rc.life.restore(ctx, &vm, byVM[vm.ID])
		switch {
		case err != nil:
			errs = append(errs, err)
		case ok:
			restarted = append(restarted, vm.ID)
		default:
			queued = append(queued, vm.ID)
		}
	}
	return restarted, queued, errs
}

// restore makes a VM's lost devices again and starts its domain (ok), or,
// when a device cannot be made, gives back what it got and queues the VM
// with the reason (!ok). err is what stopped it before either (the
// database, ctx): the next reconcile tries again.
func (lc *lifecycle) restore(ctx context.Context, vm *store.VM, allocs []store.Allocation) (ok bool, err error) {
	slices.SortFunc(allocs, func(a, b store.Allocation) int { return int(a.ID - b.ID) })
	var cause error
	for _, a := range allocs {
		if a.DeviceID == "" {
			cause = fmt.Errorf("allocation %d (%s on %s) has no device recorded", a.ID, a.Slot, a.GPUAddress)
			break
		}
		if cause = lc.recreateDevice(ctx, vm.ID, a); cause != nil {
			break
		}
	}
	if cause == nil {
		if cause = lc.hv.Start(ctx, vm.ID); cause != nil {
			if interrupted(ctx, cause) || hypervisor.IsDisconnected(cause) {
				return false, fmt.Errorf("vm %s: start its domain again: %w", vm.ID, cause)
			}
			cause = fmt.Errorf("start the domain: %w", cause)
		}
	}
	if interrupted(ctx, cause) {
		return false, cause
	}
	if cause == nil {
		next, err := lc.setState(ctx, vm.ID, store.VMUpdate{State: store.VMRunning, Phase: lc.startedPhase(), StateReason: RestartedReason})
		if err != nil {
			return false, fmt.Errorf("vm %s: record it started again: %w", vm.ID, err)
		}
		lc.booting(next)
		lc.log.Warn("VM started again after the host restarted: its GPU devices were made again", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "devices", len(allocs))
		return true, nil
	}
	// Never half made: what it got back goes, its slots too, and it waits
	// for a GPU like a VM started by its owner (its domain and disk stay).
	if err := lc.giveBack(ctx, vm.ID); err != nil {
		return false, fmt.Errorf("vm %s: a lost device could not be made again (%v): give its GPU back: %w", vm.ID, cause, err)
	}
	reason := LostDeviceReason(cause)
	err = lc.st.Tx(ctx, func(tx *store.Store) error {
		cur, err := tx.GetVM(ctx, vm.ID)
		if err != nil {
			return err
		}
		if err := tx.CreateOperation(ctx, &store.Operation{VMID: vm.ID, Kind: store.OpStart, RequestedBy: ByHostRestart}); err != nil {
			return err
		}
		_, err = tx.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: store.VMQueued, Phase: PhaseQueued, StateReason: reason})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("vm %s: queue it for a GPU: %w", vm.ID, err)
	}
	lc.boots.remove(vm.ID)
	lc.log.Warn("VM queued for a GPU: a device the host lost could not be made again", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "reason", cause)
	lc.wake()
	return false, nil
}

// recreateDevice has an allocation's backend make its lost device again,
// as a create made it, and checks that it is the one recorded.
func (lc *lifecycle) recreateDevice(ctx context.Context, vmID string, a store.Allocation) error {
	b, ok := lc.backends.Backend(a.Backend)
	if !ok {
		return backend.Errorf(backend.CodeUnavailable, a.GPUAddress, "backend %s is not running", a.Backend)
	}
	req := createRequest(vmID, a)
	req.Recreate = a.DeviceID
	d, err := b.Create(ctx, req)
	if err != nil {
		return fmt.Errorf("make the %s device %s on GPU %s again: %w", a.Kind, a.DeviceID, a.GPUAddress, err)
	}
	if d.ID != a.DeviceID {
		return fmt.Errorf("the %s device %s on GPU %s came back as %s", a.Kind, a.DeviceID, a.GPUAddress, d.ID)
	}
	lc.log.Info("made a lost device again", "vm", vmID, "backend", a.Backend, "device", d.ID, "gpu", d.GPU, "placement", d.Placement)
	return nil
}
