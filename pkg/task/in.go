package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// A task run in its owner's own VM (--in, docs/tasks.md) borrows the VM:
// the server makes the task with the VM's spec naming it (which keeps the
// owner's own actions off the VM), and the supervisor then, a step a round,
// resizes the stopped VM to the task's profile (the orchestrator's resize,
// Config.Resize), starts it (a start operation: the VM queues for the
// task's GPU like any start, and its domain gets the task channel and a
// seed that carries the runner), follows the command as for a VM of the
// task's own, and at its end stops the VM (never deletes it), resizes it
// back to the profile it had and gives it back: its spec names the task no
// more. Each step done is a line of the task's steps (store.Task.InSteps).
// A put-back that fails leaves the task ended as its command ended and the
// VM stopped, its reason and a vm.warning saying how to put it back.

// inStep is a round's step of a task in its owner's own VM.
func (s *Supervisor) inStep(ctx context.Context, t *store.Task, vm *store.VM, down map[string]bool) error {
	if s.cfg.Host != "" && vm.Host != "" && vm.Host != s.cfg.Host {
		return nil // another gpuvmd's
	}
	if t.State == api.TaskCompleting || t.InStep == store.TaskInStop || t.InStep == store.TaskInPutBack {
		return s.inRelease(ctx, t, vm)
	}
	if t.InStep == store.TaskInSubmitted || t.InStep == store.TaskInResize {
		busy, err := s.unfinishedOp(ctx, vm.ID)
		if err != nil || busy != nil {
			return err // the VM's operation first
		}
	}
	switch t.InStep {
	case store.TaskInSubmitted:
		return s.inBegin(ctx, t, vm)
	case store.TaskInResize:
		if vm.Profile != t.Profile {
			return s.inEnd(ctx, t, vm, api.TaskFailed, fmt.Sprintf("its VM %s could not be resized to profile %s: %s", vm.Name, t.Profile, s.lastError(ctx, vm.ID, store.OpResize)))
		}
		return s.inStart(ctx, t, vm, fmt.Sprintf("VM %s resized from profile %s to %s", vm.Name, t.InProfile, t.Profile))
	}
	// Started: the VM is followed as a task's own is.
	if t.CancelAt != nil && t.State == api.TaskPending {
		if done, err := s.inWithdraw(ctx, t, vm); done || err != nil {
			return err
		}
	}
	switch vm.State {
	case store.VMFailed:
		return s.end(ctx, t, vm, api.TaskNodeFail, "its VM failed: "+vm.StateReason)
	case store.VMQueued:
		return s.move(ctx, t, api.TaskPending, queueReason(vm))
	case store.VMAllocating, store.VMCreating:
		return s.move(ctx, t, api.TaskBooting, "its VM is being started")
	case store.VMRunning:
		return s.running(ctx, t, vm)
	case store.VMStopped:
		if busy, err := s.unfinishedOp(ctx, vm.ID); err != nil || busy != nil {
			return err // the start is under way
		}
		if t.State == api.TaskPending && t.CancelAt != nil {
			// Cancelled, its start withdrawn (by another round) or failed.
			return s.inEnd(ctx, t, vm, api.TaskCancelled, "cancelled before it started")
		}
		if t.State == api.TaskPending {
			// The start failed (its lease ended, the profile is gone…).
			return s.end(ctx, t, vm, api.TaskFailed, fmt.Sprintf("its VM %s did not start: %s", vm.Name, s.lastError(ctx, vm.ID, store.OpStart)))
		}
	}
	return s.follow(ctx, t, vm, down) // stopping or stopped after it ran: as a task VM's
}

// inBegin is the first step: the VM is resized to the task's profile, or,
// when it has it already, started.
func (s *Supervisor) inBegin(ctx context.Context, t *store.Task, vm *store.VM) error {
	now := s.cfg.Store.Now()
	switch {
	case t.CancelAt != nil:
		return s.inFinish(ctx, t, vm, api.TaskCancelled, "", "cancelled before it started")
	case t.StartAt != nil && now.Before(*t.StartAt):
		return s.move(ctx, t, api.TaskPending, "starts at "+t.StartAt.UTC().Format(time.RFC3339))
	case vm.State != store.VMStopped:
		return s.move(ctx, t, api.TaskPending, fmt.Sprintf("waits for its VM %s to stop (it is %s)", vm.Name, vm.State))
	case vm.Profile == t.Profile:
		return s.inStart(ctx, t, vm, "")
	case s.cfg.Resize == nil:
		return s.move(ctx, t, api.TaskPending, "waits: this server cannot resize VMs")
	}
	if err := s.cfg.Resize(ctx, vm, t.Profile, t); err != nil {
		return s.inFinish(ctx, t, vm, api.TaskFailed, "", fmt.Sprintf("its VM %s cannot be resized to profile %s: %s", vm.Name, t.Profile, err))
	}
	step := store.TaskInResize
	s.log.Info("task's VM resized for it", "task", t.ID, "vm", vm.ID, "from", vm.Profile, "to", t.Profile)
	return s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{State: api.TaskPending, InStep: &step,
		Reason: fmt.Sprintf("its VM %s is being resized from profile %s to %s", vm.Name, vm.Profile, t.Profile)})
}

