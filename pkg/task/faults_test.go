package task

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// line is the i-th line of the fake command's output.
func line(i int) string { return fmt.Sprintf("line %d of the command\n", i) }

// outputOf is lines from..to, and where each starts.
func outputOf(to int) (string, []int) {
	var b strings.Builder
	offs := make([]int, to+2)
	for i := 1; i <= to+1; i++ {
		offs[i] = b.Len()
		if i <= to {
			b.WriteString(line(i))
		}
	}
	return b.String(), offs
}

// peer is one connection of the fake runner of protocol 2.
type peer struct {
	t   *testing.T
	nc  net.Conn
	got chan Message
}

func accept(t *testing.T, l net.Listener) *peer {
	t.Helper()
	ch := make(chan net.Conn, 1)
	go func() {
		nc, err := l.Accept()
		if err == nil {
			ch <- nc
		}
	}()
	select {
	case nc := <-ch:
		p := &peer{t: t, nc: nc, got: make(chan Message, 100)}
		t.Cleanup(func() { nc.Close() })
		go func() {
			sc := bufio.NewScanner(nc)
			for sc.Scan() {
				var m Message
				if json.Unmarshal(sc.Bytes(), &m) == nil {
					p.got <- m
				}
			}
		}()
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("the supervisor did not connect to the channel")
		return nil
	}
}

func (p *peer) send(m Message) {
	p.t.Helper()
	b, _ := json.Marshal(m)
	_, _ = p.nc.Write(append(b, '\n')) // to a supervisor gone, lost
}

func (p *peer) out(output string, offs []int, from, to int) {
	for i := from; i <= to; i++ {
		p.send(Message{T: "out", Off: int64(offs[i]), D: output[offs[i]:offs[i+1]]})
	}
}

func (p *peer) expect(t string) Message {
	p.t.Helper()
	select {
	case m := <-p.got:
		if m.T != t {
			p.t.Fatalf("the runner got %+v, want %q", m, t)
		}
		return m
	case <-time.After(5 * time.Second):
		p.t.Fatalf("the runner got nothing, want %q", t)
		return Message{}
	}
}

