package kit

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

func TestLedgerConcurrent(t *testing.T) {
	dir := t.TempDir()
	a, err := OpenLedger(filepath.Join(dir, "l.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := OpenLedger(filepath.Join(dir, "l.json")) // a second process's view
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Put(Entry{Device: backend.Device{ID: fmt.Sprint(i)}, State: Creating}); err != nil {
				t.Error(err)
			}
			if _, err := l.All(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	all, err := a.All()
	if err != nil || len(all) != 100 {
		t.Fatalf("ledger holds %d entries (%v), want 100", len(all), err)
	}
	if err := b.Delete("7"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := a.Get("7"); ok {
		t.Error("deleted entry still there")
	}
}

func TestHostError(t *testing.T) {
	tests := []struct {
		err  error
		want backend.Code
	}{
		{syscall.EUSERS, backend.CodeExhausted},
		{syscall.EBUSY, backend.CodeConflict},
		{syscall.EEXIST, backend.CodeConflict},
		{syscall.EIO, backend.CodeHost},
	}
	for _, tc := range tests {
		err := HostError("0000:41:00.0", "create", fmt.Errorf("write: %w", tc.err))
		if backend.CodeOf(err) != tc.want {
			t.Errorf("%v -> %s, want %s", tc.err, backend.CodeOf(err), tc.want)
		}
		var be *backend.Error
		if !errors.As(err, &be) || be.GPU != "0000:41:00.0" {
			t.Errorf("%v does not name the GPU", err)
		}
	}
}
