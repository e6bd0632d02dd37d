package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// inFixture is alice's stopped VM "desk" of profile mig-1g and a task that
// runs in it on profile whole; its resizes are done at once by the test's
// Resize, which fails when failResize says so.
type inFixture struct {
	*fixture
	resizes    []string
	failResize func(profile string) error
	withdrawn  int
}

func newInFixture(t *testing.T) *inFixture {
	t.Helper()
	clk := &clock{now: time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)}
	st := storetest.New(t, storetest.WithClock(clk.Now))
	ctx := context.Background()
	if err := st.CreateUser(ctx, &store.User{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	f := &inFixture{fixture: &fixture{t: t, ctx: ctx, st: st, clk: clk, sock: filepath.Join(t.TempDir(), "task.sock")}}
	f.vm = &store.VM{Name: "desk", Owner: "alice", Profile: "mig-1g", Spec: `{"hours":48}`, Hours: 48}
	op, err := st.CreateVM(ctx, f.vm, store.CreateVMOptions{RequestedBy: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.FinishOperation(ctx, op.ID, nil); err != nil {
		t.Fatal(err)
	}
	f.setVM(store.VMStopped)
	f.task = &store.Task{ID: "0193a5c0-in", Owner: "alice", Profile: "whole", Command: `["train"]`, TimeLimitS: 8 * 3600, KillWaitS: 30, InProfile: "mig-1g"}
	vm, _ := st.GetVM(ctx, f.vm.ID)
	if err := st.CreateTaskIn(ctx, f.task, vm, `{"hours":48,"task":"0193a5c0-in"}`, "runs task 0193a5c0-in"); err != nil {
		t.Fatal(err)
	}
	sup, err := New(Config{Store: st, LogDir: filepath.Join(t.TempDir(), "tasks"), BootTimeout: 5 * time.Minute,
		Channel: func(context.Context, string) (string, error) { return f.sock, nil },
		Resize: func(ctx context.Context, vm *store.VM, profile string, tk *store.Task) error {
			if tk.ID != f.task.ID || vm.State != store.VMStopped {
				return fmt.Errorf("resize of %s (%s) for %s", vm.Name, vm.State, tk.ID)
			}
			f.resizes = append(f.resizes, profile)
			if f.failResize != nil {
				if err := f.failResize(profile); err != nil {
					return err
				}
			}
			_, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: vm.State, Phase: vm.Phase, StateReason: "resized", Spec: &vm.Spec, Profile: &profile})
			return err
		},
		// As the orchestrator's WithdrawStart: a start that waits in the
		// queue is failed and the VM stopped again.
		Withdraw: func(ctx context.Context, vmID, reason string) (bool, error) {
			vm, err := st.GetVM(ctx, vmID)
			if err != nil || vm.State != store.VMQueued {
				return false, err
			}
			f.withdrawn++
			ops, err := st.ListOperations(ctx, vmID)
			if err != nil {
				return false, err
			}
			for _, op := range ops {
				if op.Kind == store.OpStart && !op.Finished() {
					if err := st.FinishOperation(ctx, op.ID, errors.New("withdrawn: "+reason)); err != nil {
						return false, err
					}
				}
			}
			_, err = st.UpdateVMState(ctx, vmID, vm.Version, store.VMUpdate{State: store.VMStopped, StateReason: reason})
			return err == nil, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.sup = sup
	t.Cleanup(sup.Close)
	return f
}

// finishOps finishes the VM's unfinished operations of kind as the
// orchestrator would, the VM then in state; it reports how many.
func (f *inFixture) finishOps(kind, state string) int {
	f.t.Helper()
	ops, err := f.st.ListOperations(f.ctx, f.vm.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	n := 0
	for _, op := range ops {
		if op.Kind == kind && !op.Finished() {
			if err := f.st.FinishOperation(f.ctx, op.ID, nil); err != nil {
				f.t.Fatal(err)
			}
			n++
		}
	}
	f.setVM(state)
	return n
}

// A task in alice's own MIG desktop VM: resized to the whole-GPU profile,
// started, followed, stopped and resized back; it ends as its command
// ended, the VM stopped with its own profile, named by no task, never
// deleted, and the task's steps say what was done.
func TestTaskInOwnVM(t *testing.T) {
	f := newInFixture(t)
	f.round()
	if got := f.get(); got.State != api.TaskPending || got.InStep != store.TaskInResize || !strings.Contains(got.Reason, "resized from profile mig-1g to whole") {
		t.Fatalf("after the first round: %+v", got)
	}
	f.round()
	if got := f.get(); got.InStep != store.TaskInStart {
		t.Fatalf("after the resize: %+v", got)
	}
	if n := f.finishOps(store.OpStart, store.VMQueued); n != 1 {
		t.Fatalf("%d start operations, want 1", n)
	}
	f.round()
	msgs, send, _ := f.guest()
	f.setVM(store.VMRunning)
	f.round()
	if m := <-msgs; m.T != "from" {
		t.Fatalf("first message %+v", m)
	}
	send(`{"t":"hello","task":"0193a5c0-in"}`)
	send(`{"t":"start","pid":9}`)
	f.waitState(api.TaskRunning)
	send(`{"t":"exit","code":0,"signal":0}`)
	f.waitState(api.TaskCompleting)
	f.round()
	if f.deleteRequested() {
		t.Fatal("the owner's own VM was deleted")
	}
	if n := f.finishOps(store.OpStop, store.VMStopped); n != 1 {
		t.Fatalf("%d stop operations after the command, want 1", n)
	}
	f.round() // resized back
	ended := f.waitState(api.TaskCompleted)
	if strings.Join(f.resizes, ",") != "whole,mig-1g" {
		t.Errorf("resizes %v", f.resizes)
	}
	vm, _ := f.st.GetVM(f.ctx, f.vm.ID)
	if vm.State != store.VMStopped || vm.Profile != "mig-1g" || strings.Contains(vm.Spec, "task") || !strings.Contains(vm.Spec, `"hours":48`) {
		t.Errorf("the VM after the task: %s %s %s", vm.State, vm.Profile, vm.Spec)
	}
	steps := strings.Join(ended.InStepList(), " | ")
	for _, want := range []string{"VM desk resized from profile mig-1g to whole", "VM desk stopped", "VM desk put back to its profile mig-1g"} {
		if !strings.Contains(steps, want) {
			t.Errorf("steps %q lack %q", steps, want)
		}
	}
	if ended.InStep != store.TaskInDone || ended.ExitCode == nil || *ended.ExitCode != 0 || ended.Reason != "the command exited 0" {
		t.Errorf("ended %+v", ended)
	}
}

// A put-back the orchestrator refuses: the task ends as its command did,
// the VM stays stopped on the task's profile, named by no task, its
// reason and a vm.warning saying how to put it back.
func TestTaskInPutBackFails(t *testing.T) {
	f := newInFixture(t)
	f.failResize = func(profile string) error {
		if profile == "mig-1g" {
			return errors.New("the sharing policy refuses it")
		}
		return nil
	}
	f.round()
	f.round()
	f.finishOps(store.OpStart, store.VMRunning)
	_, send, _ := f.guest()
	f.round()
	send(`{"t":"hello"}`)
	send(`{"t":"start","pid":9}`)
	f.waitState(api.TaskRunning)
	send(`{"t":"exit","code":4,"signal":0}`)
	f.waitState(api.TaskCompleting)
	f.round()
	f.finishOps(store.OpStop, store.VMStopped)
	ended := f.waitState(api.TaskFailed)
	if ended.ExitCode == nil || *ended.ExitCode != 4 || !strings.Contains(ended.InSteps, "putting VM desk back to its profile mig-1g failed: the sharing policy refuses it") {
		t.Errorf("ended %+v", ended)
	}
	vm, _ := f.st.GetVM(f.ctx, f.vm.ID)
	if vm.State != store.VMStopped || vm.Profile != "whole" || strings.Contains(vm.Spec, "task") || !strings.Contains(vm.StateReason, "gpuvm resize desk --back") {
		t.Errorf("the VM: %s %s %s %q", vm.State, vm.Profile, vm.Spec, vm.StateReason)
	}
	evs, err := f.st.ListEventsSince(f.ctx, 0, store.EventFilter{VMID: vm.ID, Type: api.EventVMWarning, Limit: 10})
	if err != nil || len(evs) != 1 {
		t.Fatalf("warnings %v %v", evs, err)
	}
	var p api.VMWarningPayload
	if err := json.Unmarshal(evs[0].Payload, &p); err != nil || p.Kind != api.WarningTaskPutBack || !strings.Contains(p.Reason, "gpuvm resize desk --back") {
		t.Errorf("warning %+v %v", p, err)
	}
}

// A cancel before the VM was touched gives it back at once, unchanged.
func TestTaskInCancelledBeforeStart(t *testing.T) {
	f := newInFixture(t)
	if _, err := f.st.CancelTask(f.ctx, f.task.ID); err != nil {
		t.Fatal(err)
	}
	f.round()
	got := f.get()
	vm, _ := f.st.GetVM(f.ctx, f.vm.ID)
	if got.State != api.TaskCancelled || len(f.resizes) != 0 || vm.Profile != "mig-1g" || strings.Contains(vm.Spec, "task") {
		t.Errorf("task %+v, resizes %v, vm %s %s", got, f.resizes, vm.Profile, vm.Spec)
	}
}

// A cancel while the VM's start waits in the queue for the task's GPU: the
// start is withdrawn, the VM put back to its own profile, stopped, named
// by no task, and the task is cancelled, not left pending until a GPU
// comes.
func TestTaskInCancelledWhileQueued(t *testing.T) {
	f := newInFixture(t)
	f.round() // resized
	f.round() // its start queued
	f.setVM(store.VMQueued)
	f.round()
	if got := f.get(); got.State != api.TaskPending || got.InStep != store.TaskInStart {
		t.Fatalf("before the cancel: %+v", got)
	}
	if _, err := f.st.CancelTask(f.ctx, f.task.ID); err != nil {
		t.Fatal(err)
	}
	f.round() // the start withdrawn, the put-back queued
	if f.withdrawn != 1 {
		t.Fatalf("%d withdrawals, want 1", f.withdrawn)
	}
	f.round() // put back
	got := f.get()
	if got.State != api.TaskCancelled || got.Reason != "cancelled before it started" || got.InStep != store.TaskInDone {
		t.Errorf("task %+v", got)
	}
	if strings.Join(f.resizes, ",") != "whole,mig-1g" {
		t.Errorf("resizes %v", f.resizes)
	}
	vm, _ := f.st.GetVM(f.ctx, f.vm.ID)
	if vm.State != store.VMStopped || vm.Profile != "mig-1g" || strings.Contains(vm.Spec, "task") || !strings.Contains(vm.Spec, `"hours":48`) {
		t.Errorf("the VM after the cancel: %s %s %s", vm.State, vm.Profile, vm.Spec)
	}
	if f.deleteRequested() {
		t.Error("the owner's own VM was deleted")
	}
	ops, _ := f.st.ListOperations(f.ctx, f.vm.ID)
	for _, op := range ops {
		if !op.Finished() {
			t.Errorf("operation %s %s left unfinished", op.Kind, op.ID)
		}
	}
}

// A cancelled task whose VM is found stopped with its start gone (withdrawn
// by an earlier look, or failed) ends cancelled, not failed.
func TestTaskInCancelledStartGone(t *testing.T) {
	f := newInFixture(t)
	f.round() // resized
	f.round() // its start queued
	if _, err := f.st.CancelTask(f.ctx, f.task.ID); err != nil {
		t.Fatal(err)
	}
	ops, _ := f.st.ListOperations(f.ctx, f.vm.ID)
	for _, op := range ops {
		if op.Kind == store.OpStart && !op.Finished() {
			if err := f.st.FinishOperation(f.ctx, op.ID, errors.New("withdrawn: elsewhere")); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.round() // put back
	f.round()
	got := f.get()
	if got.State != api.TaskCancelled || f.withdrawn != 0 {
		t.Errorf("task %s %q, %d withdrawals", got.State, got.Reason, f.withdrawn)
	}
	vm, _ := f.st.GetVM(f.ctx, f.vm.ID)
	if vm.State != store.VMStopped || vm.Profile != "mig-1g" || strings.Contains(vm.Spec, "task") {
		t.Errorf("the VM: %s %s %s", vm.State, vm.Profile, vm.Spec)
	}
}
