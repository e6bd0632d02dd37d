package system

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/test/internal/libvirtlock"
)

// These tests stop and start libvirtd (pkill -x libvirtd, libvirtd -d), as
// scripts/setup-host.sh runs it on hosts without systemd. Running guests
// survive that; libvirtd picks them up again when it starts.

func libvirtdRunning() bool { return exec.Command("pgrep", "-x", "libvirtd").Run() == nil }

// canRestartLibvirtd skips unless this test may stop libvirtd and start it
// again itself: a monolithic libvirtd, not supervised by systemd.
func canRestartLibvirtd(t *testing.T) {
	t.Helper()
	if os.Getenv("GPUVM_SKIP_DAEMON_RESTART") == "1" {
		t.Skip("GPUVM_SKIP_DAEMON_RESTART=1")
	}
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd runs here: it, not this test, restarts libvirtd")
	}
	if !libvirtdRunning() {
		t.Skip("no libvirtd process to restart (modular daemons?)")
	}
	if _, err := exec.LookPath("libvirtd"); err != nil {
		t.Skip("libvirtd is not on PATH")
	}
	// Other test packages (test/e2e) keep libvirt test-driver state in
	// libvirtd while they run: wait until none does, and keep them out
	// while libvirtd restarts.
	release, err := libvirtlock.Exclusive()
	if err != nil {
		t.Fatalf("lock libvirtd for a restart: %v", err)
	}
	t.Cleanup(release)
}

