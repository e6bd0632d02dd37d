package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Data disks (docs/volumes.md): a person's block volumes, qcow2 files in
// the VMs' storage pool named store.DiskVolumeName (the installation's id
// and the row's), attached to at most one VM. Their intent is written
// first: the row (state creating) before the volume is made, the row moved
// to deleting before the volume is removed and removed last. A gpuvmd
// killed between the two finishes at its next start (resumeVolumes): a
// creating row gets its volume (or its error), a deleting one loses its
// volume and then its row. A volume is never made without its row, and
// nothing is removed from a pool that is not provably the row's, made by
// this installation.
const (
	HookVolumeRecorded = "volume recorded" // create: row written, volume not yet made
	HookVolumeMade     = "volume made"     // create: volume made, row not yet ready
)

// VolumeHooks lists the hook points of a data disk's creation, in order.
var VolumeHooks = []string{HookVolumeRecorded, HookVolumeMade}

// DataDisks is what the data disks ask of the hypervisor (a
// *hypervisor.Conn); a Hypervisor without it refuses them.
type DataDisks interface {
	CreateDataDisk(ctx context.Context, pool, name string, size uint64) (string, error)
	ResizeVolume(ctx context.Context, pool, name string, size uint64) error
	VolumeExists(ctx context.Context, pool, name string) (bool, error)
	DeleteVolume(ctx context.Context, pool, name string) error
}

// volumeStore is what they ask of the database (a *store.Store).
type volumeStore interface {
	CreateVolume(ctx context.Context, v *store.Volume, quota store.DiskQuota) error
	GetVolume(ctx context.Context, id string) (*store.Volume, error)
	ListVolumes(ctx context.Context, f store.VolumeFilter) ([]store.Volume, error)
	SetVolumeState(ctx context.Context, id, state string, from []string, errText string) error
	ResizeVolume(ctx context.Context, id string, size int64, quota store.DiskQuota) (*store.Volume, error)
	RevertVolumeSize(ctx context.Context, id string, to, was int64) error
	BeginDeleteVolume(ctx context.Context, id string) (*store.Volume, error)
	RemoveVolume(ctx context.Context, id string) error
}

// ErrNoDataDisks: this server's hypervisor or database cannot keep data
// disks, or it has no storage pool. The API answers it with 503 (its
// Unavailable method).
var ErrNoDataDisks error = unavailableError("this server cannot keep data disks")

type unavailableError string

func (e unavailableError) Error() string     { return string(e) }
func (e unavailableError) Unavailable() bool { return true }

func (lc *lifecycle) volumeParts() (volumeStore, DataDisks, string, error) {
	vs, ok1 := lc.st.(volumeStore)
	dd, ok2 := lc.hv.(DataDisks)
	pool := lc.settings().Libvirt.StoragePool
	if !ok1 || !ok2 {
		return nil, nil, "", fmt.Errorf("%w: its hypervisor or database has no volumes", ErrNoDataDisks)
	}
	if pool == "" {
		return nil, nil, "", fmt.Errorf("%w: no storage pool is configured (server.libvirt.storage_pool)", ErrNoDataDisks)
	}
	return vs, dd, pool, nil
}

// provable says why v is not this installation's to make or remove on
// this host; nil when it is.
func (lc *lifecycle) provable(v *store.Volume) error {
	if lc.installation != "" && (v.Installation != lc.installation || v.Volume != store.DiskVolumeName(lc.installation, v.ID)) {
		return fmt.Errorf("volume %s (%s) was not made by this installation: left alone", v.ID, v.Volume)
	}
	if v.Host != lc.host {
		return fmt.Errorf("volume %q is on host %s, not %s", v.Name, v.Host, lc.host)
	}
	return nil
}

// CreateVolume records a data disk of v.Owner (within quota) on this host
// and makes its volume. A failure after the row is written leaves the row
// in state error with the reason (deletable), and no volume.
func (o *Orchestrator) CreateVolume(ctx context.Context, v *store.Volume, quota store.DiskQuota) error {
	lc := o.life
	vs, dd, pool, err := lc.volumeParts()
	if err != nil {
		return err
	}
	v.Host, v.Pool, v.Kind = lc.host, pool, store.VolumeDisk
	lc.volMu.Lock()
	defer lc.volMu.Unlock()
	if err := vs.CreateVolume(ctx, v, quota); err != nil {
		return err
	}
	if err := lc.hook(v.ID, HookVolumeRecorded); err != nil {
		return err
	}
	return lc.makeVolume(ctx, vs, dd, v)
}

// makeVolume makes a creating row's volume (one already there, from a
// killed attempt, is taken) and marks it ready; on failure, error.
func (lc *lifecycle) makeVolume(ctx context.Context, vs volumeStore, dd DataDisks, v *store.Volume) error {
	fail := func(cause error) error {
		if err := vs.SetVolumeState(context.WithoutCancel(ctx), v.ID, store.VolError, []string{store.VolCreating}, reasonOf(cause)); err != nil {
			return errors.Join(cause, err)
		}
		v.State, v.Error = store.VolError, reasonOf(cause)
		return cause
	}
	if err := lc.provable(v); err != nil {
		return fail(err)
	}
	exists, err := dd.VolumeExists(ctx, v.Pool, v.Volume)
	if err != nil {
		return fail(fmt.Errorf("volume %q: %w", v.Name, err))
	}
	if !exists {
		if _, err := dd.CreateDataDisk(ctx, v.Pool, v.Volume, uint64(v.SizeBytes)); err != nil {
			return fail(fmt.Errorf("volume %q: %w", v.Name, err))
		}
	}
	if err := lc.hook(v.ID, HookVolumeMade); err != nil {
		return err
	}
	if err := vs.SetVolumeState(ctx, v.ID, store.VolReady, []string{store.VolCreating}, ""); err != nil {
		return err
	}
	v.State = store.VolReady
	lc.log.Info("data disk made", "volume", v.ID, "name", v.Name, "owner", v.Owner, "bytes", v.SizeBytes, "pool", v.Pool)
	return nil
}

