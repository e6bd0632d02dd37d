package orchestrator

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/task"
)

// The task supervisor and the orchestrator together, wired as gpuvmd
// wires them (cmd/gpuvmd newTaskSupervisor: its resize is QueueResize,
// its withdraw WithdrawStart): a task in its owner's own VM (--in),
// cancelled while the VM's start for it waits in the queue (every GPU
// drained), ends cancelled; its start is withdrawn and never runs, even
// once the GPUs are back, and the VM is stopped with its own profile and
// domain, named by no task, holding no GPU.
func TestTaskInCancelledWhileQueuedSupervised(t *testing.T) {
	e := newEnv(t, "h100x8")
	e.withPolicy(taskInProfiles)
	e.cfg.Server.Libvirt.StoragePool = "default-pool"
	ctx := context.Background()
	o := e.orchWith(taskInHV{&resizeHV{Hypervisor: e.hv, conn: &faultyHV{Conn: e.hv}}})
	vm := e.stoppedVM(o, "ann", "in-1g", "desk")
	_, before := e.domainXML(vm.ID)
	sup, err := task.New(task.Config{Store: e.st, Log: e.log, LogDir: filepath.Join(t.TempDir(), "tasks"), Host: o.Host(),
		Resize: func(ctx context.Context, vm *store.VM, profile string, tk *store.Task) error {
			_, _, _, err := o.QueueResize(ctx, vm, profile, ResizeBy{Name: tk.Owner, Admin: true})
			return err
		},
		Withdraw: o.WithdrawStart,
		Channel:  func(context.Context, string) (string, error) { return "", errors.New("no runner in this test") }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	// rounds runs the supervisor's and the orchestrator's rounds until
	// done says the task is where it should be.
	rounds := func(what string, done func(tk *store.Task, vm *store.VM) bool) *store.Task {
		t.Helper()
		for range 20 {
			if err := sup.Round(ctx); err != nil {
				t.Fatalf("%s: round: %v", what, err)
			}
			o.Drain(ctx)
			tk, err := e.st.GetTask(ctx, "0193b000-0000-7000-8000-000000000003")
			if err != nil {
				t.Fatal(err)
			}
			if done(tk, e.vm(vm.ID)) {
				return tk
			}
		}
		tk, _ := e.st.GetTask(ctx, "0193b000-0000-7000-8000-000000000003")
		cur := e.vm(vm.ID)
		t.Fatalf("%s: task %s %q (step %q), vm %s %s %q", what, tk.State, tk.Reason, tk.InStep, cur.State, cur.Profile, cur.StateReason)
		return nil
	}

	gpus := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}
	for _, gpu := range gpus {
		if err := e.st.DrainGPU(ctx, &store.GPUDrain{Host: "test-host", GPUAddress: gpu, Reason: "maintenance", DrainedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	tk := &store.Task{ID: "0193b000-0000-7000-8000-000000000003", Owner: "ann", Profile: "in-whole", Command: `["train"]`,
		TimeLimitS: 3600, KillWaitS: 30, InProfile: "in-1g"}
	spec, err := store.SpecWithKeys(vm.Spec, map[string]string{store.SpecTask: tk.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.CreateTaskIn(ctx, tk, e.vm(vm.ID), spec, "runs task "+tk.ID); err != nil {
		t.Fatal(err)
	}
	// Resized to the task's profile, then started: the start waits.
	rounds("queued", func(tk *store.Task, vm *store.VM) bool {
		return tk.InStep == store.TaskInStart && vm.State == store.VMQueued && vm.Profile == "in-whole"
	})
	ops, err := e.st.ListOperations(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	var start *store.Operation
	for i := range ops {
		if ops[i].Kind == store.OpStart && !ops[i].Finished() {
			start = &ops[i]
		}
	}
	if start == nil {
		t.Fatalf("no start waits for the task: %+v", ops)
	}

	if n, err := e.st.CancelTask(ctx, tk.ID); err != nil || n != 1 {
		t.Fatalf("cancel: %d, %v", n, err)
	}
	got := rounds("cancelled", func(tk *store.Task, _ *store.VM) bool { return tk.EndedAt != nil })
	if got.State != api.TaskCancelled || got.StartedAt != nil {
		t.Fatalf("task = %s %q started %v, want cancelled, never started", got.State, got.Reason, got.StartedAt)
	}
	e.wantOp(start.ID, store.OpFailed, "withdrawn: task "+tk.ID+" was cancelled")

	for _, gpu := range gpus {
		if _, err := e.st.UndrainGPU(ctx, "test-host", gpu); err != nil {
			t.Fatal(err)
		}
	}
	if err := sup.Round(ctx); err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	cur := e.wantVM(vm.ID, store.VMStopped, "")
	if cur.Profile != "in-1g" || store.TaskOfSpec(cur.Spec) != "" {
		t.Errorf("the VM after the task: profile %s, spec %s; want in-1g, no task", cur.Profile, cur.Spec)
	}
	if e.domainState(vm.ID) == hypervisor.StateRunning {
		t.Error("the withdrawn start ran")
	}
	e.wantGPUGivenBack(vm.ID)
	_, after := e.domainXML(vm.ID)
	if after.VCPU.Value != before.VCPU.Value || after.Memory.Value != before.Memory.Value || diskSources(before) != diskSources(after) || e.hasTaskChannel(vm.ID) {
		t.Errorf("after the task the domain is vcpu %+v memory %+v disks %s, want vcpu %+v memory %+v disks %s, no task channel",
			after.VCPU, after.Memory, diskSources(after), before.VCPU, before.Memory, diskSources(before))
	}
}
