package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
			// The ID is known once appended on SQLite; on PostgreSQL it is given at commit.
			if err := s.AppendEvent(ctx, e); err != nil || (e.ID == 0) != (s.driver == DriverPostgres) {
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
// sees every event: IDs become visible in order.
func TestEventsWatcherMissesNothing(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		const writers, each = 8, 40
		var done atomic.Bool
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					if err := s.AppendEvent(ctx, &Event{Type: "t", Owner: fmt.Sprint(w), Payload: JSON(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
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

// On PostgreSQL an event's ID is given when its transaction commits: a
// transaction that appended an event and is still open holds up no other
// one's commit, and what commits after a watcher read "after N" is still
// after N. (SQLite has one writer: the second transaction would wait.)
func TestEventIDsInCommitOrder(t *testing.T) {
	ctx := context.Background()
	s := newTestDB(t, DriverPostgres).open(t)
	opened, release := make(chan struct{}), make(chan struct{})
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
	second := make(chan error, 1)
	go func() { second <- s.AppendEvent(ctx, &Event{Type: "second"}) }()
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("an open transaction's event held up another transaction's commit")
	}
	seen, err := s.ListEventsSince(ctx, 0, EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].Type != "second" {
		t.Fatalf("before the first commits: %+v, want the second's event alone", seen)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	later, err := s.ListEventsSince(ctx, seen[0].ID, EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(later) != 2 || string(later[0].Payload) != `{"n": 1}` || string(later[1].Payload) != `{"n": 2}` {
		t.Fatalf("after %d: %+v, want the first transaction's two events, in the order it appended them", seen[0].ID, later)
	}
}

// On PostgreSQL a transaction's events are given their final IDs at its
// commit (schema 23): every event of a batch kept, in the order it was
// appended, none left with a provisional ID (the IDs seen skip them); an
// event of a savepoint rolled back gone; an event appended after the
// deferred triggers ran early (SET CONSTRAINTS ALL IMMEDIATE) given its ID
// too.
func TestEventIDsOfABatch(t *testing.T) {
	ctx := context.Background()
	s := newTestDB(t, DriverPostgres).open(t)
	appendN := func(tx *Store, typ string, from, to int) error {
		for n := from; n <= to; n++ {
			if err := tx.appendEvent(ctx, &Event{Type: typ, Payload: JSON(fmt.Sprintf(`{"n": %d}`, n))}); err != nil {
				return err
			}
		}
		return nil
	}
	err := s.Tx(ctx, func(tx *Store) error {
		if err := appendN(tx, "batch", 1, 300); err != nil {
			return err
		}
		undone := tx.Tx(ctx, func(sp *Store) error {
			if err := appendN(sp, "undone", 1, 3); err != nil {
				return err
			}
			return errors.New("rolled back")
		})
		if undone == nil {
			return errors.New("the savepoint was not rolled back")
		}
		if err := appendN(tx, "batch", 301, 400); err != nil {
			return err
		}
		if err := tx.db.Exec("SET CONSTRAINTS ALL IMMEDIATE").Error; err != nil {
			return err
		}
		if err := tx.db.Exec("SET CONSTRAINTS ALL DEFERRED").Error; err != nil {
			return err
		}
		return appendN(tx, "batch", 401, 402)
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
	if len(got) != 402 {
		t.Fatalf("%d events after the commit, want the 402 of the batch", len(got))
	}
	for i, e := range got {
		if want := fmt.Sprintf(`{"n": %d}`, i+1); e.Type != "batch" || string(e.Payload) != want || e.ID <= 0 || (i > 0 && e.ID <= got[i-1].ID) {
			t.Fatalf("event %d: %s %s ID %d; want batch %s, its ID above %d", i, e.Type, e.Payload, e.ID, want, got[max(i-1, 0)].ID)
		}
	}
	var all int64
	if err := s.db.Raw("SELECT COUNT(*) FROM events").Scan(&all).Error; err != nil || all != 402 {
		t.Fatalf("%d events in the table (%v), want the 402 read", all, err)
	}
}