// DeleteVolume deletes a detached data disk: the row moved to deleting,
// the volume removed, then the row.
func (o *Orchestrator) DeleteVolume(ctx context.Context, id string) error {
	lc := o.life
	vs, dd, _, err := lc.volumeParts()
	if err != nil {
		return err
	}
	lc.volMu.Lock()
	defer lc.volMu.Unlock()
	v, err := vs.BeginDeleteVolume(ctx, id)
	if err != nil {
		return err
	}
	return lc.removeVolume(ctx, vs, dd, v)
}

func (lc *lifecycle) removeVolume(ctx context.Context, vs volumeStore, dd DataDisks, v *store.Volume) error {
	if err := lc.provable(v); err != nil {
		lc.log.Error("a data disk being deleted is not provably this installation's; its volume is left alone", "volume", v.ID, "name", v.Volume, "err", err)
		return err
	}
	if err := dd.DeleteVolume(ctx, v.Pool, v.Volume); err != nil {
		return fmt.Errorf("volume %q: %w", v.Name, err)
	}
	if err := vs.RemoveVolume(ctx, v.ID); err != nil {
		return err
	}
	lc.log.Info("data disk deleted", "volume", v.ID, "name", v.Name, "owner", v.Owner)
	return nil
}

// ResizeVolume grows a data disk (detached, or its VM stopped: the API
// checks) within quota: the row first, then the volume; a volume that
// cannot grow puts the row back.
func (o *Orchestrator) ResizeVolume(ctx context.Context, id string, size int64, quota store.DiskQuota) (*store.Volume, error) {
	lc := o.life
	vs, dd, _, err := lc.volumeParts()
	if err != nil {
		return nil, err
	}
	lc.volMu.Lock()
	defer lc.volMu.Unlock()
	before, err := vs.GetVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := lc.provable(before); err != nil {
		return nil, err
	}
	v, err := vs.ResizeVolume(ctx, id, size, quota)
	if err != nil {
		return nil, err
	}
	if err := dd.ResizeVolume(ctx, v.Pool, v.Volume, uint64(size)); err != nil {
		if rerr := vs.RevertVolumeSize(context.WithoutCancel(ctx), id, size, before.SizeBytes); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, fmt.Errorf("volume %q: %w", v.Name, err)
	}
	return v, nil
}

// resumeVolumes finishes the volume work a killed gpuvmd left on this
// host: creating rows get their volume, deleting ones are removed.
func (lc *lifecycle) resumeVolumes(ctx context.Context) {
	vs, dd, _, err := lc.volumeParts()
	if err != nil {
		return
	}
	lc.volMu.Lock()
	defer lc.volMu.Unlock()
	list, err := vs.ListVolumes(ctx, store.VolumeFilter{Host: lc.host, States: []string{store.VolCreating, store.VolDeleting}})
	if err != nil {
		lc.log.Error("resume data disks", "err", err)
		return
	}
	for i := range list {
		v := &list[i]
		if v.State == store.VolCreating {
			err = lc.makeVolume(ctx, vs, dd, v)
		} else {
			err = lc.removeVolume(ctx, vs, dd, v)
		}
		lc.log.Info("data disk work resumed", "volume", v.ID, "name", v.Name, "state", v.State, "err", err)
	}
}

// dataDisks are the virtio disks of the data disks attached to vm, in the
// order they were attached (targets vdb, vdc, ... after the system disk),
// each with its volume's id as serial. One not ready, or on another host,
// stops the VM's start with a reason naming it.
func (lc *lifecycle) dataDisks(ctx context.Context, vm *store.VM) ([]domain.Disk, error) {
	vs, ok := lc.st.(volumeStore)
	if !ok {
		return nil, nil
	}
	list, err := vs.ListVolumes(ctx, store.VolumeFilter{AttachedVM: vm.ID})
	if err != nil {
		return nil, err
	}
	var out []domain.Disk
	for _, v := range list {
		switch {
		case v.State != store.VolReady:
			return nil, fmt.Errorf("data disk %q is %s, not ready: detach it or wait", v.Name, v.State)
		case strings.HasPrefix(v.Error, MissingDiskReason):
			return nil, fmt.Errorf("data disk %q: %s: detach it", v.Name, v.Error)
		case v.Host != lc.host:
			return nil, fmt.Errorf("data disk %q is on host %s, and this VM on %s: detach it", v.Name, v.Host, lc.host)
		}
		out = append(out, dataDiskOf(v))
	}
	return out, nil
}

// dataDiskOf is the virtio disk of a data disk, its volume's id as serial.
func dataDiskOf(v store.Volume) domain.Disk {
	return domain.Disk{Pool: v.Pool, Volume: v.Volume, Format: domain.FormatQCOW2, Bus: domain.BusVirtIO, Serial: v.ID}
}
