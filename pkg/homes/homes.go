// Package homes keeps every person's home: a directory on the host, made
// the first time one of their VMs needs it, owned by their stable uid
// (store.UserUID), and attached to each of their VMs over virtiofs
// (domain.Filesystem). A home outlives every VM: nothing here is called
// when a VM is deleted, a lease ends or the reconciler repairs; Remove
// takes the person's name typed again as confirmation. Making a home and
// removing it hold it (lockHome): a mutex of this process and a lock file
// under the homes root, which also holds other processes, such as the
// gpuvmds of a fleet whose nodes mount the same homes root.
package homes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
)

// loginRE is a person's name as a directory name: gpuvm's user names.
var loginRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._@+-]{0,63}$`)

// Path is the home of login under root.
func Path(root, login string) (string, error) {
	if !filepath.IsAbs(root) || filepath.Clean(root) == "/" {
		return "", fmt.Errorf("homes root %q: want an absolute directory other than /", root)
	}
	if !loginRE.MatchString(login) || login == "." || login == ".." {
		return "", fmt.Errorf("home of %q: not a user name that can be a directory", login)
	}
	return filepath.Join(filepath.Clean(root), login), nil
}

// Ensure returns login's home under root, made when it is missing: root
// 0711 (others may pass, not list), the home 0700 and owned by uid:uid
// (the group of the same number the guest's account gets). With image
// above 0, a missing home is made as an image home of that many bytes
// (image.go; the caller has checked ImageSupport), else as a directory.
// An existing home is kept as it is, its owner corrected when uid changed
// (the files inside keep theirs, which the log says); an image home is
// mounted when it is not, grown to image first when that is larger. A
// home that is not a directory, or is a symbolic link, is an error: gpuvm
// shares only what it made. While a Remove of the home runs, in this
// process or another on the same homes root (lockHome), Ensure waits for
// it, then makes the home again (empty). made (nil: none) runs once the
// home is made or found, with it still held: a Remove waits for it.
func Ensure(ctx context.Context, root, login string, uid int, image uint64, log *slog.Logger, made func()) (string, error) {
	dir, err := Path(root, login)
	if err != nil {
		return "", err
	}
	if uid < 1 {
		return "", fmt.Errorf("home of %q: uid %d: want a person's uid, not root's", login, uid)
	}
	unlock, err := lockHome(root, login, dir, true)
	if err != nil {
		return "", err
	}
	defer unlock()
	img := imageFile(root, login)
	hasImage := exists(img)
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && (hasImage || image > 0):
		if err := makeImageHome(ctx, img, dir, login, uid, image, hasImage, log); err != nil {
			return "", err
		}
		if made != nil {
			made()
		}
		return dir, nil
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(dir, 0o700); err != nil {
			return "", fmt.Errorf("make the home of %s: %w", login, err)
		}
		if err := giveTo(dir, uid, log); err != nil {
			_ = os.Remove(dir)
			return "", fmt.Errorf("give the home of %s to uid %d: %w", login, uid, err)
		}
		log.Info("home made", "user", login, "dir", dir, "uid", uid)
		if made != nil {
			made()
		}
		return dir, nil
	case err != nil:
		return "", fmt.Errorf("home of %s: %w", login, err)
	case !fi.IsDir() || fi.Mode()&fs.ModeSymlink != 0:
		return "", fmt.Errorf("home of %s: %s is not a directory (%s); move it away", login, dir, fi.Mode().Type())
	}
	if hasImage {
		if err := keepImage(ctx, img, dir, image, log); err != nil {
			return "", fmt.Errorf("home of %s: %w", login, err)
		}
		if fi, err = os.Lstat(dir); err != nil {
			return "", fmt.Errorf("home of %s: %w", login, err)
		}
	}
	if owner, group, ok := ownerOf(fi); ok && (owner != uid || group != uid) && !ownHome(owner) {
		if err := giveTo(dir, uid, log); err != nil {
			return "", fmt.Errorf("give the home of %s to uid %d: %w", login, uid, err)
		}
		log.Warn("home's owner corrected to the person's uid; files inside keep their owner (chown -R to move them)",
			"user", login, "dir", dir, "old_uid", owner, "uid", uid)
	}
	if made != nil {
		made()
	}
	return dir, nil
}

// makeImageHome makes login's home at dir as an image home (its image
// made when missing: hasImage says it is there, from an Ensure cut short
// after it), mounted, its root 0700 and without the lost+found mkfs.ext4
// puts there (e2fsck makes one again when it needs it).
func makeImageHome(ctx context.Context, img, dir, login string, uid int, size uint64, hasImage bool, log *slog.Logger) error {
	if !hasImage {
		if err := makeImage(ctx, img, size, uid); err != nil {
			return fmt.Errorf("home of %s: %w", login, err)
		}
	}
	if err := keepImage(ctx, img, dir, size, log); err != nil {
		return fmt.Errorf("home of %s: %w", login, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("home of %s: %w", login, err)
	}
	_ = os.Remove(filepath.Join(dir, "lost+found")) // only when empty
	if err := giveTo(dir, uid, log); err != nil {
		return fmt.Errorf("give the home of %s to uid %d: %w", login, uid, err)
	}
	log.Info("home made", "user", login, "dir", dir, "uid", uid, "image", img, "bytes", ImageSize(size))
	return nil
}

// unowned is set once gpuvmd, not root, has said that homes stay its own.
var unowned atomic.Bool

// giveTo gives dir to uid. gpuvmd not running as root (make run on a
// developer's machine) may not: the home stays gpuvmd's user's, which it
// says once, and the guest sees its files as that uid's.
func giveTo(dir string, uid int, log *slog.Logger) error {
	err := os.Chown(dir, uid, uid)
	if err == nil || !errors.Is(err, fs.ErrPermission) || os.Geteuid() == 0 {
		return err
	}
	if !unowned.Swap(true) {
		log.Warn("gpuvmd is not root: homes stay owned by its own user, not by each person's uid; in the guests their files belong to that uid",
			"uid", os.Geteuid(), "dir", dir)
	}
	return nil
}

// ownHome: a home owned by gpuvmd's own user when gpuvmd is not root,
// which giveTo left so.
func ownHome(owner int) bool { return os.Geteuid() != 0 && owner == os.Geteuid() }

// ErrNotAHome: the home's path is not a directory gpuvm made (a symbolic
// link, a file): it is left alone.
var ErrNotAHome = errors.New("not a home gpuvm made; it is left alone")

// ErrNotConfirmed: Remove was not given the person's name as confirmation.
var ErrNotConfirmed = errors.New("removing a home needs its person's name typed again as confirmation")

// Remove deletes login's home and everything in it, for the person or an
// admin, when confirm is the person's name. Nothing calls it with a VM.
// inUse (nil: none) says why the home may not go now (a VM of the person
// that may mount it); it runs with the home held, as the removal does, and
// its error is returned as it is, nothing removed. A VM whose start calls
// Ensure meanwhile waits: it either counts in inUse, or gets the home made
// again once the removal is done, never a half-removed one. removed (nil:
// none) runs once the home is gone, with it still held: an Ensure waits
// for it.
func Remove(root, login, confirm string, inUse func() error, removed func()) error {
	dir, err := Path(root, login)
	if err != nil {
		return err
	}
	if confirm != login {
		return fmt.Errorf("remove the home of %s: %w", login, ErrNotConfirmed)
	}
	unlock, err := lockHome(root, login, dir, false)
	if err != nil {
		return err
	}
	defer unlock()
	if inUse != nil {
		if err := inUse(); err != nil {
			return err
		}
	}
	if img := imageFile(root, login); exists(img) {
		if err := removeImage(img, dir, login); err != nil {
			return err
		}
		if removed != nil {
			removed()
		}
		return nil
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("remove the home of %s: %w", login, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("remove the home of %s: %s is not a directory (%s): %w", login, dir, fi.Mode().Type(), ErrNotAHome)
	}
	// RemoveAll removes a symbolic link inside the home, never what it
	// points to.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if removed != nil {
		removed()
	}
	return nil
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }
