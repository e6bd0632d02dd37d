package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEvents(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		if id, err := s.LastEventID(ctx); err != nil || id != 0 {
			t.Fatalf("LastEventID of empty = %d, %v", id, err)
		}
		for i := range 5 {
			e := &Event{VMID: fmt.Sprint("vm", i%2), Owner: "alice", Type: "vm.state", Payload: JSON(fmt.Sprintf(`{"n": %d}`, i))}
			if err := s.AppendEvent(ctx, e); err != nil || e.ID <= 0 {
				t.Fatalf("append: %+v, %v", e, err)
			}
		}
		if err := s.AppendEvent(ctx, &Event{Type: "host.drain", Owner: "root"}); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendEvent(ctx, &Event{Type: "x", Payload: JSON("{not json")}); err == nil {
			t.Fatal("invalid JSON payload accepted")
		}
		if err := s.AppendEvent(ctx, &Event{}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("event without type: %v", err)
		}
		all, err := s.ListEventsSince(ctx, 0, EventFilter{})
		if err != nil || len(all) != 6 {
			t.Fatalf("all events: %d, %v", len(all), err)
		}
		var p struct{ N int }
		if err := json.Unmarshal(all[3].Payload, &p); err != nil || p.N != 3 {
			t.Fatalf("payload %s: %v", all[3].Payload, err)
		}
		if string(all[5].Payload) != "{}" {
			t.Fatalf("empty payload stored as %q", all[5].Payload)
		}
		tests := []struct {
			name  string
			after int64
			f     EventFilter
			want  int
		}{
			{"after 2", all[1].ID, EventFilter{}, 4},
			{"vm1", 0, EventFilter{VMID: "vm1"}, 2},
			{"owner", 0, EventFilter{Owner: "root"}, 1},
			{"limit", 0, EventFilter{Limit: 2}, 2},
			{"after last", all[5].ID, EventFilter{}, 0},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				es, err := s.ListEventsSince(ctx, tc.after, tc.f)
				if err != nil || len(es) != tc.want {
					t.Fatalf("%d events, %v; want %d", len(es), err, tc.want)
				}
				for i := 1; i < len(es); i++ {
					if es[i].ID <= es[i-1].ID {
						t.Fatalf("events out of order: %d after %d", es[i].ID, es[i-1].ID)
					}
				}
			})
		}
		if id, _ := s.LastEventID(ctx); id != all[5].ID {
			t.Fatalf("LastEventID = %d, want %d", id, all[5].ID)
		}
		n, err := s.DeleteEventsBefore(ctx, all[2].CreatedAt)
		if err != nil || n != 2 {
			t.Fatalf("DeleteEventsBefore = %d, %v", n, err)
		}
	})
}

