// Package libvirtlock lets the test binaries that share this machine's
// libvirtd agree on when it may be restarted. `go test ./...` runs packages
// in parallel: a test that stops libvirtd (test/system's restart tests) takes
// the lock exclusively; tests that need libvirtd to stay up meanwhile (the
// state of its test driver, test+unix:///default, lives only as long as the
// daemon; a running guest's connection drops) hold it shared.
//
// The lock is flock(2) on a file in the temporary directory, so it is
// released when its holder exits, however it exits.
package libvirtlock

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Path is the lock file.
func Path() string { return filepath.Join(os.TempDir(), "gpuvm-test-libvirtd.lock") }

// Shared waits until nobody holds the lock exclusively and holds it shared
// until release is called.
func Shared() (release func(), err error) { return lock(Path(), syscall.LOCK_SH) }

// Exclusive waits until nobody holds the lock and holds it alone until
// release is called: for a test that stops or restarts libvirtd.
func Exclusive() (release func(), err error) { return lock(Path(), syscall.LOCK_EX) }

func lock(path string, how int) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("open the libvirtd test lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
