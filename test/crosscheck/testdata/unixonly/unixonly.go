// Package unixonly names a signal Windows does not have: it builds for
// Linux and macOS, not for Windows.
package unixonly

import "syscall"

// Signal is SIGUSR1.
var Signal = syscall.SIGUSR1