// inStart starts the VM for the task (a start operation).
func (s *Supervisor) inStart(ctx context.Context, t *store.Task, vm *store.VM, note string) error {
	if t.CancelAt != nil {
		return s.inEnd(ctx, t, vm, api.TaskCancelled, "cancelled before it started")
	}
	op := &store.Operation{VMID: vm.ID, Kind: store.OpStart, RequestedBy: t.Owner}
	if err := s.cfg.Store.CreateOperation(ctx, op); err != nil {
		return err
	}
	s.wake()
	step := store.TaskInStart
	return s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{State: api.TaskPending, InStep: &step, InNote: note,
		Reason: fmt.Sprintf("its VM %s is being started with profile %s", vm.Name, t.Profile)})
}

// inWithdraw ends a task cancelled while its VM's start waits in the
// queue: the start is withdrawn and the VM put back. It reports false when
// the start could not be withdrawn (it is past the queue, or this server
// cannot): the VM is then stopped once it has started.
func (s *Supervisor) inWithdraw(ctx context.Context, t *store.Task, vm *store.VM) (bool, error) {
	if s.cfg.Withdraw == nil || (vm.State != store.VMQueued && vm.State != store.VMStopped) {
		return false, nil
	}
	ok, err := s.cfg.Withdraw(ctx, vm.ID, fmt.Sprintf("task %s was cancelled before the VM started", t.ID))
	if err != nil || !ok {
		return false, err
	}
	s.log.Info("task cancelled while its VM waited to start: the start is withdrawn", "task", t.ID, "vm", vm.ID)
	cur, err := s.cfg.Store.GetVM(ctx, vm.ID)
	if err != nil {
		return true, err
	}
	return true, s.inEnd(ctx, t, cur, api.TaskCancelled, "cancelled before it started")
}

// inEnd is end for a task in its owner's VM: the task is completing (with
// the state it ends in when that is known now) until its VM is stopped
// and put back.
func (s *Supervisor) inEnd(ctx context.Context, t *store.Task, vm *store.VM, state, reason string) error {
	u := store.TaskUpdate{State: api.TaskCompleting, Reason: reason}
	if api.TaskEnded(state) {
		u.InEnd = &state
	}
	if err := s.cfg.Store.UpdateTask(ctx, t.ID, nil, u); err != nil {
		return err
	}
	s.log.Info("task ending; its VM is stopped and put back", "task", t.ID, "vm", vm.ID, "state", state, "reason", reason)
	t.State, t.Reason = api.TaskCompleting, reason
	if u.InEnd != nil {
		t.InEnd = state
	}
	return s.inRelease(ctx, t, vm)
}

// inRelease gives a completing task's VM back: stopped, then resized back
// to the profile it had.
func (s *Supervisor) inRelease(ctx context.Context, t *store.Task, vm *store.VM) error {
	if vm.State == store.VMDeleted || vm.State == store.VMDeleting {
		return s.vmGone(ctx, t, vm)
	}
	if s.cfg.Host != "" && vm.Host != "" && vm.Host != s.cfg.Host {
		return nil
	}
	busy, err := s.unfinishedOp(ctx, vm.ID)
	if err != nil || busy != nil {
		return err
	}
	switch vm.State {
	case store.VMStopped:
	case store.VMRunning:
		if t.InStep == store.TaskInStop {
			return nil // the stop is under way
		}
		op := &store.Operation{VMID: vm.ID, Kind: store.OpStop, RequestedBy: t.Owner}
		if err := s.cfg.Store.CreateOperation(ctx, op); err != nil {
			return err
		}
		s.wake()
		step := store.TaskInStop
		s.log.Info("task's VM stopped: its GPU is given back", "task", t.ID, "vm", vm.ID)
		return s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{InStep: &step})
	case store.VMFailed:
		return s.inPutBackFailed(ctx, t, vm, "its VM failed: "+vm.StateReason)
	default:
		return nil // queued, stopping…: the stop or start under way ends first
	}
	var note string
	if t.InStep == store.TaskInStop {
		note = fmt.Sprintf("VM %s stopped: %s", vm.Name, vm.StateReason)
	}
	switch {
	case vm.Profile == t.InProfile && t.InStep == store.TaskInPutBack:
		return s.inFinish(ctx, t, vm, "", "", fmt.Sprintf("VM %s put back to its profile %s", vm.Name, vm.Profile))
	case vm.Profile == t.InProfile:
		return s.inFinish(ctx, t, vm, "", "", note)
	case t.InStep == store.TaskInPutBack:
		return s.inPutBackFailed(ctx, t, vm, s.lastError(ctx, vm.ID, store.OpResize))
	case s.cfg.Resize == nil:
		return s.inPutBackFailed(ctx, t, vm, "this server cannot resize VMs")
	}
	if err := s.cfg.Resize(ctx, vm, t.InProfile, t); err != nil {
		if note != "" {
			if uerr := s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{InNote: note}); uerr != nil {
				return uerr
			}
		}
		return s.inPutBackFailed(ctx, t, vm, err.Error())
	}
	step := store.TaskInPutBack
	return s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{InStep: &step, InNote: note})
}

