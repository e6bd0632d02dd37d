package task

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

func TestParseArray(t *testing.T) {
	tests := []struct {
		spec    string
		want    string // the indices, or the error's words
		wantCap int
	}{
		{"0-5%2", "[0 1 2 3 4 5]", 2},
		{"1,3,5-7", "[1 3 5 6 7]", 0},
		{"7", "[7]", 0},
		{"999999", "[999999]", 0},
		{"0-9999", "10000 elements", 0},
		{"0-10000", "at most 10000 elements", 0},
		{"0-1000000000", "not an index", 0},
		{"1000000", "not an index", 0},
		{"5-3", "goes backwards", 0},
		{"%0", "not a cap", 0},
		{"0-3%0", "not a cap", 0},
		{"0-3%", "not a cap", 0},
		{"0-3%x", "not a cap", 0},
		{"a-b", "not an index", 0},
		{"", "give indices", 0},
		{"1,,2", "not an index", 0},
		{"-1", "not an index", 0},
		{"1-2-3", "not an index", 0},
		{"1,1", "given twice", 0},
		{"0-5,3", "given twice", 0},
		{"1\x002", "not an index", 0},
		{"+1", "not an index", 0},
		{" 1", "not an index", 0},
		{strings.Repeat("1,", 1<<19), "at most 65536 bytes", 0},
		{strings.Repeat("0-999999,", 2), "at most 10000 elements", 0},
	}
	for _, tc := range tests {
		a, err := ParseArray(tc.spec)
		got := fmt.Sprint(a.Indices)
		if err != nil {
			got = err.Error()
		}
		if tc.want == "10000 elements" {
			if err != nil || len(a.Indices) != 10000 {
				t.Errorf("ParseArray(%.20q) = %d elements, %v", tc.spec, len(a.Indices), err)
			}
			continue
		}
		if !strings.Contains(got, tc.want) || a.Cap != tc.wantCap {
			t.Errorf("ParseArray(%.20q) = %s cap %d; want %q cap %d", tc.spec, got, a.Cap, tc.want, tc.wantCap)
		}
	}
}

func TestParseWarnSignalAndRetryOn(t *testing.T) {
	for _, tc := range []struct {
		spec, want string
	}{
		{"USR1@10m", "USR1 10m0s"},
		{"sigusr2@600", "USR2 10m0s"},
		{"TERM", "TERM 1m0s"},
		{"KILL@1m", "not a signal"},
		{"FOO@1m", "not a signal"},
		{"USR1@1h", "not shorter than the time limit"},
		{"USR1@2h", "not shorter"},
		{"USR1@0", "at least 1s"},
		{"USR1@-5m", "at least 1s"},
		{"USR1@soon", "not a lead"},
		{"USR1@1000000000h", "not a lead"},
		{"", "not a signal"},
	} {
		name, lead, err := ParseWarnSignal(tc.spec, time.Hour)
		got := fmt.Sprintf("%s %s", name, lead)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("ParseWarnSignal(%q) = %s; want %q", tc.spec, got, tc.want)
		}
	}
	for _, tc := range []struct {
		list []string
		want string
	}{
		{[]string{"2", "137", "node_fail", "2"}, "2,137,node_fail"},
		{[]string{"007"}, "7"},
		{[]string{"256"}, "not an exit code"},
		{[]string{"-1"}, "not an exit code"},
		{[]string{"timeout"}, "not an exit code"},
		{[]string{"1e3"}, "not an exit code"},
		{make([]string, 300), "at most"},
	} {
		got, err := ParseRetryOn(tc.list)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("ParseRetryOn(%q) = %s; want %q", tc.list, got, tc.want)
		}
	}
	code := func(n int) *int { return &n }
	for _, tc := range []struct {
		stored, state string
		code, sig     *int
		want          bool
	}{
		{"2,137", api.TaskFailed, code(2), code(0), true},
		{"2,137", api.TaskFailed, code(0), code(9), true},
		{"2,137", api.TaskFailed, code(1), code(0), false},
		{"2,137", api.TaskNodeFail, nil, nil, false},
		{"2,node_fail", api.TaskNodeFail, nil, nil, true},
		{"boot_fail", api.TaskBootFail, nil, nil, true},
		{"0,1,2", api.TaskTimeout, code(0), code(0), false},
		{"0", api.TaskCompleted, code(0), code(0), false},
	} {
		if got := retries(tc.stored, tc.state, tc.code, tc.sig); got != tc.want {
			t.Errorf("retries(%q, %s) = %v", tc.stored, tc.state, got)
		}
	}
}

