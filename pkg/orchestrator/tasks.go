package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// seedTask is the task vm serves as its seed carries it; nil for a VM of
// no task. A VM whose spec names a task (store.SpecTask, docs/tasks.md)
// serves it: its domain gets the task channel, its seed the runner.
func (lc *lifecycle) seedTask(ctx context.Context, vm *store.VM) (*cloudinit.Task, error) {
	id := store.TaskOfSpec(vm.Spec)
	if id == "" {
		return nil, nil
	}
	t, err := lc.st.GetTask(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("vm %s: its task: %w", vm.ID, err)
	}
	return SeedTask(t)
}

// SeedTask is a task's row as the runner in the seed gets it.
func SeedTask(t *store.Task) (*cloudinit.Task, error) {
	out := &cloudinit.Task{ID: t.ID, Script: t.Script, ArrayID: t.ArrayID, Index: t.ArrayIndex, Count: t.ArrayCount, Attempt: t.Attempt}
	if t.Command != "" {
		if err := json.Unmarshal([]byte(t.Command), &out.Command); err != nil {
			return nil, fmt.Errorf("task %s: its command: %w", t.ID, err)
		}
	}
	if t.Env != "" {
		if err := json.Unmarshal([]byte(t.Env), &out.Env); err != nil {
			return nil, fmt.Errorf("task %s: its env: %w", t.ID, err)
		}
	}
	return out, nil
}

// TaskPreparer is what a start asks of a hypervisor (a *hypervisor.Conn)
// for a task run in its owner's own VM: the shut-off domain given the
// task channel and a seed that carries the task, or, without a seed, the
// channel taken away.
type TaskPreparer interface {
	PrepareTask(ctx context.Context, uuid, pool string, seed *cloudinit.Config) error
}

// maxInstanceID is the longest cloud-init instance ID a seed takes.
const maxInstanceID = 128

// prepareTask readies a stopped VM's domain for its start. A VM whose spec
// names a task at a start runs it in its owner's own VM (--in,
// docs/tasks.md; a VM made for a task never starts again): its domain gets
// the task channel and a seed rendered as a create renders a task VM's,
// with an instance ID of the task's (cloud-init runs the vendor-data, the
// runner, once per instance) that keeps the guest's SSH host keys. Any
// other VM's domain loses a task channel an earlier task gave it; its seed
// stays that task's, whose instance cloud-init has seen, so the runner
// does not run again.
func (lc *lifecycle) prepareTask(ctx context.Context, vm *store.VM) error {
	tp, ok := lc.hv.(TaskPreparer)
	if !ok {
		return nil
	}
	id := store.TaskOfSpec(vm.Spec)
	if id == "" {
		return tp.PrepareTask(ctx, vm.ID, "", nil)
	}
	req, err := lc.vmRequest(ctx, vm)
	if err != nil {
		return err
	}
	if req.Seed == nil {
		return fmt.Errorf("profile %q gives its guests no cloud-init seed: task %s's runner cannot be delivered", vm.Profile, id)
	}
	req.Seed.InstanceID = vm.ID + "-task-" + id
	if len(req.Seed.InstanceID) > maxInstanceID {
		req.Seed.InstanceID = req.Seed.InstanceID[:maxInstanceID]
	}
	req.Seed.KeepHostKeys = true
	return tp.PrepareTask(ctx, vm.ID, req.Pool, req.Seed)
}

// WithdrawStart takes back a start that has not begun: the VM waits in the
// queue for a GPU (or is still stopped, its start not yet queued), its
// start operation the only one unfinished and no GPU claimed. In one
// transaction the VM is stopped again, with reason, and the start fails
// with it, so a round that would place the VM finds it changed and leaves
// it. It reports false, changing nothing, when the start is past that (a
// GPU claimed, its domain starting), or there is no such start: that start
// runs on. A task in its owner's own VM (pkg/task) withdraws its VM's
// start when it is cancelled while the VM waits.
func (o *Orchestrator) WithdrawStart(ctx context.Context, vmID, reason string) (bool, error) {
	withdrawn := false
	var vm *store.VM
	err := o.life.st.Tx(ctx, func(tx *store.Store) error {
		cur, err := tx.GetVM(ctx, vmID)
		if err != nil {
			return err
		}
		vm = cur
		switch {
		case cur.State == store.VMQueued:
		case cur.State == store.VMStopped && cur.Phase != api.PhaseStarting:
		default:
			return nil
		}
		ops, err := tx.ListOperations(ctx, vmID)
		if err != nil {
			return err
		}
		var start *store.Operation
		for i := range ops {
			if ops[i].Finished() {
				continue
			}
			if start != nil || ops[i].Kind != store.OpStart || (ops[i].Step != "" && ops[i].Step != StepQueue) {
				return nil // another operation, or a start past the queue
			}
			start = &ops[i]
		}
		if start == nil {
			return nil
		}
		if allocs, err := liveAllocations(ctx, tx, vmID); err != nil || len(allocs) > 0 {
			return err // a GPU claimed: the start goes on
		}
		if _, err := tx.UpdateVMState(ctx, vmID, cur.Version, store.VMUpdate{State: store.VMStopped, StateReason: reason}); err != nil {
			return err
		}
		if err := finishActionTx(ctx, tx, cur, start, errors.New("withdrawn: "+reason)); err != nil {
			return err
		}
		withdrawn = true
		return nil
	})
	if errors.Is(err, store.ErrConflict) {
		return false, nil // it moved meanwhile (placed, or started): the next look decides
	}
	if err != nil {
		return false, fmt.Errorf("withdraw the start of vm %s: %w", vmID, err)
	}
	if withdrawn {
		o.life.log.Info("VM's queued start withdrawn", "vm", vmID, "name", vm.Name, "reason", reason)
		o.disp.wake()
	}
	return withdrawn, nil
}
