package store

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"gorm.io/gorm"
)

// Events become visible in ID order: a watcher that read "after 6" and
// goes on "after 8" must never miss a 7 committed later. SQLite has one
// writer at a time, so its IDs are in commit order. On PostgreSQL an event
// takes its ID at INSERT (events_next_id, schema 26), and a transaction
// claims, before its first event takes one, every ID above the sequence's
// last value, by a shared advisory lock held until its commit is visible. A
// reader reads up to the horizon only (events_horizon): the IDs at or below
// the lowest claim held, all final. An event committed late holds the
// readers back until it is visible (its commit wakes them: OnEventCommitted
// here, the fleet's notification on the other nodes); no commit waits for
// another (schema 23's lock, taken inside every commit, stalled a fleet's
// creates: issue 26). A transaction that appends an event holds the
// readers back for its whole life: every one is database work alone.

// AppendEvent records an event. CreatedAt, when zero, is set by the store;
// ID too.
func (s *Store) AppendEvent(ctx context.Context, e *Event) error {
	err := s.Tx(ctx, func(tx *Store) error { return tx.appendEvent(ctx, e) })
	return wrap(err, nil, "append %s event", e.Type)
}

func (s *Store) appendEvent(ctx context.Context, e *Event) error {
	if e.Type == "" {
		return fmt.Errorf("%w: event without a type", ErrInvalid)
	}
	e.ID = 0
	if e.CreatedAt.IsZero() {
		e.CreatedAt = s.clock()
	} else {
		e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Microsecond)
	}
	if err := s.withContext(ctx).insert(e, nil); err != nil {
		return err
	}
	if s.appended != nil {
		*s.appended = true // told when the transaction commits (Tx)
	} else {
		s.events.fire()
	}
	return nil
}

// eventWatch holds the functions OnEventCommitted registered.
type eventWatch struct {
	mu   sync.Mutex
	next int
	fns  map[int]func()
}

// OnEventCommitted registers fn, called after each transaction of this Store
// (or of a Store bound to one of its transactions) that appended events
// commits: what lets a watcher of this process read new events at once
// instead of at its next poll. It is not called for events other processes
// write. fn runs in the writer's goroutine and must not block. cancel
// unregisters it.
func (s *Store) OnEventCommitted(fn func()) (cancel func()) {
	w := s.events
	if w == nil {
		return func() {}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]func(){}
	}
	w.next++
	id := w.next
	w.fns[id] = fn
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.fns, id)
	}
}

func (w *eventWatch) fire() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fn := range w.fns {
		fn()
	}
}

// EventFilter selects the events ListEventsSince returns.
type EventFilter struct {
	VMID  string // "": every VM
	Owner string // "": every owner
	Type  string // "": every type
	// From, when set, leaves out events created before it.
	From time.Time
	// Limit: 0 means 100, more than 1000 means 1000.
	Limit int
}

// ListEventsSince lists the events after an ID, in ID order: a watcher asks
// again with the last ID it saw and misses nothing. On PostgreSQL it lists
// those at or below the horizon only (see the top of this file): one that a
// transaction still open may precede comes at a later call.
func (s *Store) ListEventsSince(ctx context.Context, afterID int64, f EventFilter) ([]Event, error) {
	q, horizon, err := s.finalEvents(ctx)
	if err != nil || horizon <= afterID {
		return nil, wrap(err, nil, "list events after %d", afterID)
	}
	var es []Event
	err = eventsSinceQuery(q, afterID, f).Find(&es).Error
	return es, wrap(err, nil, "list events after %d", afterID)
}

// finalEvents is the events that are final (all on SQLite; on PostgreSQL
// those at or below the horizon, read in a statement of its own first, so
// that the events are read in a snapshot taken after it), and the highest
// ID they may have.
func (s *Store) finalEvents(ctx context.Context) (*gorm.DB, int64, error) {
	q := s.db.WithContext(ctx).Model(&Event{})
	if s.driver != DriverPostgres {
		return q, math.MaxInt64, nil
	}
	var h int64
	if err := s.db.WithContext(ctx).Raw("SELECT events_horizon()").Row().Scan(&h); err != nil {
		return nil, 0, fmt.Errorf("read the events' horizon: %w", err)
	}
	return q.Where("id <= ?", h), h, nil
}

// eventsSinceQuery is ListEventsSince's query. Those of one type are read
// through the index events_type (type, id), from afterID on (schema 18).
func eventsSinceQuery(db *gorm.DB, afterID int64, f EventFilter) *gorm.DB {
	limit := queryLimit(f.Limit, 100, 1000)
	q := db.Where("id > ?", afterID)
	if f.VMID != "" {
		q = q.Where("vm_id = ?", f.VMID)
	}
	if f.Owner != "" {
		q = q.Where("owner = ?", f.Owner)
	}
	if f.Type != "" {
		q = q.Where("type = ?", f.Type)
	}
	if !f.From.IsZero() {
		q = q.Where("created_at >= ?", f.From.UTC().Truncate(time.Microsecond))
	}
	return q.Order("id").Limit(limit)
}

// LastEventID is the ID of the newest event, 0 when there is none: where a
// new watcher that wants only what comes next starts. On PostgreSQL, the
// newest at or below the horizon: one above it may yet be preceded.
func (s *Store) LastEventID(ctx context.Context) (int64, error) {
	q, _, err := s.finalEvents(ctx)
	if err != nil {
		return 0, wrap(err, nil, "read last event id")
	}
	var id *int64
	if err := q.Select("MAX(id)").Row().Scan(&id); err != nil {
		return 0, wrap(err, nil, "read last event id")
	}
	if id == nil {
		return 0, nil
	}
	return *id, nil
}

// DeleteEventsBefore deletes events older than t and says how many.
func (s *Store) DeleteEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("created_at < ?", t.UTC()).Delete(&Event{})
	return res.RowsAffected, wrap(res.Error, nil, "delete events before %s", t.UTC().Format(time.RFC3339))
}
