package store

import (
	"context"
	"database/sql"
	"time"
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
	rows, err := s.db.WithContext(ctx).Raw(query, args...).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		out = append(out, *new(T))
		if err := scan(rows, &out[len(out)-1]); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}
