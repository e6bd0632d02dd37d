package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Data disks (volumes.go) carry the installation's id and their row's in
// their file's name (store.DiskVolumeName). One in the pool whose row is
// gone (a database restored from before it was made), or made by another
// installation, is an orphan: never removed by the reconciler, reported
// with the other orphans, deleted by an admin (DELETE
// /v1/admin/orphans/{id}) or, when it is this installation's, adopted as a
// detached data disk of a person (AdoptVolume).

// diskNameRE matches store.DiskVolumeName: the installation's id, then the
// volume's (a UUID).
var diskNameRE = regexp.MustCompile(`^gpuvm-disk-(.+)-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.qcow2$`)

// volumeGetter reads a data disk's row (a *store.Store).
type volumeGetter interface {
	GetVolume(ctx context.Context, id string) (*store.Volume, error)
}

// volumeAdopter records an adopted data disk (a *store.Store).
type volumeAdopter interface {
	AdoptVolume(ctx context.Context, v *store.Volume) error
}

// volumeSizer tells a volume's capacity (a *hypervisor.Conn).
type volumeSizer interface {
	VolumeCapacity(ctx context.Context, pool, name string) (uint64, error)
}

// diskOrphan judges a volume of the pool named as a data disk: ok when it
// is an orphan.
func (rc *reconciler) diskOrphan(ctx context.Context, pool, name string) (o orphan, ok bool, err error) {
	m := diskNameRE.FindStringSubmatch(name)
	vg, can := rc.st.(volumeGetter)
	if m == nil || !can {
		return orphan{}, false, nil
	}
	inst, id := m[1], m[2]
	full := pool + "/" + name
	o = orphan{Orphan: api.Orphan{ID: orphanID(api.OrphanVolume, rc.host, full), Kind: api.OrphanVolume, Name: full, Host: rc.host,
		Installation: inst}, pool: pool, volume: name, diskID: id}
	if rc.installation != "" && inst != rc.installation {
		o.Reason = fmt.Sprintf("a data disk made by another gpuvm installation (%s)", inst)
		return o, true, nil
	}
	_, err = vg.GetVolume(ctx, id)
	switch {
	case err == nil:
		return orphan{}, false, nil
	case !errors.Is(err, store.ErrNotFound):
		return orphan{}, false, fmt.Errorf("look up the row of data disk %s: %w", full, err)
	}
	o.Reason = fmt.Sprintf("a data disk of this installation, but its database has no volume %s (restored from an older backup, or the row was lost)", id)
	o.Adoptable = true
	return o, true, nil
}

// AdoptVolume makes an orphaned data disk of this installation, whose row
// was lost, a detached data disk of req.Owner again (named req.Name, else
// "adopted-" and the end of its ID), its size read from the pool; no quota
// is checked. req.File is the orphan's "pool/name" or its file name. by is
// the admin who adopts it.
func (rc *reconciler) AdoptVolume(ctx context.Context, req api.AdoptVolumeRequest, by string) (*store.Volume, error) {
	if _, err := rc.reconcileHost(ctx); err != nil {
		rc.log.Warn("reconcile before an orphan decision incomplete", "err", err)
	}
	it, ok := rc.orphans.byFile(req.File)
	if !ok {
		return nil, fmt.Errorf("%w: no orphaned data disk %q on %s (gpuvm admin orphans lists them)", ErrNoOrphan, req.File, rc.host)
	}
	if it.diskID == "" || !it.Adoptable {
		return nil, fmt.Errorf("orphan %s (%s): %w: only a data disk of this installation whose row is lost can be adopted as a volume; this one is an orphan because %s",
			it.ID, it.Name, ErrNotAdoptable, it.Reason)
	}
	va, ok1 := rc.st.(volumeAdopter)
	vs, ok2 := rc.hv.(volumeSizer)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: its hypervisor or database has no volumes", ErrNoDataDisks)
	}
	// The owner is read once, by the store, in the transaction that
	// records the disk: an unknown one is ErrInvalid naming owner.
	rc.roundMu.Lock()
	defer rc.roundMu.Unlock()
	size, err := vs.VolumeCapacity(ctx, it.pool, it.volume)
	if err != nil {
		return nil, fmt.Errorf("adopt orphan %s: %w", it.ID, err)
	}
	v := &store.Volume{ID: it.diskID, Owner: req.Owner, Name: cmp.Or(req.Name, "adopted-"+it.diskID[len(it.diskID)-8:]),
		SizeBytes: int64(size), Host: rc.host, Pool: it.pool, Volume: it.volume, Installation: it.Installation, CreatedBy: by}
	if err := va.AdoptVolume(ctx, v); err != nil {
		return nil, fmt.Errorf("adopt orphan %s: %w", it.ID, err)
	}
	rc.log.Warn("adopted an orphaned data disk", "orphan", it.ID, "volume", v.ID, "file", it.Name, "owner", v.Owner, "name", v.Name, "bytes", size, "by", by)
	rc.orphans.drop(it.ID)
	return v, nil
}

