package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The writer never checkpoints (a create in a few hundred paid for it);
// the checkpointer does, from a reader: the log is copied into the
// database file while writes go on, and what was written is all there
// after a reopen.
func TestCheckpointsOffTheWriter(t *testing.T) {
	ctx := context.Background()
	d := newTestDB(t, DriverSQLite)
	s := d.open(t)
	var auto int
	if err := s.db.WithContext(ctx).Raw("PRAGMA wal_autocheckpoint").Scan(&auto).Error; err != nil || auto != 0 {
		t.Fatalf("writer's wal_autocheckpoint = %d (%v), want 0", auto, err)
	}
	mustUser(t, s, "alice")
	for i := range 300 {
		mustVM(t, s, "alice", fmt.Sprint("vm", i))
	}
	before := fileSize(t, d.dsn)
	deadline := time.Now().Add(10 * checkpointEvery)
	for fileSize(t, d.dsn) == before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if after := fileSize(t, d.dsn); after <= before {
		t.Fatalf("the database file stayed %d bytes for %v after 300 creates: nothing checkpointed the log", after, 10*checkpointEvery)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = d.open(t)
	page, err := s.ListVMs(ctx, VMFilter{Limit: 1000})
	if err != nil || len(page.VMs) != 300 {
		t.Fatalf("after a reopen: %d VMs (%v), want 300", len(page.VMs), err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// An idle store does not checkpoint: the log is looked at (a stat), and
// checkpointed again only once written since it was all copied.
func TestCheckpointOnlyAfterWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpuvm.db-wal")
	w := walFile{path: path}
	if !w.changed() {
		t.Fatal("no log file yet: want a checkpoint (it may be made meanwhile)")
	}
	if err := os.WriteFile(path, []byte("frames"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		write, copiedAll, want bool
	}{
		{false, false, true}, // a new file
		{false, false, true}, // the last checkpoint left some behind
		{false, true, true},  // so did the one before: this one copies all
		{false, true, false}, // nothing since: skipped
		{false, true, false},
		{true, true, true}, // written: checkpoint
		{false, true, false},
	} {
		if tc.write {
			time.Sleep(10 * time.Millisecond)
			if err := os.WriteFile(path, []byte("more frames"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got := w.changed(); got != tc.want {
			t.Fatalf("step %d: changed() = %v, want %v", i, got, tc.want)
		}
		w.copied(tc.copiedAll)
	}
	if got := sqlitePath("file:/var/lib/gpuvm/gpuvm.db?_busy_timeout=5000"); got != "/var/lib/gpuvm/gpuvm.db" {
		t.Errorf("sqlitePath = %q", got)
	}
}
