package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// An array's elements in brief (counts by state, the highest exit code
// and signal, how many started, the first start) and by pages, on each
// database.
func TestArraySummariesAndPages(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "alice")
		arr := &Task{ID: "arr", Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 60, ArraySpec: "0-6"}
		base := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
		var elems []Task
		for i := range 7 {
			idx := i
			e := Task{ID: fmt.Sprintf("arr_%d", i), Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 60, ArrayIndex: &idx}
			switch {
			case i < 3:
				code, sig, at := i, 0, base.Add(time.Duration(10-i)*time.Minute)
				e.State, e.ExitCode, e.Signal, e.StartedAt = api.TaskFailed, &code, &sig, &at
			case i == 3:
				code, sig, at := 0, 9, base.Add(time.Hour)
				e.State, e.ExitCode, e.Signal, e.StartedAt = api.TaskTimeout, &code, &sig, &at
			}
			elems = append(elems, e)
		}
		if err := s.CreateTaskArray(ctx, arr, elems); err != nil {
			t.Fatal(err)
		}
		sums, err := s.ArraySummaries(ctx, []string{"arr", "none"})
		if err != nil {
			t.Fatal(err)
		}
		sum := sums["arr"]
		if len(sums) != 1 || sum == nil || fmt.Sprint(sum.Counts) != "map[failed:3 pending:3 timeout:1]" || sum.Started != 4 ||
			sum.ExitCode == nil || *sum.ExitCode != 2 || sum.Signal == nil || *sum.Signal != 9 {
			t.Fatalf("summaries = %v; arr %+v", sums, sum)
		}
		first, err := s.ArrayFirstStart(ctx, "arr")
		if err != nil || first == nil || !first.Equal(base.Add(8*time.Minute)) {
			t.Fatalf("first start = %v, %v", first, err)
		}
		if none, err := s.ArrayFirstStart(ctx, "none"); err != nil || none != nil {
			t.Fatalf("first start of no array = %v, %v", none, err)
		}
		var got []string
		after, pages := -1, 0
		for {
			page, more, err := s.ListArrayElementsAfter(ctx, "arr", after, 3)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, e := range page {
				got = append(got, e.ID)
			}
			if !more {
				break
			}
			after = *page[len(page)-1].ArrayIndex
		}
		if fmt.Sprint(got) != "[arr_0 arr_1 arr_2 arr_3 arr_4 arr_5 arr_6]" || pages != 3 {
			t.Fatalf("pages: %v in %d", got, pages)
		}
	})
}
