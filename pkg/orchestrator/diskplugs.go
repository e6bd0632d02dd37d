package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// A data disk's place in a VM's domain (docs/volumes.md). The rows say
// which disks a VM has (store.Volume.AttachedVM); the domain follows them:
//
//   - At every start the domain's data disks become the rows' (startDisks,
//     Hypervisor-side ReplaceDataDisks), so a disk attached to or detached
//     from a stopped VM is there, or gone, when it runs again.
//   - A running VM's disks are plugged in or out by an operation of the VM
//     (store.OpDisks) on its host: an attach writes the row and the
//     operation together (the intent), a detach marks the row detaching and
//     writes the operation; runDisks then plugs in what the rows have and
//     the domain lacks, and unplugs what is detaching, waiting for the
//     guest to let it go. A disk stays attached until its guest has let it
//     go, so no other VM can take it while this one may still write it.
//
// runDisks is safe to run again (after gpuvmd was killed): it looks at the
// running domain each time.

// StepPlugDisks is the step of an OpDisks operation.
const StepPlugDisks = "plug data disks"

// DiskPlugs is what a data disk's place in a domain asks of the hypervisor
// (a *hypervisor.Conn); without it a domain keeps the disks it was made
// with, and a running VM's are not changed.
type DiskPlugs interface {
	ReplaceDataDisks(ctx context.Context, uuid string, disks []domain.Disk) error
	LiveDataDisks(ctx context.Context, uuid string) (volumes []string, running bool, err error)
	PlugDataDisk(ctx context.Context, uuid string, disk domain.Disk) error
	UnplugDataDisk(ctx context.Context, uuid, volume string, wait time.Duration) error
}

// plugStore is what they ask of the database (a *store.Store).
type plugStore interface {
	ListVolumes(ctx context.Context, f store.VolumeFilter) ([]store.Volume, error)
	SetVolumeState(ctx context.Context, id, state string, from []string, errText string) error
	EndDetachVolume(ctx context.Context, id string) error
	DetachVolume(ctx context.Context, id string) error
}

// UnplugWait is how long an unplug waits for the guest to let a disk go
// (Linux lets one it does not use go at once under q35's ACPI hot-plug, in
// about five seconds under native PCIe hot-plug).
var UnplugWait = 30 * time.Second

// startDisks readies a stopped VM's domain for its start: the disks being
// detached from it are detached (the domain does not run), and its data
// disks become those its rows attach (dataDisks). A disk that cannot be
// given fails the start with its reason.
func (lc *lifecycle) startDisks(ctx context.Context, vm *store.VM) error {
	ps, ok1 := lc.st.(plugStore)
	dp, ok2 := lc.hv.(DiskPlugs)
	if !ok1 || !ok2 {
		return nil
	}
	if err := lc.settleDetaching(ctx, ps, vm); err != nil {
		return err
	}
	disks, err := lc.dataDisks(ctx, vm) // volumes.go
	if err != nil {
		return err
	}
	return dp.ReplaceDataDisks(ctx, vm.ID, disks)
}

// settleDetaching detaches the disks being detached from vm, whose domain
// does not run.
func (lc *lifecycle) settleDetaching(ctx context.Context, ps plugStore, vm *store.VM) error {
	list, err := ps.ListVolumes(ctx, store.VolumeFilter{AttachedVM: vm.ID})
	if err != nil {
		return err
	}
	for _, v := range list {
		if v.State != store.VolDetaching {
			continue
		}
		if err := ps.EndDetachVolume(ctx, v.ID); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		lc.log.Info("data disk detached from a VM that does not run", "vm", vm.ID, "volume", v.ID, "name", v.Name)
	}
	return nil
}

// runDisks carries out an OpDisks operation: the running VM's domain gets
// the disks its rows attach and loses those being detached. A disk that
// cannot be plugged in is detached again (the attach undone); one its
// guest does not let go stays attached, ready; the operation fails naming
// each. A VM that no longer runs needs nothing plugged: its next start
// has what the rows say.
func (lc *lifecycle) runDisks(ctx context.Context, vm *store.VM, op *store.Operation) error {
	vm, op, done, err := lc.fresh(ctx, vm, op)
	if err != nil || done {
		return err
	}
	ps, ok1 := lc.st.(plugStore)
	dp, ok2 := lc.hv.(DiskPlugs)
	if !ok1 || !ok2 {
		lc.finishAction(ctx, vm, op, errors.New("this server's hypervisor or database cannot plug data disks into a running VM"))
		return nil
	}
	// undo ends the operation with cause, its disks as they were: those it
	// attached detached, those being detached attached and ready again.
	undo := func(cause error) error {
		if err := lc.undoDisks(ctx, ps, vm, op); err != nil {
			return err
		}
		lc.finishAction(ctx, vm, op, cause)
		return nil
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepPlugDisks); err != nil {
		return err
	}
	live, running, err := dp.LiveDataDisks(ctx, vm.ID)
	switch {
	case err == nil:
	case hypervisor.IsNotFound(err):
		running = false
	case interrupted(ctx, err), hypervisor.IsDisconnected(err):
		return err // the next round tries again
	default:
		return undo(fmt.Errorf("read the domain's disks: %w", err))
	}
	if vm.State != store.VMRunning || !running {
		return lc.disksNotRunning(ctx, ps, vm, op)
	}
	list, err := ps.ListVolumes(ctx, store.VolumeFilter{AttachedVM: vm.ID})
	if err != nil {
		return err
	}
	var failed []error
	for _, v := range list {
		var err error
		switch {
		case v.State == store.VolDetaching:
			err = lc.unplug(ctx, ps, dp, vm, v)
		case v.State == store.VolReady && !slices.Contains(live, v.Volume):
			err = lc.plug(ctx, ps, dp, vm, op, v)
		}
		if interrupted(ctx, err) || hypervisor.IsDisconnected(err) {
			return err
		}
		if err != nil {
			failed = append(failed, err)
		}
	}
	lc.finishAction(ctx, vm, op, errors.Join(failed...))
	return nil
}

