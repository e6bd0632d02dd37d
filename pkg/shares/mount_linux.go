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
	if hostmount.Detect().ViaSystemd {
		return bindInHost(path, view)
	}
	if err := unix.Mount(path, view, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	if err := unix.Mount("", view, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		_ = unix.Unmount(view, unix.MNT_DETACH)
		return fmt.Errorf("make the bind mount read-only: %w", err)
	}
	if ok, _, err := isReadOnlyBind(path, view); err != nil || !ok {
		_ = unix.Unmount(view, unix.MNT_DETACH)
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

// bindInHost makes the read-only view in the host's mount namespace, as
// gpuvmd in its systemd unit's sandbox must (pkg/hostmount): mount(8)
// through systemd-run, checked from here once it has propagated.
func bindInHost(path, view string) error {
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
		return errors.Join(errors.New("the bind mount is not read-only (as gpuvmd sees it) after it was made so"), err)
	}
	return nil
}

// hostMountTimeout bounds one mount(8) through systemd-run.
const hostMountTimeout = 30 * time.Second

// unmount detaches view when it is a mount point (through systemd-run
// into the host's mount namespace where gpuvmd has one of its own).
func unmount(view string) error {
	if hostmount.Detect().ViaSystemd {
		if mounted, err := hostmount.Mounted(view); err != nil || !mounted {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), hostMountTimeout)
		defer cancel()
		return hostmount.Run(ctx, "umount", "--lazy", view)
	}
	err := unix.Unmount(view, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // not a mount point, or gone
	}
	return fmt.Errorf("unmount %s: %w", view, err)
}
