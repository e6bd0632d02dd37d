package task

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// clock is a test's time, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fixture is a store with alice's task and its VM, and a supervisor whose
// task channel is a unix socket the test listens on: the fake guest.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	st   *store.Store
	clk  *clock
	sup  *Supervisor
	sock string
	task *store.Task
	vm   *store.VM
}

func newFixture(t *testing.T, timeLimit time.Duration, opts ...func(*store.Task)) *fixture {
	t.Helper()
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	st := storetest.New(t, storetest.WithClock(clk.Now))
	ctx := context.Background()
	if err := st.CreateUser(ctx, &store.User{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: ctx, st: st, clk: clk, sock: filepath.Join(t.TempDir(), "task.sock")}
	f.task = &store.Task{ID: "0193a5c0-task", Owner: "alice", Profile: "tiny", Command: `["sh","-c","exit 3"]`,
		TimeLimitS: int64(timeLimit / time.Second), KillWaitS: 30}
	for _, o := range opts {
		o(f.task)
	}
	f.vm = &store.VM{Name: "task-0193a5c0", Owner: "alice", Profile: "tiny", Spec: `{"hours":1,"task":"0193a5c0-task"}`, Hours: 1}
	if _, err := st.CreateVM(ctx, f.vm, store.CreateVMOptions{RequestedBy: "alice", Task: f.task}); err != nil {
		t.Fatal(err)
	}
	sup, err := New(Config{Store: st, LogDir: filepath.Join(t.TempDir(), "tasks"), BootTimeout: 5 * time.Minute,
		Channel: func(_ context.Context, vmID string) (string, error) {
			if vmID != f.vm.ID {
				return "", fmt.Errorf("asked for the channel of vm %s", vmID)
			}
			return f.sock, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.sup = sup
	t.Cleanup(sup.Close) // before the store closes
	return f
}

func (f *fixture) setVM(state string) {
	f.t.Helper()
	vm, err := f.st.GetVM(f.ctx, f.vm.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.st.UpdateVMState(f.ctx, vm.ID, vm.Version, store.VMUpdate{State: state, Phase: vm.Phase}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) round() {
	f.t.Helper()
	if err := f.sup.Round(f.ctx); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) get() *store.Task {
	f.t.Helper()
	t, err := f.st.GetTask(f.ctx, f.task.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return t
}

// waitState does rounds until the task is in state (5 s at most).
func (f *fixture) waitState(state string) *store.Task {
	f.t.Helper()
	for i := 0; i < 100; i++ {
		if t := f.get(); t.State == state {
			return t
		}
		time.Sleep(50 * time.Millisecond)
		f.round()
	}
	f.t.Fatalf("task is %+v, want %s", f.get(), state)
	return nil
}

func (f *fixture) deleteRequested() bool {
	f.t.Helper()
	ops, err := f.st.ListOperations(f.ctx, f.vm.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, op := range ops {
		if op.Kind == store.OpDelete && !op.Finished() {
			return true
		}
	}
	return false
}

// guest is the fake guest's side of the channel: it listens, as QEMU does
// for a channel of mode bind, and hands the connection over.
func (f *fixture) guest() (got chan Message, send func(string), accepted chan struct{}) {
	f.t.Helper()
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { l.Close() })
	got, accepted = make(chan Message, 100), make(chan struct{})
	var mu sync.Mutex
	var nc net.Conn
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		nc = c
		mu.Unlock()
		close(accepted)
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			var m Message
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				got <- m
			}
		}
	}()
	send = func(line string) {
		<-accepted
		mu.Lock()
		defer mu.Unlock()
		if _, err := nc.Write([]byte(line + "\n")); err != nil {
			f.t.Errorf("guest write: %v", err)
		}
	}
	f.t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if nc != nil {
			nc.Close()
		}
	})
	return got, send, accepted
}

// A task whose command fails: its state follows the VM, then the runner;
// at the exit its VM is deleted at once; the log holds every line in
// order; it ends failed, exit 3.
func TestTaskFailsExit3(t *testing.T) {
	f := newFixture(t, time.Hour)
	f.round()
	if got := f.get(); got.State != api.TaskPending {
		t.Fatalf("queued VM: task %s", got.State)
	}
	f.setVM(store.VMCreating)
	f.round()
	if got := f.get(); got.State != api.TaskBooting {
		t.Fatalf("creating VM: task %s", got.State)
	}
	msgs, send, accepted := f.guest()
	f.setVM(store.VMRunning)
	f.round()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the supervisor did not connect to the channel")
	}
	if m := <-msgs; m.T != "from" || m.Off != 0 {
		t.Fatalf("first message to the guest %+v, want from 0", m)
	}
	send(`{"t":"hello","task":"0193a5c0-task"}`)
	send(`{"t":"start","pid":42}`)
	running := f.waitState(api.TaskRunning)
	if running.StartedAt == nil || !strings.Contains(running.Reason, "pid 42") {
		t.Fatalf("running = %+v", running)
	}
	var want strings.Builder
	for i := 0; i < 200; i++ {
		line := fmt.Sprintf("line %d \"quoted\"\t\\\n", i)
		d, _ := json.Marshal(line)
		send(fmt.Sprintf(`{"t":"out","off":%d,"d":%s}`, want.Len(), d))
		if i == 100 { // a repeat (a runner resending) is not kept twice
			send(fmt.Sprintf(`{"t":"out","off":%d,"d":%s}`, want.Len(), d))
		}
		want.WriteString(line)
	}
	send(`{"t":"hb"}`)
	send(`{"t":"exit","code":3,"signal":0}`)
	done := f.waitState(api.TaskCompleting)
	select {
	case <-f.sup.kick: // the exit asks for a round now
	case <-time.After(5 * time.Second):
		t.Fatal("the command's end did not start a round")
	}
	f.round()
	if !f.deleteRequested() {
		t.Fatal("the command ended and its VM's delete was not asked for")
	}
	if done.ExitCode == nil || *done.ExitCode != 3 || done.Signal == nil || *done.Signal != 0 || done.EndedAt != nil {
		t.Fatalf("completing = %+v", done)
	}
	f.setVM(store.VMDeleted)
	ended := f.waitState(api.TaskFailed)
	if ended.EndedAt == nil || ended.Reason != "the command exited 3" || ended.LogBytes != int64(want.Len()) {
		t.Fatalf("ended = %+v (want %d log bytes)", ended, want.Len())
	}
	b, err := os.ReadFile(LogPath(f.sup.cfg.LogDir, f.task.ID))
	if err != nil || string(b) != want.String() {
		t.Fatalf("log (%v):\n%q\nwant\n%q", err, b, want.String())
	}
}

// At the time limit: SIGTERM to the runner, after kill_wait SIGKILL and
// the VM deleted; the task ends timeout.
func TestTaskTimeLimit(t *testing.T) {
	f := newFixture(t, time.Hour)
	msgs, send, _ := f.guest()
	f.setVM(store.VMRunning)
	f.round()
	send(`{"t":"hello"}`)
	send(`{"t":"start","pid":7}`)
	f.waitState(api.TaskRunning)
	f.later(59*time.Minute, send)
	f.round()
	if f.get().TermAt != nil {
		t.Fatal("stopped before its time limit")
	}
	f.later(time.Minute, send)
	f.round()
	expect(t, msgs, "from", "signal:TERM")
	if f.get().TermAt == nil || f.deleteRequested() {
		t.Fatalf("at the limit: %+v, delete asked %v", f.get(), f.deleteRequested())
	}
	f.later(29*time.Second, send)
	f.round()
	if f.deleteRequested() {
		t.Fatal("powered off before kill_wait")
	}
	f.later(time.Second, send)
	f.round()
	expect(t, msgs, "signal:KILL")
	if !f.deleteRequested() || f.get().State != api.TaskCompleting {
		t.Fatalf("after kill_wait: %+v, delete asked %v", f.get(), f.deleteRequested())
	}
	f.setVM(store.VMDeleted)
	if got := f.waitState(api.TaskTimeout); !strings.Contains(got.Reason, "time limit") {
		t.Fatalf("timeout = %+v", got)
	}
}

// A lease that ends before the time limit (the VM ran before the command
// started) stops the command kill_wait before it.
func TestTaskLeaseBeforeLimit(t *testing.T) {
	f := newFixture(t, time.Hour)
	msgs, send, _ := f.guest()
	vm, _ := f.st.GetVM(f.ctx, f.vm.ID)
	end := f.clk.Now().Add(time.Hour)
	if _, err := f.st.UpdateVMState(f.ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: vm.Phase, LeaseEnd: &end}); err != nil {
		t.Fatal(err)
	}
	f.clk.add(2 * time.Minute) // the boot
	f.round()
	send(`{"t":"start","pid":7}`)
	f.waitState(api.TaskRunning)
	f.later(57*time.Minute+29*time.Second, send)
	f.round()
	if f.get().TermAt != nil {
		t.Fatal("stopped more than kill_wait before the lease's end")
	}
	f.later(time.Second, send)
	f.round()
	expect(t, msgs, "from", "signal:TERM")
}