// A watcher that polls "after the last ID I saw" while many writers append
// sees every event, each once, in ID order, though the writers keep their
// transactions open a while after their event took its ID, and so commit
// out of ID order (on PostgreSQL; SQLite's writers take turns).
func TestEventsWatcherMissesNothing(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		const writers, each = 8, 40
		var done atomic.Bool
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					err := s.Tx(ctx, func(tx *Store) error {
						if err := tx.appendEvent(ctx, &Event{Type: "t", Owner: fmt.Sprint(w), Payload: JSON(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
							return err
						}
						time.Sleep(time.Duration((w*7+i*3)%4) * 500 * time.Microsecond)
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		go func() { wg.Wait(); done.Store(true) }()
		seen := map[int64]bool{}
		var last int64
		for {
			finished := done.Load()
			es, err := s.ListEventsSince(ctx, last, EventFilter{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if seen[e.ID] || e.ID <= last {
					t.Fatalf("event %d seen after %d", e.ID, last)
				}
				seen[e.ID] = true
				last = e.ID
			}
			if finished && len(es) == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		all, _ := s.ListEventsSince(ctx, 0, EventFilter{Limit: 1000})
		if len(all) != writers*each {
			t.Fatalf("%d events, want %d", len(all), writers*each)
		}
		for _, e := range all {
			if !seen[e.ID] {
				t.Errorf("the watcher missed event %d", e.ID)
			}
		}
	})
}

// OnEventCommitted is called once a transaction that appended events has
// committed (once for the whole transaction, nested ones included), not for
// one rolled back or without events, and no more once cancelled.
func TestOnEventCommitted(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		var calls atomic.Int32
		var seen atomic.Int64 // the events visible when called: committed
		cancel := s.OnEventCommitted(func() {
			calls.Add(1)
			// A read of the outer Store here would wait for the
			// transaction on SQLite: a call before the commit hangs.
			es, err := s.ListEventsSince(ctx, 0, EventFilter{})
			if err != nil {
				t.Error(err)
			}
			seen.Store(int64(len(es)))
		})
		if err := s.AppendEvent(ctx, &Event{Type: "vm.state", Owner: "ann"}); err != nil {
			t.Fatal(err)
		}
		if calls.Load() != 1 || seen.Load() != 1 {
			t.Fatalf("after AppendEvent: %d calls, newest %d", calls.Load(), seen.Load())
		}
		err := s.Tx(ctx, func(tx *Store) error {
			for range 2 {
				if err := tx.AppendEvent(ctx, &Event{Type: "vm.state", Owner: "ann"}); err != nil {
					return err
				}
			}
			if calls.Load() != 1 {
				t.Errorf("called before the commit")
			}
			return nil
		})
		if err != nil || calls.Load() != 2 || seen.Load() != 3 {
			t.Fatalf("after a Tx of two: %v, %d calls, newest %d", err, calls.Load(), seen.Load())
		}
		boom := errors.New("boom")
		err = s.Tx(ctx, func(tx *Store) error {
			if err := tx.AppendEvent(ctx, &Event{Type: "vm.state", Owner: "ann"}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) || calls.Load() != 2 {
			t.Fatalf("rolled back: %v, %d calls", err, calls.Load())
		}
		if err := s.Tx(ctx, func(tx *Store) error { _, err := tx.LastEventID(ctx); return err }); err != nil || calls.Load() != 2 {
			t.Fatalf("a Tx without events: %v, %d calls", err, calls.Load())
		}
		cancel()
		if err := s.AppendEvent(ctx, &Event{Type: "vm.state", Owner: "ann"}); err != nil || calls.Load() != 2 {
			t.Fatalf("after cancel: %v, %d calls", err, calls.Load())
		}
	})
}

// On PostgreSQL an event takes its ID at INSERT (schema 26): a transaction
// that appended an event and is still open holds up no other one's commit,
// and holds the readers back below its IDs instead: what commits after a
// watcher read "after N" is still after N. (SQLite has one writer: the
// second transaction would wait.)
func TestEventIDsInCommitOrder(t *testing.T) {
	ctx := context.Background()
	s := newTestDB(t, DriverPostgres).open(t)
	if err := s.AppendEvent(ctx, &Event{Type: "before"}); err != nil {
		t.Fatal(err)
	}
	opened, release := make(chan struct{}), make(chan struct{})
	let := sync.OnceFunc(func() { close(release) })
	defer let() // a failure below must not leave the transaction open
	first := make(chan error, 1)
	go func() {
		first <- s.Tx(ctx, func(tx *Store) error {
			for _, p := range []string{`{"n":1}`, `{"n":2}`} {
				if err := tx.appendEvent(ctx, &Event{Type: "first", Payload: JSON(p)}); err != nil {
					return err
				}
			}
			close(opened)
			<-release
			return nil
		})
	}()
	<-opened
	second := &Event{Type: "second"}
	done := make(chan error, 1)
	go func() { done <- s.AppendEvent(ctx, second) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		let()
		t.Fatal("an open transaction's event held up another transaction's commit")
	}
	seen, err := s.ListEventsSince(ctx, 0, EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].Type != "before" {
		t.Fatalf("before the first commits: %+v, want the event before it alone (the second's is above its IDs)", seen)
	}
	if id, err := s.LastEventID(ctx); err != nil || id != seen[0].ID {
		t.Fatalf("LastEventID before the first commits = %d, %v; want %d, below the open transaction's", id, err, seen[0].ID)
	}
	let()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	later, err := s.ListEventsSince(ctx, seen[0].ID, EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(later) != 3 || string(later[0].Payload) != `{"n": 1}` || string(later[1].Payload) != `{"n": 2}` || later[2].ID != second.ID {
		t.Fatalf("after %d: %+v, want the first transaction's two events, in the order it appended them, then the second's (%d)", seen[0].ID, later, second.ID)
	}
	if id, err := s.LastEventID(ctx); err != nil || id != second.ID {
		t.Fatalf("LastEventID after = %d, %v; want %d", id, err, second.ID)
	}
}

// On PostgreSQL a transaction's events keep the IDs they took at INSERT,
// in the order it appended them; a savepoint that appended the
// transaction's first event and was rolled back lets its claim go (the
// readers are not held back by it), and the next event claims again; two
// schemas in one database do not hold each other's readers back.
func TestEventIDsOfABatch(t *testing.T) {
	ctx := context.Background()
	s := newTestDB(t, DriverPostgres).open(t)
	other := newTestDB(t, DriverPostgres).open(t) // another schema, same database
	// Its IDs far above this one's, so that a claim of this one's, were it
	// seen there, would hold its readers back.
	if err := other.db.Exec("SELECT setval('events_ids', 1000000)").Error; err != nil {
		t.Fatal(err)
	}
	appendN := func(tx *Store, typ string, from, to int) error {
		for n := from; n <= to; n++ {
			if err := tx.appendEvent(ctx, &Event{Type: typ, Payload: JSON(fmt.Sprintf(`{"n": %d}`, n))}); err != nil {
				return err
			}
		}
		return nil
	}
	// visible appends one event outside the open transaction and says
	// whether a reader sees it.
	visible := func(st *Store, typ string) bool {
		t.Helper()
		e := &Event{Type: typ}
		if err := st.AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
		es, err := st.ListEventsSince(ctx, e.ID-1, EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(es) == 1 && es[0].ID == e.ID
	}
	var outside []string
	err := s.Tx(ctx, func(tx *Store) error {
		undone := tx.Tx(ctx, func(sp *Store) error {
			if err := appendN(sp, "undone", 1, 3); err != nil {
				return err
			}
			return errors.New("rolled back")
		})
		if undone == nil {
			return errors.New("the savepoint was not rolled back")
		}
		if !visible(s, "outside") {
			return errors.New("a savepoint rolled back still holds the readers back")
		}
		outside = append(outside, "outside")
		if err := appendN(tx, "batch", 1, 300); err != nil {
			return err
		}
		if visible(s, "held") {
			return errors.New("an event above an open transaction's IDs was read before it committed")
		}
		if !visible(other, "elsewhere") {
			return errors.New("a transaction in another schema held this one's readers back")
		}
		outside = append(outside, "held")
		return appendN(tx, "batch", 301, 400)
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []Event
	for after := int64(0); ; {
		page, err := s.ListEventsSince(ctx, after, EventFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1].ID
	}
	// In ID order: the event outside, the batch's first 300, the one held
	// back (appended between them and the rest), the batch's last 100.
	var want []string
	for n := 1; n <= 400; n++ {
		want = append(want, fmt.Sprintf(`batch {"n": %d}`, n))
	}
	want = slices.Insert(want, 300, "held {}")
	want = slices.Insert(want, 0, "outside {}")
	if len(got) != len(want) {
		t.Fatalf("%d events after the commit, want %d", len(got), len(want))
	}
	for i, e := range got {
		if s := e.Type + " " + string(e.Payload); s != want[i] || (i > 0 && e.ID <= got[i-1].ID) {
			t.Fatalf("event %d: %s ID %d; want %s, its ID above %d", i, s, e.ID, want[i], got[max(i-1, 0)].ID)
		}
	}
	var all int64
	if err := s.db.Raw("SELECT COUNT(*) FROM events").Scan(&all).Error; err != nil || all != 402 {
		t.Fatalf("%d events in the table (%v), want the 402 read", all, err)
	}
}

// Schema 26 moves the events' IDs to a sequence of its own: it goes on from
// the IDs schema 25 handed out, even when every event was deleted since, so
// that a watcher's last ID stays below every new one; and the events kept
// keep theirs.
func TestEventIDsGoOnAcrossSchema26(t *testing.T) {
	ctx := context.Background()
	d := newTestDB(t, DriverPostgres)
	all := migrations
	at26 := slices.IndexFunc(all, func(m migration) bool { return m.Version == 26 })
	if at26 < 0 {
		t.Fatal("no migration 26")
	}
	migrations = all[:at26]
	old, err := Open(ctx, d.config())
	migrations = all
	if err != nil {
		t.Fatal(err)
	}
	// Raw SQL: schema 25 gives an event's final ID at commit.
	for range 5 {
		if err := old.db.Exec("INSERT INTO events (created_at, type) VALUES (now(), 'old')").Error; err != nil {
			t.Fatal(err)
		}
	}
	var seen int64
	if err := old.db.Raw("SELECT MAX(id) FROM events").Scan(&seen).Error; err != nil || seen < 5 {
		t.Fatalf("schema 25's last event: %d, %v", seen, err)
	}
	if err := old.db.Exec("DELETE FROM events WHERE id NOT IN (SELECT id FROM events ORDER BY id LIMIT 2)").Error; err != nil {
		t.Fatal(err)
	}
	_ = old.Close()
	s := d.open(t)
	kept, err := s.ListEventsSince(ctx, 0, EventFilter{})
	if err != nil || len(kept) != 2 {
		t.Fatalf("the events kept: %+v, %v", kept, err)
	}
	e := &Event{Type: "new"}
	if err := s.AppendEvent(ctx, e); err != nil {
		t.Fatal(err)
	}
	if e.ID <= seen {
		t.Fatalf("the first event of schema 26 took ID %d; schema 25 had handed out %d", e.ID, seen)
	}
	if es, err := s.ListEventsSince(ctx, seen, EventFilter{}); err != nil || len(es) != 1 || es[0].ID != e.ID {
		t.Fatalf("after %d: %+v, %v; want the new event", seen, es, err)
	}
}
