package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// What of the state directory a backup takes. gpuvmd's state directory
// holds:
//
//	gpuvm.db, gpuvm.db-wal, gpuvm.db-shm  the SQLite database: copied with store.SnapshotSQLite
//	backends/NAME.json                    a backend's ledger (plugins/internal/kit/ledger.go): taken
//	backends/NAME.json.lock               its lock: not taken (made again)
//	backends/NAME-vgpu-types.json         the names of vGPU type IDs a backend saw: taken
//	backends/.ledger-*.json, *.tmp        files being written: not taken
//	admin.token                           the first admin's token, a secret: never taken
//	host.lock                             the backends' lock of the host: not taken
//	sim-PRESET/                           a simulated server's host state: not taken
//	backups/, images/                     archives and base images: not taken
//
// The ledgers are read after the database is copied: a device made in
// between is then in its ledger but not the database (the reconciler
// reports it as an orphan), never in the database but not its ledger
// (which would make the backend take its own device for an admin's).

// BackendsDir is where the backends keep their ledgers, under the state
// directory.
const BackendsDir = "backends"

// stateFileRE is a file of BackendsDir a backup takes.
var stateFileRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*\.json$`)

// typeCacheSuffix ends the name of a backend's vGPU type-name cache
// (plugins/internal/kit/typenames.go).
const typeCacheSuffix = "-vgpu-types.json"

// lockWait bounds the wait for a backend that holds its ledger's lock.
const lockWait = 30 * time.Second

// StateFiles reads the files of the state directory that a backup takes
// besides the database: each backend's ledger, read under the ledger's
// lock (the one the backend takes to change it) so that the copy is the
// ledger between two changes, and the backends' caches. A missing backends
// directory is no state, not an error.
func StateFiles(ctx context.Context, stateDir string) ([]Source, error) {
	dir := filepath.Join(stateDir, BackendsDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the backend ledgers: %w", err)
	}
	var out []Source
	for _, e := range entries {
		if !e.Type().IsRegular() || !stateFileRE.MatchString(e.Name()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		kind := KindLedger
		if strings.HasSuffix(e.Name(), typeCacheSuffix) {
			kind = KindCache
		}
		var data []byte
		var mode fs.FileMode
		if kind == KindLedger {
			data, mode, err = readLocked(ctx, p)
		} else {
			data, mode, err = readFile(p)
		}
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, err
		}
		out = append(out, Source{Name: statePrefix + BackendsDir + "/" + e.Name(), Kind: kind, Mode: mode, Data: data})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// readLocked reads a ledger while holding its lock shared: no backend
// changes it meanwhile. The lock file is opened, never made: one made by a
// backup run as root could not be opened by the backends. A ledger without
// a lock file no backend has locked yet; its backend replaces it whole
// (rename), so it is read as it is.
func readLocked(ctx context.Context, path string) ([]byte, fs.FileMode, error) {
	lock := flock.New(path+".lock", flock.SetFlag(os.O_RDONLY))
	ok, err := lock.TryRLock()
	if errors.Is(err, fs.ErrNotExist) {
		return readFile(path)
	}
	if err == nil && !ok { // a backend is changing it: wait
		wctx, cancel := context.WithTimeout(ctx, lockWait)
		defer cancel()
		ok, err = lock.TryRLockContext(wctx, 50*time.Millisecond)
		ctx = wctx
	}
	if err != nil || !ok {
		return nil, 0, fmt.Errorf("lock the ledger %s (a backend holds it?): %w", path, errors.Join(err, ctx.Err()))
	}
	defer lock.Unlock()
	return readFile(path)
}

func readFile(path string) ([]byte, fs.FileMode, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", path, err)
	}
	return data, fi.Mode().Perm(), nil
}
