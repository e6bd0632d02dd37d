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
// ways. Guest to host: hello, start (Pid), out (Off, D), hb, exit (Code,
// Signal). Host to guest: from (Off), signal (Sig).
type Message struct {
	T      string `json:"t"`
	Task   string `json:"task,omitempty"`
	Pid    int    `json:"pid,omitempty"`
	Off    int64  `json:"off"`
	D      string `json:"d,omitempty"`
	Code   *int   `json:"code,omitempty"`
	Signal *int   `json:"signal,omitempty"`
	Sig    string `json:"sig,omitempty"`
}

// maxLine bounds a line of the protocol: the runner sends one line of
// output per message, and a longer one is cut.
const maxLine = 1 << 20

// conn is the connection to one task's runner.
type conn struct {
	s    *Supervisor
	task string
	nc   net.Conn
	log  *os.File

	mu      sync.Mutex
	written int64 // bytes of output kept
	base    int64 // bytes kept before this attempt: the runner's offset 0
	dropped int64 // bytes beyond MaxLog
	hello   bool
	lastHB  time.Time
	done    chan struct{}
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
	c := &conn{s: s, task: t.ID, nc: nc, log: f, written: end, base: base, done: make(chan struct{})}
	s.mu.Lock()
	s.conns[t.ID] = c
	s.mu.Unlock()
	// What was kept is not asked for again.
	c.send(Message{T: "from", Off: end - base})
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := c.s.cfg.Store
	switch m.T {
	case "hello":
		c.mu.Lock()
		c.hello = true
		c.mu.Unlock()
	case "hb":
		c.mu.Lock()
		c.lastHB = time.Now()
		c.mu.Unlock()
	case "start":
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
	case "out":
		return c.out(m.Off, m.D)
	case "exit":
		return c.exit(ctx, m)
	}
	return nil
}

// out keeps a chunk of output at its offset: what was kept already is not
// written twice; after a gap (output gpuvmd never got: the runner blocks
// while gpuvmd is not connected, so only a runner that lost some) what
// comes is kept right after what was kept.
func (c *conn) out(off int64, d string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	off += c.base
	if off+int64(len(d)) <= c.written {
		return nil
	}
	if off < c.written {
		d = d[c.written-off:]
	}
	if room := c.s.cfg.MaxLog - c.written; int64(len(d)) > room {
		c.dropped += int64(len(d)) - max(room, 0)
		d = d[:max(room, 0)]
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
	reason := fmt.Sprintf("the command exited %d", code)
	if sig != 0 {
		reason = fmt.Sprintf("the command was killed by signal %d", sig)
	}
	n := c.size()
	err := st.UpdateTask(ctx, c.task, nil, store.TaskUpdate{State: api.TaskCompleting, Reason: reason, ExitCode: &code, Signal: &sig, LogBytes: &n})
	if err != nil {
		return err
	}
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

func (c *conn) signal(sig string) { c.send(Message{T: "signal", Sig: sig}) }

func (c *conn) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written
}

func (c *conn) helloed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

func (c *conn) close() { _ = c.nc.Close() }
