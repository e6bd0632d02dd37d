package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
)

// flakyDial stands in for libvirt.NewConnect: it fails (as when libvirtd is
// down) until up is called, and records when it was tried.
type flakyDial struct {
	mu       sync.Mutex
	attempts []time.Time
	isUp     bool
	block    chan struct{} // when not nil, dialling waits for it
}

func (f *flakyDial) dial(uri string) (*libvirt.Connect, error) {
	f.mu.Lock()
	f.attempts = append(f.attempts, time.Now())
	up, block := f.isUp, f.block
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	if !up {
		return nil, errors.New("injected: Failed to connect socket: Connection refused")
	}
	return libvirt.NewConnect(uri)
}

func (f *flakyDial) up() {
	f.mu.Lock()
	f.isUp = true
	f.mu.Unlock()
}

func (f *flakyDial) tries() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.attempts...)
}

// waitTries waits until dial was tried n times.
func (f *flakyDial) waitTries(t *testing.T, n int) []time.Time {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if a := f.tries(); len(a) >= n {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial tried %d times, want %d", len(f.tries()), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// simulateLoss does what the close callback does when libvirtd goes away.
func simulateLoss(c *Conn, reason string) { c.markDisconnected(c.generation(), reason) }

// nextEvent waits for an event of gpuvm's domain uuid, or a connection
// event when uuid is "".
func nextEvent(t *testing.T, events <-chan Event, uuid string) Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("events channel closed")
			}
			if ev.UUID == uuid {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event for %q", uuid)
		}
	}
}

