// Package host is the GPU server as backends see it: its sysfs (the real one, a
// captured tree, or the simulated server's), PCI and IOMMU facts read from it,
// the two NVIDIA vGPU kernel interfaces, and NVML.
package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// SysFS is sysfs under some root. Paths are slash-separated and relative to
// the root ("bus/pci/devices/0000:41:00.0/vendor"); a leading "/sys/" or "/" is
// accepted and ignored. Errors wrap fs errors (fs.ErrNotExist, and the
// *fs.PathError with the errno a kernel write returned), so callers can use
// errors.Is.
type SysFS interface {
	// ReadFile returns a file's content.
	ReadFile(name string) ([]byte, error)
	// WriteFile writes data to an existing attribute, as `echo data > name`.
	WriteFile(name string, data []byte) error
	// ReadDir lists the names in a directory, sorted.
	ReadDir(name string) ([]string, error)
	// Readlink returns a symbolic link's target as the kernel wrote it.
	Readlink(name string) (string, error)
	// Exists reports whether name exists.
	Exists(name string) bool
	// Describe says what this sysfs is, for reports ("/sys", "captured tree
	// /tmp/x", "simulated server h100x8").
	Describe() string
}

// Clean turns a path as callers write it into the relative form.
func Clean(name string) string {
	name = path.Clean("/" + filepath.ToSlash(name))
	name = strings.TrimPrefix(name, "/sys/")
	if name == "/sys" {
		return "."
	}
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		return "."
	}
	return name
}

// Dir is a SysFS on a directory: "/sys" on a real host, or a captured tree of
// one (links inside it are followed within the tree).
type Dir struct {
	Root string
}

// NewDir returns the SysFS rooted at root.
func NewDir(root string) *Dir { return &Dir{Root: root} }

func (d *Dir) abs(name string) string { return filepath.Join(d.Root, filepath.FromSlash(Clean(name))) }

// ReadFile implements SysFS.
func (d *Dir) ReadFile(name string) ([]byte, error) {
	p, err := d.resolve(name, "open", true)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// WriteFile implements SysFS. Like a shell redirect into sysfs it never
// creates a file.
func (d *Dir) WriteFile(name string, data []byte) error {
	p, err := d.resolve(name, "open", true)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// ReadDir implements SysFS.
func (d *Dir) ReadDir(name string) ([]string, error) {
	p, err := d.resolve(name, "open", true)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}

// Readlink implements SysFS. The links on the way to name are followed
// within the tree; name itself is not.
func (d *Dir) Readlink(name string) (string, error) {
	p, err := d.resolve(name, "readlink", false)
	if err != nil {
		return "", err
	}
	return os.Readlink(p)
}

// Exists implements SysFS.
func (d *Dir) Exists(name string) bool {
	p, err := d.resolve(name, "stat", true)
	if err != nil {
		return false
	}
	_, err = os.Stat(p)
	return err == nil
}

// Describe implements SysFS.
func (d *Dir) Describe() string {
	if d.live() {
		return "/sys"
	}
	return "sysfs tree at " + d.Root
}

// live reports whether d is the running kernel's sysfs, where the kernel's
// own links are followed by the OS.
func (d *Dir) live() bool { return filepath.Clean(d.Root) == "/sys" }

// maxLinkHops bounds link following in a captured tree, as the kernel's
// ELOOP limit does.
const maxLinkHops = 40

// resolve maps name to a host path. On /sys it is the plain path. In a
// captured tree every link on the way is followed by hand, within the tree:
// relative targets from the directory holding the link, absolute targets
// ("/sys/devices/...") from the tree's root, and ".." never above the root,
// so that neither a link nor a name can lead the OS out of the tree (onto the
// real /sys, say). followLast says whether a link in the last element is
// followed too (not for Readlink). op names the operation in the error.
func (d *Dir) resolve(name, op string, followLast bool) (string, error) {
	if d.live() {
		return d.abs(name), nil
	}
	todo := strings.Split(Clean(name), "/")
	var done []string
	hops := 0
	for len(todo) > 0 {
		elem := todo[0]
		todo = todo[1:]
		switch elem {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		next := path.Join(path.Join(done...), elem)
		if len(todo) == 0 && !followLast {
			done = append(done, elem)
			break
		}
		target, err := os.Readlink(d.abs(next))
		if err != nil { // not a link, or not there: the OS says which later
			done = append(done, elem)
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", &fs.PathError{Op: op, Path: Clean(name), Err: syscall.ELOOP}
		}
		target = filepath.ToSlash(target)
		if path.IsAbs(target) {
			done = done[:0]
			target = Clean(target)
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return d.abs(path.Join(done...)), nil
}

// ReadString reads an attribute and trims surrounding white space.
func ReadString(fsys SysFS, name string) (string, error) {
	b, err := fsys.ReadFile(name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// LinkBase returns the last element of a link's target: the driver of
// ".../driver", the group number of ".../iommu_group".
func LinkBase(fsys SysFS, name string) (string, error) {
	t, err := fsys.Readlink(name)
	if err != nil {
		return "", err
	}
	return path.Base(filepath.ToSlash(t)), nil
}

// IsNotExist reports whether err says a sysfs path does not exist.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// WriteString writes s to a sysfs attribute and names the attribute and the
// value in the error.
func WriteString(fsys SysFS, name, s string) error {
	if err := fsys.WriteFile(name, []byte(s)); err != nil {
		return fmt.Errorf("write %q to %s: %w", s, Clean(name), unwrapPath(err))
	}
	return nil
}

// unwrapPath keeps the errno of a *fs.PathError and drops its path, which the
// caller names already (and which would be a host path under a captured root).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
