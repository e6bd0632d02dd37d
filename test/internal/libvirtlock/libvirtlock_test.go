package libvirtlock

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Shared holders do not wait for each other; an exclusive one waits until
// every shared one has released, and shared ones wait for it in turn.
func TestSharedAndExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	r1, err := lock(path, syscall.LOCK_SH)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := lock(path, syscall.LOCK_SH)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		r, err := lock(path, syscall.LOCK_EX)
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	r1()
	select {
	case <-got:
		t.Fatal("the exclusive lock was granted while a shared one was held")
	case <-time.After(200 * time.Millisecond):
	}
	r2()
	var rx func()
	select {
	case rx = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the exclusive lock was not granted once the shared ones were released")
	}
	shared := make(chan func(), 1)
	go func() {
		r, err := lock(path, syscall.LOCK_SH)
		if err != nil {
			t.Error(err)
		}
		shared <- r
	}()
	select {
	case <-shared:
		t.Fatal("a shared lock was granted while the exclusive one was held")
	case <-time.After(200 * time.Millisecond):
	}
	rx()
	select {
	case r := <-shared:
		r()
	case <-time.After(10 * time.Second):
		t.Fatal("the shared lock was not granted once the exclusive one was released")
	}
}