// waitSize waits until sup keeps n bytes of the task's output.
func waitSize(t *testing.T, sup *Supervisor, id string, n int) {
	t.Helper()
	for i := 0; i < 250; i++ {
		if c := sup.conn(id); c != nil && c.size() == int64(n) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the supervisor does not keep %d bytes of output", n)
}

// gpuvmd stops abruptly while the command prints (supervisor A: lines
// 1..k kept, k+1..m sent but lost with it); supervisor B, on the same
// store and log directory, connects, says from where, and the runner's
// output is kept whole: every line once, in order. A line that comes
// after the gap before the runner resends is not kept, nor an exit
// reported before B has the output (B asks again), and B says bye to the
// exit it records.
func TestTaskLogResumesAfterRestart(t *testing.T) {
	const k, m, n = 40, 55, 80
	output, offs := outputOf(n)
	f := newFixture(t, time.Hour)
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f.setVM(store.VMRunning)
	f.round()
	a := accept(t, l)
	if from := a.expect("from"); from.Off != 0 || from.V != Protocol {
		t.Fatalf("first from %+v", from)
	}
	a.send(Message{T: "hello", V: 2, Task: f.task.ID})
	a.send(Message{T: "start", Pid: 9})
	a.out(output, offs, 1, k)
	f.waitState(api.TaskRunning)
	waitSize(t, f.sup, f.task.ID, offs[k+1])
	// A stops reading, as a gpuvmd killed does: no clean close of the
	// runner's side, what it sends now is lost.
	f.sup.conn(f.task.ID).close()
	a.out(output, offs, k+1, m)

	b, err := New(f.sup.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	f.sup = b
	f.round()
	c := accept(t, l)
	from := c.expect("from")
	if from.Off != int64(offs[k+1]) {
		t.Fatalf("B asks from %d, want %d (lines 1..%d kept)", from.Off, offs[k+1], k)
	}
	// A line the runner was writing when A went, after the gap, and an
	// exit before the rest: neither is taken.
	c.out(output, offs, m+1, m+1)
	c.send(Message{T: "exit", Code: new(int), Signal: new(int), Off: int64(len(output))})
	if again := c.expect("from"); again.Off != from.Off {
		t.Fatalf("after an early exit B asks from %d, want %d", again.Off, from.Off)
	}
	if got := f.get(); got.State != api.TaskRunning {
		t.Fatalf("an exit before the output is all kept ended the task: %+v", got)
	}
	c.send(Message{T: "resume", V: 2, Off: from.Off})
	c.out(output, offs, k+1, n)
	c.out(output, offs, k+1, n) // the second from's replay: kept once
	c.send(Message{T: "exit", Code: new(int), Signal: new(int), Off: int64(len(output))})
	c.expect("bye")
	done := f.waitState(api.TaskCompleting)
	if done.LogBytes != int64(len(output)) {
		t.Fatalf("log_bytes %d, want %d", done.LogBytes, len(output))
	}
	got, err := os.ReadFile(LogPath(f.sup.cfg.LogDir, f.task.ID))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != output {
		t.Fatalf("the log:\n%s\nwant lines 1..%d once each", got, n)
	}
	for i := 1; i <= n; i++ {
		if c := strings.Count(string(got), line(i)); c != 1 {
			t.Fatalf("line %d kept %d times", i, c)
		}
	}
}

// A runner of protocol 1 (no "v") never resends: after a gap what comes
// is kept after what was kept, as before protocol 2.
func TestTaskLogProtocol1Gap(t *testing.T) {
	f := newFixture(t, time.Hour)
	_, send, _ := f.guest()
	f.setVM(store.VMRunning)
	f.round()
	send(`{"t":"hello","task":"0193a5c0-task"}`)
	send(`{"t":"out","off":0,"d":"a\n"}`)
	send(`{"t":"out","off":10,"d":"b\n"}`)
	waitSize(t, f.sup, f.task.ID, 4)
	if got, err := os.ReadFile(LogPath(f.sup.cfg.LogDir, f.task.ID)); err != nil || string(got) != "a\nb\n" {
		t.Fatalf("log %q (%v), want a, b", got, err)
	}
}

// The boot timeout counts from when the VM was first seen running, kept
// in the task's row: a supervisor that starts again does not give the
// guest its time again. After it the task is boot_fail and its VM deleted,
// or, when retry_on holds boot_fail, queued again for a new VM.
func TestTaskBootTimeoutSurvivesRestart(t *testing.T) {
	for _, retry := range []bool{false, true} {
		f := newFixture(t, time.Hour, func(tk *store.Task) {
			if retry {
				tk.Retries, tk.RetryOn = 1, "boot_fail"
			}
		})
		f.setVM(store.VMRunning)
		f.round()
		first := f.get().BootingAt
		if first == nil || !first.Equal(f.clk.Now()) {
			t.Fatalf("booting_at %v, want %v", first, f.clk.Now())
		}
		f.clk.add(4 * time.Minute)
		b, err := New(f.sup.cfg) // gpuvmd started again
		if err != nil {
			t.Fatal(err)
		}
		f.sup = b
		f.round()
		if got := f.get(); got.State != api.TaskBooting || !got.BootingAt.Equal(*first) {
			t.Fatalf("4 minutes in: %+v", got)
		}
		f.clk.add(time.Minute + time.Second)
		f.round()
		got := f.get()
		if !f.deleteRequested() {
			t.Fatal("boot_fail: the VM's delete was not asked for")
		}
		if !retry {
			if got.State != api.TaskBootFail || !strings.Contains(got.Reason, "did not report within 5m0s") {
				t.Fatalf("boot fail: %+v", got)
			}
			continue
		}
		if got.State != api.TaskPending || got.Attempt != 2 || got.VMID != "" || got.BootingAt != nil || !strings.Contains(got.Reason, "boot_fail") {
			t.Fatalf("retried: %+v", got)
		}
	}
}

// A runner that stops talking while its command runs (killed in the
// guest: no exit, no heartbeat) fails the task after the heartbeat
// timeout, its VM deleted.
func TestTaskRunnerGone(t *testing.T) {
	f := newFixture(t, time.Hour)
	_, send, _ := f.guest()
	f.setVM(store.VMRunning)
	f.round()
	send(`{"t":"hello","v":2}`)
	send(`{"t":"start","pid":7}`)
	f.waitState(api.TaskRunning)
	f.later(time.Minute, send)
	f.clk.add(DefaultHeartbeatTimeout)
	f.round()
	if got := f.get(); got.State != api.TaskRunning || f.deleteRequested() {
		t.Fatalf("silent for the timeout only: %+v", got)
	}
	f.clk.add(time.Second)
	f.round()
	got := f.get()
	if got.State != api.TaskFailed || got.Reason != RunnerGone || !f.deleteRequested() {
		t.Fatalf("runner gone: %+v, delete asked %v", got, f.deleteRequested())
	}
}

// The node of a task's VM declared down by the fleet (its heartbeat
// stopped): the task ends node_fail, or is queued again when retry_on
// holds node_fail; a node that is late but not declared down is waited
// for. The VM's delete waits for its node.
func TestTaskNodeFail(t *testing.T) {
	for _, retry := range []bool{false, true} {
		f := newFixture(t, time.Hour, func(tk *store.Task) {
			if retry {
				tk.Retries, tk.RetryOn = 2, "3,node_fail"
			}
		})
		f.sup.cfg.Host = "h1"
		for _, h := range []string{"h1", "h2"} {
			if err := f.st.RegisterHost(f.ctx, &store.Host{Name: h, APIURL: "http://" + h}); err != nil {
				t.Fatal(err)
			}
		}
		vm, _ := f.st.GetVM(f.ctx, f.vm.ID)
		h2 := "h2"
		if _, err := f.st.UpdateVMState(f.ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: vm.Phase, Host: &h2}); err != nil {
			t.Fatal(err)
		}
		f.round()
		f.clk.add(time.Hour)
		f.round()
		if got := f.get(); got.State != api.TaskPending || got.EndedAt != nil || f.deleteRequested() {
			t.Fatalf("a node late but not declared down: %+v", got)
		}
		if names, err := f.st.MarkHostsDown(f.ctx, f.clk.Now()); err != nil || len(names) != 2 {
			t.Fatalf("mark down: %v %v", names, err)
		}
		if err := f.st.Heartbeat(f.ctx, "h1", ""); err != nil {
			t.Fatal(err)
		}
		f.round()
		got := f.get()
		if !f.deleteRequested() {
			t.Fatal("node_fail: the VM's delete was not asked for")
		}
		if !retry {
			if got.State != api.TaskNodeFail || !strings.Contains(got.Reason, "node h2 is down") || got.EndedAt == nil {
				t.Fatalf("node fail: %+v", got)
			}
			continue
		}
		if got.State != api.TaskPending || got.Attempt != 2 || got.VMID != "" || !strings.Contains(got.Reason, "node_fail") {
			t.Fatalf("retried: %+v", got)
		}
	}
}
