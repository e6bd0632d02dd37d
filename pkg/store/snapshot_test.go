package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// A snapshot of a database that another Store keeps writing to is one
// moment of it: every writer transaction is in it whole or not at all, the
// transactions in it are a prefix of those committed, it passes
// integrity_check, and it is the same installation.
func TestSnapshotSQLiteWhileWriting(t *testing.T) {
	d := newTestDB(t, DriverSQLite)
	live := d.open(t)
	writer := d.open(t) // a second Store on the file: gpuvmd, while the backup runs
	ctx := context.Background()
	inst, err := live.Installation(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The writer commits users w00000, w00001, … each with one token, in one
	// transaction each: started counts the transactions begun, committed
	// those done; progress wakes the test after each commit.
	var started, committed atomic.Int64
	progress := make(chan struct{}, 1)
	stop := make(chan struct{})
	writerErr := make(chan error, 1)
	go func() {
		defer close(progress)
		for i := 0; ; i++ {
			select {
			case <-stop:
				writerErr <- nil
				return
			default:
			}
			name := fmt.Sprintf("w%05d", i)
			started.Add(1)
			err := writer.Tx(ctx, func(tx *Store) error {
				if err := tx.CreateUser(ctx, &User{Name: name}); err != nil {
					return err
				}
				_, _, err := tx.CreateToken(ctx, name, "t", nil)
				return err
			})
			if err != nil {
				writerErr <- fmt.Errorf("writer, user %s: %w", name, err)
				return
			}
			committed.Add(1)
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}()
	waitFor := func(n int64) {
		t.Helper()
		for committed.Load() < n {
			if _, ok := <-progress; !ok {
				t.Fatalf("the writer stopped before %d commits: %v", n, <-writerErr)
			}
		}
	}

	dir := t.TempDir()
	var seen []int64
	for round, atLeast := range []int64{20, 60, 120} {
		waitFor(atLeast)
		before := committed.Load()
		dst := filepath.Join(dir, fmt.Sprintf("snap-%d.db", round))
		info, err := SnapshotSQLite(ctx, d.dsn, dst)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		after := started.Load()
		waitFor(after + 1) // the writer goes on after the snapshot
		if info.SchemaVersion != SchemaVersion() || info.Installation.ID != inst.ID {
			t.Errorf("round %d: info %+v; want schema %d, installation %s", round, info, SchemaVersion(), inst.ID)
		}
		if _, err := os.Stat(dst + "-wal"); err == nil {
			t.Errorf("round %d: the snapshot has a -wal file beside it", round)
		}

		snap := (&testDB{driver: DriverSQLite, dsn: dst, clock: d.clock, log: d.log}).open(t)
		if err := IntegrityCheck(ctx, snap.db); err != nil {
			t.Errorf("round %d: %v", round, err)
		}
		got, err := snap.Installation(ctx)
		if err != nil || got.ID != inst.ID || !got.CreatedAt.Equal(inst.CreatedAt) {
			t.Errorf("round %d: installation %+v, %v; want %+v", round, got, err, inst)
		}
		users := count(t, snap, "users", "name LIKE ?", "w%")
		tokens := count(t, snap, "api_tokens", "user_id IN (SELECT id FROM users WHERE name LIKE ?)", "w%")
		if users != tokens {
			t.Errorf("round %d: %d writer users but %d of their tokens: a transaction was cut in two", round, users, tokens)
		}
		if users < before || users > after {
			t.Errorf("round %d: %d writer users; %d were committed before the snapshot began and at most %d when it ended", round, users, before, after)
		}
		var names []string
		if err := snap.db.Table("users").Where("name LIKE ?", "w%").Order("name").Pluck("name", &names).Error; err != nil {
			t.Fatal(err)
		}
		for i, n := range names {
			if want := fmt.Sprintf("w%05d", i); n != want {
				t.Fatalf("round %d: user %d is %s, want %s: the snapshot is not a prefix of the commits", round, i, n, want)
			}
		}
		if info.Rows("users") != count(t, snap, "users") {
			t.Errorf("round %d: info says %d users, the copy has %d", round, info.Rows("users"), count(t, snap, "users"))
		}
		seen = append(seen, users)
	}
	close(stop)
	for range progress {
	}
	if err := <-writerErr; err != nil {
		t.Fatal(err)
	}
	if !(seen[0] < seen[1] && seen[1] < seen[2]) {
		t.Errorf("snapshots hold %v writer users: the writer did not go on between them", seen)
	}
}

func TestSnapshotSQLiteRefusals(t *testing.T) {
	ctx := context.Background()
	d := newTestDB(t, DriverSQLite)
	d.open(t)
	dir := t.TempDir()
	taken := filepath.Join(dir, "taken.db")
	if err := os.WriteFile(taken, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src, dst, want string
	}{
		{"missing source", filepath.Join(dir, "none.db"), filepath.Join(dir, "a.db"), "no such file"},
		{"source is a directory", dir, filepath.Join(dir, "b.db"), "is not a file"},
		{"destination exists", d.dsn, taken, "exists already"},
		{"not a gpuvm database", taken, filepath.Join(dir, "c.db"), "snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SnapshotSQLite(ctx, tc.src, tc.dst)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if tc.name != "destination exists" {
				if _, err := os.Stat(tc.dst); err == nil {
					t.Errorf("a refused snapshot left %s", tc.dst)
				}
			}
		})
	}
	if b, _ := os.ReadFile(taken); string(b) != "x" {
		t.Error("the existing destination was changed")
	}
}

// Inspect reads a database without migrating it.
func TestInspectDoesNotMigrate(t *testing.T) {
	ctx := context.Background()
	d := newTestDB(t, DriverSQLite)
	s := d.open(t)
	mustUser(t, s, "ann")
	if err := s.db.Exec("DELETE FROM schema_migrations WHERE version = ?", SchemaVersion()).Error; err != nil {
		t.Fatal(err)
	}
	info, err := Inspect(ctx, Config{Driver: DriverSQLite, DSN: d.dsn})
	if err != nil {
		t.Fatal(err)
	}
	if info.SchemaVersion != SchemaVersion()-1 || info.Rows("users") != 1 || info.Installation.ID == "" {
		t.Errorf("info = %+v", info)
	}
	v, err := s.CurrentSchemaVersion(ctx)
	if err != nil || v != SchemaVersion()-1 {
		t.Errorf("after Inspect the schema version is %d (%v): it migrated", v, err)
	}
}
