//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package homes

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// childEnv makes the test binary, run again by
// TestHomeHeldAcrossProcesses, the other process: TestHomesChild then
// removes the home of ann under $GPUVM_HOMES_ROOT, signalling in
// $GPUVM_HOMES_SIGNALS.
const childEnv = "GPUVM_HOMES_CHILD"

// The signals between the two processes, files in one directory: the
// child writes held once its removal holds the home (in Remove's inUse)
// and then waits for release, which the parent writes; it writes removed
// once the home is gone (in Remove's removed, still held).
const (
	sigHeld    = "held"
	sigRelease = "release"
	sigRemoved = "removed"
)

// TestHomesChild is the child process of TestHomeHeldAcrossProcesses;
// run otherwise, it does nothing.
func TestHomesChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("the other process of TestHomeHeldAcrossProcesses")
	}
	root, sigs := os.Getenv("GPUVM_HOMES_ROOT"), os.Getenv("GPUVM_HOMES_SIGNALS")
	inUse := func() error {
		if err := os.WriteFile(filepath.Join(sigs, sigHeld), nil, 0o600); err != nil {
			return err
		}
		return waitFile(filepath.Join(sigs, sigRelease), nil)
	}
	removed := func() {
		if err := os.WriteFile(filepath.Join(sigs, sigRemoved), nil, 0o600); err != nil {
			t.Error(err)
		}
	}
	if err := Remove(root, "ann", "ann", inUse, removed); err != nil {
		t.Fatal(err)
	}
}

// waitFile waits for name to appear, or for done (nil: never) to close,
// for at most a minute.
func waitFile(name string, done <-chan struct{}) error {
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		if _, err := os.Stat(name); err == nil {
			return nil
		}
		select {
		case <-done:
			return errors.New("gave up waiting for " + name + ": the other side ended")
		case <-time.After(5 * time.Millisecond):
		}
	}
	return errors.New("timed out waiting for " + name)
}

// A home's removal in another process (another gpuvmd on the same homes
// root) holds it as one in this process does: a VM's start here (Ensure)
// that comes while the child's removal holds the home waits for the
// removal, and gets the home made again, empty, with the child's removed
// hook run before its own made hook.
func TestHomeHeldAcrossProcesses(t *testing.T) {
	root := filepath.Join(t.TempDir(), "homes")
	sigs := t.TempDir()
	uid, dir := homeWithNotes(t, root)

	var out bytes.Buffer
	child := exec.Command(os.Args[0], "-test.run=^TestHomesChild$", "-test.count=1", "-test.v")
	child.Env = append(os.Environ(), childEnv+"=1", "GPUVM_HOMES_ROOT="+root, "GPUVM_HOMES_SIGNALS="+sigs)
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var childErr error
	go func() { childErr = child.Wait(); close(exited) }()
	defer func() { // never leave the child waiting
		_ = os.WriteFile(filepath.Join(sigs, sigRelease), nil, 0o600)
		<-exited
	}()
	if err := waitFile(filepath.Join(sigs, sigHeld), exited); err != nil {
		t.Fatalf("%v; child's output:\n%s", err, out.String())
	}

	// The child holds the home: a start here comes now.
	var removedFirst bool
	ensured := make(chan error, 1)
	go func() {
		_, err := Ensure(context.Background(), root, "ann", uid, 0, quiet, func() {
			_, err := os.Stat(filepath.Join(sigs, sigRemoved))
			removedFirst = err == nil
		})
		ensured <- err
	}()
	select {
	case err := <-ensured:
		t.Fatalf("Ensure went ahead (%v, after the child's removal: %v) while another process's removal held the home", err, removedFirst)
	case <-time.After(300 * time.Millisecond):
	}
	if err := os.WriteFile(filepath.Join(sigs, sigRelease), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-ensured; err != nil {
		t.Fatal(err)
	}
	<-exited
	if childErr != nil {
		t.Fatalf("child: %v; its output:\n%s", childErr, out.String())
	}
	if !removedFirst {
		t.Error("Ensure's made ran before the child's removal was done")
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Fatalf("the home after another process's removal and a start: %v %v; want it made again, empty", ents, err)
	}
	if _, err := os.Stat(filepath.Join(root, LocksDir, "ann.lock")); err != nil {
		t.Errorf("the lock file after the removal: %v; want it kept", err)
	}
}

// A lock file that cannot be made or opened is an error saying whose home
// was being locked; nothing is made or removed, and the home is not held
// afterwards. A Remove under a root that is not there is a missing home
// (fs.ErrNotExist), and makes no root.
func TestLockHomeErrors(t *testing.T) {
	uid := os.Getuid()
	if uid == 0 {
		uid = 20000
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string)
		want  string
	}{
		{"the locks directory is a file", func(t *testing.T, root string) {
			if err := os.WriteFile(filepath.Join(root, LocksDir), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a directory"},
		{"the lock file is a directory", func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, LocksDir, "ann.lock"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, "is a directory"},
		{"the lock file is a symbolic link", func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, LocksDir), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(root, LocksDir, "ann.lock")); err != nil {
				t.Fatal(err)
			}
		}, "too many levels of symbolic links"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "homes")
			if err := os.Mkdir(root, 0o711); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, root)
			_, err := Ensure(context.Background(), root, "ann", uid, 0, quiet, func() { t.Error("made ran") })
			if err == nil || !strings.HasPrefix(err.Error(), "lock the home of ann: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Ensure = %v; want lock the home of ann: …%s", err, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(root, "ann")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the home after a failed lock: %v; want none made", err)
			}
			err = Remove(root, "ann", "ann", func() error { t.Error("inUse ran"); return nil }, nil)
			if err == nil || !strings.HasPrefix(err.Error(), "lock the home of ann: ") {
				t.Errorf("Remove = %v; want lock the home of ann: …", err)
			}
			m, _ := mutexes.Load(filepath.Join(root, "ann"))
			if mu := m.(*sync.Mutex); !mu.TryLock() {
				t.Error("a failed lock left the home's mutex held")
			} else {
				mu.Unlock()
			}
		})
	}

	root := filepath.Join(t.TempDir(), "homes")
	if err := Remove(root, "ann", "ann", nil, nil); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "lock the home of ann: ") {
		t.Errorf("Remove under a missing root = %v; want a missing home", err)
	}
	if _, err := os.Lstat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove made the homes root: %v", err)
	}
}
