package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Availability tells whether this server has what the VMs of a profile are
// made of: the disk image (a file, or an imported image of the store), the
// boot kernel and initrd, the image's drivers ISO and the cloud-init
// template. A profile that lacks one is unavailable: a VM of it would fail
// at once. Its checks are cheap (a map, a stat, one record looked up), so
// they run on each question, and an image built, imported or deleted shows
// at the next.
type Availability struct {
	// Store looks up imported images; nil: they are not looked up.
	Store Lookup
	// Stat checks that a file exists (os.Stat); nil: files are not checked
	// (libvirt's test driver reads none, a remote libvirt has its own).
	Stat func(path string) (fs.FileInfo, error)
}

// Missing is one thing a profile needs that this server lacks: What says it
// in words for people, with no server path; Path is the file, for the
// server's log ("" when it is not a file).
type Missing struct {
	What string
	Path string
}

// Check lists what profile p needs that this server lacks (nil: nothing). A
// nil Availability checks nothing. The error is the store's, when an
// imported image could not be looked up.
func (a *Availability) Check(ctx context.Context, cfg *config.Config, p *config.Profile) ([]Missing, error) {
	if a == nil || cfg == nil || p == nil {
		return nil, nil
	}
	var out []Missing
	file := func(what, path string) {
		if a.Stat == nil || path == "" {
			return
		}
		if fi, err := a.Stat(path); err != nil || fi.IsDir() {
			out = append(out, Missing{What: what, Path: path})
		}
	}
	if p.Disk != nil && p.Disk.Image != "" {
		img := cfg.Images[p.Disk.Image]
		switch {
		case img == nil:
			out = append(out, Missing{What: fmt.Sprintf("its disk image %q is not configured", p.Disk.Image)})
		case img.Imported != "":
			m, err := a.imported(ctx, img)
			if err != nil {
				return out, err
			}
			if m != nil {
				out = append(out, *m)
			} else {
				file(fmt.Sprintf("the drivers ISO of its disk image %q", img.Name), img.DriversISO)
			}
		default:
			file(fmt.Sprintf("its disk image %q", img.Name), img.Path)
			file(fmt.Sprintf("the drivers ISO of its disk image %q", img.Name), img.DriversISO)
		}
	}
	if p.Boot != nil {
		file("its boot kernel", p.Boot.Kernel)
		file("its boot initrd", p.Boot.Initrd)
	}
	if p.CloudInit != nil && cfg.Templates[p.CloudInit.Template] == nil {
		out = append(out, Missing{What: fmt.Sprintf("its cloud-init template %q is not configured", p.CloudInit.Template)})
	}
	return out, nil
}

// imported is what an image block naming an imported image lacks: the
// record, or (files checked) the record's volume file.
func (a *Availability) imported(ctx context.Context, img *config.Image) (*Missing, error) {
	if a.Store == nil {
		return nil, nil
	}
	rec, err := a.Store.GetImage(ctx, img.Imported, img.Version)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &Missing{What: fmt.Sprintf("its disk image %q names imported image %s, which is not in the store", img.Name, Ref(img.Imported, img.Version))}, nil
	case err != nil:
		return nil, fmt.Errorf("image %s: imported image %s: %w", img.Name, Ref(img.Imported, img.Version), err)
	case rec.Format == FormatISO:
		return &Missing{What: fmt.Sprintf("its disk image %q names imported image %s, an ISO; a disk needs a qcow2 or raw image", img.Name, store.ImageRef(rec.Name, rec.Version))}, nil
	}
	if a.Stat != nil && rec.Path != "" {
		if _, err := a.Stat(rec.Path); err != nil {
			return &Missing{What: fmt.Sprintf("its disk image %q (imported image %s)", img.Name, store.ImageRef(rec.Name, rec.Version)), Path: rec.Path}, nil
		}
	}
	return nil, nil
}

// Reason says in one sentence, with no server path, why a profile with
// these things missing is unavailable ("" when none is).
func Reason(ms []Missing) string {
	var files, other []string
	for _, m := range ms {
		if m.Path != "" {
			files = append(files, m.What)
		} else {
			other = append(other, m.What)
		}
	}
	if len(files) > 0 {
		verb, it := "is", "it"
		if len(files) > 1 {
			verb, it = "are", "them"
		}
		other = append([]string{fmt.Sprintf("%s %s not on this server (an admin has to build or import %s)", joinAnd(files), verb, it)}, other...)
	}
	return strings.Join(other, "; ")
}

// Unavailable is Reason of Check: why a VM of p cannot be made on this
// server now, in words with no server path ("" when it can, or when the
// store could not be read: nothing is said rather than guessed).
func (a *Availability) Unavailable(ctx context.Context, cfg *config.Config, p *config.Profile) string {
	ms, _ := a.Check(ctx, cfg, p)
	return Reason(ms)
}

// joinAnd joins words as a list in a sentence: "a", "a and b", "a, b and c".
func joinAnd(ws []string) string {
	if len(ws) < 2 {
		return strings.Join(ws, "")
	}
	return strings.Join(ws[:len(ws)-1], ", ") + " and " + ws[len(ws)-1]
}