// inPutBackFailed ends the task as its command ended and leaves the VM
// stopped, not put back: its reason, and a vm.warning to its owner, say so
// and how to put it back.
func (s *Supervisor) inPutBackFailed(ctx context.Context, t *store.Task, vm *store.VM, cause string) error {
	why := fmt.Sprintf("task %s ended, but putting VM %s back to its profile %s failed: %s; put it back with: gpuvm resize %s --back",
		t.ID, vm.Name, t.InProfile, cause, vm.Name)
	s.log.Warn("task's VM not put back", "task", t.ID, "vm", vm.ID, "profile", t.InProfile, "cause", cause)
	return s.inFinish(ctx, t, vm, "", why, fmt.Sprintf("putting VM %s back to its profile %s failed: %s", vm.Name, t.InProfile, cause))
}

// inFinish gives the VM back (its spec names the task no more; vmReason,
// when set, is its new reason, with a vm.warning) and ends the task: in
// state, else in the state it was to end in, else as its command ended.
func (s *Supervisor) inFinish(ctx context.Context, t *store.Task, vm *store.VM, state, vmReason, note string) error {
	for range 5 {
		cur, err := s.cfg.Store.GetVM(ctx, vm.ID)
		if err != nil {
			return err
		}
		spec, err := store.SpecWithKeys(cur.Spec, map[string]string{store.SpecTask: ""})
		if err != nil {
			return err
		}
		reason := cur.StateReason
		if vmReason != "" {
			reason = vmReason
		}
		_, err = s.cfg.Store.UpdateVMState(ctx, cur.ID, cur.Version, store.VMUpdate{State: cur.State, Phase: cur.Phase, StateReason: reason, Spec: &spec})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		if vmReason != "" {
			if err := s.warn(ctx, cur, vmReason); err != nil {
				return err
			}
		}
		return s.inEnded(ctx, t, state, note)
	}
	return fmt.Errorf("give VM %s back: it changed five times meanwhile", vm.ID)
}

// inEnded ends a task whose VM is given back.
func (s *Supervisor) inEnded(ctx context.Context, t *store.Task, state, note string) error {
	reason := t.Reason
	switch {
	case state != "":
		reason = "" // given with its state by the caller's note
	case t.InEnd != "":
		state = t.InEnd
	default:
		state, reason = finalState(t)
	}
	if reason == "" {
		reason = note
	}
	done := store.TaskInDone
	s.forget(t.ID)
	s.log.Info("task ended; its VM is its owner's again", "task", t.ID, "vm", t.InVM, "state", state)
	return s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{State: state, Reason: reason, InStep: &done, InNote: note})
}

// warn gives the VM's owner a vm.warning: the VM was not put back.
func (s *Supervisor) warn(ctx context.Context, vm *store.VM, reason string) error {
	b, _ := json.Marshal(api.VMWarningPayload{Kind: api.WarningTaskPutBack, Action: api.NoticeNone, At: s.cfg.Store.Now(), Reason: reason})
	return s.cfg.Store.AppendEvent(ctx, &store.Event{VMID: vm.ID, Owner: vm.Owner, Type: api.EventVMWarning, Payload: b})
}

// unfinishedOp is the VM's oldest unfinished operation; nil when none.
func (s *Supervisor) unfinishedOp(ctx context.Context, vmID string) (*store.Operation, error) {
	ops, err := s.cfg.Store.ListOperations(ctx, vmID)
	if err != nil {
		return nil, err
	}
	for i := range ops {
		if !ops[i].Finished() {
			return &ops[i], nil
		}
	}
	return nil, nil
}

// lastError is the error of the VM's last operation of kind, in words.
func (s *Supervisor) lastError(ctx context.Context, vmID, kind string) string {
	ops, err := s.cfg.Store.ListOperations(ctx, vmID)
	if err != nil {
		return err.Error()
	}
	for i := len(ops) - 1; i >= 0; i-- {
		if ops[i].Kind == kind && ops[i].Error != "" {
			return ops[i].Error
		}
	}
	return "no reason was recorded"
}

func (s *Supervisor) wake() {
	if s.cfg.Wake != nil {
		s.cfg.Wake()
	}
}
