package task

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Message is a line of the task channel's protocol (docs/tasks.md), both
// ways. Guest to host: hello (V), resume (V, Off), start (Pid), out (Off,
// D), hb (V), exit (Code, Signal, Off: the output's size). Host to guest:
// from (V, Off), signal (Sig), bye.
type Message struct {
	T      string `json:"t"`
	V      int    `json:"v,omitempty"`
	Task   string `json:"task,omitempty"`
	Pid    int    `json:"pid,omitempty"`
	Off    int64  `json:"off"`
	D      string `json:"d,omitempty"`
	Code   *int   `json:"code,omitempty"`
	Signal *int   `json:"signal,omitempty"`
	Sig    string `json:"sig,omitempty"`
}

// The protocol's message types (Message.T). A runner sends MsgHello,
// MsgHeartbeat, MsgStart, MsgOut, MsgResume and MsgExit; gpuvmd sends
// MsgFrom, MsgSignal and MsgBye. The Windows runner's script is checked
// against these (TestWindowsRunnerSpeaksTheProtocol).
const (
	MsgHello     = "hello"
	MsgHeartbeat = "hb"
	MsgStart     = "start"
	MsgOut       = "out"
	MsgResume    = "resume"
	MsgExit      = "exit"
	MsgFrom      = "from"
	MsgSignal    = "signal"
	MsgBye       = "bye"
)

// GuestMessages and HostMessages are the types each side sends.
var (
	GuestMessages = []string{MsgHello, MsgHeartbeat, MsgStart, MsgOut, MsgResume, MsgExit}
	HostMessages  = []string{MsgFrom, MsgSignal, MsgBye}
)

// The signals gpuvmd itself sends a running command (a task's warning
// signal, one of WarnSignals, besides): SigTerm at the time limit or a
// cancel, SigKill kill_wait after it.
const (
	SigTerm = "TERM"
	SigKill = "KILL"
)

// maxLine bounds a line of the protocol: the runner sends a line of
// output in pieces of at most 32 KiB (before escaping).
const maxLine = 1 << 20

// Protocol is the version of the channel's protocol this gpuvmd speaks.
// 1: the runner sends its output once, as it comes. 2: the runner keeps
// its output in a file and, on each "from", says "resume" and sends it
// again from that offset; its heartbeats carry "v"; its exit carries the
// output's size and is sent until gpuvmd says "bye".
const Protocol = 2

// conn is the connection to one task's runner.
type conn struct {
	s    *Supervisor
	task string
	vm   string
	nc   net.Conn
	log  *os.File

	mu      sync.Mutex
	written int64 // bytes of output kept
	// pos is where the output received in order ends (base + the
	// runner's offset): written, and what MaxLog left out.
	pos  int64
	base int64 // bytes kept before this attempt: the runner's offset 0
	// proto is the runner's protocol: 0 while not known (no hello or
	// heartbeat seen on this connection).
	proto    int
	hello    bool
	lastSeen time.Time // its last message, or the connect
	done     chan struct{}
}

// connect dials a running VM's task channel and reads it until it closes.
func (s *Supervisor) connect(ctx context.Context, t *store.Task) (*conn, error) {
	path, err := s.cfg.Channel(ctx, t.VMID)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("task channel %s: %w", path, err)
	}
	if err := os.MkdirAll(s.cfg.LogDir, 0o750); err != nil {
		nc.Close()
		return nil, err
	}
	f, err := os.OpenFile(LogPath(s.cfg.LogDir, t.ID), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		nc.Close()
		return nil, err
	}
	end, err := f.Seek(0, 2)
	if err != nil {
		nc.Close()
		f.Close()
		return nil, err
	}
	base := min(t.LogBase, end)
	c := &conn{s: s, task: t.ID, vm: t.VMID, nc: nc, log: f, written: end, pos: end, base: base, lastSeen: s.cfg.Store.Now(),
		done: make(chan struct{})}
	s.mu.Lock()
	s.conns[t.ID] = c
	s.mu.Unlock()
	// What was kept is not asked for again; a runner of protocol 2 sends
	// what came after it, again if it sent it to a gpuvmd that stopped
	// before keeping it.
	c.send(Message{T: MsgFrom, V: Protocol, Off: end - base})
	go c.read()
	s.log.Info("connected to the task's runner", "task", t.ID, "vm", t.VMID, "from", end)
	return c, nil
}

func (c *conn) read() {
	defer func() {
		c.nc.Close()
		c.log.Close()
		close(c.done)
		c.s.mu.Lock()
		if c.s.conns[c.task] == c {
			delete(c.s.conns, c.task)
		}
		c.s.mu.Unlock()
	}()
	sc := bufio.NewScanner(c.nc)
	sc.Buffer(make([]byte, 64<<10), maxLine+1024)
	for sc.Scan() {
		var m Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			c.s.log.Warn("task channel: not a message", "task", c.task, "err", err)
			continue
		}
		if err := c.handle(m); err != nil {
			c.s.log.Warn("task channel", "task", c.task, "message", m.T, "err", err)
		}
	}
}

