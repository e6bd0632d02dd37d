package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/revert"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// DeviceUUID is the device UUID of an allocation: chosen before the backend
// is asked, the same on every retry.
func DeviceUUID(vmID string, allocationID int64) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "gpuvm:%s:%d", vmID, allocationID)).String()
}

// runCreate takes a VM from allocating (or creating) to running, resuming
// from the state it is in. The create is done when the domain runs; the
// VM is in phase booting then, until its guest is up (boot.go).
func (lc *lifecycle) runCreate(ctx context.Context, vm *store.VM, op *store.Operation) error {
	vm, op, done, err := lc.fresh(ctx, vm, op)
	if err != nil || done {
		return err
	}
	p := lc.profile(vm.Profile)
	if p == nil {
		return lc.failVM(ctx, vm.ID, op, fmt.Errorf("profile %q no longer exists", vm.Profile))
	}
	// The guest's SSH host key: its public half is recorded before the
	// seed that holds the private half is made (seed.go).
	hostKey, spec, err := newHostKey(p, vm)
	if err != nil {
		return lc.createFailed(ctx, vm.ID, op, err)
	}
	if vm.State == store.VMAllocating {
		deviceErr, err := lc.makeDevices(ctx, vm.ID, op)
		if err != nil {
			return err
		}
		if deviceErr != nil {
			return lc.createFailed(ctx, vm.ID, op, deviceErr)
		}
		if err := lc.hook(vm.ID, HookDeviceRecorded); err != nil {
			return err
		}
		next, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMCreating, Phase: api.PhasePreparingDisk, Spec: spec})
		if err != nil {
			return err
		}
		vm = next
	} else if spec != nil && vm.State == store.VMCreating {
		// An interrupted create: the key recorded then has no private
		// half any more; this attempt's seed gets the new one.
		next, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: vm.State, Phase: vm.Phase, StateReason: vm.StateReason, Spec: spec})
		if err != nil {
			return err
		}
		vm = next
	}
	if vm.State != store.VMCreating {
		return fmt.Errorf("vm %s is %s, not creating", vm.ID, vm.State)
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepPrepareDisk); err != nil {
		return err
	}
	if err := lc.hook(vm.ID, HookDiskPrepared); err != nil {
		return err
	}
	if err := lc.checkAvailable(ctx, vm); err != nil { // reason.go
		return lc.createFailed(ctx, vm.ID, op, err)
	}
	req, err := lc.vmRequest(ctx, vm)
	if err != nil {
		return lc.createFailed(ctx, vm.ID, op, err)
	}
	if req.Seed != nil {
		req.Seed.HostKey = hostKey
	}
	info, err := lc.hv.CreateVM(ctx, req)
	if err != nil {
		return lc.createFailed(ctx, vm.ID, op, missingPool(err))
	}
	if err := lc.hook(vm.ID, HookDomainCreated); err != nil {
		return err
	}
	if info.SeedSkipped != "" {
		// The VM runs; its reason says what it lacks (gpuvm show).
		lc.log.Warn("VM created without its cloud-init seed", "vm", vm.ID, "name", vm.Name, "pool", req.Pool, "reason", info.SeedSkipped)
	}
	lease := lc.st.Now().Add(time.Duration(max(vm.Hours, 1)) * time.Hour)
	running, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: lc.startedPhase(),
		LeaseEnd: &lease, StateReason: info.SeedSkipped})
	if err != nil {
		return err
	}
	lc.booting(running)
	lc.warnGuestDriver(ctx, running, p) // guestdriver.go
	if err := lc.hook(vm.ID, HookRunning); err != nil {
		return err
	}
	lc.log.Info("VM running", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "domain", req.Spec.Name)
	return lc.st.FinishOperation(ctx, op.ID, nil)
}