func expect(t *testing.T, msgs chan Message, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case m := <-msgs:
			got := m.T
			if m.Sig != "" {
				got += ":" + m.Sig
			}
			if got != w {
				t.Fatalf("the guest got %q, want %q", got, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the guest got nothing, want %q", w)
		}
	}
}

// A guest whose runner never says hello: boot_fail, its VM deleted.
func TestTaskBootFail(t *testing.T) {
	f := newFixture(t, time.Hour)
	f.setVM(store.VMRunning)
	f.round() // no socket: the channel is not ready
	f.clk.add(5*time.Minute + time.Second)
	f.round()
	if got := f.get(); got.State != api.TaskBootFail || got.EndedAt == nil || !f.deleteRequested() {
		t.Fatalf("boot fail: %+v, delete asked %v", got, f.deleteRequested())
	}
}

// A cancel of a pending task deletes its VM; the task ends cancelled.
func TestTaskCancelPending(t *testing.T) {
	f := newFixture(t, time.Hour)
	now := f.clk.Now()
	if err := f.st.UpdateTask(f.ctx, f.task.ID, nil, store.TaskUpdate{CancelAt: &now}); err != nil {
		t.Fatal(err)
	}
	f.round()
	if !f.deleteRequested() || f.get().State != api.TaskCompleting {
		t.Fatalf("cancelled: %+v, delete asked %v", f.get(), f.deleteRequested())
	}
	f.setVM(store.VMDeleted)
	f.waitState(api.TaskCancelled)
}

