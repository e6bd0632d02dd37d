//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package homes

import "os"

const noFollow = 0

// flock: where the platform has no flock(2), the lock file is not locked;
// only this process's mutex holds the home (lockHome).
func flock(*os.File) error { return nil }
