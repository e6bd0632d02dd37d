// Package quota limits how much of the host's disk a directory may take:
// filesystem project quotas where the directory's filesystem has them on
// (ext4 mounted with prjquota, XFS with pquota), and otherwise a measure
// of its use by a bounded walk, with nothing refused, which Probe says.
//
// A project is a number the filesystem stores in each inode: a directory
// given one with the inherit flag passes it to everything made in it, and
// the quota of that number counts (and, with a limit, refuses) the blocks
// of all those files wherever they are written from, a VM's virtiofs
// daemon included.
package quota

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Enforcement modes.
const (
	// Project: the filesystem counts the directory's project and refuses
	// writes past its limit (EDQUOT, "Disk quota exceeded").
	Project = "project"
	// Image: the filesystem has no project quotas, and each home with a
	// quota is a filesystem of its own, an image of the quota's size
	// (pkg/homes): writes past it are refused (ENOSPC, "No space left on
	// device").
	Image = "image"
	// None: usage is measured by walking the directory; nothing is refused.
	None = "none"
)

// ErrUnsupported: not on this OS or architecture.
var ErrUnsupported = errors.New("filesystem project quotas are not on this OS")

// Enforcement is what a directory's filesystem does about quotas.
type Enforcement struct {
	// Mode is Project, Image or None.
	Mode string `json:"mode"`
	// FSType is the filesystem's type (ext4, xfs, tmpfs, ...); Device the
	// block device quotactl is given (Project only).
	FSType string `json:"fs_type,omitempty"`
	Device string `json:"device,omitempty"`
	// Why says, for None, why there are no project quotas and how to have
	// them; for Project, what is in force.
	Why string `json:"why"`
}

// Fix is how to give a directory's filesystem project quotas.
const Fix = "make the filesystem with project quotas (ext4: mkfs.ext4 -O quota,project, or tune2fs -O quota,project " +
	"on an unmounted one; XFS: any) and mount it with prjquota (ext4) or pquota (XFS)"

// Describe is a sentence for a person and an admin: which enforcement
// holds for what is at dir.
func (e Enforcement) Describe(what, dir string) string {
	if e.Mode == Project {
		return fmt.Sprintf("%s at %s are on %s with project quotas (%s): writes past a quota are refused", what, dir, e.FSType, e.Device)
	}
	fsType := e.FSType
	if fsType == "" {
		fsType = "a filesystem"
	}
	if e.Mode == Image {
		return fmt.Sprintf("%s at %s are on %s without project quotas (%s): a home with a quota is made as a filesystem image of its size, "+
			"loop-mounted, and writes past it are refused; a home made as a directory before its person had a quota is measured only", what, dir, fsType, e.Why)
	}
	return fmt.Sprintf("%s at %s are on %s without project quotas (%s): usage is measured, writes past the quota are not refused; %s",
		what, dir, fsType, e.Why, Fix)
}

// Usage is what a directory takes: bytes used, and its limit (0: none).
type Usage struct {
	Used  uint64
	Limit uint64
}

// WalkUsage measures dir's use by walking it: the allocated size of
// each regular file and directory, at most maxEntries entries (beyond,
// the count so far and an error saying it stopped). Symbolic links are
// not followed; other filesystems mounted inside are not entered. It is
// slow on a big tree: never call it on a request path.
func WalkUsage(ctx context.Context, dir string, maxEntries int) (uint64, error) {
	root, err := os.Lstat(dir)
	if err != nil {
		return 0, fmt.Errorf("measure %s: %w", dir, err)
	}
	dev, _ := deviceOf(root)
	var used uint64
	n := 0
	errStop := errors.New("stop")
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed meanwhile
				return nil
			}
			return err
		}
		n++
		if n > maxEntries {
			return errStop
		}
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if d.IsDir() && path != dir {
			if dv, ok := deviceOf(fi); ok && dv != dev {
				return fs.SkipDir
			}
		}
		used += allocated(fi)
		return nil
	})
	switch {
	case errors.Is(err, errStop):
		return used, fmt.Errorf("measure %s: stopped after %d entries; usage is at least %d bytes", dir, maxEntries, used)
	case err != nil:
		return used, fmt.Errorf("measure %s: %w", dir, err)
	}
	return used, nil
}
