package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpuvm/gpuvm/pkg/config"
	"slices"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// DiskVolumeName is the name of a data disk's volume in its libvirt pool:
// it carries the installation's id and the volume's, so that a volume in a
// pool is provably this installation's and which row it is, and it can be
// taken neither for a VM's disk overlay nor for its seed.
func DiskVolumeName(installation, id string) string {
	return "gpuvm-disk-" + installation + "-" + id + ".qcow2"
}

// DiskQuota is the most bytes a person's data disks may hold together (nil:
// no limit) and the rule of the policy that says so, for the refusal.
type DiskQuota struct {
	Bytes *uint64
	Rule  string
}

// DiskQuotaError refuses a data disk, or a growth, past a person's quota.
// It matches ErrConflict.
type DiskQuotaError struct {
	Owner       string
	Quota, Have uint64 // bytes: the quota, what the other disks hold
	Want        uint64 // bytes asked for
	Rule        string
}

func (e *DiskQuotaError) Error() string {
	size := config.FormatSize
	return fmt.Sprintf("%s's data disks would hold %s (%s already, %s asked), past the %s allowed by %s (storage.disk_quota)",
		e.Owner, size(e.Have+e.Want), size(e.Have), size(e.Want), size(e.Quota), e.Rule)
}

// Is makes a DiskQuotaError match ErrConflict.
func (e *DiskQuotaError) Is(target error) bool { return target == ErrConflict }

// VolumeInUseError refuses to attach a volume attached to another VM, or to
// delete an attached one. It matches ErrConflict.
type VolumeInUseError struct {
	Volume string // its name
	VMID   string
	VMName string
}

func (e *VolumeInUseError) Error() string {
	return fmt.Sprintf("volume %q is attached to VM %q (%s): detach it first", e.Volume, e.VMName, e.VMID)
}

// Is makes a VolumeInUseError match ErrConflict.
func (e *VolumeInUseError) Is(target error) bool { return target == ErrConflict }

// checkDiskQuota refuses want more bytes for owner's disks past quota
// (except is a volume not counted: the one being resized).
func (s *Store) checkDiskQuota(ctx context.Context, owner, except string, want uint64, quota DiskQuota) error {
	if quota.Bytes == nil {
		return nil
	}
	var sum int64
	q := s.db.WithContext(ctx).Model(&Volume{}).Where("owner = ? AND kind = ? AND id <> ?", owner, VolumeDisk, except)
	if err := q.Select("COALESCE(SUM(size_bytes), 0)").Scan(&sum).Error; err != nil {
		return wrap(err, nil, "sum the data disks of %s", owner)
	}
	have := uint64(max(sum, 0))
	if have+want > *quota.Bytes || have+want < have {
		return &DiskQuotaError{Owner: owner, Quota: *quota.Bytes, Have: have, Want: want, Rule: quota.Rule}
	}
	return nil
}

// CreateVolume records the intent of a data disk: its row, state creating,
// on host in pool, after checking the owner's quota and that the name is
// free, in one transaction. It fills v's ID, Installation, Volume, State
// and times. A name the owner already uses is ErrNameTaken.
func (s *Store) CreateVolume(ctx context.Context, v *Volume, quota DiskQuota) error {
	if v.Owner == "" || v.Name == "" || v.SizeBytes <= 0 || v.Host == "" || v.Pool == "" {
		return fmt.Errorf("create volume: %w: owner, name, a positive size, host and pool are required", ErrInvalid)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("create volume: %w", err)
	}
	return s.Tx(ctx, func(tx *Store) error {
		inst, err := tx.Installation(ctx)
		if err != nil {
			return err
		}
		var n int64
		if err := tx.db.WithContext(ctx).Model(&Volume{}).Where("owner = ? AND name = ?", v.Owner, v.Name).Count(&n).Error; err != nil {
			return wrap(err, nil, "look for volume %q of %s", v.Name, v.Owner)
		}
		if n > 0 {
			return fmt.Errorf("volume %q of %s: %w", v.Name, v.Owner, ErrNameTaken)
		}
		if err := tx.checkDiskQuota(ctx, v.Owner, "", uint64(v.SizeBytes), quota); err != nil {
			return err
		}
		now := tx.clock()
		if v.Kind == "" {
			v.Kind = VolumeDisk
		}
		v.ID, v.Installation, v.Volume = id.String(), inst.ID, DiskVolumeName(inst.ID, id.String())
		v.State, v.Error, v.AttachedVM, v.AttachedAt = VolCreating, "", nil, nil
		v.CreatedAt, v.UpdatedAt = now, now
		return wrap(tx.db.Create(v).Error, ErrNameTaken, "insert volume %q of %s", v.Name, v.Owner)
	})
}