// disksNotRunning ends an OpDisks operation of a VM whose domain does not
// run: what is detaching is detached (no guest holds it). A VM stopped
// meanwhile has the disks this operation attached at its next start; one
// recorded as running whose domain does not run (gone, or off: the
// reconciler will say) cannot have them plugged in: they are detached
// again and the operation fails saying so.
func (lc *lifecycle) disksNotRunning(ctx context.Context, ps plugStore, vm *store.VM, op *store.Operation) error {
	if err := lc.settleDetaching(ctx, ps, vm); err != nil {
		return err
	}
	if vm.State != store.VMRunning {
		lc.finishAction(ctx, vm, op, nil)
		return nil
	}
	list, err := ps.ListVolumes(ctx, store.VolumeFilter{AttachedVM: vm.ID})
	if err != nil {
		return err
	}
	var failed []error
	for _, v := range list {
		if v.AttachedAt == nil || v.AttachedAt.Before(op.CreatedAt) {
			continue
		}
		if err := ps.DetachVolume(ctx, v.ID); err != nil {
			return err
		}
		failed = append(failed, fmt.Errorf("data disk %q not attached: VM %s is recorded as running but its domain does not run on %s", v.Name, vm.Name, lc.host))
	}
	lc.finishAction(ctx, vm, op, errors.Join(failed...))
	return nil
}

// undoDisks puts the disks of op's VM back as they were before op: a disk
// op attached (at or after its creation) detached, one being detached
// attached and ready.
func (lc *lifecycle) undoDisks(ctx context.Context, ps plugStore, vm *store.VM, op *store.Operation) error {
	list, err := ps.ListVolumes(ctx, store.VolumeFilter{AttachedVM: vm.ID})
	if err != nil {
		return err
	}
	for _, v := range list {
		switch {
		case v.State == store.VolDetaching:
			err = ps.SetVolumeState(ctx, v.ID, store.VolReady, []string{store.VolDetaching}, "")
		case v.AttachedAt != nil && !v.AttachedAt.Before(op.CreatedAt):
			err = ps.DetachVolume(ctx, v.ID)
		}
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return nil
}

// unplug takes a detaching disk out of vm's running domain and detaches
// it; a guest that keeps it keeps it attached, ready.
func (lc *lifecycle) unplug(ctx context.Context, ps plugStore, dp DiskPlugs, vm *store.VM, v store.Volume) error {
	if err := dp.UnplugDataDisk(ctx, vm.ID, v.Volume, UnplugWait); err != nil {
		if interrupted(ctx, err) || hypervisor.IsDisconnected(err) {
			return err
		}
		if err := ps.SetVolumeState(ctx, v.ID, store.VolReady, []string{store.VolDetaching}, ""); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		lc.log.Warn("data disk not unplugged: still attached", "vm", vm.ID, "volume", v.ID, "name", v.Name, "err", err)
		return fmt.Errorf("data disk %q stays attached: %w", v.Name, err)
	}
	if err := ps.EndDetachVolume(ctx, v.ID); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	lc.log.Info("data disk detached from a running VM", "vm", vm.ID, "volume", v.ID, "name", v.Name)
	return nil
}

// plug puts a ready disk its rows attach into vm's running domain. One
// this operation attached (at or after its creation: the attach writes
// both at once) that cannot be plugged in is detached again; an older
// one stays attached, for the next start.
func (lc *lifecycle) plug(ctx context.Context, ps plugStore, dp DiskPlugs, vm *store.VM, op *store.Operation, v store.Volume) error {
	err := dp.PlugDataDisk(ctx, vm.ID, dataDiskOf(v))
	if err == nil {
		lc.log.Info("data disk plugged into a running VM", "vm", vm.ID, "volume", v.ID, "name", v.Name)
		return nil
	}
	if interrupted(ctx, err) || hypervisor.IsDisconnected(err) {
		return err
	}
	lc.log.Warn("data disk not plugged in", "vm", vm.ID, "volume", v.ID, "name", v.Name, "err", err)
	if v.AttachedAt != nil && !v.AttachedAt.Before(op.CreatedAt) {
		if err := ps.DetachVolume(ctx, v.ID); err != nil {
			return err
		}
		return fmt.Errorf("data disk %q not attached: %w (stop the VM and attach it then: its next start has it)", v.Name, err)
	}
	return fmt.Errorf("data disk %q: %w", v.Name, err)
}
