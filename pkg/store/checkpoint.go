package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"
)

// checkpointEvery is how often the WAL is copied into the database file.
const checkpointEvery = time.Second

// checkpointer copies SQLite's write-ahead log into the database file from
// a read-only connection, every checkpointEvery. SQLite would otherwise do
// it itself once the log passes 1,000 pages, in the transaction that
// commits then: one create in a few hundred paid for copying the log back,
// and fsyncing it, doubling the store's p99 (issue #26). A checkpoint is
// not needed for durability: with synchronous=NORMAL a commit is safe in
// the log once written, across a crash of gpuvmd.
type checkpointer struct {
	stop, done chan struct{}
}

// startCheckpoints turns SQLite's own checkpoints off on the writer and
// starts the checkpointer on the read-only pool. A database without
// readers (in memory) keeps SQLite's.
func (s *Store) startCheckpoints(ctx context.Context, dsn string) error {
	if s.readers == nil {
		return nil
	}
	if err := s.db.WithContext(ctx).Exec("PRAGMA wal_autocheckpoint = 0").Error; err != nil {
		return fmt.Errorf("open sqlite database: turn off automatic checkpoints: %w", err)
	}
	c := &checkpointer{stop: make(chan struct{}), done: make(chan struct{})}
	s.ckpt = c
	go func() {
		defer close(c.done)
		t := time.NewTicker(checkpointEvery)
		defer t.Stop()
		failing := false
		wal := walFile{path: sqlitePath(dsn) + "-wal"}
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
			if !wal.changed() {
				continue // nothing written since the log was all copied
			}
			done, err := checkpoint(s.readers)
			wal.copied(done && err == nil)
			switch {
			case err != nil && !failing:
				s.log.Warn("checkpoint the SQLite log", "err", err)
			case err == nil && failing:
				s.log.Info("checkpoints of the SQLite log work again")
			}
			failing = err != nil
		}
	}()
	return nil
}

// checkpoint copies what it can of the log without waiting for readers or
// the writer (PASSIVE): what a reader still needs is copied next time.
// It reports whether the whole log was copied.
func checkpoint(db *sql.DB) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var busy, frames, copied int
	err := db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	return err == nil && frames == copied, err
}

// walFile tells whether the log was written since it was last all
// copied: its size and time then (a stat, not a statement, each second of
// an idle gpuvmd).
type walFile struct {
	path     string
	seen     os.FileInfo // when the last checkpoint began
	complete bool        // that checkpoint copied the whole log
}

func (w *walFile) changed() bool {
	fi, err := os.Stat(w.path)
	if err != nil {
		w.seen = nil
		return true
	}
	same := w.complete && w.seen != nil && fi.Size() == w.seen.Size() && fi.ModTime().Equal(w.seen.ModTime())
	w.seen = fi
	return !same
}

func (w *walFile) copied(all bool) { w.complete = all }

// sqlitePath is the file a SQLite DSN names ("file:x.db?mode=rw" → x.db).
func sqlitePath(dsn string) string {
	path, _, _ := strings.Cut(dsn, "?")
	return strings.TrimPrefix(path, "file:")
}

// stopCheckpoints stops the checkpointer; the writer's close then
// checkpoints the whole log, as SQLite does when its last connection
// closes.
func (s *Store) stopCheckpoints() {
	if s.ckpt == nil {
		return
	}
	close(s.ckpt.stop)
	<-s.ckpt.done
	s.ckpt = nil
}
