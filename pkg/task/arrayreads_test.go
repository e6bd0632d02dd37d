package task

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// rowsStore counts the task rows a supervisor's round reads: tasks
// listed, elements listed, rows of the arrays' summaries.
type rowsStore struct {
	*store.Store
	rows int
}

func (r *rowsStore) ListRoundTasks(ctx context.Context) ([]store.Task, error) {
	ts, err := r.Store.ListRoundTasks(ctx)
	r.rows += len(ts)
	return ts, err
}

func (r *rowsStore) ListWaitingElements(ctx context.Context, arrayID string, after, limit int) ([]store.Task, error) {
	ts, err := r.Store.ListWaitingElements(ctx, arrayID, after, limit)
	r.rows += len(ts)
	return ts, err
}

func (r *rowsStore) ArraySummaries(ctx context.Context, ids []string) (map[string]*store.ArraySummary, error) {
	sums, err := r.Store.ArraySummaries(ctx, ids)
	for _, s := range sums {
		r.rows += len(s.Counts) // a row per array and state
	}
	return sums, err
}

func (r *rowsStore) ArrayFirstStart(ctx context.Context, arrayID string) (*time.Time, error) {
	r.rows++
	return r.Store.ArrayFirstStart(ctx, arrayID)
}

// bigArray is a supervisor over an array of 10,000 elements of which all
// but the last four have completed (each started a second after the one
// before, exit code 0 or, for index 17, 3); the four wait for a VM, which
// no Launch makes.
func bigArray(tb testing.TB) (*Supervisor, *rowsStore, *store.Task) {
	tb.Helper()
	return bigArrayOf(tb, 10000-4, false)
}

// bigArrayOf is a supervisor over an array of 10,000 elements, cap 4, of
// which the first ended have completed as bigArray's; the others wait for
// a VM, which Launch makes through the store as the server does when
// launch.
func bigArrayOf(tb testing.TB, ended int, launch bool) (*Supervisor, *rowsStore, *store.Task) {
	tb.Helper()
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	st := storetest.New(tb, storetest.WithClock(clk.Now))
	ctx := context.Background()
	if err := st.CreateUser(ctx, &store.User{Name: "alice"}); err != nil {
		tb.Fatal(err)
	}
	const n = 10000
	arr := &store.Task{ID: "0193a5c0-big", Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 3600, KillWaitS: 30,
		ArraySpec: "0-9999%4", ArrayCap: 4}
	elems := make([]store.Task, n)
	for i := range elems {
		idx := i
		e := store.Task{ID: fmt.Sprintf("%s_%d", arr.ID, i), Owner: "alice", Profile: "tiny", Command: `["true"]`,
			TimeLimitS: 3600, KillWaitS: 30, ArrayIndex: &idx, ArrayCount: n}
		if i < ended {
			code, sig := 0, 0
			if i == 17 {
				code = 3
			}
			started, ended := clk.now.Add(time.Duration(i+1)*time.Second), clk.now.Add(time.Duration(i+2)*time.Second)
			e.State, e.ExitCode, e.Signal, e.StartedAt, e.EndedAt, e.VMID = api.TaskCompleted, &code, &sig, &started, &ended, fmt.Sprintf("vm-%d", i)
		}
		elems[i] = e
	}
	if err := st.CreateTaskArray(ctx, arr, elems); err != nil {
		tb.Fatal(err)
	}
	rs := &rowsStore{Store: st}
	cfg := Config{Store: rs, LogDir: filepath.Join(tb.TempDir(), "tasks"),
		Channel: func(context.Context, string) (string, error) { return "", fmt.Errorf("no channel in this test") }}
	if launch {
		n := 0
		cfg.Launch = func(ctx context.Context, tk *store.Task) error {
			n++
			vm := &store.VM{Name: fmt.Sprintf("task-%d", n), Owner: tk.Owner, Profile: tk.Profile, Hours: 1,
				Spec: fmt.Sprintf(`{"hours":1,"task":%q}`, tk.ID)}
			_, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: tk.Owner, Launch: &store.TaskLaunch{TaskID: tk.ID, Attempt: tk.Attempt}})
			return err
		}
	}
	sup, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(sup.Close)
	return sup, rs, arr
}

