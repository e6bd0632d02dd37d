package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// QueueEntry is where a queued VM stands and why it waits, as a scheduling
// round saw it.
type QueueEntry struct {
	Position int    // 1 = next; 0 = not ranked (it cannot start yet for another reason)
	Phase    string // what it is doing ("waiting for a GPU")
	Reason   string // why it waits, for people
}

// SetQueue records a scheduling round's queue in one transaction: the
// position and reason of each VM in entries that is still queued, and
// position 0 for every other VM that had one (queued VMs the round did not
// rank, VMs that left the queue). Only rows that change are written. A new
// reason or phase bumps the VM's version and appends a vm.state event, as any change
// of what its owner is told; a new position alone does neither (positions
// shift with every start ahead). It returns how many VMs it changed.
func (s *Store) SetQueue(ctx context.Context, entries map[string]QueueEntry) (int, error) {
	changed := 0
	err := s.Tx(ctx, func(tx *Store) error {
		// The queued VMs and those that left the queue holding a
		// position: two index searches (vms_queued_start, vms_queue_left).
		// The OR of the two conditions scans the whole table, deleted VMs
		// included, on both SQLite and PostgreSQL.
		const cols = "id, owner, state, phase, state_reason, queue_position, version"
		var cur []VM
		err := tx.db.Raw("SELECT " + cols + " FROM vms WHERE " + queuedVM +
			" UNION ALL SELECT " + cols + " FROM vms WHERE " + leftQueue).Scan(&cur).Error
		if err != nil {
			return err
		}
		now := tx.clock()
		var moved []string
		for _, vm := range cur {
			e, ranked := entries[vm.ID]
			if vm.State != VMQueued || !ranked {
				if vm.QueuePosition != 0 {
					if err := tx.db.Model(&VM{}).Where("id = ?", vm.ID).Update("queue_position", 0).Error; err != nil {
						return err
					}
					changed++
				}
				continue
			}
			if e.Position < 0 {
				return fmt.Errorf("%w: queue position %d of vm %s", ErrInvalid, e.Position, vm.ID)
			}
			switch {
			case e.Reason != vm.StateReason || e.Phase != vm.Phase:
				res := tx.db.Model(&VM{}).Where("id = ? AND version = ? AND state = ?", vm.ID, vm.Version, VMQueued).Updates(map[string]any{
					"queue_position": e.Position,
					"phase":          e.Phase,
					"state_reason":   e.Reason,
					"version":        gorm.Expr("version + 1"),
					"updated_at":     now,
				})
				if res.Error != nil {
					return res.Error
				}
				if res.RowsAffected == 0 {
					continue
				}
				err := tx.appendEvent(ctx, &Event{VMID: vm.ID, Owner: vm.Owner, Type: "vm.state", Payload: mustJSON(map[string]any{
					"state": vm.State, "phase": e.Phase, "reason": e.Reason, "version": vm.Version + 1, "queue_position": e.Position})})
				if err != nil {
					return err
				}
			case e.Position != vm.QueuePosition:
				moved = append(moved, vm.ID)
				continue
			default:
				continue
			}
			changed++
		}
		// Positions alone, many at a time: they all shift when the head of
		// a long queue starts.
		const chunk = 300
		for lo := 0; lo < len(moved); lo += chunk {
			ids := moved[lo:min(lo+chunk, len(moved))]
			var b strings.Builder
			args := make([]any, 0, 2*len(ids)+len(ids)+1)
			b.WriteString("UPDATE vms SET queue_position = CASE id")
			for _, id := range ids {
				b.WriteString(" WHEN ? THEN CAST(? AS INTEGER)")
				args = append(args, id, entries[id].Position)
			}
			b.WriteString(" END WHERE state = ? AND id IN ?")
			args = append(args, VMQueued, ids)
			res := tx.db.Exec(b.String(), args...)
			if res.Error != nil {
				return res.Error
			}
			changed += int(res.RowsAffected)
		}
		return nil
	})
	if err != nil {
		return 0, wrap(err, nil, "record the queue of %d vms", len(entries))
	}
	return changed, nil
}

// GetVMs returns the VMs of the given IDs, keyed by ID; an ID with no VM
// has no key.
func (s *Store) GetVMs(ctx context.Context, ids []string) (map[string]*VM, error) {
	out := make(map[string]*VM, len(ids))
	const chunk = 1000 // bounded IN lists, as in ListAllocationsForVMs
	for lo := 0; lo < len(ids); lo += chunk {
		var vms []VM
		if err := s.db.WithContext(ctx).Where("id IN ?", ids[lo:min(lo+chunk, len(ids))]).Find(&vms).Error; err != nil {
			return nil, wrap(err, nil, "get %d vms", len(ids))
		}
		for i := range vms {
			out[vms[i].ID] = &vms[i]
		}
	}
	return out, nil
}

// ListEndedUsage lists the usage records that ended after since, by end
// time: what the scheduler's fair share and GPU-hour budgets count (a
// record still open belongs to a VM that holds its devices now, which the
// scheduler counts from its allocations).
func (s *Store) ListEndedUsage(ctx context.Context, since time.Time) ([]UsageRecord, error) {
	var out []UsageRecord
	err := s.db.WithContext(ctx).Where("ended_at IS NOT NULL AND ended_at > ?", since.UTC()).Order("ended_at, id").Find(&out).Error
	return out, wrap(err, nil, "list usage ended since %s", since.UTC().Format(time.RFC3339))
}
