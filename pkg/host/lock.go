package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gofrs/flock"
)

// lockRetry is how often Lock tries again while another process holds the
// lock.
const lockRetry = 20 * time.Millisecond

// Lock takes an exclusive lock on the file at path (flock(2)), creating the
// file and its parent directories, so that backend processes change the host
// one at a time. It waits until the lock is free or ctx is done. unlock
// releases it and may be called more than once.
//
// The lock is per open file, not per process: two Lock calls in one process
// exclude each other too.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	fl := flock.New(path)
	ok, err := fl.TryLockContext(ctx, lockRetry)
	if err != nil {
		_ = fl.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !ok { // not reached with flock v0.13: a done ctx is an error
		_ = fl.Close()
		return nil, fmt.Errorf("lock %s: not acquired", path)
	}
	var once sync.Once
	return func() { once.Do(func() { _ = fl.Unlock() }) }, nil
}