// Somebody deletes a running task's VM: the task ends cancelled; its VM
// failing ends it node_fail.
func TestTaskVMGone(t *testing.T) {
	f := newFixture(t, time.Hour)
	f.setVM(store.VMRunning)
	f.round()
	f.setVM(store.VMDeleted)
	if got := f.waitState(api.TaskCancelled); !strings.Contains(got.Reason, "deleted") {
		t.Fatalf("cancelled = %+v", got)
	}
	g := newFixture(t, time.Hour)
	g.setVM(store.VMFailed)
	g.round()
	if got := g.get(); got.State != api.TaskNodeFail || !g.deleteRequested() {
		t.Fatalf("node fail = %+v, delete asked %v", got, g.deleteRequested())
	}
	if err := g.st.UpdateTask(g.ctx, g.task.ID, nil, store.TaskUpdate{State: api.TaskRunning}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("an ended task moved: %v", err)
	}
}

// later moves the clock on by d, the runner heartbeating meanwhile (its
// heartbeat seen at the new time).
func (f *fixture) later(d time.Duration, send func(string)) {
	f.t.Helper()
	f.clk.add(d)
	send(`{"t":"hb","v":2}`)
	for i := 0; i < 100; i++ {
		if c := f.sup.conn(f.task.ID); c != nil {
			c.mu.Lock()
			seen := c.lastSeen
			c.mu.Unlock()
			if !seen.Before(f.clk.Now()) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.t.Fatal("the supervisor did not see the runner's heartbeat")
}