// stopLibvirtd stops libvirtd and waits until it is gone.
func stopLibvirtd() error {
	if out, err := exec.Command("pkill", "-x", "libvirtd").CombinedOutput(); err != nil && libvirtdRunning() {
		return fmt.Errorf("pkill -x libvirtd: %v %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for libvirtdRunning() {
		if time.Now().After(deadline) {
			return errors.New("libvirtd still runs 30s after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// startLibvirtd starts libvirtd unless it runs.
func startLibvirtd() error {
	if libvirtdRunning() {
		return nil
	}
	if out, err := exec.Command("libvirtd", "-d").CombinedOutput(); err != nil {
		return fmt.Errorf("libvirtd -d: %v %s", err, out)
	}
	return nil
}

// restoreLibvirtd makes sure libvirtd runs and the shared connection is
// back; for cleanups, which run even when a test failed midway.
func (e *env) restoreLibvirtd(t *testing.T, conns ...*hypervisor.Conn) {
	t.Helper()
	if err := startLibvirtd(); err != nil {
		t.Errorf("restarting libvirtd: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range append([]*hypervisor.Conn{e.conn}, conns...) {
		if err := c.WaitConnected(ctx); err != nil && !errors.Is(err, hypervisor.ErrClosed) {
			t.Errorf("no connection to libvirt after restarting it: %v", err)
		}
	}
}

// waitEvent waits for an event of type typ (of domain uuid, or a
// connection event when uuid is "").
func waitEvent(t *testing.T, events <-chan hypervisor.Event, typ hypervisor.EventType, uuid string, timeout time.Duration) hypervisor.Event {
	t.Helper()
	deadline := time.After(timeout)
	var seen []string
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("events channel closed; saw %v", seen)
			}
			seen = append(seen, string(ev.Type))
			if ev.Type == typ && ev.UUID == uuid {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event in %v; saw %v", typ, timeout, seen)
		}
	}
}

// TestLibvirtdRestart stops libvirtd under a connection: calls fail at once
// with ErrDisconnected; once libvirtd is back the same Conn works again,
// lists the domain defined before, and its event subscriber, told of the
// loss and of the reconnect, gets events again.
func TestLibvirtdRestart(t *testing.T) {
	e := setup(t)
	canRestartLibvirtd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A persistent domain, never started: it must outlive the restart.
	req, _ := e.request("restart")
	if _, err := e.conn.Define(ctx, req.Spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.restoreLibvirtd(t)
		if err := e.conn.Undefine(context.Background(), req.Spec.UUID); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	events, err := e.conn.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}

	down := time.Now()
	if err := stopLibvirtd(); err != nil {
		t.Fatal(err)
	}
	t.Logf("libvirtd stopped in %v", time.Since(down).Round(time.Millisecond))
	for _, call := range []struct {
		name string
		f    func() error
	}{
		{"List", func() error { _, err := e.conn.List(ctx); return err }},
		{"Lookup", func() error { _, err := e.conn.Lookup(ctx, req.Spec.UUID); return err }},
		{"Start", func() error { return e.conn.Start(ctx, req.Spec.UUID) }},
	} {
		start := time.Now()
		err := call.f()
		took := time.Since(start)
		if !errors.Is(err, hypervisor.ErrDisconnected) {
			t.Fatalf("%s with libvirtd stopped: %v; want ErrDisconnected", call.name, err)
		}
		if took > 2*time.Second {
			t.Errorf("%s took %v to fail", call.name, took)
		}
		t.Logf("%s failed in %v: %v", call.name, took.Round(time.Microsecond), err)
	}
	if e.conn.Connected() {
		t.Error("Connected with libvirtd stopped")
	}
	waitEvent(t, events, hypervisor.EventDisconnected, "", 10*time.Second)

	if err := startLibvirtd(); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	err = e.conn.WaitConnected(wctx)
	wcancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reconnected %v after libvirtd stopped", time.Since(down).Round(time.Millisecond))
	waitEvent(t, events, hypervisor.EventReconnected, "", 10*time.Second)

	list, err := e.conn.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, i := range list {
		if i.UUID == req.Spec.UUID {
			found = true
			if i.State != hypervisor.StateShutoff || i.Metadata.VMID != req.Spec.Metadata.VMID {
				t.Errorf("after the restart: %+v", i)
			}
		}
	}
	if !found {
		t.Fatalf("the domain defined before the restart is not listed after it (%d domains)", len(list))
	}
	// Events flow through the new connection, to the same subscriber.
	if err := e.conn.Undefine(ctx, req.Spec.UUID); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events, hypervisor.EventUndefined, req.Spec.UUID, 10*time.Second)
}

// TestLibvirtdStopsMidCreate stops libvirtd between CreateVM's define and
// start: CreateVM fails at once, naming the VM and the lost connection, and
// cannot roll back; once libvirtd is back, CleanupVM removes the domain,
// the overlay and the seed.
func TestLibvirtdStopsMidCreate(t *testing.T) {
	e := setup(t)
	canRestartLibvirtd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var armed atomic.Bool
	var hookErr atomic.Value
	conn, err := hypervisor.Open(ctx, systemURI, logger(),
		hypervisor.WithDomainType(e.accel.Type),
		hypervisor.WithReconnectBackoff(50*time.Millisecond, time.Second),
		hypervisor.WithCallHook(func(op string) error {
			if op == "start domain" && armed.CompareAndSwap(true, false) {
				if err := stopLibvirtd(); err != nil {
					hookErr.Store(err)
				}
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	req, serial := e.request("midcreate")
	base := filepath.Join(e.dir, req.Spec.Name+"-base.raw")
	if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(base)
	defer os.Remove(serial)
	req.BaseImage = base
	t.Cleanup(func() {
		e.restoreLibvirtd(t, conn)
		_ = e.conn.CleanupVM(context.Background(), req.Spec.UUID, req.Spec.Name, e.pool)
	})

	armed.Store(true)
	start := time.Now()
	_, err = conn.CreateVM(ctx, req)
	took := time.Since(start)
	if v := hookErr.Load(); v != nil {
		t.Fatal(v)
	}
	if armed.Load() {
		t.Fatal("CreateVM never reached the start of the domain")
	}
	var ve *hypervisor.VMError
	if !errors.As(err, &ve) || ve.VM != req.Spec.Name || ve.Op != "start" || !hypervisor.IsDisconnected(err) || !strings.Contains(err.Error(), "rollback incomplete") {
		t.Fatalf("err = %v; want a start error naming %s, wrapping ErrDisconnected, telling the rollback is incomplete", err, req.Spec.Name)
	}
	t.Logf("CreateVM failed after %v: %v", took.Round(time.Millisecond), err)

	if err := startLibvirtd(); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	for _, c := range []*hypervisor.Conn{conn, e.conn} {
		if err := c.WaitConnected(wctx); err != nil {
			t.Fatal(err)
		}
	}
	wcancel()

	// What the rollback could not remove is there...
	if info, err := conn.Lookup(ctx, req.Spec.UUID); err != nil || info.Active() {
		t.Fatalf("the domain after the restart: %+v, %v (the test did not stop CreateVM midway?)", info, err)
	}
	for _, v := range []string{hypervisor.OverlayName(req.Spec.Name), hypervisor.SeedName(req.Spec.Name)} {
		if ok, err := conn.VolumeExists(ctx, e.pool, v); !ok || err != nil {
			t.Fatalf("volume %s after the restart: %v, %v", v, ok, err)
		}
	}
	// ... and CleanupVM removes it, from the same connection.
	for i := 0; i < 2; i++ {
		if err := conn.CleanupVM(ctx, req.Spec.UUID, req.Spec.Name, e.pool); err != nil {
			t.Fatal(err)
		}
	}
	e.assertGone(t, req)
}
