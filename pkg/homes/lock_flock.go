//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package homes

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// noFollow: a lock file that is a symbolic link is not opened.
const noFollow = syscall.O_NOFOLLOW

// flock takes f's exclusive advisory lock, waiting for another process
// (another open file) that holds it; closing f releases it.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("flock %s: %w", f.Name(), err)
		}
		return nil
	}
}
