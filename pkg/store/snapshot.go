package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"
)

// Backups (gpuvmd backup, gpuvmd restore). A SQLite database is copied
// while gpuvmd goes on using it with VACUUM INTO rather than SQLite's online
// backup API: VACUUM INTO is one statement that reads the database in one
// read transaction, so the copy is one consistent snapshot, and in WAL mode
// a reader never blocks gpuvmd's writer; its output is one self-contained,
// compacted file (no -wal beside it), and it needs nothing but SQL, where the
// backup API needs the driver's raw connection on both sides and, copied in
// steps, starts over whenever gpuvmd writes between two steps (so on a busy
// database it may never finish; in one step it is the same read transaction
// as VACUUM INTO, without the compaction).

// Info is what a gpuvm database holds, read without changing it.
type Info struct {
	// SchemaVersion is the newest migration applied: 0 for an empty
	// database.
	SchemaVersion int `json:"schema_version"`
	// Installation is the zero value before schema version 4.
	Installation Installation `json:"installation"`
	// Tables are the rows of each gpuvm table the database has.
	Tables []TableCount `json:"tables"`
}

// Rows is the number of rows of table in the info; -1 when it has no such
// table.
func (i Info) Rows(table string) int64 {
	for _, t := range i.Tables {
		if t.Table == table {
			return t.Rows
		}
	}
	return -1
}

// Info reads what the store's database holds.
func (s *Store) Info(ctx context.Context) (Info, error) {
	return readInfo(ctx, s.db)
}

// Inspect opens the database of cfg without migrating it (a newer or older
// gpuvmd may be running on it) and reads what it holds.
func Inspect(ctx context.Context, cfg Config) (Info, error) {
	var dialector gorm.Dialector
	switch cfg.Driver {
	case DriverSQLite, "":
		dsn, err := existingSQLite(cfg.DSN, cfg.BusyTimeout)
		if err != nil {
			return Info{}, err
		}
		dialector = sqlite.Open(dsn)
	case DriverPostgres:
		dialector = postgres.Open(cfg.DSN)
	default:
		return Info{}, fmt.Errorf("inspect database: unknown driver %q", cfg.Driver)
	}
	db, err := openQuiet(dialector)
	if err != nil {
		return Info{}, fmt.Errorf("inspect database: %w", err)
	}
	defer closeDB(db)
	return readInfo(ctx, db)
}

// SnapshotSQLite writes a consistent copy of the SQLite database at src to
// dst, a path that must not exist, while a gpuvmd may go on reading and
// writing src: the copy is the database as of one moment (see above). It
// opens src without migrating it, checks the copy with PRAGMA
// integrity_check, turns it into a single rollback-journal file (store.Open
// puts it back in WAL mode), flushes it to disk and returns what it holds.
func SnapshotSQLite(ctx context.Context, src, dst string) (Info, error) {
	dsn, err := existingSQLite(src, 0)
	if err != nil {
		return Info{}, err
	}
	if _, err := os.Lstat(dst); err == nil {
		return Info{}, fmt.Errorf("snapshot %s: %s exists already", src, dst)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("snapshot %s: %w", src, err)
	}
	db, err := openQuiet(sqlite.Open(dsn))
	if err != nil {
		return Info{}, fmt.Errorf("snapshot %s: open: %w", src, err)
	}
	err = db.WithContext(ctx).Exec("VACUUM INTO ?", dst).Error
	closeDB(db)
	if err != nil {
		_ = os.Remove(dst)
		return Info{}, fmt.Errorf("snapshot %s: VACUUM INTO %s: %w", src, dst, err)
	}
	info, err := checkSnapshot(ctx, dst)
	if err != nil {
		_ = os.Remove(dst)
		return Info{}, fmt.Errorf("snapshot %s: %w", src, err)
	}
	return info, nil
}

// checkSnapshot makes the copy one file, checks it and reads it.
func checkSnapshot(ctx context.Context, path string) (Info, error) {
	dsn, err := existingSQLite(path, 0)
	if err != nil {
		return Info{}, err
	}
	db, err := openQuiet(sqlite.Open(dsn))
	if err != nil {
		return Info{}, fmt.Errorf("open the copy: %w", err)
	}
	defer closeDB(db)
	var mode string
	if err := db.WithContext(ctx).Raw("PRAGMA journal_mode = DELETE").Scan(&mode).Error; err != nil {
		return Info{}, fmt.Errorf("set the copy's journal mode: %w", err)
	}
	if err := IntegrityCheck(ctx, db); err != nil {
		return Info{}, fmt.Errorf("the copy: %w", err)
	}
	info, err := readInfo(ctx, db)
	if err != nil {
		return Info{}, fmt.Errorf("the copy: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return Info{}, fmt.Errorf("flush the copy: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return Info{}, fmt.Errorf("flush the copy: %w", err)
	}
	return info, nil
}

// IntegrityCheck runs PRAGMA integrity_check on a SQLite database and
// returns its complaints as an error.
func IntegrityCheck(ctx context.Context, db *gorm.DB) error {
	var rows []string
	if err := db.WithContext(ctx).Raw("PRAGMA integrity_check").Scan(&rows).Error; err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	if len(rows) != 1 || rows[0] != "ok" {
		return fmt.Errorf("integrity check failed: %s", strings.Join(rows, "; "))
	}
	return nil
}

// existingSQLite is the DSN of a SQLite database that must exist already:
// opening a missing path would make an empty database.
func existingSQLite(path string, busy time.Duration) (string, error) {
	if path == "" || strings.HasPrefix(path, "file:") || strings.Contains(path, "?") {
		return "", fmt.Errorf("open sqlite database %q: give a plain file path", path)
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return "", fmt.Errorf("open sqlite database: %w", err)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("open sqlite database: %s is not a file", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("open sqlite database %s: %w", path, err)
	}
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	u := url.URL{Scheme: "file", Path: abs, RawQuery: fmt.Sprintf("mode=rw&_busy_timeout=%d", busy.Milliseconds())}
	return u.String(), nil
}

func openQuiet(d gorm.Dialector) (*gorm.DB, error) {
	db, err := gorm.Open(d, &gorm.Config{Logger: gormlogger.Discard, SkipDefaultTransaction: true})
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(1)
	return db, nil
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// readInfo reads the schema version, the installation and the row counts.
func readInfo(ctx context.Context, db *gorm.DB) (Info, error) {
	db = db.WithContext(ctx)
	var info Info
	m := db.Migrator()
	if !m.HasTable(schemaMigration{}.TableName()) {
		return info, errors.New("read the database: no schema_migrations table: not a gpuvm database")
	}
	var v *int
	if err := db.Raw("SELECT MAX(version) FROM schema_migrations").Row().Scan(&v); err != nil {
		return info, fmt.Errorf("read the schema version: %w", err)
	}
	if v != nil {
		info.SchemaVersion = *v
	}
	if m.HasTable(Installation{}.TableName()) {
		if err := db.Take(&info.Installation).Error; err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
			return info, fmt.Errorf("read the installation ID: %w", err)
		}
	}
	for _, c := range copiers {
		if !m.HasTable(c.table) {
			continue
		}
		var n int64
		if err := db.Table(c.table).Count(&n).Error; err != nil {
			return info, fmt.Errorf("count the rows of %s: %w", c.table, err)
		}
		info.Tables = append(info.Tables, TableCount{Table: c.table, Rows: n})
	}
	return info, nil
}
