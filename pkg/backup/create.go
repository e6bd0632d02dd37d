package backup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// Options say what a backup is of.
type Options struct {
	// StateDir is gpuvmd's state directory.
	StateDir string
	// Driver is store.DriverSQLite or store.DriverPostgres.
	Driver string
	// SQLitePath is the SQLite database (sqlite only).
	SQLitePath string
	// Postgres is what the PostgreSQL database holds, when it could be
	// read (postgres only; nil: unknown). The archive does not hold the
	// database: pg_dump does; PostgresNote says how.
	Postgres     *store.Info
	PostgresNote string
	// Version is gpuvmd's version, written into the manifest.
	Version string
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Create writes a backup archive to path: a snapshot of the SQLite
// database (taken first) and the state files (StateFiles, read after it).
// It returns the manifest written.
func Create(ctx context.Context, path string, o Options) (*Manifest, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	m := &Manifest{GpuvmVersion: o.Version, CreatedAt: now().UTC().Truncate(time.Second), Database: Database{Driver: o.Driver}}
	var srcs []Source
	switch o.Driver {
	case store.DriverSQLite:
		tmp, err := os.MkdirTemp(filepath.Dir(path), ".gpuvm-backup-db-")
		if err != nil {
			return nil, fmt.Errorf("back up: a temporary directory beside %s: %w", path, err)
		}
		defer os.RemoveAll(tmp)
		copyPath := filepath.Join(tmp, "gpuvm.db")
		info, err := store.SnapshotSQLite(ctx, o.SQLitePath, copyPath)
		if err != nil {
			return nil, fmt.Errorf("back up the database: %w", err)
		}
		m.InstallationID, m.SchemaVersion = info.Installation.ID, info.SchemaVersion
		m.Database.File, m.Database.Tables = DatabaseEntry, info.Tables
		srcs = append(srcs, Source{Name: DatabaseEntry, Kind: KindDatabase, Mode: 0o600, Path: copyPath})
	case store.DriverPostgres:
		if o.Postgres != nil {
			m.InstallationID, m.SchemaVersion = o.Postgres.Installation.ID, o.Postgres.SchemaVersion
			m.Database.Tables = o.Postgres.Tables
		}
		m.Database.Note = o.PostgresNote
	default:
		return nil, fmt.Errorf("back up: unknown database driver %q", o.Driver)
	}
	state, err := StateFiles(ctx, o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("back up the state directory %s: %w", o.StateDir, err)
	}
	srcs = append(srcs, state...)
	if err := Write(path, m, srcs); err != nil {
		return nil, err
	}
	return m, nil
}
