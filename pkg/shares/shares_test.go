package shares

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

func TestAvailable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Available(dir); err != nil {
		t.Errorf("Available(dir) = %v", err)
	}
	if err := Available(filepath.Join(dir, "missing")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Available(missing) = %v, want not exist", err)
	}
	if err := Available(file); err == nil {
		t.Error("Available(file) = nil, want an error")
	}
}

// A read-only view refuses a write, is made once however often asked
// for, and Release removes it when its share is gone. As root on Linux.
func TestReadOnlyView(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		if err := CanEnforceReadOnly(); !errors.Is(err, ErrNotEnforceable) {
			t.Errorf("CanEnforceReadOnly() = %v, want ErrNotEnforceable", err)
		}
		_, err := ReadOnlyView(t.TempDir(), "team", t.TempDir())
		if !errors.Is(err, ErrNotEnforceable) {
			t.Errorf("ReadOnlyView as non-root = %v, want ErrNotEnforceable", err)
		}
		t.Skip("bind mounts need root on Linux")
	}
	state, src := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "data.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	view, err := ReadOnlyView(state, "team", src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmount(view) })
	if b, err := os.ReadFile(filepath.Join(view, "data.txt")); err != nil || string(b) != "hello" {
		t.Errorf("read through the view: %q, %v", b, err)
	}
	err = os.WriteFile(filepath.Join(view, "new.txt"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through the view: %v, want EROFS", err)
	}
	if again, err := ReadOnlyView(state, "team", src); err != nil || again != view {
		t.Errorf("second ReadOnlyView = %q, %v", again, err)
	}
	// Once only: unmounting once leaves no mount behind.
	if err := unmount(view); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(view, "data.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after one unmount the view still shows the share (%v): it was mounted twice", err)
	}
	if _, err := ReadOnlyView(state, "team", src); err != nil {
		t.Fatal(err)
	}
	if err := Release(state, map[string]bool{"team": true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(view, "data.txt")); err != nil {
		t.Errorf("Release removed a view still declared: %v", err)
	}
	if err := Release(state, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(view); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Release the view %s is still there: %v", view, err)
	}
	if _, err := os.Stat(filepath.Join(src, "data.txt")); err != nil {
		t.Errorf("Release touched the share itself: %v", err)
	}
}
