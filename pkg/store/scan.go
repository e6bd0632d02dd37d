package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// The dispatch rounds read every unfinished operation and its VM, and the
// whole queue, each round (issue #26). These reads scan the rows straight
// into the structs, without gorm's reflection, which took most of their
// time with thousands of rows. TestScanMatchesModels keeps the column lists
// in step with models.go.

// vmColumns are the VM's columns in the order scanVM reads them.
const vmColumns = "id, name, owner, group_name, profile, spec, state, phase, state_reason, host, hours, lease_end, created_at, updated_at, version, display_password, queue_position, start_at, lease_warned_at"

// opColumns are the operation's columns in the order scanOp reads them.
const opColumns = "id, vm_id, kind, state, step, error, requested_by, created_at, updated_at, started_at, finished_at"

// nullTime scans a nullable time into a *time.Time.
type nullTime struct{ p **time.Time }

func (n nullTime) Scan(v any) error {
	var t sql.NullTime
	if err := t.Scan(v); err != nil {
		return err
	}
	*n.p = nil
	if t.Valid {
		tt := t.Time
		*n.p = &tt
	}
	return nil
}

func scanVM(rows *sql.Rows, vm *VM) error {
	return rows.Scan(&vm.ID, &vm.Name, &vm.Owner, &vm.Group, &vm.Profile, &vm.Spec, &vm.State, &vm.Phase, &vm.StateReason,
		&vm.Host, &vm.Hours, nullTime{&vm.LeaseEnd}, &vm.CreatedAt, &vm.UpdatedAt, &vm.Version, &vm.DisplayPassword,
		&vm.QueueRank, nullTime{&vm.StartAt}, nullTime{&vm.LeaseWarnedAt})
}

func scanOp(rows *sql.Rows, op *Operation) error {
	return rows.Scan(&op.ID, &op.VMID, &op.Kind, &op.State, &op.Step, &op.Error, &op.RequestedBy,
		&op.CreatedAt, &op.UpdatedAt, nullTime{&op.StartedAt}, nullTime{&op.FinishedAt})
}

// scanAll runs a query and scans each row with scan into a new T.
func scanAll[T any](ctx context.Context, s *Store, scan func(*sql.Rows, *T) error, query string, args ...any) ([]T, error) {
	return scanRows(s.db.WithContext(ctx).Raw(query, args...), scan)
}

// scanRows runs the query q has built and scans each row with scan into
// a new T: scanAll for a query gorm builds (its conditions, its order).
func scanRows[T any](q *gorm.DB, scan func(*sql.Rows, *T) error) ([]T, error) {
	return scanRowsSized(q, 0, scan)
}

// scanRowsSized is scanRows for a query expected to return about n rows (a
// page): its slice is made once, not grown (and copied) a dozen times.
func scanRowsSized[T any](q *gorm.DB, n int, scan func(*sql.Rows, *T) error) ([]T, error) {
	rows, err := q.Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T // nil when no row, as before
	if n > 0 {
		out = make([]T, 0, n)
	}
	for rows.Next() {
		out = append(out, *new(T))
		if err := scan(rows, &out[len(out)-1]); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// VMStamp tells whether a VM read before is still as it was: every change
// of a VM bumps its version but two, its rank (SetQueue) and its lease
// warning (WarnLease), so the stamp carries the rank.
type VMStamp struct {
	Version   int64
	QueueRank int
}

// OpStamp is an unfinished operation as far as a dispatch round needs it
// to know whether the operation it read before is still as it was: every
// change of an operation sets its state, step or updated_at, which Stamp
// holds (compared, never parsed).
type OpStamp struct {
	ID, VMID, Stamp string
}

// ListUnfinishedOperationStamps lists the stamps of the pending and
// running operations, oldest first, with the stamp of each one's VM (a VM
// that does not exist has none), read together: what a dispatch round
// reads to know which operations and VMs it must read again. Each row is
// one text value, split here: the SQLite driver's cost is per value read
// (a cgo call or more each), and this read is of every unfinished
// operation, every round.
//
// onHost, when not "", reads only the operations of VMs on that host: a
// fleet node that does not lead makes only the VMs placed on its own GPUs,
// and reading the whole queue (ten thousand waiting: all of it the
// leader's) every round of every node was most of a follower's work and
// of the database's (issue #26).
func (s *Store) ListUnfinishedOperationStamps(ctx context.Context, onHost string) ([]OpStamp, map[string]VMStamp, error) {
	vms := map[string]VMStamp{}
	onHostCond, onHostWords, args := "", "", []any(nil)
	if onHost != "" {
		onHostCond, onHostWords, args = " AND v.host = ?", " of VMs on "+onHost, []any{onHost}
	}
	ops, err := scanAll(ctx, s, func(rows *sql.Rows, op *OpStamp) error {
		var row string
		if err := rows.Scan(&row); err != nil {
			return err
		}
		f := strings.SplitN(row, "|", 5)
		if len(f) != 5 {
			return fmt.Errorf("operation stamp %q", row)
		}
		op.ID, op.VMID, op.Stamp = f[0], f[1], f[4]
		if f[2] == "" {
			return nil // no VM
		}
		version, err1 := strconv.ParseInt(f[2], 10, 64)
		rank, err2 := strconv.Atoi(f[3])
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("vm stamp %q: %w", row, err)
		}
		vms[op.VMID] = VMStamp{Version: version, QueueRank: rank}
		return nil
	}, "SELECT o.id || '|' || o.vm_id || '|' || COALESCE(CAST(v.version AS TEXT), '') || '|' || COALESCE(CAST(v.queue_position AS TEXT), '')"+
		" || '|' || o.state || '|' || CAST(o.updated_at AS TEXT) || '|' || o.step"+
		" FROM operations o LEFT JOIN vms v ON v.id = o.vm_id WHERE o."+unfinishedOp+onHostCond+" ORDER BY o.created_at, o.id", args...)
	if err != nil {
		return nil, nil, wrap(err, nil, "list unfinished operations%s", onHostWords)
	}
	return ops, vms, nil
}

// GetOperations returns the operations of the given IDs, keyed by ID; an
// ID with no operation has no key.
func (s *Store) GetOperations(ctx context.Context, ids []string) (map[string]*Operation, error) {
	out := make(map[string]*Operation, len(ids))
	const chunk = 1000 // bounded IN lists, as in GetVMs
	for lo := 0; lo < len(ids); lo += chunk {
		ops, err := scanAll(ctx, s, scanOp, "SELECT "+opColumns+" FROM operations WHERE id IN ?", ids[lo:min(lo+chunk, len(ids))])
		if err != nil {
			return nil, wrap(err, nil, "get %d operations", len(ids))
		}
		for i := range ops {
			out[ops[i].ID] = &ops[i]
		}
	}
	return out, nil
}
