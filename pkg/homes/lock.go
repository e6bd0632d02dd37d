package homes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// LocksDir is the directory beside the homes, under their root, that
// holds one lock file per home (<root>/.locks/<login>.lock). A person's
// name never starts with a dot (loginRE), so it is never a home: what
// lists the homes under the root skips it (Path refuses its name). Lock
// files are never deleted, not even with their home: a process waiting
// on a deleted one would hold a lock no other process sees.
const LocksDir = ".locks"

// A home is held while it is made or found (Ensure) and while its removal
// checks that no VM may mount it and removes it (Remove): a VM's start
// never finds a home half-removed. What the callers run with the home
// held (Ensure's made, Remove's removed: where the home lives, recorded
// and forgotten) is ordered with them.
//
// The hold is two locks, taken in this order:
//   - a mutex per home directory in this process (mutexes), for its
//     goroutines: on NFS Linux emulates flock(2) with POSIX locks, which
//     are a process's, so two goroutines of one gpuvmd would both get the
//     file's lock there; the mutex also keeps a single goroutine of the
//     process waiting in flock(2);
//   - an advisory lock (flock(2), exclusive) on the home's lock file in
//     LocksDir, for other processes: another gpuvmd on the same host, or
//     one on another node mounting the same homes root from storage whose
//     filesystem honours flock across clients (NFSv4, CephFS, GPFS). NFS
//     mounted with nolock (or local_lock=all or flock) keeps the lock on
//     each client, and nodes sharing the homes over it are not held by
//     each other's. Where the platform has no flock (the CLI built for
//     Windows reads this package), only the mutex holds.
var mutexes sync.Map // home directory -> *sync.Mutex

// lockHome holds login's home under root (dir, from Path) until unlock
// is called. makeRoot makes the homes root when it is missing (Ensure);
// without it (Remove) a missing root is the error, which wraps
// fs.ErrNotExist: there is no home to remove. The lock file is opened
// close-on-exec: what runs with the home held does not pass it on.
func lockHome(root, login, dir string, makeRoot bool) (unlock func(), err error) {
	m, _ := mutexes.LoadOrStore(dir, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	f, err := openLock(root, login, makeRoot)
	if err == nil {
		err = flock(f)
		if err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		mu.Unlock()
		return nil, fmt.Errorf("lock the home of %s: %w", login, err)
	}
	return func() {
		_ = f.Close() // closing the file releases its flock
		mu.Unlock()
	}, nil
}

// openLock opens (makes when missing) login's lock file: LocksDir 0700
// and the file 0600, gpuvmd's (root's).
func openLock(root, login string, makeRoot bool) (*os.File, error) {
	root = filepath.Clean(root)
	if makeRoot {
		if err := os.MkdirAll(root, 0o711); err != nil {
			return nil, fmt.Errorf("homes root: %w", err)
		}
	}
	locks := filepath.Join(root, LocksDir)
	if err := os.Mkdir(locks, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err // names the directory
	}
	return os.OpenFile(filepath.Join(locks, login+".lock"), os.O_RDWR|os.O_CREATE|noFollow, 0o600)
}
