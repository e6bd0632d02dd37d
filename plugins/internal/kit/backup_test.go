package kit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backup"
)

// A backup (pkg/backup) takes a backend's ledger as the backend wrote it,
// and under the lock the ledger takes to change it: while a change holds
// it, the backup waits.
func TestBackupReadsTheLedgerUnderItsLock(t *testing.T) {
	stateDir := t.TempDir()
	l, err := OpenLedger(filepath.Join(stateDir, backup.BackendsDir, "vgpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Put(Entry{Device: backend.Device{ID: "mdev-1", GPU: "0000:41:00.0"}, State: Created}); err != nil {
		t.Fatal(err)
	}
	types := openTypeNames(filepath.Join(stateDir, backup.BackendsDir, "vgpu-vgpu-types.json"))
	types.Learn(map[int]string{558: "L40S-12Q"})

	srcs, err := backup.StateFiles(context.Background(), stateDir)
	if err != nil {
		t.Fatal(err)
	}
	onDisk, _ := os.ReadFile(l.path)
	kinds := map[string]string{}
	for _, s := range srcs {
		kinds[s.Name] = s.Kind
		if s.Name == "state/backends/vgpu.json" && string(s.Data) != string(onDisk) {
			t.Errorf("the backup took %q; the ledger is %q", s.Data, onDisk)
		}
	}
	if kinds["state/backends/vgpu.json"] != backup.KindLedger || kinds["state/backends/vgpu-vgpu-types.json"] != backup.KindCache || len(kinds) != 2 {
		t.Errorf("state files %v", kinds)
	}

	// The ledger's own lock, as a change holds it.
	if err := l.lock.Lock(); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := backup.StateFiles(done, stateDir); err == nil || !strings.Contains(err.Error(), "vgpu.json") {
		t.Errorf("backup while the ledger is locked: %v; want it to wait for the lock", err)
	}
	if err := l.lock.Unlock(); err != nil {
		t.Fatal(err)
	}
}