// missingPool adds to a create's error that names a storage pool libvirt
// does not have where the pool should have come from.
func missingPool(err error) error {
	var se *hypervisor.StorageError
	if errors.As(err, &se) && se.Volume == "" && hypervisor.IsNotFound(err) {
		return fmt.Errorf("%w (gpuvmd makes storage pool %s, server.libvirt.storage_pool, when it starts or reloads its configuration; its log says why it could not)", err, se.Pool)
	}
	return err
}

// fresh re-reads the VM and the operation a round handed to a worker: the
// round read them before it marked the VM busy, and another run of the
// same VM's work may have moved them on in between. done is true when the
// operation is finished by now (nothing is left to do).
func (lc *lifecycle) fresh(ctx context.Context, vm *store.VM, op *store.Operation) (*store.VM, *store.Operation, bool, error) {
	cur, err := lc.st.GetOperation(ctx, op.ID)
	if err != nil {
		return vm, op, false, err
	}
	if cur.Finished() {
		return vm, cur, true, nil
	}
	now, err := lc.st.GetVM(ctx, vm.ID)
	if err != nil {
		return vm, cur, false, err
	}
	return now, cur, false, nil
}

// makeDevices has the backends make the devices of a VM's claimed slots
// (its reserved allocations) and records each (the allocation created,
// with its device and hostdev), for a create or a start. deviceErr is a
// device the backend could not make, which the caller rolls back; err
// anything else that stopped it (the database, a test hook), to be tried
// again.
func (lc *lifecycle) makeDevices(ctx context.Context, vmID string, op *store.Operation) (deviceErr, err error) {
	// Only an attempt that got as far as creating devices can have left
	// one behind; a fresh one skips the backend's inventory.
	mayExist := op.Step != "" && op.Step != StepAllocate
	allocs, err := liveAllocations(ctx, lc.st, vmID)
	if err != nil {
		return nil, err
	}
	for _, a := range allocs {
		if a.State != store.AllocReserved {
			continue
		}
		if err := lc.beginDeviceStep(ctx, vmID, op.ID, a.ID); err != nil {
			return nil, err
		}
		d, err := lc.createDevice(ctx, vmID, a, allocs, mayExist)
		if err != nil {
			return fmt.Errorf("create the %s device on GPU %s: %w", a.Kind, a.GPUAddress, err), nil
		}
		if err := lc.hook(vmID, HookDeviceCreated); err != nil {
			return nil, err
		}
		hd, _ := json.Marshal(d.Hostdev)
		if err := lc.st.MarkAllocationCreated(ctx, a.ID, d.ID, string(hd)); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// errSlotsGone: the allocation a device was to be made for was released
// meanwhile (in a fleet, the leader queued the VM again because this node
// looked down): nothing is made, and the VM is the leader's to place.
var errSlotsGone = errors.New("its GPU slots were released meanwhile (the VM was queued again): no device is made")

// beginDeviceStep records that the create begins to make a device for
// allocation allocID, in one transaction with the VM's allocations locked,
// and refuses (errSlotsGone) when that allocation is no longer live.
// RequeueFromDownHosts takes the same lock before it releases a VM's
// slots: either it sees this step and leaves the VM, or this sees the
// slots released and makes nothing.
func (lc *lifecycle) beginDeviceStep(ctx context.Context, vmID, opID string, allocID int64) error {
	return lc.st.Tx(ctx, func(tx *store.Store) error {
		live, err := tx.LockLiveAllocations(ctx, vmID)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(live, func(a store.Allocation) bool { return a.ID == allocID }) {
			return fmt.Errorf("vm %s, allocation %d: %w", vmID, allocID, errSlotsGone)
		}
		return tx.SetOperationStep(ctx, opID, StepCreateDevice)
	})
}

// vmRequest is the libvirt side of a VM: its domain from the profile and the
// recorded devices, and its disk.
func (lc *lifecycle) vmRequest(ctx context.Context, vm *store.VM) (hypervisor.VMRequest, error) {
	set := lc.settings()
	p := set.Profiles[vm.Profile]
	allocs, err := liveAllocations(ctx, lc.st, vm.ID)
	if err != nil {
		return hypervisor.VMRequest{}, err
	}
	in := domain.Instance{
		Name: lc.names.of(vm.ID), UUID: vm.ID, Installation: lc.installation, VMID: vm.ID, Owner: vm.Owner, DomainType: set.DomainType,
		GraphicsListen: set.Libvirt.GraphicsListen, Password: vm.DisplayPassword,
	}
	for _, a := range allocs {
		var h backend.Hostdev
		if err := json.Unmarshal([]byte(a.Hostdev), &h); err != nil || a.State != store.AllocCreated {
			return hypervisor.VMRequest{}, fmt.Errorf("allocation %d (%s on %s) has no device recorded", a.ID, a.Slot, a.GPUAddress)
		}
		hd := hypervisor.HostdevFromBackend(h)
		if hd.Type != domain.HostdevMdev {
			hd.Display = false // only an mdev drives a display through libvirt
		}
		in.Hostdevs = append(in.Hostdevs, hd)
	}
	home, err := lc.home(ctx, set, p, vm) // home.go
	if err != nil {
		return hypervisor.VMRequest{}, err
	}
	if home != nil {
		in.Filesystems = []domain.Filesystem{home.fs}
	}
	shares, err := lc.shares(ctx, set, p, vm) // shares.go
	if err != nil {
		return hypervisor.VMRequest{}, fmt.Errorf("vm %s: %w", vm.ID, err)
	}
	for _, s := range shares {
		in.Filesystems = append(in.Filesystems, s.fs)
	}
	spec, err := domain.FromProfile(p, in)
	if err == nil && lc.settings().DetachSimulatedGPUs && len(spec.Hostdevs) > 0 {
		lc.log.Warn("simulated GPU server: the VM's GPU devices exist only in the simulator and are not attached to the domain",
			"vm", vm.ID, "devices", len(spec.Hostdevs))
		spec.Hostdevs = nil
		spec.Title = strings.TrimSpace(spec.Title + " [simulated GPU, not attached]")
	}
	if err != nil {
		return hypervisor.VMRequest{}, err
	}
	data, err := lc.dataDisks(ctx, vm) // volumes.go
	if err != nil {
		return hypervisor.VMRequest{}, err
	}
	spec.Disks = append(spec.Disks, data...)
	spec.TaskChannel = store.TaskOfSpec(vm.Spec) != "" // tasks.go
	req := hypervisor.VMRequest{Spec: spec, Pool: set.Libvirt.StoragePool}
	var kind gpu.Kind
	if len(allocs) > 0 {
		kind = allocs[0].Kind
	}
	if req.Seed, err = lc.seed(ctx, set, p, vm, kind, home, shares); err != nil { // seed.go
		return hypervisor.VMRequest{}, err
	}
	if p.Disk != nil && p.Disk.Image != "" {
		img := set.Images[p.Disk.Image]
		if img != nil && img.Imported != "" {
			if img, err = lc.importedImage(ctx, vm.ID, img); err != nil { // images.go
				return hypervisor.VMRequest{}, fmt.Errorf("profile %s: %w", p.Name, err)
			}
		}
		if img == nil || img.Path == "" {
			return hypervisor.VMRequest{}, fmt.Errorf("profile %s: image %q has no file path", p.Name, p.Disk.Image)
		}
		req.BaseImage, req.BaseFormat, req.DiskBytes = img.Path, domain.DiskFormat(img.Format), p.Disk.Size
	}
	return req, nil
}

// createDevice makes an allocation's device, or, when an earlier attempt
// may have made it (mayExist), adopts that one: a device of the same VM on the
// same GPU that no other allocation of the VM holds.
func (lc *lifecycle) createDevice(ctx context.Context, vmID string, a store.Allocation, allocs []store.Allocation, mayExist bool) (backend.Device, error) {
	b, ok := lc.backends.Backend(a.Backend)
	if !ok {
		return backend.Device{}, backend.Errorf(backend.CodeUnavailable, a.GPUAddress, "backend %s is not running", a.Backend)
	}
	held := map[string]bool{}
	for _, other := range allocs {
		if other.DeviceID != "" {
			held[other.DeviceID] = true
		}
	}
	if mayExist {
		// The host as it is now, asked of the backend (not its pushed
		// inventory, which a backend that restarted may not have sent yet):
		// a complete device of the interrupted create is adopted; a half-made
		// one (no hostdev: the backend died making it) is removed first, so
		// that the create below does not leave it behind.
		invs, errs := lc.backends.inventoriesOf(ctx, []string{a.Backend})
		if len(errs) > 0 {
			return backend.Device{}, errors.Join(errs...)
		}
		for _, d := range invs[a.Backend].Devices {
			if d.VMUUID != vmID || d.GPU != a.GPUAddress || d.Kind != a.Kind || held[d.ID] {
				continue
			}
			if d.Hostdev.Type == "" || d.Absent != "" {
				// Half made, or lost with the host (hostlost.go).
				lc.log.Warn("removing the half-made device of an interrupted create", "vm", vmID, "device", d.ID, "gpu", d.GPU, "absent", d.Absent)
				if err := b.Remove(ctx, backend.RemoveRequest{ID: d.ID, GPU: d.GPU}); err != nil && !errors.Is(err, backend.ErrNotFound) {
					return backend.Device{}, fmt.Errorf("remove the half-made device %s of an interrupted create: %w", d.ID, err)
				}
				continue
			}
			lc.log.Info("adopting the device an interrupted create made", "vm", vmID, "device", d.ID, "gpu", d.GPU)
			return d, nil
		}
	}
	return b.Create(ctx, createRequest(vmID, a))
}

// createRequest asks a backend for an allocation's device: its GPU, and
// the type or profile and placement of a vGPU or MIG device.
func createRequest(vmID string, a store.Allocation) backend.CreateRequest {
	req := backend.CreateRequest{GPU: a.GPUAddress, VMUUID: vmID}
	switch a.Kind {
	case gpu.KindVGPU:
		req.Type, req.DeviceUUID = a.Profile, DeviceUUID(vmID, a.ID)
	case gpu.KindMIG:
		req.Profile, req.Placement, req.DeviceUUID = a.Profile, a.PlacementStart, DeviceUUID(vmID, a.ID)
	}
	return req
}

// createFailed rolls back what a create made (domain, devices, slots) and
// either queues the VM again (the GPU turned out to be full) or marks it
// failed. An interrupted create (ctx ended) is left to the reconciler.
func (lc *lifecycle) createFailed(ctx context.Context, vmID string, op *store.Operation, cause error) error {
	if ctx.Err() != nil || errors.Is(cause, errAbandoned) {
		return cause
	}
	if errors.Is(cause, backend.ErrExhausted) || errors.Is(cause, backend.ErrUnavailable) {
		if err := lc.rollback(ctx, vmID); err != nil {
			return errors.Join(cause, err)
		}
		vm, err := lc.st.GetVM(ctx, vmID)
		if err != nil {
			return err
		}
		_, err = lc.st.UpdateVMState(ctx, vmID, vm.Version, store.VMUpdate{State: store.VMQueued, Phase: PhaseQueued, StateReason: reasonOf(cause)})
		lc.log.Warn("VM queued again", "vm", vmID, "reason", cause)
		return err
	}
	return lc.failVM(ctx, vmID, op, cause)
}

// failVM rolls back and marks the VM failed with the cause, finishing op.
func (lc *lifecycle) failVM(ctx context.Context, vmID string, op *store.Operation, cause error) error {
	if err := lc.rollback(ctx, vmID); err != nil {
		return errors.Join(cause, err)
	}
	vm, err := lc.st.GetVM(ctx, vmID)
	if err != nil {
		return err
	}
	if reasonOf(cause) != cause.Error() {
		lc.log.Warn("VM failed; its reason shows the files by their base names", "vm", vmID, "err", cause)
	}
	if _, err := lc.st.UpdateVMState(ctx, vmID, vm.Version, store.VMUpdate{State: store.VMFailed, StateReason: reasonOf(cause)}); err != nil {
		return err
	}
	if op != nil {
		lc.finishOp(ctx, op.ID, cause)
	}
	return cause
}

// rollback removes a VM's domain and devices and frees its slots. Every part
// is idempotent.
func (lc *lifecycle) rollback(ctx context.Context, vmID string) error {
	// What a create makes, in the order it makes it, undone last first and
	// each only once the one made after it is gone: the slots are freed
	// once the devices are removed, the devices once no domain holds them.
	// The steps look at what exists, not at how far the create got.
	var r revert.Reverter
	r.Add(func() error { return lc.release(ctx, vmID) })       // the slots claimed
	r.Add(func() error { return lc.removeDevices(ctx, vmID) }) // the devices made
	r.Add(func() error {
		// A create that failed has nothing to shut down gracefully: the
		// domain goes at once, with every volume made for it.
		if err := lc.cleanupVolumes(ctx, vmID); err != nil {
			return fmt.Errorf("remove the domain and its volumes: %w", err)
		}
		return nil
	})
	return r.RevertUntilFailure()
}

// release frees a VM's slots and ends its usage records, in one
// transaction: the GPU time it is charged for ends when its devices go.
func (lc *lifecycle) release(ctx context.Context, vmID string) error {
	err := lc.st.Tx(ctx, func(tx *store.Store) error {
		if _, err := tx.ReleaseAllocations(ctx, vmID); err != nil {
			return err
		}
		_, err := tx.EndUsageRecords(ctx, vmID, tx.Now())
		return err
	})
	if err == nil {
		lc.fleet.capacityFreed() // in a fleet, the leader may place a queued VM there now
	}
	return err
}

// removeDevices removes every device made for a VM: those its allocations
// recorded and, for allocations whose device was never recorded (a create
// that crashed in between), any their backend lists for the VM.
func (lc *lifecycle) removeDevices(ctx context.Context, vmID string) error {
	allocs, err := liveAllocations(ctx, lc.st, vmID)
	if err != nil {
		return err
	}
	var errs []error
	removed := map[string]bool{}
	unrecorded := map[string]bool{}
	for _, a := range allocs {
		if a.DeviceID == "" {
			unrecorded[a.Backend] = true
			continue
		}
		b, ok := lc.backends.Backend(a.Backend)
		if !ok {
			errs = append(errs, fmt.Errorf("backend %s is not running", a.Backend))
			continue
		}
		if err := b.Remove(ctx, backend.RemoveRequest{ID: a.DeviceID, GPU: a.GPUAddress}); err != nil && !errors.Is(err, backend.ErrNotFound) {
			errs = append(errs, fmt.Errorf("remove device %s: %w", a.DeviceID, err))
			continue
		}
		removed[a.Backend+"/"+a.DeviceID] = true
	}
	var names []string
	for name := range unrecorded {
		names = append(names, name)
	}
	invs, invErrs := lc.backends.currentInventoriesOf(ctx, names)
	errs = append(errs, invErrs...)
	for name, inv := range invs {
		b, _ := lc.backends.Backend(name)
		for _, d := range inv.Devices {
			if d.VMUUID != vmID || !d.Managed || removed[name+"/"+d.ID] {
				continue
			}
			if err := b.Remove(ctx, backend.RemoveRequest{ID: d.ID, GPU: d.GPU}); err != nil && !errors.Is(err, backend.ErrNotFound) {
				errs = append(errs, fmt.Errorf("remove device %s: %w", d.ID, err))
			}
		}
	}
	return errors.Join(errs...)
}
