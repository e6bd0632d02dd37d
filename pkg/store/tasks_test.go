package store

import (
	"context"
	"errors"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
)

func TestTasks(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "alice")
		mustUser(t, s, "bob")
		task := &Task{ID: "t-1", Owner: "alice", Profile: "tiny", Command: `["sh","-c","exit 3"]`, TimeLimitS: 3600, KillWaitS: 30}
		vm := &VM{Name: "task-t1", Owner: "alice", Profile: "tiny", Spec: `{"hours":1,"task":"t-1"}`, Hours: 1}
		if _, err := s.CreateVM(ctx, vm, CreateVMOptions{RequestedBy: "alice", Task: task}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetTask(ctx, "t-1")
		if err != nil || got.VMID != vm.ID || got.State != api.TaskPending || got.Command != task.Command || got.EndedAt != nil {
			t.Fatalf("get = %+v, %v", got, err)
		}
		if of, err := s.TaskOfVM(ctx, vm.ID); err != nil || of.ID != "t-1" {
			t.Fatalf("of vm = %+v, %v", of, err)
		}
		// A task without a time limit writes neither it nor its VM.
		bad := &VM{Name: "task-bad", Owner: "bob", Profile: "tiny", Hours: 1}
		if _, err := s.CreateVM(ctx, bad, CreateVMOptions{Task: &Task{ID: "t-2", Owner: "bob", Profile: "tiny"}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("task without a limit = %v, want ErrInvalid", err)
		}
		if _, err := s.GetVMByName(ctx, "bob", "task-bad"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the VM of a refused task was written: %v", err)
		}
		now := s.Now()
		if err := s.UpdateTask(ctx, "t-1", []string{api.TaskPending}, TaskUpdate{State: api.TaskRunning, StartedAt: &now}); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateTask(ctx, "t-1", []string{api.TaskPending}, TaskUpdate{State: api.TaskBooting}); !errors.Is(err, ErrConflict) {
			t.Fatalf("move from a state it is not in = %v, want ErrConflict", err)
		}
		code, sig, n := 3, 0, int64(42)
		if err := s.UpdateTask(ctx, "t-1", nil, TaskUpdate{State: api.TaskFailed, Reason: "exit 3", ExitCode: &code, Signal: &sig, LogBytes: &n}); err != nil {
			t.Fatal(err)
		}
		got, _ = s.GetTask(ctx, "t-1")
		if got.State != api.TaskFailed || got.ExitCode == nil || *got.ExitCode != 3 || got.Signal == nil || *got.Signal != 0 ||
			got.LogBytes != 42 || got.EndedAt == nil || got.StartedAt == nil || got.Reason != "exit 3" {
			t.Fatalf("ended = %+v", got)
		}
		// An ended task never changes.
		if err := s.UpdateTask(ctx, "t-1", nil, TaskUpdate{State: api.TaskRunning}); !errors.Is(err, ErrConflict) {
			t.Fatalf("update of an ended task = %v, want ErrConflict", err)
		}
		if err := s.UpdateTask(ctx, "nope", nil, TaskUpdate{State: api.TaskRunning}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("update of a missing task = %v, want ErrNotFound", err)
		}
		if live, err := s.ListRoundTasks(ctx); err != nil || len(live) != 0 {
			t.Fatalf("live = %+v, %v", live, err)
		}
		if l, err := s.ListTasks(ctx, "bob", 0); err != nil || len(l) != 0 {
			t.Fatalf("bob's = %+v, %v", l, err)
		}
		if l, err := s.ListTasks(ctx, "", 10); err != nil || len(l) != 1 || l[0].ID != "t-1" {
			t.Fatalf("all = %+v, %v", l, err)
		}
	})
}