// sim is a store, a supervisor whose Launch makes VMs through the store as
// the server does, and a hand-moved orchestrator: the guest side is
// simulated through the store (a runner's start and exit are what the
// channel's messages write).
type sim struct {
	t   *testing.T
	ctx context.Context
	st  *store.Store
	clk *clock
	sup *Supervisor
	n   int
}

func newSim(t *testing.T) *sim {
	t.Helper()
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	st := storetest.New(t, storetest.WithClock(clk.Now))
	ctx := context.Background()
	if err := st.CreateUser(ctx, &store.User{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	m := &sim{t: t, ctx: ctx, st: st, clk: clk}
	sup, err := New(Config{Store: st, LogDir: filepath.Join(t.TempDir(), "tasks"), BootTimeout: 5 * time.Minute,
		Channel: func(context.Context, string) (string, error) { return "", fmt.Errorf("no channel in this test") },
		Launch: func(ctx context.Context, tk *store.Task) error {
			m.n++
			vm := &store.VM{Name: fmt.Sprintf("task-%d", m.n), Owner: tk.Owner, Profile: tk.Profile, Hours: 1,
				Spec: fmt.Sprintf(`{"hours":1,"task":%q}`, tk.ID)}
			_, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: tk.Owner, Launch: &store.TaskLaunch{TaskID: tk.ID, Attempt: tk.Attempt}})
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	m.sup = sup
	t.Cleanup(sup.Close)
	return m
}

func (m *sim) round() {
	m.t.Helper()
	if err := m.sup.Round(m.ctx); err != nil {
		m.t.Fatal(err)
	}
}

func (m *sim) setVM(id, state string) {
	m.t.Helper()
	vm, err := m.st.GetVM(m.ctx, id)
	if err != nil {
		m.t.Fatal(err)
	}
	if _, err := m.st.UpdateVMState(m.ctx, vm.ID, vm.Version, store.VMUpdate{State: state, Phase: vm.Phase, StateReason: "test"}); err != nil {
		m.t.Fatal(err)
	}
}

func (m *sim) deleteAsked(vmID string) bool {
	m.t.Helper()
	ops, err := m.st.ListOperations(m.ctx, vmID)
	if err != nil {
		m.t.Fatal(err)
	}
	for _, op := range ops {
		if op.Kind == store.OpDelete && !op.Finished() {
			return true
		}
	}
	return false
}

// guestEnd is how a simulated attempt ends: an exit (code, signal), or
// its VM failing.
type guestEnd struct {
	code, sig int
	vmFails   bool
}

// tick moves every live task with a VM one step as its VM and runner
// would: a queued VM runs, a booting task's command starts, a running one
// ends as end says, a deleted VM is gone.
func (m *sim) tick(end func(t *store.Task) guestEnd) {
	m.t.Helper()
	live, err := m.st.ListRoundTasks(m.ctx) // those waiting for a VM have none to move
	if err != nil {
		m.t.Fatal(err)
	}
	for _, tk := range live {
		if tk.VMID == "" {
			continue
		}
		vm, err := m.st.GetVM(m.ctx, tk.VMID)
		if err != nil {
			m.t.Fatal(err)
		}
		now := m.clk.Now()
		switch {
		case vm.State == store.VMQueued:
			m.setVM(vm.ID, store.VMRunning)
		case m.deleteAsked(vm.ID):
			m.setVM(vm.ID, store.VMDeleted)
		case tk.State == api.TaskBooting:
			if err := m.st.UpdateTask(m.ctx, tk.ID, nil, store.TaskUpdate{State: api.TaskRunning, StartedAt: &now}); err != nil {
				m.t.Fatal(err)
			}
		case tk.State == api.TaskRunning:
			e := end(&tk)
			if e.vmFails {
				m.setVM(vm.ID, store.VMFailed)
				continue
			}
			err := m.st.UpdateTask(m.ctx, tk.ID, nil, store.TaskUpdate{State: api.TaskCompleting, ExitCode: &e.code, Signal: &e.sig})
			if err != nil {
				m.t.Fatal(err)
			}
		}
	}
}

// An array of six with %2: never more than two elements have a VM (are
// booting, running or completing) at once; all six run; the array's
// state follows, and it ends failed with the highest exit code.
func TestArrayCap(t *testing.T) {
	m := newSim(t)
	arr := &store.Task{ID: "0193a5c0-arr", Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 3600, KillWaitS: 30,
		ArraySpec: "0-5%2", ArrayCap: 2}
	var elems []store.Task
	for i := 0; i < 6; i++ {
		idx := i
		elems = append(elems, store.Task{ID: fmt.Sprintf("%s_%d", arr.ID, i), Owner: "alice", Profile: "tiny", Command: `["true"]`,
			TimeLimitS: 3600, KillWaitS: 30, ArrayIndex: &idx, ArrayCount: 6})
	}
	if err := m.st.CreateTaskArray(m.ctx, arr, elems); err != nil {
		t.Fatal(err)
	}
	exits := map[int]int{3: 3, 4: 1}
	maxLive, sawRunning := 0, false
	started := map[string]bool{}
	for i := 0; i < 100; i++ {
		m.round()
		all, _, err := m.st.ListArrayElementsAfter(m.ctx, arr.ID, -1, 1000)
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for _, e := range all {
			if e.VMID != "" && e.EndedAt == nil {
				live++
			}
			if e.StartedAt != nil {
				started[e.ID] = true
			}
		}
		maxLive = max(maxLive, live)
		a, _ := m.st.GetTask(m.ctx, arr.ID)
		sawRunning = sawRunning || a.State == api.TaskRunning
		if a.EndedAt != nil {
			break
		}
		m.tick(func(tk *store.Task) guestEnd { return guestEnd{code: exits[*tk.ArrayIndex]} })
	}
	a, _ := m.st.GetTask(m.ctx, arr.ID)
	if maxLive != 2 || len(started) != 6 || !sawRunning {
		t.Fatalf("at most %d elements at once (want 2), %d started (want 6), array seen running %v", maxLive, len(started), sawRunning)
	}
	if a.State != api.TaskFailed || a.ExitCode == nil || *a.ExitCode != 3 || a.Reason != "4 completed, 2 failed" || a.EndedAt == nil {
		t.Fatalf("array = %+v, exit %v", a, a.ExitCode)
	}
}

// Cancelling an array cancels its elements: those waiting for a VM at
// once, the others through their VM's delete.
func TestArrayCancel(t *testing.T) {
	m := newSim(t)
	arr := &store.Task{ID: "0193a5c0-arr", Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 3600, KillWaitS: 30,
		ArraySpec: "0-3%1", ArrayCap: 1}
	var elems []store.Task
	for i := 0; i < 4; i++ {
		idx := i
		elems = append(elems, store.Task{ID: fmt.Sprintf("%s_%d", arr.ID, i), Owner: "alice", Profile: "tiny", Command: `["true"]`,
			TimeLimitS: 3600, KillWaitS: 30, ArrayIndex: &idx, ArrayCount: 4})
	}
	if err := m.st.CreateTaskArray(m.ctx, arr, elems); err != nil {
		t.Fatal(err)
	}
	m.round()
	if n, err := m.st.CancelTask(m.ctx, arr.ID); err != nil || n != 5 {
		t.Fatalf("cancel: %d, %v", n, err)
	}
	for i := 0; i < 20; i++ {
		m.round()
		if a, _ := m.st.GetTask(m.ctx, arr.ID); a.EndedAt != nil {
			break
		}
		m.tick(func(*store.Task) guestEnd { return guestEnd{} })
	}
	a, _ := m.st.GetTask(m.ctx, arr.ID)
	if a.State != api.TaskCancelled || a.Reason != "4 cancelled" {
		t.Fatalf("array = %s %q", a.State, a.Reason)
	}
	if _, err := m.st.CancelTask(m.ctx, arr.ID); err == nil {
		t.Fatal("an ended array cancelled again")
	}
}

// Retries: an attempt that ends as retry_on lists runs again in a new VM,
// at most retries times; an end not listed does not.
func TestRetries(t *testing.T) {
	tests := []struct {
		name     string
		retries  int
		retryOn  string
		ends     []guestEnd
		state    string
		attempts int
	}{
		{"listed code, then success", 2, "2,137", []guestEnd{{code: 2}, {code: 0}}, api.TaskCompleted, 2},
		{"stops after N", 2, "2,137", []guestEnd{{code: 2}, {code: 2}, {code: 2}, {code: 0}}, api.TaskFailed, 3},
		{"killed by signal 9 is 137", 1, "137", []guestEnd{{sig: 9}, {code: 0}}, api.TaskCompleted, 2},
		{"a code not listed", 3, "2,137", []guestEnd{{code: 1}, {code: 0}}, api.TaskFailed, 1},
		{"node_fail listed", 1, "node_fail", []guestEnd{{vmFails: true}, {code: 0}}, api.TaskCompleted, 2},
		{"node_fail not listed", 1, "2", []guestEnd{{vmFails: true}, {code: 0}}, api.TaskNodeFail, 1},
		{"no retries", 0, "", []guestEnd{{code: 2}, {code: 0}}, api.TaskFailed, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(t)
			tk := &store.Task{ID: "0193a5c0-task", Owner: "alice", Profile: "tiny", Command: `["true"]`, TimeLimitS: 3600, KillWaitS: 30,
				Retries: tc.retries, RetryOn: tc.retryOn}
			vm := &store.VM{Name: "task-0", Owner: "alice", Profile: "tiny", Hours: 1, Spec: `{"task":"0193a5c0-task"}`}
			if _, err := m.st.CreateVM(m.ctx, vm, store.CreateVMOptions{RequestedBy: "alice", Task: tk}); err != nil {
				t.Fatal(err)
			}
			vms := map[string]bool{}
			for i := 0; i < 100; i++ {
				m.round()
				got, _ := m.st.GetTask(m.ctx, tk.ID)
				if got.VMID != "" {
					vms[got.VMID] = true
				}
				if got.EndedAt != nil {
					break
				}
				m.tick(func(x *store.Task) guestEnd { return tc.ends[x.Attempt-1] })
			}
			got, _ := m.st.GetTask(m.ctx, tk.ID)
			if got.State != tc.state || got.Attempt != tc.attempts || len(vms) != tc.attempts {
				t.Fatalf("task %s after attempt %d in %d VMs (%s); want %s after %d", got.State, got.Attempt, len(vms), got.Reason, tc.state, tc.attempts)
			}
			as, err := m.st.ListTaskAttempts(m.ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.attempts
			if tc.retries == 0 {
				want = 0 // a task that may not retry keeps no attempts
			}
			if len(as) != want {
				t.Fatalf("%d attempts kept, want %d: %+v", len(as), want, as)
			}
			for i, a := range as {
				if a.Attempt != i+1 || a.VMID == "" || (i < len(as)-1 && a.State == api.TaskCompleted) {
					t.Fatalf("attempt %d = %+v", i+1, a)
				}
			}
		})
	}
}

// The warning signal goes to the runner its lead before the time limit,
// once; SIGTERM at the limit.
func TestWarningSignal(t *testing.T) {
	f := newFixture(t, time.Hour, func(tk *store.Task) { tk.WarnSignal, tk.WarnLeadS = "USR1", 600 })
	msgs, send, _ := f.guest()
	f.setVM(store.VMRunning)
	f.round()
	send(`{"t":"start","pid":7}`)
	f.waitState(api.TaskRunning)
	f.later(49*time.Minute+59*time.Second, send)
	f.round()
	if f.get().WarnedAt != nil {
		t.Fatal("warned before the lead")
	}
	f.later(time.Second, send)
	f.round()
	f.round()
	expect(t, msgs, "from", "signal:USR1")
	if f.get().WarnedAt == nil {
		t.Fatal("the warning is not recorded")
	}
	f.later(10*time.Minute, send)
	f.round()
	expect(t, msgs, "signal:TERM")
}
