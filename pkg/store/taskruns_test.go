package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// TestListEndedTaskRuns: the tasks whose command started and that ended
// since, newest end first, at most the limit; not those that never
// started, nor those that ended before.
func TestListEndedTaskRuns(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "alice")
		mk := func(id string, started bool) {
			t.Helper()
			task := &Task{ID: id, Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 3600, KillWaitS: 30}
			vm := &VM{Name: "task-" + id, Owner: "alice", Profile: "tiny", Spec: fmt.Sprintf(`{"task":%q}`, id), Hours: 1}
			if _, err := s.CreateVM(ctx, vm, CreateVMOptions{RequestedBy: "alice", Task: task}); err != nil {
				t.Fatal(err)
			}
			if started {
				at := s.Now().Add(-10 * time.Minute)
				if err := s.UpdateTask(ctx, id, nil, TaskUpdate{State: api.TaskRunning, StartedAt: &at}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.UpdateTask(ctx, id, nil, TaskUpdate{State: api.TaskCancelled}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // distinct ends
		}
		mk("old", true)
		since := s.Now()
		time.Sleep(5 * time.Millisecond)
		mk("never-started", false)
		mk("t1", true)
		mk("t2", true)
		mk("t3", true)
		var ids []string
		runs, err := s.ListEndedTaskRuns(ctx, since, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			ids = append(ids, r.ID)
			if r.TimeLimitS != 3600 || r.StartedAt == nil || r.EndedAt == nil || r.Owner != "alice" {
				t.Errorf("%s: %+v", r.ID, r)
			}
		}
		if want := []string{"t3", "t2"}; !slices.Equal(ids, want) {
			t.Errorf("ended since: %v, want %v", ids, want)
		}
	})
}
