package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The audit log (table audit_log) is append only: AppendAudit adds a row,
// the table's trigger refuses every UPDATE, and rows leave only through
// PruneAudit (retention). Nothing else in the store writes it.

// Page sizes of ListAudit.
const (
	DefaultAuditPage = 100
	MaxAuditPage     = 1000
)

// AppendAudit records an entry. ID and, when zero, CreatedAt are set by the
// store; Action and Outcome are required.
func (s *Store) AppendAudit(ctx context.Context, e *AuditEntry) error {
	if e.Action == "" {
		return fmt.Errorf("append audit entry: %w: no action", ErrInvalid)
	}
	switch e.Outcome {
	case AuditOK, AuditRefused, AuditFailed:
	default:
		return fmt.Errorf("append %s audit entry: %w: outcome %q (want %s, %s or %s)", e.Action, ErrInvalid, e.Outcome, AuditOK, AuditRefused, AuditFailed)
	}
	// e is filled (its ID and time) only when it is written: in a
	// pipelined transaction, when the transaction is sent.
	was := *e
	e.ID = 0
	if e.CreatedAt.IsZero() {
		e.CreatedAt = s.clock()
	} else {
		e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Microsecond)
	}
	err := s.withContext(ctx).insert(e, func(err error) error {
		return wrap(err, nil, "append %s audit entry", was.Action)
	})
	if err != nil {
		*e = was
	}
	return err
}

// AuditFilter selects the entries ListAudit returns; empty fields select
// everything.
type AuditFilter struct {
	User string // the user who acted
	VMID string // the VM acted on
	// Action is an action name ("vm.create"), or a prefix ending in a dot
	// ("vm.") for every action of its kind.
	Action string
	// From (included) and To (excluded) bound the entries' times.
	From, To time.Time
	// After is the Next of the previous page: only entries with a smaller
	// ID follow (the list is newest first). 0: from the newest.
	After int64
	// Limit is the page size: 0 means DefaultAuditPage, more than
	// MaxAuditPage means MaxAuditPage.
	Limit int
}

// ListAudit lists one page of entries, newest (highest ID) first. next is
// the After of the following page, 0 on the last one.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) (entries []AuditEntry, next int64, err error) {
	limit := queryLimit(f.Limit, DefaultAuditPage, MaxAuditPage)
	if f.After < 0 {
		return nil, 0, fmt.Errorf("list audit entries: %w: cursor %d", ErrInvalid, f.After)
	}
	q := s.db.WithContext(ctx).Model(&AuditEntry{})
	if f.After > 0 {
		q = q.Where("id < ?", f.After)
	}
	if f.User != "" {
		q = q.Where("user_name = ?", f.User)
	}
	if f.VMID != "" {
		q = q.Where("vm_id = ?", f.VMID)
	}
	if strings.HasSuffix(f.Action, ".") {
		// substr, not LIKE (no wildcard in the filter can widen it) nor
		// a range (PostgreSQL's collation may order punctuation apart
		// from bytes): equality is exact on both drivers.
		q = q.Where("substr(action, 1, ?) = ?", len(f.Action), f.Action)
	} else if f.Action != "" {
		q = q.Where("action = ?", f.Action)
	}
	if !f.From.IsZero() {
		q = q.Where("created_at >= ?", f.From.UTC().Truncate(time.Microsecond))
	}
	if !f.To.IsZero() {
		q = q.Where("created_at < ?", f.To.UTC().Truncate(time.Microsecond))
	}
	if err := q.Order("id DESC").Limit(limit + 1).Find(&entries).Error; err != nil {
		return nil, 0, wrap(err, nil, "list audit entries")
	}
	if len(entries) > limit {
		entries = entries[:limit]
		next = entries[limit-1].ID
	}
	return entries, next, nil
}

// PruneAudit deletes the entries created before t (retention) and says how
// many.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("created_at < ?", before.UTC().Truncate(time.Microsecond)).Delete(&AuditEntry{})
	return res.RowsAffected, wrap(res.Error, nil, "prune audit entries before %s", before.UTC().Format(time.RFC3339))
}
