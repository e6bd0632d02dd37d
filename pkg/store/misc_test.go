package store

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

func TestIdempotencyKeys(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		k := &IdempotencyKey{User: "alice", Key: "abc", RequestHash: "h", VMID: "vm1"}
		if err := s.PutIdempotencyKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := s.PutIdempotencyKey(ctx, &IdempotencyKey{User: "alice", Key: "abc", RequestHash: "other"}); !errors.Is(err, ErrIdempotencyKeyUsed) {
			t.Fatalf("reuse: %v", err)
		}
		// Keys are per user.
		if err := s.PutIdempotencyKey(ctx, &IdempotencyKey{User: "bob", Key: "abc", RequestHash: "h"}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetIdempotencyKey(ctx, "alice", "abc")
		if err != nil || got.RequestHash != "h" || got.VMID != "vm1" {
			t.Fatalf("get %+v, %v", got, err)
		}
		if _, err := s.GetIdempotencyKey(ctx, "carol", "abc"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get missing: %v", err)
		}
		if err := s.PutIdempotencyKey(ctx, &IdempotencyKey{User: "alice"}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty key: %v", err)
		}
		d.clock.Advance(25 * time.Hour)
		if err := s.PutIdempotencyKey(ctx, &IdempotencyKey{User: "alice", Key: "new", RequestHash: "h"}); err != nil {
			t.Fatal(err)
		}
		n, err := s.DeleteIdempotencyKeysBefore(ctx, d.clock.Now().Add(-24*time.Hour))
		if err != nil || n != 2 {
			t.Fatalf("delete old keys: %d, %v", n, err)
		}
	})
}

