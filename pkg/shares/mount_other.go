//go:build !linux

package shares

import "fmt"

// CanEnforceReadOnly: only Linux bind mounts enforce read-only shares.
func CanEnforceReadOnly() error {
	return fmt.Errorf("%w: read-only bind mounts are Linux's", ErrNotEnforceable)
}

func bindReadOnly(path, view string) error { return CanEnforceReadOnly() }

func unmount(view string) error { return nil }
