//go:build linux

package shares

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuvm/gpuvm/pkg/hostmount"
)

// CanEnforceReadOnly says why read-only shares cannot be enforced here,
// nil when they can: bind mounts need root.
func CanEnforceReadOnly() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: gpuvmd is not root, and a read-only bind mount needs root", ErrNotEnforceable)
	}
	return nil
}

// bindReadOnly makes view a read-only bind mount of path, unless it is
// one already.
func bindReadOnly(path, view string) error {
	if err := CanEnforceReadOnly(); err != nil {
		return err
	}
	ok, mounted, err := isReadOnlyBind(path, view)
	if err != nil || ok {
		return err
	}
	if mounted {
		// A view of another directory (the share's path changed) or made
		// writable: replaced.
		if err := unmount(view); err != nil {
			return fmt.Errorf("unmount the old view: %w", err)
		}
	}
	// mount(8) where mounts are made (pkg/hostmount: in the host's mount
	// namespace, where libvirtd's virtiofs daemons see them).
	ctx, cancel := context.WithTimeout(context.Background(), hostMountTimeout)
	defer cancel()
	if err := hostmount.Run(ctx, "mount", "--bind", path, view); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	if err := hostmount.Run(ctx, "mount", "-o", "remount,bind,ro,nosuid,nodev", view); err != nil {
		_ = unmount(view)
		return fmt.Errorf("make the bind mount read-only: %w", err)
	}
	if ok, _, err := isReadOnlyBind(path, view); err != nil || !ok {
		_ = unmount(view)
		return errors.Join(errors.New("the bind mount is not read-only after it was made so"), err)
	}
	return nil
}

// isReadOnlyBind reports whether view is a read-only mount of path's
// directory (ok), and whether view is a mount point at all (mounted).
func isReadOnlyBind(path, view string) (ok, mounted bool, err error) {
	var pv, vv, parent unix.Stat_t
	if err := unix.Stat(path, &pv); err != nil {
		return false, false, err
	}
	if err := unix.Stat(view, &vv); err != nil {
		return false, false, err
	}
	if err := unix.Stat(view+"/..", &parent); err != nil {
		return false, false, err
	}
	// A bind mount of a directory of the same filesystem has the parent's
	// device too: the mount point is told by its inode being path's.
	same := vv.Dev == pv.Dev && vv.Ino == pv.Ino
	mounted = same || vv.Dev != parent.Dev
	if !same {
		return false, mounted, nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(view, &fs); err != nil {
		return false, mounted, err
	}
	return fs.Flags&unix.ST_RDONLY != 0, mounted, nil
}

// hostMountTimeout bounds one mount(8) or umount(8).
const hostMountTimeout = 30 * time.Second

// unmount detaches view when it is a mount point.
func unmount(view string) error {
	ctx, cancel := context.WithTimeout(context.Background(), hostMountTimeout)
	defer cancel()
	return hostmount.Unmount(ctx, view, true)
}
