package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestReadsDoNotWaitForTheWriter: while a transaction holds SQLite's one
// writing connection, a read outside it answers (from the read-only pool,
// as of the last commit), and sees the transaction's writes once it has
// committed. With one connection for everything the read would wait for
// the transaction, which here waits for the read: its deadline would end it.
func TestReadsDoNotWaitForTheWriter(t *testing.T) {
	ctx := context.Background()
	s := newTestDB(t, DriverSQLite).open(t)
	mustUser(t, s, "alice", "ml")
	read := make(chan error, 1)
	err := s.Tx(ctx, func(tx *Store) error {
		if err := tx.SetUserGroups(ctx, "alice", []string{"vis"}); err != nil {
			return err
		}
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			u, err := s.GetUser(rctx, "alice")
			if err == nil && strings.Join(u.Groups, ",") != "ml" {
				err = errors.New("the read saw the uncommitted groups " + strings.Join(u.Groups, ","))
			}
			read <- err
		}()
		return <-read
	})
	if err != nil {
		t.Fatalf("a read while the writer is held: %v", err)
	}
	u, err := s.GetUser(ctx, "alice")
	if err != nil || strings.Join(u.Groups, ",") != "vis" {
		t.Fatalf("after the commit: %+v, %v", u, err)
	}
}

func TestSQLiteReaderDSN(t *testing.T) {
	for _, tc := range []struct {
		dsn      string
		memory   bool
		want     []string
		wantNone []string
	}{
		{"/var/lib/gpuvm/gpuvm.db", false, []string{"_query_only=1", "_busy_timeout=5000", "_foreign_keys=on"}, []string{"_journal_mode", "_txlock"}},
		{"/x.db?_busy_timeout=100&_txlock=exclusive", false, []string{"_query_only=1", "_busy_timeout=100"}, []string{"_txlock"}},
		{":memory:", true, nil, nil},
		{"file::memory:?cache=shared", true, nil, nil},
		{"file:x.db?mode=memory", true, nil, nil},
	} {
		if got := sqliteInMemory(tc.dsn); got != tc.memory {
			t.Errorf("sqliteInMemory(%q) = %t", tc.dsn, got)
		}
		if tc.memory {
			continue
		}
		got, err := sqliteReaderDSN(tc.dsn, DefaultBusyTimeout)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("sqliteReaderDSN(%q) = %q, without %s", tc.dsn, got, w)
			}
		}
		for _, w := range tc.wantNone {
			if strings.Contains(got, w) {
				t.Errorf("sqliteReaderDSN(%q) = %q, with %s", tc.dsn, got, w)
			}
		}
	}
}