// handle acts on one message of the runner.
func (c *conn) handle(m Message) error {
	// maxOffset bounds the output offsets a runner may send (1 PiB): the
	// guest's word, an offset no output reaches would overflow the sums
	// below and make an exit look complete.
	const maxOffset = 1 << 50
	if m.Off < 0 || m.Off > maxOffset {
		c.s.log.Warn("the task's runner sent an offset out of bounds; message left out", "task", c.task, "type", m.T, "off", m.Off)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := c.s.cfg.Store
	c.mu.Lock()
	c.lastSeen = st.Now()
	switch {
	case m.V > 0:
		c.proto = m.V
	case m.T == MsgHello || m.T == MsgHeartbeat:
		c.proto = 1
	}
	c.mu.Unlock()
	switch m.T {
	case MsgHello:
		c.mu.Lock()
		c.hello = true
		c.mu.Unlock()
	case MsgResume:
		c.s.log.Info("the task's runner sends its output again", "task", c.task, "from", m.Off)
	case MsgStart:
		c.mu.Lock()
		c.hello = true
		c.mu.Unlock()
		now := st.Now()
		err := st.UpdateTask(ctx, c.task, []string{api.TaskPending, api.TaskBooting},
			store.TaskUpdate{State: api.TaskRunning, Reason: fmt.Sprintf("the command runs (pid %d in the guest)", m.Pid), StartedAt: &now})
		if errors.Is(err, store.ErrConflict) {
			return nil
		}
		return err
	case MsgOut:
		return c.out(m.Off, m.D)
	case MsgExit:
		return c.exit(ctx, m)
	}
	return nil
}

// out keeps a chunk of output at its offset: what was received already is
// not written twice. After a gap (output sent to a gpuvmd that stopped
// before keeping it) a runner of protocol 2 sends it again from "from":
// what comes after the gap is dropped until then; a runner of protocol 1
// never does, and what comes is kept right after what was kept.
func (c *conn) out(off int64, d string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	off += c.base
	if off+int64(len(d)) <= c.pos {
		return nil
	}
	if off > c.pos && c.proto != 1 {
		return nil
	}
	if off < c.pos {
		d = d[c.pos-off:]
	}
	c.pos += int64(len(d))
	if room := c.s.cfg.MaxLog - c.written; int64(len(d)) > room {
		d = d[:max(room, 0)] // past MaxLog: counted in pos, not kept
	}
	if d == "" {
		return nil
	}
	n, err := c.log.WriteAt([]byte(d), c.written)
	c.written += int64(n)
	return err
}

// exit records the command's end; the round it starts asks for its VM's
// delete.
func (c *conn) exit(ctx context.Context, m Message) error {
	st := c.s.cfg.Store
	code, sig := 0, 0
	if m.Code != nil {
		code = *m.Code
	}
	if m.Signal != nil {
		sig = *m.Signal
	}
	if missing := c.missing(m.Off); missing >= 0 {
		// Output was lost on the way (a gpuvmd stopped): asked for again;
		// the runner sends the exit again after it.
		c.s.log.Info("the task's runner reported its exit before gpuvmd had all its output: asking for the rest", "task", c.task, "from", missing)
		c.send(Message{T: MsgFrom, V: Protocol, Off: missing})
		return nil
	}
	reason := fmt.Sprintf("the command exited %d", code)
	if sig != 0 {
		reason = fmt.Sprintf("the command was killed by signal %d", sig)
	}
	n := c.size()
	err := st.UpdateTask(ctx, c.task, nil, store.TaskUpdate{State: api.TaskCompleting, Reason: reason, ExitCode: &code, Signal: &sig, LogBytes: &n})
	if errors.Is(err, store.ErrConflict) {
		c.send(Message{T: MsgBye}) // ended already: a repeat of the exit
		return nil
	}
	if err != nil {
		return err
	}
	c.send(Message{T: MsgBye})
	// The round, now, asks for the VM's delete: one goroutine asks for
	// deletes, so that no two are asked for.
	c.s.kickNow()
	return nil
}

func (c *conn) send(m Message) {
	b, _ := json.Marshal(m)
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(append(b, '\n')); err != nil {
		c.s.log.Warn("task channel: send", "task", c.task, "message", m.T, "err", err)
	}
}

func (c *conn) signal(sig string) { c.send(Message{T: MsgSignal, Sig: sig}) }

func (c *conn) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written
}

// missing is the runner's offset from which output of size n (an exit's)
// is missing, -1 when none is.
func (c *conn) missing(n int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base+n <= c.pos {
		return -1
	}
	return c.pos - c.base
}

// silent is how long the runner has said nothing, when that counts in
// state: while the command runs (the runner heartbeats then), or while it
// boots once the runner said it speaks protocol 2 (which heartbeats from
// its hello); else 0.
func (c *conn) silent(state string, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if state != api.TaskRunning && (state != api.TaskBooting || c.proto < 2) {
		return 0
	}
	return now.Sub(c.lastSeen)
}

func (c *conn) helloed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

func (c *conn) close() { _ = c.nc.Close() }