// TestReconnect loses the connection and checks: calls fail at once with
// ErrDisconnected, reconnecting backs off, and once reconnected the same
// Conn works, still sees the domain defined before, and its Events
// subscriber is told and keeps receiving.
func TestReconnect(t *testing.T) {
	c := openTest(t, WithReconnectBackoff(5*time.Millisecond, 40*time.Millisecond))
	ctx := testCtx(t)
	fd := &flakyDial{}
	c.dial = fd.dial
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := c.Events(ectx)
	if err != nil {
		t.Fatal(err)
	}
	spec := gpuSpec(t, kindMdev)
	if _, err := c.Define(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Undefine(context.Background(), spec.UUID) })
	nextEvent(t, events, spec.UUID) // defined

	simulateLoss(c, "injected: libvirtd stopped")
	if c.Connected() {
		t.Error("Connected after the loss")
	}
	if ev := nextEvent(t, events, ""); ev.Type != EventDisconnected || !strings.Contains(ev.Detail, "libvirtd stopped") {
		t.Errorf("first event after the loss: %+v", ev)
	}

	// Calls fail at once, saying why.
	calls := map[string]func() error{
		"List":   func() error { _, err := c.List(ctx); return err },
		"Lookup": func() error { _, err := c.Lookup(ctx, spec.UUID); return err },
		"Start":  func() error { return c.Start(ctx, spec.UUID) },
		"Define": func() error { _, err := c.Define(ctx, spec); return err },
		"Events": func() error { _, err := c.Events(ctx); return err },
		"DeleteVolume": func() error {
			return c.DeleteVolume(ctx, "p", "v")
		},
	}
	for name, f := range calls {
		start := time.Now()
		err := f()
		var de *DisconnectedError
		if !errors.Is(err, ErrDisconnected) || !IsDisconnected(err) || !errors.As(err, &de) || de.Since.IsZero() {
			t.Errorf("%s while disconnected: %v, want ErrDisconnected", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s took %v while disconnected", name, d)
		}
		if err != nil && !strings.Contains(err.Error(), testURI) {
			t.Errorf("%s: error does not name the URI: %v", name, err)
		}
	}
	if c.Alive(ctx) {
		t.Error("Alive while disconnected")
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if err := c.WaitConnected(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitConnected while down: %v", err)
	}
	wcancel()

	// Attempts back off: 5, 10, 20, 40, 40 ms (timers never fire early).
	tries := fd.waitTries(t, 6)
	for i, want := range []time.Duration{10, 20, 40, 40, 40} {
		gap := tries[i+1].Sub(tries[i])
		if gap < want*time.Millisecond {
			t.Errorf("attempt %d came %v after the one before, want at least %v", i+2, gap, want*time.Millisecond)
		}
		if want == 40 && gap > 2*time.Second {
			t.Errorf("attempt %d came %v after the one before: the backoff is not capped", i+2, gap)
		}
	}

	// libvirtd is back.
	fd.up()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.Connected() || !c.Alive(ctx) || c.generation() != 1 {
		t.Errorf("after reconnecting: connected=%v alive=%v generation=%d", c.Connected(), c.Alive(ctx), c.generation())
	}
	if ev := nextEvent(t, events, ""); ev.Type != EventReconnected {
		t.Errorf("event after reconnecting: %+v", ev)
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, i := range list {
		found = found || i.UUID == spec.UUID
	}
	if !found {
		t.Errorf("the domain defined before the loss is not listed after it")
	}
	// The same subscriber gets events through the new connection.
	if err := c.Start(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events, spec.UUID); ev.Type != EventStarted || ev.VMID != spec.Metadata.VMID {
		t.Errorf("event after reconnecting: %+v", ev)
	}
	if err := c.Destroy(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events, spec.UUID); ev.Type != EventStopped {
		t.Errorf("event after reconnecting: %+v", ev)
	}
	c.mu.Lock()
	nIDs, nSubs := len(c.callbackIDs), len(c.subs)
	c.mu.Unlock()
	if nIDs != 1 || nSubs != 1 {
		t.Errorf("%d callbacks and %d subscribers on the new connection, want 1 and 1", nIDs, nSubs)
	}

	// A second loss reconnects again.
	n := len(fd.tries())
	simulateLoss(c, "injected: again")
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fd.tries()) != n+1 || c.generation() != 2 {
		t.Errorf("second reconnect: %d attempts, generation %d", len(fd.tries())-n, c.generation())
	}
	// A loss reported for a retired connection is ignored.
	c.markDisconnected(0, "stale close callback")
	if !c.Connected() {
		t.Error("a stale loss took the connection down")
	}

	// The subscriber leaves: its callback goes with it.
	cancel()
	for range events {
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		nIDs = len(c.callbackIDs)
		c.mu.Unlock()
		if nIDs == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if nIDs != 0 {
		t.Errorf("%d callbacks left after the subscriber went", nIDs)
	}
}

// TestReconnectHonoursClose: Close stops a reconnect in progress, whether it
// waits between attempts or is stuck in one.
func TestReconnectHonoursClose(t *testing.T) {
	t.Run("between attempts", func(t *testing.T) {
		c := openTest(t, WithReconnectBackoff(5*time.Millisecond, 20*time.Millisecond))
		fd := &flakyDial{}
		c.dial = fd.dial
		simulateLoss(c, "injected")
		fd.waitTries(t, 3)
		start := time.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Close took %v", d)
		}
		if err := c.WaitConnected(testCtx(t)); !errors.Is(err, ErrClosed) {
			t.Errorf("WaitConnected after Close: %v", err)
		}
		if _, err := c.List(testCtx(t)); !errors.Is(err, ErrClosed) {
			t.Errorf("List after Close: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
		n := len(fd.tries())
		time.Sleep(100 * time.Millisecond)
		if m := len(fd.tries()); m != n {
			t.Errorf("still reconnecting after Close: %d more attempts", m-n)
		}
	})
	t.Run("during an attempt", func(t *testing.T) {
		c := openTest(t, WithReconnectBackoff(time.Millisecond, time.Millisecond))
		block := make(chan struct{})
		fd := &flakyDial{block: block, isUp: true}
		c.dial = fd.dial
		simulateLoss(c, "injected")
		fd.waitTries(t, 1)
		// Wait only once the connection is down: a wait started before
		// the loss may see the old connection up and return at once.
		waiting := make(chan error, 1)
		go func() { waiting <- c.WaitConnected(context.Background()) }()
		start := time.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Close took %v", d)
		}
		if err := <-waiting; !errors.Is(err, ErrClosed) {
			t.Errorf("WaitConnected: %v", err)
		}
		close(block) // the late connection is closed, not adopted
		time.Sleep(50 * time.Millisecond)
		if c.Connected() || c.generation() != 0 {
			t.Errorf("a closed Conn adopted a connection: generation %d", c.generation())
		}
	})
}

// TestLostMidCreate: the connection goes while CreateVM runs, so its
// rollback cannot run; once reconnected, CleanupVM removes what is left.
func TestLostMidCreate(t *testing.T) {
	c := openTest(t, WithReconnectBackoff(5*time.Millisecond, 20*time.Millisecond))
	ctx := testCtx(t)
	dir := t.TempDir()
	pool := uniqueName(t, "pool")
	if err := c.EnsurePool(ctx, pool, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeletePool(context.Background(), pool) })
	base := filepath.Join(t.TempDir(), "base.raw")
	if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"define domain", "start domain"} {
		t.Run(step, func(t *testing.T) {
			fd := &flakyDial{}
			c.dial = fd.dial
			s := gpuSpec(t, kindMdev)
			s.Disks = nil
			req := VMRequest{Spec: s, Pool: pool, BaseImage: base, Seed: &cloudinit.Config{InstanceID: s.UUID, Hostname: "vm-1", User: "alice"}}
			var once sync.Once
			c.testHook = func(op string) error {
				var err error
				if op == step {
					once.Do(func() {
						simulateLoss(c, "injected: libvirtd stopped during "+op)
						err = &DisconnectedError{URI: c.uri, Err: errors.New("End of file while reading data")}
					})
				}
				return err
			}
			_, err := c.CreateVM(ctx, req)
			c.testHook = nil
			var ve *VMError
			if !errors.As(err, &ve) || ve.VM != s.Name || !IsDisconnected(err) || !strings.Contains(err.Error(), "rollback incomplete") {
				t.Fatalf("err = %v; want a VMError naming %s, wrapping ErrDisconnected, telling the rollback is incomplete", err, s.Name)
			}
			t.Log(err)

			fd.up()
			if err := c.WaitConnected(ctx); err != nil {
				t.Fatal(err)
			}
			// The rollback could not run: the volumes are still there.
			for _, v := range []string{OverlayName(s.Name), SeedName(s.Name)} {
				if ok, err := c.VolumeExists(ctx, pool, v); !ok || err != nil {
					t.Fatalf("volume %s: %v, %v; the test did not stop CreateVM midway", v, ok, err)
				}
			}
			for i := 0; i < 2; i++ { // idempotent
				if err := c.CleanupVM(ctx, s.UUID, s.Name, pool); err != nil {
					t.Fatal(err)
				}
			}
			assertNothingLeft(t, c, pool, dir, req)
		})
	}

	t.Run("refusals", func(t *testing.T) {
		other := gpuSpec(t, kindNone)
		if _, err := c.CreateVM(ctx, VMRequest{Spec: other, Pool: pool, BaseImage: base}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.DeleteVM(context.Background(), other.UUID, time.Second) }()
		err := c.CleanupVM(ctx, randomUUID(), other.Name, pool)
		if err == nil || !strings.Contains(err.Error(), "taken by another domain") {
			t.Errorf("cleanup of a name another domain has: %v", err)
		}
		if ok, _ := c.VolumeExists(ctx, pool, OverlayName(other.Name)); !ok {
			t.Error("cleanup removed another domain's overlay")
		}
		_, fuuid := foreignDomain(t, c, false)
		if err := c.CleanupVM(ctx, fuuid, "", pool); !errors.Is(err, ErrNotGpuvm) {
			t.Errorf("cleanup of a foreign domain: %v", err)
		}
		if err := c.CleanupVM(ctx, "nope", "x", pool); err == nil {
			t.Error("cleanup with a bad UUID accepted")
		}
		// A VM that never got anywhere.
		if err := c.CleanupVM(ctx, randomUUID(), uniqueName(t, "never"), pool); err != nil {
			t.Errorf("cleanup of nothing: %v", err)
		}
	})
}

// TestDisconnectedErrorText: what people read.
func TestDisconnectedErrorText(t *testing.T) {
	cause := libvirt.Error{Code: libvirt.ERR_SYSTEM_ERROR, Message: "End of file while reading data: Input/output error"}
	err := vmError("vm-1", "start", fmt.Errorf("start domain: %w", &DisconnectedError{URI: "qemu:///system", Err: clean(cause)}))
	want := `VM "vm-1": start: start domain: not connected to libvirt qemu:///system (libvirtd stopped or restarting; reconnecting in the background): End of file while reading data: Input/output error`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	if !errors.Is(err, ErrDisconnected) || !isCode(err, libvirt.ERR_SYSTEM_ERROR) || IsNotFound(err) {
		t.Errorf("chain of %v", err)
	}
}
