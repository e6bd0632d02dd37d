package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Operation kinds of disk snapshots (the orchestrator's snapshots.go).
const (
	OpSnapshot       = "snapshot"
	OpRestore        = "restore"
	OpSnapshotDelete = "snapshot-delete"
)

// SnapshotTag is the name of a snapshot inside the VM's qcow2 overlay: it
// carries the installation's id and the snapshot's, so that a snapshot on a
// disk is provably this installation's and which row it is.
func SnapshotTag(installation, id string) string { return "gpuvm-" + installation + "-" + id }

// SnapshotLimit is the most snapshots a person may keep (0: no limit) and
// the rule of the policy that says so, in words, for the refusal.
type SnapshotLimit struct {
	Keep int
	Rule string
}

// SnapshotLimitError refuses a snapshot beyond a person's limit. It matches
// ErrConflict.
type SnapshotLimitError struct {
	Owner      string
	Keep, Have int
	Rule       string
}

func (e *SnapshotLimitError) Error() string {
	return fmt.Sprintf("%s keeps %d snapshot(s), the most allowed by %s (snapshots.keep = %d): delete one first",
		e.Owner, e.Have, e.Rule, e.Keep)
}

// Is makes a SnapshotLimitError match ErrConflict.
func (e *SnapshotLimitError) Is(target error) bool { return target == ErrConflict }

// CreateSnapshot records the intent of a snapshot of vm's disk: the row
// (state creating, its tag made from the installation's id and its own) and
// its pending snapshot operation, in one transaction, after counting the
// owner's snapshots against limit (failed ones do not count). It fills
// snap's ID, Tag, Installation, State, OperationID and times.
func (s *Store) CreateSnapshot(ctx context.Context, snap *Snapshot, requestedBy string, limit SnapshotLimit) (*Operation, error) {
	if snap.VMID == "" || snap.Owner == "" {
		return nil, fmt.Errorf("create snapshot: %w: vm and owner are required", ErrInvalid)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("create snapshot: %w", err)
	}
	var op *Operation
	err = s.Tx(ctx, func(tx *Store) error {
		inst, err := tx.Installation(ctx)
		if err != nil {
			return err
		}
		if limit.Keep > 0 {
			var n int64
			if err := tx.db.WithContext(ctx).Model(&Snapshot{}).Where("owner = ? AND state <> ?", snap.Owner, SnapFailed).Count(&n).Error; err != nil {
				return wrap(err, nil, "count the snapshots of %s", snap.Owner)
			}
			if int(n) >= limit.Keep {
				return &SnapshotLimitError{Owner: snap.Owner, Keep: limit.Keep, Have: int(n), Rule: limit.Rule}
			}
		}
		op = &Operation{VMID: snap.VMID, Kind: OpSnapshot, RequestedBy: requestedBy}
		if err := tx.createOperation(op); err != nil {
			return wrap(err, nil, "create the snapshot operation of vm %s", snap.VMID)
		}
		now := tx.clock()
		snap.ID, snap.Installation, snap.Tag = id.String(), inst.ID, SnapshotTag(inst.ID, id.String())
		snap.State, snap.OperationID, snap.CreatedBy = SnapCreating, op.ID, requestedBy
		snap.CreatedAt, snap.UpdatedAt, snap.Error, snap.RestoredAt = now, now, "", nil
		return wrap(tx.db.Create(snap).Error, nil, "insert snapshot of vm %s", snap.VMID)
	})
	if err != nil {
		return nil, err
	}
	return op, nil
}

// BeginSnapshotOperation records the intent to restore (OpRestore) or delete
// (OpSnapshotDelete) a ready snapshot, or deletes a failed one: its operation, and the row moved to
// restoring or deleting with the operation's id, in one transaction. A
// snapshot that is not ready is ErrConflict.
func (s *Store) BeginSnapshotOperation(ctx context.Context, snapID, kind, requestedBy string) (*Snapshot, *Operation, error) {
	next := map[string]string{OpRestore: SnapRestoring, OpSnapshotDelete: SnapDeleting}[kind]
	if next == "" {
		return nil, nil, fmt.Errorf("begin snapshot operation: %w: kind %q", ErrInvalid, kind)
	}
	var snap *Snapshot
	var op *Operation
	err := s.Tx(ctx, func(tx *Store) error {
		cur, err := tx.GetSnapshot(ctx, snapID)
		if err != nil {
			return err
		}
		from := []string{SnapReady}
		if kind == OpSnapshotDelete {
			// A failed snapshot may have left its tag on the disk (a
			// command that timed out and finished after): deleting it
			// removes the tag, if any, and the row.
			from = append(from, SnapFailed)
		}
		if !slices.Contains(from, cur.State) {
			return fmt.Errorf("snapshot %s is %s, not ready: %w", snapID, cur.State, ErrConflict)
		}
		op = &Operation{VMID: cur.VMID, Kind: kind, RequestedBy: requestedBy}
		if err := tx.createOperation(op); err != nil {
			return wrap(err, nil, "create the %s operation of vm %s", kind, cur.VMID)
		}
		res := tx.db.Model(&Snapshot{}).Where("id = ? AND state IN ?", snapID, from).
			Updates(map[string]any{"state": next, "operation_id": op.ID, "updated_at": tx.clock()})
		if res.Error != nil {
			return wrap(res.Error, nil, "update snapshot %s", snapID)
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("snapshot %s changed while being read: %w", snapID, ErrConflict)
		}
		cur.State, cur.OperationID = next, op.ID
		snap = cur
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return snap, op, nil
}

// SnapshotUpdate is what SetSnapshotState changes besides the state: the
// consistency and error when not empty, RestoredAt when set.
type SnapshotUpdate struct {
	Consistency string
	Error       string
	RestoredAt  *time.Time
}

// SetSnapshotState moves a snapshot from one of states (any when empty) to
// state. A snapshot in none of them is ErrConflict; a missing one
// ErrNotFound.
func (s *Store) SetSnapshotState(ctx context.Context, id, state string, from []string, u SnapshotUpdate) error {
	q := s.db.WithContext(ctx).Model(&Snapshot{}).Where("id = ?", id)
	if len(from) > 0 {
		q = q.Where("state IN ?", from)
	}
	set := map[string]any{"state": state, "updated_at": s.clock(), "error": u.Error}
	if u.Consistency != "" {
		set["consistency"] = u.Consistency
	}
	if u.RestoredAt != nil {
		set["restored_at"] = u.RestoredAt.UTC()
	}
	res := q.Updates(set)
	if res.Error != nil {
		return wrap(res.Error, nil, "update snapshot %s", id)
	}
	if res.RowsAffected == 1 {
		return nil
	}
	if _, err := s.GetSnapshot(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("snapshot %s is not %v: %w", id, from, ErrConflict)
}

// GetSnapshot is one snapshot; a missing one is ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	var snap Snapshot
	if err := s.db.WithContext(ctx).Where("id = ?", id).Take(&snap).Error; err != nil {
		return nil, wrap(err, nil, "snapshot %s", id)
	}
	utcSnapshot(&snap)
	return &snap, nil
}

// SnapshotOfOperation is the snapshot an operation acts on; ErrNotFound
// when none.
func (s *Store) SnapshotOfOperation(ctx context.Context, opID string) (*Snapshot, error) {
	var snap Snapshot
	if err := s.db.WithContext(ctx).Where("operation_id = ?", opID).Take(&snap).Error; err != nil {
		return nil, wrap(err, nil, "snapshot of operation %s", opID)
	}
	utcSnapshot(&snap)
	return &snap, nil
}

// ListSnapshots is a VM's snapshots, oldest first.
func (s *Store) ListSnapshots(ctx context.Context, vmID string) ([]Snapshot, error) {
	return s.listSnapshots(ctx, "vm_id = ?", vmID)
}

// ListAllSnapshots is every snapshot, oldest first (the rules loop's
// expiry, backups).
func (s *Store) ListAllSnapshots(ctx context.Context) ([]Snapshot, error) {
	return s.listSnapshots(ctx, "")
}

func (s *Store) listSnapshots(ctx context.Context, where string, args ...any) ([]Snapshot, error) {
	q := s.db.WithContext(ctx).Order("created_at, id")
	if where != "" {
		q = q.Where(where, args...)
	}
	var out []Snapshot
	if err := q.Find(&out).Error; err != nil {
		return nil, wrap(err, nil, "list snapshots")
	}
	for i := range out {
		utcSnapshot(&out[i])
	}
	return out, nil
}

// RemoveSnapshot removes a snapshot's row (its disk snapshot is gone); a
// missing one is no error.
func (s *Store) RemoveSnapshot(ctx context.Context, id string) error {
	err := s.db.WithContext(ctx).Where("id = ?", id).Delete(&Snapshot{}).Error
	if err != nil && !errors.Is(err, ErrNotFound) {
		return wrap(err, nil, "remove snapshot %s", id)
	}
	return nil
}

func utcSnapshot(s *Snapshot) {
	s.CreatedAt, s.UpdatedAt, s.RestoredAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC(), utcPtr(s.RestoredAt)
}