// GetVolume is one volume; a missing one is ErrNotFound.
func (s *Store) GetVolume(ctx context.Context, id string) (*Volume, error) {
	var v Volume
	if err := s.db.WithContext(ctx).Where("id = ?", id).Take(&v).Error; err != nil {
		return nil, wrap(err, nil, "volume %s", id)
	}
	utcVolume(&v)
	return &v, nil
}

// GetVolumeByName is owner's volume called name; ErrNotFound when none.
func (s *Store) GetVolumeByName(ctx context.Context, owner, name string) (*Volume, error) {
	var v Volume
	if err := s.db.WithContext(ctx).Where("owner = ? AND name = ?", owner, name).Take(&v).Error; err != nil {
		return nil, wrap(err, nil, "volume %q of %s", name, owner)
	}
	utcVolume(&v)
	return &v, nil
}

// VolumeFilter chooses volumes; empty fields choose all.
type VolumeFilter struct {
	Owner      string
	Host       string
	AttachedVM string
	States     []string
}

// ListVolumes is the volumes f chooses, by name then id (attached ones of
// a VM: in the order they were attached).
func (s *Store) ListVolumes(ctx context.Context, f VolumeFilter) ([]Volume, error) {
	q := s.db.WithContext(ctx)
	if f.Owner != "" {
		q = q.Where("owner = ?", f.Owner)
	}
	if f.Host != "" {
		q = q.Where("host = ?", f.Host)
	}
	if f.AttachedVM != "" {
		q = q.Where("attached_vm = ?", f.AttachedVM).Order("attached_at, id")
	}
	if len(f.States) > 0 {
		q = q.Where("state IN ?", f.States)
	}
	var out []Volume
	if err := q.Order("name, id").Find(&out).Error; err != nil {
		return nil, wrap(err, nil, "list volumes")
	}
	for i := range out {
		utcVolume(&out[i])
	}
	return out, nil
}

// SetVolumeState moves a volume from one of from (any when empty) to state,
// with errText as its error. A volume in none of them is ErrConflict; a
// missing one ErrNotFound.
func (s *Store) SetVolumeState(ctx context.Context, id, state string, from []string, errText string) error {
	q := s.db.WithContext(ctx).Model(&Volume{}).Where("id = ?", id)
	if len(from) > 0 {
		q = q.Where("state IN ?", from)
	}
	res := q.Updates(map[string]any{"state": state, "error": errText, "updated_at": s.clock()})
	if res.Error != nil {
		return wrap(res.Error, nil, "update volume %s", id)
	}
	if res.RowsAffected == 1 {
		return nil
	}
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("volume %s is not %v: %w", id, from, ErrConflict)
}

// attachedTo is the live VM a volume is attached to; nil when none (no VM,
// or a deleted one: a deleted VM holds no disk).
func (s *Store) attachedTo(ctx context.Context, v *Volume) (*VM, error) {
	if v.AttachedVM == nil || *v.AttachedVM == "" {
		return nil, nil
	}
	vm, err := s.GetVM(ctx, *v.AttachedVM)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if vm.State == VMDeleted {
		return nil, nil
	}
	return vm, nil
}

// AttachVolume attaches a ready volume to vmID. One attached to another
// live VM is a *VolumeInUseError; one not ready is ErrConflict. Attaching
// it again to the same VM changes nothing.
func (s *Store) AttachVolume(ctx context.Context, id, vmID string) (*Volume, error) {
	var out *Volume
	err := s.Tx(ctx, func(tx *Store) error {
		v, err := tx.GetVolume(ctx, id)
		if err != nil {
			return err
		}
		if v.State != VolReady {
			return fmt.Errorf("volume %q is %s, not ready: %w", v.Name, v.State, ErrConflict)
		}
		cur, err := tx.attachedTo(ctx, v)
		if err != nil {
			return err
		}
		if cur != nil && cur.ID == vmID {
			out = v
			return nil
		}
		if cur != nil {
			return &VolumeInUseError{Volume: v.Name, VMID: cur.ID, VMName: cur.Name}
		}
		now := tx.clock()
		res := tx.db.Model(&Volume{}).Where("id = ? AND state = ?", id, VolReady).
			Updates(map[string]any{"attached_vm": vmID, "attached_at": now, "updated_at": now})
		if res.Error != nil {
			return wrap(res.Error, nil, "attach volume %s", id)
		}
		v.AttachedVM, v.AttachedAt, v.UpdatedAt = &vmID, &now, now
		out = v
		return nil
	})
	return out, err
}