// byFile is the orphaned volume called file: its "pool/name", or its
// name when no other pool has an orphan of that name.
func (s *orphanState) byFile(file string) (orphan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var byName []orphan
	for _, o := range s.items {
		switch {
		case o.Kind != api.OrphanVolume || file == "":
		case o.Name == file: // pool/name
			return o, true
		case o.volume == file:
			byName = append(byName, o)
		}
	}
	if len(byName) == 1 { // a bare name only when one pool has it
		return byName[0], true
	}
	return orphan{}, false
}

// MissingDiskReason starts the error of a ready data disk whose file its
// pool does not have.
const MissingDiskReason = "its file is missing from the host"

// volumeMarker reads and marks data disks' rows (a *store.Store).
type volumeMarker interface {
	ListVolumes(ctx context.Context, f store.VolumeFilter) ([]store.Volume, error)
	SetVolumeState(ctx context.Context, id, state string, from []string, errText string) error
}

// missingDisks judges the ready data disks of this host in pool against
// the pool's volumes (vols, listed at listedAt): one whose file is gone
// (a database restored from a backup without the pool's files, or a file
// removed by hand) keeps its row, which is never dropped, with an error
// saying so (a VM it is attached to will not start: dataDisks); one
// whose file is back loses that error. Rows changed since the listing
// wait for the next round (a disk made meanwhile is not missing). It
// returns the disks newly found missing ("owner/name").
func (rc *reconciler) missingDisks(ctx context.Context, pool string, vols []string, listedAt time.Time) ([]string, []error) {
	vm, ok := rc.st.(volumeMarker)
	if !ok {
		return nil, nil
	}
	rows, err := vm.ListVolumes(ctx, store.VolumeFilter{Host: rc.host, States: []string{store.VolReady}})
	if err != nil {
		return nil, []error{fmt.Errorf("check the data disks' files: %w", err)}
	}
	have := make(map[string]bool, len(vols))
	for _, v := range vols {
		have[v] = true
	}
	var missing []string
	var errs []error
	for _, v := range rows {
		if v.Kind != store.VolumeDisk || v.Pool != pool || v.UpdatedAt.After(listedAt) {
			continue
		}
		marked := strings.HasPrefix(v.Error, MissingDiskReason)
		var why string
		switch {
		case !have[v.Volume] && !marked:
			why = fmt.Sprintf("%s (%s/%s): restored from a backup without the pool's files, or removed by hand? Put the file back, or delete the volume", MissingDiskReason, pool, v.Volume)
		case have[v.Volume] && marked:
		default:
			continue
		}
		if err := vm.SetVolumeState(ctx, v.ID, store.VolReady, []string{store.VolReady}, why); err != nil {
			errs = append(errs, fmt.Errorf("mark data disk %s/%s: %w", v.Owner, v.Name, err))
			continue
		}
		if why == "" {
			rc.log.Info("a data disk's file is back", "volume", v.ID, "owner", v.Owner, "name", v.Name, "file", pool+"/"+v.Volume)
			continue
		}
		rc.log.Error("a data disk's file is missing; its row is kept", "volume", v.ID, "owner", v.Owner, "name", v.Name, "file", pool+"/"+v.Volume)
		missing = append(missing, v.Owner+"/"+v.Name)
	}
	return missing, errs
}