func TestReservations(t *testing.T) {
	ctx := context.Background()
	day := func(d, h int) time.Time { return time.Date(2026, 3, d, h, 0, 0, 0, time.UTC) }
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		once := &Reservation{OwnerKind: OwnerUser, Owner: "alice", Profile: "render-l40s", Count: 1, StartAt: day(2, 20), EndAt: day(3, 6)}
		weekly := &Reservation{OwnerKind: OwnerGroup, Owner: "ml", GPUKind: gpu.KindPassthrough, GPUModel: "H100", Count: 4,
			StartAt: day(6, 18), EndAt: day(6, 23), RRule: "FREQ=WEEKLY;BYDAY=FR"}
		until := day(20, 0)
		ended := &Reservation{OwnerKind: OwnerGroup, Owner: "ml", GPUKind: gpu.KindMIG, GPUType: "3g.40gb", Count: 2,
			StartAt: day(1, 8), EndAt: day(1, 12), RRule: "FREQ=DAILY", RepeatUntil: &until}
		for _, r := range []*Reservation{once, weekly, ended} {
			if err := s.CreateReservation(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		bad := []struct {
			name string
			r    Reservation
		}{
			{"owner kind", Reservation{OwnerKind: "team", Owner: "x", Profile: "p", Count: 1, StartAt: day(1, 1), EndAt: day(1, 2)}},
			{"no need", Reservation{OwnerKind: OwnerUser, Owner: "x", Count: 1, StartAt: day(1, 1), EndAt: day(1, 2)}},
			{"count", Reservation{OwnerKind: OwnerUser, Owner: "x", Profile: "p", StartAt: day(1, 1), EndAt: day(1, 2)}},
			{"backwards", Reservation{OwnerKind: OwnerUser, Owner: "x", Profile: "p", Count: 1, StartAt: day(1, 2), EndAt: day(1, 1)}},
		}
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				if err := s.CreateReservation(ctx, &tc.r); !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v, want ErrInvalid", err)
				}
			})
		}
		ids := func(rs []Reservation) (out []int64) {
			for _, r := range rs {
				out = append(out, r.ID)
			}
			return out
		}
		windows := []struct {
			name string
			f    ReservationFilter
			want []int64
		}{
			{"everything", ReservationFilter{}, []int64{ended.ID, once.ID, weekly.ID}},
			{"group ml", ReservationFilter{OwnerKind: OwnerGroup, Owner: "ml"}, []int64{ended.ID, weekly.ID}},
			{"night of the 2nd", ReservationFilter{From: day(2, 22), To: day(3, 0)}, []int64{ended.ID, once.ID}},
			{"after the daily one ends", ReservationFilter{From: day(21, 0), To: day(22, 0)}, []int64{weekly.ID}},
			{"before everything", ReservationFilter{From: day(1, 0), To: day(1, 1)}, nil},
		}
		for _, tc := range windows {
			t.Run(tc.name, func(t *testing.T) {
				rs, err := s.ListReservations(ctx, tc.f)
				if err != nil {
					t.Fatal(err)
				}
				if got := ids(rs); !equalIDs(got, tc.want) {
					t.Fatalf("reservations %v, want %v", got, tc.want)
				}
			})
		}
		got, err := s.GetReservation(ctx, weekly.ID)
		if err != nil || got.RRule != weekly.RRule || !got.StartAt.Equal(weekly.StartAt) || got.Version != 1 {
			t.Fatalf("get %+v, %v", got, err)
		}
		got.Count = 2
		if err := s.UpdateReservation(ctx, got); err != nil || got.Version != 2 {
			t.Fatalf("update: %v (version %d)", err, got.Version)
		}
		weekly.Count = 8 // still at version 1
		if err := s.UpdateReservation(ctx, weekly); !errors.Is(err, ErrConflict) {
			t.Fatalf("stale update: %v", err)
		}
		if err := s.DeleteReservation(ctx, weekly.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteReservation(ctx, weekly.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("delete twice: %v", err)
		}
		if _, err := s.GetReservation(ctx, weekly.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get deleted: %v", err)
		}
		weekly.Version = 2
		if err := s.UpdateReservation(ctx, weekly); !errors.Is(err, ErrNotFound) {
			t.Fatalf("update deleted: %v", err)
		}
	})
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestUsage(t *testing.T) {
	ctx := context.Background()
	at := func(h int) time.Time { return time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC) }
	ptr := func(t time.Time) *time.Time { return &t }
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		mustUser(t, s, "alice")
		mustUser(t, s, "bob")
		a := mustVM(t, s, "alice", "a")
		b := mustVM(t, s, "bob", "b")
		records := []*UsageRecord{
			// alice: a whole GPU from 10 to 12, and 1/7 of one from 11, still open.
			{VMID: a.ID, User: "alice", Group: "render", GPUAddress: gpuC, Kind: gpu.KindPassthrough, Share: 1, StartedAt: at(10), EndedAt: ptr(at(12))},
			{VMID: a.ID, User: "alice", Group: "render", GPUAddress: gpuA, Kind: gpu.KindMIG, Profile: "1g.10gb", Share: 1.0 / 7, StartedAt: at(11)},
			// bob: half a GPU from 8 to 9, outside the range below.
			{VMID: b.ID, User: "bob", GPUAddress: gpuB, Kind: gpu.KindVGPU, Share: 0.5, StartedAt: at(8), EndedAt: ptr(at(9))},
			{VMID: b.ID, User: "bob", GPUAddress: gpuB, Kind: gpu.KindVGPU, Share: 0.5, StartedAt: at(9), EndedAt: ptr(at(13))},
		}
		for _, r := range records {
			if err := s.InsertUsageRecord(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if records[0].GPUSeconds != 7200 {
			t.Fatalf("gpu seconds of a closed record: %g", records[0].GPUSeconds)
		}
		for _, r := range []UsageRecord{
			{VMID: a.ID, User: "alice", GPUAddress: gpuC, Kind: gpu.KindPassthrough, Share: 0},
			{VMID: a.ID, User: "alice", GPUAddress: gpuC, Kind: gpu.KindPassthrough, Share: 1.5},
			{VMID: a.ID, GPUAddress: gpuC, Kind: gpu.KindPassthrough, Share: 1},
			{VMID: a.ID, User: "alice", GPUAddress: gpuC, Kind: gpu.KindPassthrough, Share: 1, StartedAt: at(5), EndedAt: ptr(at(4))},
		} {
			if err := s.InsertUsageRecord(ctx, &r); !errors.Is(err, ErrInvalid) {
				t.Errorf("bad record %+v: %v", r, err)
			}
		}

		// Now is 12:30 (the clock started at 9:00).
		d.clock.Advance(3*time.Hour + 30*time.Minute - d.clock.Now().Sub(at(9)))
		sums, err := s.SumUsageByUser(ctx, at(10), at(14))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{
			"alice": 7200 + 1.0/7*5400, // 10–12 whole, 11–12:30 a seventh
			"bob":   0.5 * 3 * 3600,    // 10–13 of 9–13
		}
		if len(sums) != 2 || sums[0].User != "alice" || sums[1].User != "bob" {
			t.Fatalf("sums %+v", sums)
		}
		for _, u := range sums {
			if math.Abs(u.GPUSeconds-want[u.User]) > 0.01 {
				t.Errorf("%s: %g GPU-seconds, want %g", u.User, u.GPUSeconds, want[u.User])
			}
		}

		n, err := s.EndUsageRecords(ctx, a.ID, at(13))
		if err != nil || n != 1 {
			t.Fatalf("end: %d, %v", n, err)
		}
		if n, _ := s.EndUsageRecords(ctx, a.ID, at(14)); n != 0 {
			t.Fatalf("ended twice: %d", n)
		}
		sums, _ = s.SumUsageByUser(ctx, at(0), at(23))
		if math.Abs(sums[0].GPUSeconds-(7200+1.0/7*7200)) > 0.01 || math.Abs(sums[1].GPUSeconds-0.5*5*3600) > 0.01 {
			t.Fatalf("sums after end %+v", sums)
		}
		if _, err := s.SumUsageByUser(ctx, at(5), at(5)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty range: %v", err)
		}
	})
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"unknown driver", Config{Driver: "mysql", DSN: "x"}, `unknown driver "mysql"`},
		{"empty DSN", Config{}, "empty DSN"},
		{"foreign keys off", Config{DSN: filepath.Join(dir, "fk.db") + "?_foreign_keys=off"}, "foreign keys are off"},
		{"no such directory", Config{DSN: filepath.Join(dir, "missing", "x.db")}, "open sqlite database"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = testLogger(t)
			s, err := Open(ctx, tc.cfg)
			if err == nil {
				_ = s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSQLiteDSN(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/var/lib/gpuvm/gpuvm.db", "/var/lib/gpuvm/gpuvm.db?_busy_timeout=5000&_foreign_keys=on&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate"},
		{"file:/x.db?_busy_timeout=100&cache=private", "file:/x.db?_busy_timeout=100&_foreign_keys=on&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate&cache=private"},
	}
	for _, tc := range tests {
		got, err := sqliteDSN(tc.in, DefaultBusyTimeout)
		if err != nil || got != tc.want {
			t.Errorf("sqliteDSN(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := sqliteDSN("?a=b", time.Second); err == nil {
		t.Error("DSN without a path accepted")
	}
}

// The store's pragmas are in force on the SQLite connection.
func TestSQLitePragmas(t *testing.T) {
	d := newTestDB(t, DriverSQLite)
	s := d.open(t)
	for pragma, want := range map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "5000"} {
		var got string
		if err := s.db.Raw("PRAGMA " + pragma).Row().Scan(&got); err != nil || got != want {
			t.Errorf("PRAGMA %s = %q, %v; want %q", pragma, got, err, want)
		}
	}
	sqlDB, _ := s.db.DB()
	if n := sqlDB.Stats().MaxOpenConnections; n != 1 {
		t.Errorf("MaxOpenConnections = %d, want 1", n)
	}
}

// PostgreSQL's pool keeps the connections a burst opened: one closed on
// its return and opened again at the next burst costs a backend's start,
// its password exchange and every statement prepared again, which under
// issue #26's creates was most of the database's CPU and their p99.
func TestPostgresPoolKeepsBurstConnections(t *testing.T) {
	d := newTestDB(t, DriverPostgres)
	s := d.open(t)
	sqlDB, err := s.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	burst := func() {
		var wg sync.WaitGroup
		for range DefaultMaxOpenConns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := sqlDB.ExecContext(context.Background(), "SELECT pg_sleep(0.05)"); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	burst()
	opened := sqlDB.Stats().OpenConnections
	burst()
	st := sqlDB.Stats()
	if st.MaxIdleClosed != 0 || st.OpenConnections != opened || opened < 2 {
		t.Errorf("after two bursts of %d: %d open after the first, %d after the second, %d closed as surplus idle; want none closed",
			DefaultMaxOpenConns, opened, st.OpenConnections, st.MaxIdleClosed)
	}
}

// Inside Tx, a Store bound to the transaction cannot be closed.
func TestTxStoreClose(t *testing.T) {
	d := newTestDB(t, DriverSQLite)
	s := d.open(t)
	err := s.Tx(context.Background(), func(tx *Store) error { return tx.Close() })
	if err == nil {
		t.Fatal("closed the store inside a transaction")
	}
}

func TestQueryLimit(t *testing.T) {
	for _, tc := range []struct{ limit, def, max, want int }{
		{0, 50, 1000, 50},
		{-3, 50, 1000, 50},
		{1, 50, 1000, 1},
		{1000, 50, 1000, 1000},
		{1001, 50, 1000, 1000},
		{0, 1000, 1000, 1000},
	} {
		if got := queryLimit(tc.limit, tc.def, tc.max); got != tc.want {
			t.Errorf("queryLimit(%d, %d, %d) = %d, want %d", tc.limit, tc.def, tc.max, got, tc.want)
		}
	}
}
