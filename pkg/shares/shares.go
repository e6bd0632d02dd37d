// Package shares makes admin-declared shares (config's server.storage
// share blocks) ready on the host for a VM's virtiofs devices: a
// read-write share is its own directory; a read-only one is a read-only
// bind mount of it under gpuvmd's state directory, because neither
// libvirt 9 ("virtiofs does not yet support read-only mode") nor QEMU
// 7.2's virtiofsd (no read-only switch) can make a virtiofs share
// read-only, and a guest's own ro mount is no enforcement (its root can
// remount).
package shares

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DirName is the directory under server.state_dir that holds the
// read-only views of the shares.
const DirName = "shares"

// Enforcement of a read-only share, as doctor, GET /v1/shares and a VM's
// capabilities say it.
const (
	// EnforcedBindMount: a read-only bind mount on the host that the
	// virtiofs daemon serves, which no guest can make writable.
	EnforcedBindMount = "host read-only bind mount"
)

// ErrNotEnforceable: read-only shares cannot be enforced on this host
// (gpuvmd is not root, or the system has no bind mounts); such a share is
// not offered read-only-unenforced.
var ErrNotEnforceable = errors.New("read-only shares cannot be enforced here")

// Available says why path cannot be shared now, nil when it can: it must
// be an existing directory. A share whose directory is missing (a dataset
// not yet copied, a disk not mounted) stays declared; gpuvmd says it is
// unavailable rather than failing to start.
func Available(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("share directory %s: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("share directory %s is not a directory", path)
	}
	return nil
}

// ReadOnlyView is the directory a read-only share's virtiofs device
// serves: stateDir/shares/NAME, a read-only bind mount of path, made now
// if it is not there or no longer right (idempotent: a view that is
// already a read-only mount of path is kept). It stays while gpuvmd
// runs, for the VMs that use it; Release removes one no longer declared.
func ReadOnlyView(stateDir, name, path string) (string, error) {
	if err := Available(path); err != nil {
		return "", err
	}
	view := filepath.Join(stateDir, DirName, name)
	if err := os.MkdirAll(view, 0o755); err != nil {
		return "", fmt.Errorf("read-only view of share %s: %w", name, err)
	}
	if err := bindReadOnly(path, view); err != nil {
		return "", fmt.Errorf("read-only view of share %s (%s at %s): %w", name, path, view, err)
	}
	return view, nil
}

// Release unmounts the read-only views under stateDir/shares whose share
// is not in keep, and removes their directories: what a share taken out
// of the configuration left. A view still in use by a running VM's
// virtiofs daemon is detached (lazily unmounted), not broken under it.
func Release(stateDir string, keep map[string]bool) error {
	dir := filepath.Join(stateDir, DirName)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if keep[e.Name()] || !e.IsDir() {
			continue
		}
		view := filepath.Join(dir, e.Name())
		if err := unmount(view); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Remove(view); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