// A round over an array of 10,000 elements, 9,996 of them ended, reads
// the live tasks and a row per state of the array, not its 10,000
// elements; the array's row is as its elements make it.
func TestArrayRoundReadsNoEndedElements(t *testing.T) {
	sup, rs, arr := bigArray(t)
	ctx := context.Background()
	if err := sup.Round(ctx); err != nil {
		t.Fatal(err)
	}
	// The array and its four waiting elements, its two states' summary,
	// its first start once.
	if rs.rows > 5+2+1 {
		t.Errorf("the round read %d task rows, want at most 8 (not the array's 10,000 elements)", rs.rows)
	}
	a, err := rs.GetTask(ctx, arr.ID)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Date(2026, 12, 1, 9, 0, 1, 0, time.UTC)
	if a.State != api.TaskPending || a.Reason != "4 pending, 9996 completed" || a.ExitCode == nil || *a.ExitCode != 3 ||
		a.StartedAt == nil || !a.StartedAt.Equal(first) {
		t.Errorf("array = %s %q exit %v started %v", a.State, a.Reason, a.ExitCode, a.StartedAt)
	}
	rs.rows = 0
	if err := sup.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if rs.rows > 5+2 {
		t.Errorf("the next round read %d task rows, want at most 7", rs.rows)
	}
}

// BenchmarkArrayRound is a supervisor's round over an array of 10,000
// elements, 9,996 of them ended; rows/op is the task rows it reads.
func BenchmarkArrayRound(b *testing.B) {
	sup, rs, _ := bigArray(b)
	ctx := context.Background()
	if err := sup.Round(ctx); err != nil {
		b.Fatal(err)
	}
	rs.rows = 0
	b.ResetTimer()
	for range b.N {
		if err := sup.Round(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rs.rows)/float64(b.N), "rows/op")
}

// A round at the start of an array of 10,000 elements with %4 reads the
// four it launches, not the 9,996 that wait for their turn; those are
// told so all the same. The next round, the four running, reads none of
// them.
func TestArrayStartReadsOnlyWhatItLaunches(t *testing.T) {
	sup, rs, arr := bigArrayOf(t, 0, true)
	ctx := context.Background()
	if err := sup.Round(ctx); err != nil {
		t.Fatal(err)
	}
	// The array, its four elements launched, its one state's summary.
	if rs.rows > 1+4+1 {
		t.Errorf("the round read %d task rows, want at most 6 (not the array's 10,000 waiting elements)", rs.rows)
	}
	elems, _, err := rs.ListArrayElementsAfter(ctx, arr.ID, -1, 10000)
	if err != nil {
		t.Fatal(err)
	}
	turn := "waiting for its turn: at most 4 of its array's elements run at once"
	for _, e := range elems {
		launched := e.VMID != ""
		if launched != (*e.ArrayIndex < 4) || !launched && (e.State != api.TaskPending || e.Reason != turn) {
			t.Fatalf("element %d: vm %q, %s %q", *e.ArrayIndex, e.VMID, e.State, e.Reason)
		}
	}
	rs.rows = 0
	if err := sup.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if rs.rows > 1+4+1 {
		t.Errorf("the next round read %d task rows, want at most 6", rs.rows)
	}
}

// A round over an array of 10,000 elements with %4 whose launches the
// store all refuses (another gpuvmd launched them, or the cap was reached
// there) stops at the cap: it tries four, reading the four, not the next
// four and the next until the array's end.
func TestArrayRoundStopsAtRefusedLaunches(t *testing.T) {
	sup, rs, _ := bigArrayOf(t, 0, false)
	launches := 0
	sup.cfg.Launch = func(ctx context.Context, tk *store.Task) error {
		launches++
		return fmt.Errorf("launch task %s: 4 of its array's elements run, its cap: %w", tk.ID, store.ErrConflict)
	}
	if err := sup.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The array, the four elements tried, its one state's summary.
	if rs.rows > 1+4+1 || launches > 4 {
		t.Errorf("the round read %d task rows and launched %d times, want at most 6 rows and 4 launches", rs.rows, launches)
	}
}

// BenchmarkArrayStartRound is a supervisor's round over an array of
// 10,000 elements with %4, four of them launched, the others waiting for
// their turn; rows/op is the task rows it reads.
func BenchmarkArrayStartRound(b *testing.B) {
	sup, rs, _ := bigArrayOf(b, 0, true)
	ctx := context.Background()
	if err := sup.Round(ctx); err != nil {
		b.Fatal(err)
	}
	rs.rows = 0
	b.ResetTimer()
	for range b.N {
		if err := sup.Round(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rs.rows)/float64(b.N), "rows/op")
}
