package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

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

// seedEndedTasks writes n tasks that ran in a VM of their own and ended,
// one every minute back from end (the newest at end).
func seedEndedTasks(tb testing.TB, s *Store, n int, end time.Time) {
	tb.Helper()
	mustUser(tb, s, "alice")
	tasks := make([]Task, n)
	for i := range tasks {
		ended := end.Add(-time.Duration(i) * time.Minute)
		started := ended.Add(-10 * time.Minute)
		tasks[i] = Task{ID: fmt.Sprintf("old%06d", i), Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 3600,
			KillWaitS: 30, State: api.TaskCompleted, VMID: fmt.Sprintf("vm%d", i), Attempt: 1, CreatedAt: started, UpdatedAt: ended,
			StartedAt: &started, EndedAt: &ended}
	}
	if err := s.db.CreateInBatches(tasks, 500).Error; err != nil {
		tb.Fatal(err)
	}
	if err := s.db.Exec("ANALYZE").Error; err != nil {
		tb.Fatal(err)
	}
}

// The estimates read the tasks ended in the last 30 days at every replay
// of the state: that read goes through tasks_ended, not every task ever
// recorded.
func TestEndedTaskRunsReadThroughTheIndex(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		now := d.clock.Now().UTC()
		seedEndedTasks(t, s, 3000, now)
		since := now.Add(-30 * time.Hour)
		runs, err := s.ListEndedTaskRuns(context.Background(), since, 2000)
		if err != nil || len(runs) != 30*60+1 {
			t.Fatalf("ended since 30 hours: %d, %v; want %d", len(runs), err, 30*60+1)
		}
		plan := explain(t, s, func(tx *gorm.DB) *gorm.DB { return endedTaskRunsQuery(tx, since, 2000).Find(&[]Task{}) })
		if !strings.Contains(plan, "tasks_ended") {
			t.Errorf("the ended tasks are not read through tasks_ended:\n%s", plan)
		}
	})
}

// BenchmarkEndedTaskRuns is the estimates' read of the ended tasks (the
// last 30 days, at most 2,000) among 100,000 ended tasks, one a minute
// (about 69 days of them).
func BenchmarkEndedTaskRuns(b *testing.B) {
	for _, driver := range drivers {
		b.Run(driver, func(b *testing.B) {
			d := newTestDB(b, driver)
			s := d.open(b)
			now := d.clock.Now().UTC()
			seedEndedTasks(b, s, 100000, now)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				runs, err := s.ListEndedTaskRuns(ctx, now.Add(-30*24*time.Hour), 2000)
				if err != nil || len(runs) != 2000 {
					b.Fatalf("%d, %v", len(runs), err)
				}
			}
		})
	}
}
