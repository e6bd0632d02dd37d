package store

import (
	"context"
	"errors"
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

// The supervisor's round reads an array's waiting elements apart, page by
// page, and tells those beyond its cap to wait without reading them, on
// each database: the round's own read has the array, a task not of an
// array and the elements with a VM or cancelled, not the waiting ones.
func TestRoundTasksAndWaitingElements(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "alice")
		arr := &Task{ID: "arr", Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 60, ArraySpec: "0-5%2", ArrayCap: 2}
		at := d.clock.Now().UTC()
		var elems []Task
		for i := range 6 {
			idx := i
			e := Task{ID: fmt.Sprintf("arr_%d", i), Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 60, ArrayIndex: &idx}
			switch i {
			case 0:
				e.VMID = "vm0"
			case 1:
				e.State, e.EndedAt, e.VMID = api.TaskCompleted, &at, "vm1"
			case 2:
				e.CancelAt = &at
			}
			elems = append(elems, e)
		}
		if err := s.CreateTaskArray(ctx, arr, elems); err != nil {
			t.Fatal(err)
		}
		single := &Task{ID: "single", Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 60}
		if err := s.Tx(ctx, func(tx *Store) error { return tx.insertTask(single, "") }); err != nil {
			t.Fatal(err)
		}
		ids := func(ts []Task) string {
			var out []string
			for _, t := range ts {
				out = append(out, t.ID)
			}
			return fmt.Sprint(out)
		}
		round, err := s.ListRoundTasks(ctx)
		if err != nil || ids(round) != "[arr arr_0 arr_2 single]" {
			t.Fatalf("round's tasks = %s, %v", ids(round), err)
		}
		vms, err := s.ListLiveTaskVMs(ctx)
		if err != nil || ids(vms) != "[arr_0]" || vms[0].VMID != "vm0" || vms[0].TimeLimitS != 60 {
			t.Fatalf("live tasks' VMs = %+v, %v", vms, err)
		}
		page, err := s.ListWaitingElements(ctx, "arr", -1, 2)
		if err != nil || ids(page) != "[arr_3 arr_4]" {
			t.Fatalf("first page = %s, %v", ids(page), err)
		}
		page, err = s.ListWaitingElements(ctx, "arr", 4, 2)
		if err != nil || ids(page) != "[arr_5]" {
			t.Fatalf("second page = %s, %v", ids(page), err)
		}
		if _, err := s.ListWaitingElements(ctx, "arr", -1, 0); !errors.Is(err, ErrInvalid) {
			t.Fatalf("a page of none: %v", err)
		}
		for _, want := range []int64{2, 0} {
			n, err := s.SetWaitingReason(ctx, "arr", 3, "wait")
			if err != nil || n != want {
				t.Fatalf("set the reason: %d, %v; want %d", n, err, want)
			}
		}
		all, _, err := s.ListArrayElementsAfter(ctx, "arr", -1, 100)
		if err != nil {
			t.Fatal(err)
		}
		var reasons []string
		for _, e := range all {
			reasons = append(reasons, e.Reason)
		}
		if fmt.Sprintf("%q", reasons) != `["" "" "" "" "wait" "wait"]` {
			t.Fatalf("reasons = %q", reasons)
		}
	})
}
