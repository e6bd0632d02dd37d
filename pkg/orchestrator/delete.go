package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// ErrCancelled ends the create operation of a VM deleted before it was ready.
var ErrCancelled = errors.New("cancelled: the VM was deleted")

// runDelete deletes a VM: domain, devices, slots, in that order, each step
// idempotent, then marks it deleted. A create still unfinished is cancelled.
func (lc *lifecycle) runDelete(ctx context.Context, vm *store.VM, op, create *store.Operation) error {
	vm, op, done, err := lc.fresh(ctx, vm, op)
	if err != nil || done {
		return err
	}
	if create != nil {
		lc.finishOp(ctx, create.ID, ErrCancelled)
	}
	if vm.State == store.VMDeleted {
		return lc.st.FinishOperation(ctx, op.ID, nil)
	}
	if vm.State != store.VMDeleting {
		next, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMDeleting, Phase: api.PhaseRemovingDomain})
		if err != nil {
			return err
		}
		vm = next
	}
	fail := func(step string, err error) error {
		if ctx.Err() != nil || errors.Is(err, errAbandoned) {
			return err
		}
		// Left unfinished: the next round tries again.
		return fmt.Errorf("delete vm %s: %s: %w", vm.ID, step, err)
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepDeleteDomain); err != nil {
		return err
	}
	if err := lc.hv.DeleteVM(ctx, vm.ID, lc.settings().ShutdownTimeout); err != nil && !hypervisor.IsNotFound(err) {
		return fail(StepDeleteDomain, err)
	}
	if err := lc.cleanupVolumes(ctx, vm.ID); err != nil {
		return fail(StepDeleteDomain, err)
	}
	if err := lc.hook(vm.ID, HookDomainDeleted); err != nil {
		return err
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepRemoveDevice); err != nil {
		return err
	}
	if err := lc.removeDevices(ctx, vm.ID); err != nil {
		return fail(StepRemoveDevice, err)
	}
	if err := lc.hook(vm.ID, HookDevicesRemoved); err != nil {
		return err
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepRelease); err != nil {
		return err
	}
	if err := lc.release(ctx, vm.ID); err != nil {
		return fail(StepRelease, err)
	}
	if _, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMDeleted}); err != nil {
		return err
	}
	lc.log.Info("VM deleted", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner)
	return lc.st.FinishOperation(ctx, op.ID, nil)
}
