package store

import (
	"context"
	"database/sql"
	"fmt"
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
func (s *Store) startCheckpoints(ctx context.Context) error {
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
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
			err := checkpoint(s.readers)
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
func checkpoint(db *sql.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var busy, frames, copied int
	return db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
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