// AttachVolumeLive attaches a ready volume to vmID, a running VM, and
// queues the operation (OpDisks) that plugs it into the VM's domain, in one
// transaction: the intent first, as every change of a host.
func (s *Store) AttachVolumeLive(ctx context.Context, id, vmID, requestedBy string) (*Volume, *Operation, error) {
	var v *Volume
	op := &Operation{VMID: vmID, Kind: OpDisks, RequestedBy: requestedBy}
	err := s.Tx(ctx, func(tx *Store) error {
		// The operation first: a disk attached at or after its creation
		// is one it plugs in (and detaches again when it cannot).
		if err := tx.createOperation(op); err != nil {
			return err
		}
		var err error
		v, err = tx.AttachVolume(ctx, id, vmID)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return v, op, nil
}

// BeginDetachVolume marks a ready volume attached to a running VM
// detaching and queues the operation (OpDisks) that unplugs it, in one
// transaction. It stays attached (nothing else may take it) until the
// guest has let it go (EndDetachVolume). Not ready, or detached, is
// ErrConflict.
func (s *Store) BeginDetachVolume(ctx context.Context, id, requestedBy string) (*Volume, *Operation, error) {
	var v *Volume
	var op *Operation
	err := s.Tx(ctx, func(tx *Store) error {
		cur, err := tx.GetVolume(ctx, id)
		if err != nil {
			return err
		}
		if cur.State != VolReady || cur.AttachedVM == nil {
			return fmt.Errorf("volume %q is %s and attached to %v: %w", cur.Name, cur.State, cur.AttachedVM != nil, ErrConflict)
		}
		op = &Operation{VMID: *cur.AttachedVM, Kind: OpDisks, RequestedBy: requestedBy}
		if err := tx.createOperation(op); err != nil {
			return err
		}
		if err := tx.SetVolumeState(ctx, id, VolDetaching, []string{VolReady}, ""); err != nil {
			return err
		}
		cur.State = VolDetaching
		v = cur
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return v, op, nil
}

// EndDetachVolume detaches a detaching volume, ready again: its VM's
// domain no longer has it.
func (s *Store) EndDetachVolume(ctx context.Context, id string) error {
	res := s.db.WithContext(ctx).Model(&Volume{}).Where("id = ? AND state = ?", id, VolDetaching).
		Updates(map[string]any{"attached_vm": nil, "attached_at": nil, "state": VolReady, "updated_at": s.clock()})
	if res.Error != nil {
		return wrap(res.Error, nil, "detach volume %s", id)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("volume %s is not detaching: %w", id, ErrConflict)
	}
	return nil
}

// DetachVolume detaches a volume from whatever VM holds it (one being
// detached from it is ready again); a detached one is no error.
func (s *Store) DetachVolume(ctx context.Context, id string) error {
	res := s.db.WithContext(ctx).Model(&Volume{}).Where("id = ?", id).
		Updates(map[string]any{"attached_vm": nil, "attached_at": nil, "state": readyIfDetaching, "updated_at": s.clock()})
	if res.Error != nil {
		return wrap(res.Error, nil, "detach volume %s", id)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("volume %s: %w", id, ErrNotFound)
	}
	return nil
}

// readyIfDetaching sets a detaching volume's state ready, and keeps any
// other.
var readyIfDetaching = gorm.Expr("CASE WHEN state = ? THEN ? ELSE state END", VolDetaching, VolReady)

// DetachVolumesOfVM detaches every volume attached to vmID (its deletion:
// the disks stay, detached).
func (s *Store) DetachVolumesOfVM(ctx context.Context, vmID string) (int64, error) {
	res := s.db.WithContext(ctx).Model(&Volume{}).Where("attached_vm = ?", vmID).
		Updates(map[string]any{"attached_vm": nil, "attached_at": nil, "state": readyIfDetaching, "updated_at": s.clock()})
	return res.RowsAffected, wrap(res.Error, nil, "detach the volumes of vm %s", vmID)
}

// ResizeVolume records a ready volume's new, larger size within the
// owner's quota. A smaller or equal size is ErrInvalid.
func (s *Store) ResizeVolume(ctx context.Context, id string, size int64, quota DiskQuota) (*Volume, error) {
	var out *Volume
	err := s.Tx(ctx, func(tx *Store) error {
		v, err := tx.GetVolume(ctx, id)
		if err != nil {
			return err
		}
		if v.State != VolReady {
			return fmt.Errorf("volume %q is %s, not ready: %w", v.Name, v.State, ErrConflict)
		}
		if size <= v.SizeBytes {
			return fmt.Errorf("volume %q holds %d bytes; it can only grow: %w", v.Name, v.SizeBytes, ErrInvalid)
		}
		if err := tx.checkDiskQuota(ctx, v.Owner, v.ID, uint64(size), quota); err != nil {
			return err
		}
		now := tx.clock()
		if err := tx.db.Model(&Volume{}).Where("id = ?", id).Updates(map[string]any{"size_bytes": size, "updated_at": now}).Error; err != nil {
			return wrap(err, nil, "resize volume %s", id)
		}
		v.SizeBytes, v.UpdatedAt = size, now
		out = v
		return nil
	})
	return out, err
}

// RevertVolumeSize sets a volume's size back from to was, when it is still
// to: a growth its host volume could not follow (the orchestrator).
func (s *Store) RevertVolumeSize(ctx context.Context, id string, to, was int64) error {
	res := s.db.WithContext(ctx).Model(&Volume{}).Where("id = ? AND size_bytes = ?", id, to).
		Updates(map[string]any{"size_bytes": was, "updated_at": s.clock()})
	return wrap(res.Error, nil, "set volume %s back to %d bytes", id, was)
}

// BeginDeleteVolume moves a ready or failed volume that no live VM holds to
// deleting (the host's volume is removed next, then the row). An attached
// one is a *VolumeInUseError.
func (s *Store) BeginDeleteVolume(ctx context.Context, id string) (*Volume, error) {
	var out *Volume
	err := s.Tx(ctx, func(tx *Store) error {
		v, err := tx.GetVolume(ctx, id)
		if err != nil {
			return err
		}
		if v.State == VolDeleting {
			out = v
			return nil
		}
		if !slices.Contains([]string{VolReady, VolError}, v.State) {
			return fmt.Errorf("volume %q is %s: %w", v.Name, v.State, ErrConflict)
		}
		cur, err := tx.attachedTo(ctx, v)
		if err != nil {
			return err
		}
		if cur != nil {
			return &VolumeInUseError{Volume: v.Name, VMID: cur.ID, VMName: cur.Name}
		}
		now := tx.clock()
		err = tx.db.Model(&Volume{}).Where("id = ?", id).
			Updates(map[string]any{"state": VolDeleting, "attached_vm": nil, "attached_at": nil, "updated_at": now}).Error
		if err != nil {
			return wrap(err, nil, "delete volume %s", id)
		}
		v.State, v.AttachedVM, v.AttachedAt, v.UpdatedAt = VolDeleting, nil, nil, now
		out = v
		return nil
	})
	return out, err
}

// RemoveVolume removes a volume's row (its host volume is gone); a missing
// one is no error.
func (s *Store) RemoveVolume(ctx context.Context, id string) error {
	return wrap(s.db.WithContext(ctx).Where("id = ?", id).Delete(&Volume{}).Error, nil, "remove volume %s", id)
}

func utcVolume(v *Volume) {
	v.CreatedAt, v.UpdatedAt, v.AttachedAt = v.CreatedAt.UTC(), v.UpdatedAt.UTC(), utcPtr(v.AttachedAt)
}

// AdoptVolume records a data disk found in a pool without its row (an
// orphan an admin adopts): v as given, its ID and Volume those its file's
// name carries, state ready, detached. The owner must exist and not use
// the name (ErrNameTaken; one who does not is ErrInvalid naming owner, read
// in the transaction that writes the row); an ID already recorded is
// ErrConflict. No quota
// is checked: the disk is there already.
func (s *Store) AdoptVolume(ctx context.Context, v *Volume) error {
	if v.ID == "" || v.Owner == "" || v.Name == "" || v.SizeBytes <= 0 || v.Host == "" || v.Pool == "" || v.Volume == "" || v.Installation == "" {
		return fmt.Errorf("adopt volume: %w: id, owner, name, a positive size, host, pool, volume and installation are required", ErrInvalid)
	}
	return s.Tx(ctx, func(tx *Store) error {
		if _, err := tx.GetUser(ctx, v.Owner); errors.Is(err, ErrNotFound) {
			return fmt.Errorf("adopt volume: %w: owner: no user %q", ErrInvalid, v.Owner)
		} else if err != nil {
			return err
		}
		var n int64
		if err := tx.db.WithContext(ctx).Model(&Volume{}).Where("id = ?", v.ID).Count(&n).Error; err != nil {
			return wrap(err, nil, "look for volume %s", v.ID)
		}
		if n > 0 {
			return fmt.Errorf("volume %s is recorded already: %w", v.ID, ErrConflict)
		}
		if err := tx.db.WithContext(ctx).Model(&Volume{}).Where("owner = ? AND name = ?", v.Owner, v.Name).Count(&n).Error; err != nil {
			return wrap(err, nil, "look for volume %q of %s", v.Name, v.Owner)
		}
		if n > 0 {
			return fmt.Errorf("volume %q of %s: %w", v.Name, v.Owner, ErrNameTaken)
		}
		now := tx.clock()
		v.Kind, v.State, v.Error, v.AttachedVM, v.AttachedAt = VolumeDisk, VolReady, "", nil, nil
		v.CreatedAt, v.UpdatedAt = now, now
		return wrap(tx.db.Create(v).Error, ErrNameTaken, "insert volume %q of %s", v.Name, v.Owner)
	})
}
