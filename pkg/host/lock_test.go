package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "gpuvm", "host.lock")
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("lock file: %v", err)
	}

	t.Run("held: waits until ctx is done", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		u, err := Lock(ctx, path)
		if err == nil {
			u()
			t.Fatal("second Lock succeeded while the first is held")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d < 90*time.Millisecond {
			t.Errorf("gave up after %v", d)
		}
	})

	t.Run("released: a waiter gets it", func(t *testing.T) {
		var got atomic.Bool
		done := make(chan error, 1)
		go func() {
			u, err := Lock(context.Background(), path)
			if err == nil {
				got.Store(true)
				u()
			}
			done <- err
		}()
		time.Sleep(60 * time.Millisecond)
		if got.Load() {
			t.Fatal("waiter got the lock while it was held")
		}
		unlock()
		unlock() // twice is harmless
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("waiter did not get the lock after unlock")
		}
	})

	t.Run("cancelled ctx", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if u, err := Lock(ctx, filepath.Join(t.TempDir(), "other.lock")); err == nil || !errors.Is(err, context.Canceled) {
			if u != nil {
				u()
			}
			t.Errorf("Lock with a cancelled ctx: %v", err)
		}
	})

	t.Run("parent is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Lock(context.Background(), filepath.Join(file, "x.lock")); err == nil {
			t.Error("Lock under a file succeeded")
		}
	})
}
