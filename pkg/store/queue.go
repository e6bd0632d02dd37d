package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
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
	// Seen, when set, is the VM as the round read it (its owner, state,
	// phase, reason, rank and version). When every entry has it and no
	// other queued VM holds a rank, SetQueue takes the queue from them
	// rather than reading it again; a VM changed since is then left as it
	// is (the version), or not moved (its state), until the next round.
	Seen *VM
}

// SetQueue records a scheduling round's queue in one transaction: the
// order and reason of each VM in entries that is still queued, and rank 0
// for every other VM that had one (queued VMs the round did not rank, VMs
// that left the queue). The order is stored as ranks (queuerank.go): only
// the VMs that are out of order get a new one, so the head of the queue
// leaving writes no other row. A new reason or phase bumps the VM's
// version and appends a vm.state event with the round's position, as any
// change of what its owner is told; a new rank alone does neither. It
// returns how many VMs it changed.
func (s *Store) SetQueue(ctx context.Context, entries map[string]QueueEntry) (int, error) {
	changed := 0
	// The queue is read before the transaction, off the writer (SQLite's
	// readers): only the rounds write ranks, one at a time, and every
	// write below is guarded by the VM's state (and version), so a VM
	// that moved since is left for the next round; what the transaction
	// holds the writer for is the writes alone, not a read of the queue
	// that every create would wait behind (issue #26).
	cur, err := s.queueNow(ctx, entries)
	if err != nil {
		return 0, wrap(err, nil, "read the queue of %d vms", len(entries))
	}
	rank, err := queueRanks(cur, entries)
	if err != nil {
		return 0, wrap(err, nil, "record the queue of %d vms", len(entries))
	}
	err = s.Tx(ctx, func(tx *Store) error {
		changed = 0
		now := tx.clock()
		var moved []string
		var events []*Event
		for _, vm := range cur {
			e, ranked := entries[vm.ID]
			if vm.State != VMQueued || !ranked {
				if vm.QueueRank != 0 {
					res := tx.db.Model(&VM{}).Where("id = ? AND queue_position <> 0", vm.ID).Update("queue_position", 0)
					if res.Error != nil {
						return res.Error
					}
					changed += int(res.RowsAffected)
				}
				continue
			}
			switch {
			case e.Reason != vm.StateReason || e.Phase != vm.Phase:
				res := tx.db.Model(&VM{}).Where("id = ? AND version = ? AND state = ?", vm.ID, vm.Version, VMQueued).Updates(map[string]any{
					"queue_position": rank[vm.ID],
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
				events = append(events, &Event{VMID: vm.ID, Owner: vm.Owner, Type: "vm.state", Payload: mustJSON(map[string]any{
					"state": vm.State, "phase": e.Phase, "reason": e.Reason, "version": vm.Version + 1, "queue_position": e.Position})})
			case rank[vm.ID] != vm.QueueRank:
				moved = append(moved, vm.ID)
				continue
			default:
				continue
			}
			changed++
		}
		n, err := tx.setRanks(moved, rank)
		changed += n
		if err != nil {
			return err
		}
		for _, ev := range events {
			if err := tx.appendEvent(ctx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, wrap(err, nil, "record the queue of %d vms", len(entries))
	}
	return changed, nil
}

// queueNow is the queued VMs and those that left the queue holding a
// rank, as SetQueue needs them: the entries' Seen VMs when all have one
// and the queue holds no ranked VM that is not among them (a count over
// vms_queue_rank), else read. The VMs that left the queue are read
// (vms_queue_left; nearly always none).
func (s *Store) queueNow(ctx context.Context, entries map[string]QueueEntry) ([]VM, error) {
	const cols = "id, owner, state, phase, state_reason, queue_position, version"
	scan := func(rows *sql.Rows, vm *VM) error {
		return rows.Scan(&vm.ID, &vm.Owner, &vm.State, &vm.Phase, &vm.StateReason, &vm.QueueRank, &vm.Version)
	}
	left, err := scanAll(ctx, s, scan, "SELECT "+cols+" FROM vms WHERE "+leftQueue)
	if err != nil {
		return nil, err
	}
	gone := make(map[string]bool, len(left))
	for _, vm := range left {
		gone[vm.ID] = true
	}
	seen := make([]VM, 0, len(entries)+len(left))
	ranked := int64(0)
	for id, e := range entries {
		if e.Seen == nil || e.Seen.ID != id || e.Seen.State != VMQueued {
			seen = nil
			break
		}
		if !gone[id] {
			seen = append(seen, *e.Seen)
			if e.Seen.QueueRank != 0 {
				ranked++
			}
		}
	}
	if seen != nil {
		var n int64
		if err := s.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM vms WHERE " + queuedVM + " AND queue_position <> 0").Scan(&n).Error; err != nil {
			return nil, err
		}
		if n == ranked {
			return append(seen, left...), nil
		}
	}
	// The OR of the two conditions would scan the whole table, deleted
	// VMs included, on both SQLite and PostgreSQL: two index searches.
	queued, err := scanAll(ctx, s, scan, "SELECT "+cols+" FROM vms WHERE "+queuedVM)
	return append(queued, left...), err
}

// queueRanks is the rank of each queued VM of cur in entries: the round's
// order, by position, kept with as few new ranks as can be (assignRanks);
// 0 for those of position 0.
func queueRanks(cur []VM, entries map[string]QueueEntry) (map[string]int, error) {
	type placed struct {
		pos  int
		id   string
		rank int
	}
	var order []placed
	for i := range cur {
		vm := &cur[i]
		e, ranked := entries[vm.ID]
		if vm.State != VMQueued || !ranked {
			continue
		}
		if e.Position < 0 {
			return nil, fmt.Errorf("%w: queue position %d of vm %s", ErrInvalid, e.Position, vm.ID)
		}
		if e.Position > 0 {
			order = append(order, placed{e.Position, vm.ID, vm.QueueRank})
		}
	}
	slices.SortFunc(order, func(a, b placed) int {
		return cmp.Or(cmp.Compare(a.pos, b.pos), strings.Compare(a.id, b.id))
	})
	was := make([]int, len(order))
	for i, p := range order {
		was[i] = p.rank
	}
	ranks, err := assignRanks(was)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(order))
	for i, p := range order {
		out[p.id] = ranks[i]
	}
	return out, nil
}

// setRanks writes the ranks of the VMs moved, many at a time (all of them
// when the queue is numbered again), and returns how many it changed.
func (s *Store) setRanks(moved []string, rank map[string]int) (int, error) {
	changed := 0
	const chunk = 300
	for lo := 0; lo < len(moved); lo += chunk {
		ids := moved[lo:min(lo+chunk, len(moved))]
		var b strings.Builder
		args := make([]any, 0, 2*len(ids)+len(ids)+1)
		b.WriteString("UPDATE vms SET queue_position = CASE id")
		for _, id := range ids {
			b.WriteString(" WHEN ? THEN CAST(? AS INTEGER)")
			args = append(args, id, rank[id])
		}
		b.WriteString(" END WHERE state = ? AND id IN ?")
		args = append(args, VMQueued, ids)
		res := s.db.Exec(b.String(), args...)
		if res.Error != nil {
			return changed, res.Error
		}
		changed += int(res.RowsAffected)
	}
	return changed, nil
}

// GetVMs returns the VMs of the given IDs, keyed by ID; an ID with no VM
// has no key.
func (s *Store) GetVMs(ctx context.Context, ids []string) (map[string]*VM, error) {
	out := make(map[string]*VM, len(ids))
	const chunk = 1000 // bounded IN lists, as in ListAllocationsForVMs
	for lo := 0; lo < len(ids); lo += chunk {
		vms, err := scanAll(ctx, s, scanVM, "SELECT "+vmColumns+" FROM vms WHERE id IN ?", ids[lo:min(lo+chunk, len(ids))])
		if err != nil {
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
