package images

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// An image block of the configuration may name an imported image
// (config.Image.Imported, .Version); the configuration is parsed without the
// store, so the record is looked up here: when a VM is created (Resolve) and
// when the server loads the configuration (CheckConfig).

// Lookup finds image records (store.Store).
type Lookup interface {
	GetImage(ctx context.Context, name string, version int) (*store.Image, error)
}

// Ref writes an image block's reference: NAME@VERSION, or "NAME (newest)".
func Ref(name string, version int) string {
	if version == 0 {
		return name + " (newest)"
	}
	return store.ImageRef(name, version)
}

// Resolve is the record an image block names: its pinned version, or the
// newest. A record that is an ISO cannot be a disk's base and is refused.
func Resolve(ctx context.Context, st Lookup, img *config.Image) (*store.Image, error) {
	if img.Imported == "" {
		return nil, fmt.Errorf("image %s names no imported image", img.Name)
	}
	rec, err := st.GetImage(ctx, img.Imported, img.Version)
	if err != nil {
		return nil, fmt.Errorf("image %s: imported image %s: %w", img.Name, Ref(img.Imported, img.Version), err)
	}
	if rec.Format == FormatISO {
		return nil, fmt.Errorf("image %s: imported image %s is an ISO; a VM's disk needs a qcow2 or raw image", img.Name, store.ImageRef(rec.Name, rec.Version))
	}
	return rec, nil
}

// CheckConfig looks up every imported image the configuration names and
// returns a warning, "FILE:LINE: …", for each that is missing, is an ISO,
// or whose OS or firmware differs from the block's.
func CheckConfig(ctx context.Context, st Lookup, cfg *config.Config) ([]string, error) {
	names := make([]string, 0, len(cfg.Images))
	for name, img := range cfg.Images {
		if img != nil && img.Imported != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []string
	for _, name := range names {
		img := cfg.Images[name]
		at := fmt.Sprintf("%s:%d:%d", img.DeclRange.Filename, img.DeclRange.Start.Line, img.DeclRange.Start.Column)
		rec, err := st.GetImage(ctx, img.Imported, img.Version)
		switch {
		case errors.Is(err, store.ErrNotFound):
			out = append(out, fmt.Sprintf("%s: warning: image %q names imported image %s, which is not in the store (gpuvm admin images lists them); VMs of its profiles cannot be created", at, name, Ref(img.Imported, img.Version)))
			continue
		case err != nil:
			return out, err
		case rec.Format == FormatISO:
			out = append(out, fmt.Sprintf("%s: warning: image %q names imported image %s, an ISO; a VM's disk needs a qcow2 or raw image", at, name, store.ImageRef(rec.Name, rec.Version)))
		}
		if rec.OS != img.OS {
			out = append(out, fmt.Sprintf("%s: warning: image %q says os = %q; imported image %s is %s", at, name, img.OS, store.ImageRef(rec.Name, rec.Version), rec.OS))
		}
		if rec.Firmware != img.Firmware {
			out = append(out, fmt.Sprintf("%s: warning: image %q says firmware = %q; imported image %s was stored as %s", at, name, img.Firmware, store.ImageRef(rec.Name, rec.Version), rec.Firmware))
		}
	}
	return out, nil
}

// ProfilesUsing is, per image record id, the profiles whose disk is made on
// it by the configuration: those whose image block pins that version, or
// follows the newest and newest is it. Sorted.
func ProfilesUsing(cfg *config.Config, recs []store.Image) map[int64][]string {
	newest := map[string]int{}
	for _, r := range recs {
		newest[r.Name] = max(newest[r.Name], r.Version)
	}
	out := map[int64][]string{}
	for _, p := range cfg.Profiles {
		if p == nil || p.Disk == nil {
			continue
		}
		img := cfg.Images[p.Disk.Image]
		if img == nil || img.Imported == "" {
			continue
		}
		for _, r := range recs {
			if r.Name == img.Imported && (r.Version == img.Version || img.Version == 0 && r.Version == newest[r.Name]) {
				out[r.ID] = append(out[r.ID], p.Name)
			}
		}
	}
	for id := range out {
		slices.Sort(out[id])
	}
	return out
}
