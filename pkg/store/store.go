package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"
)

// Drivers Open understands.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// Defaults of Config.
const (
	DefaultBusyTimeout   = 5 * time.Second
	DefaultSlowThreshold = 200 * time.Millisecond
	DefaultMaxOpenConns  = 10 // PostgreSQL only
)

// Config says which database to open and how.
type Config struct {
	// Driver is DriverSQLite (the default when empty) or DriverPostgres.
	Driver string
	// DSN is, for SQLite, a file path (or a "file:" URI); Open adds the
	// pragmas it needs (WAL, busy timeout, foreign keys, immediate
	// transactions) unless the DSN sets them. For PostgreSQL, a libpq
	// URL or key=value string ("postgres://u:p@host/db?sslmode=disable").
	DSN string
	// Now is the clock for every timestamp the store writes; nil: time.Now.
	// Times are stored in UTC, truncated to microseconds (PostgreSQL's
	// precision) so that what is read back equals what was written.
	Now func() time.Time
	// Logger receives the store's messages and gorm's: failed statements
	// at error (expected ones, such as a taken slot, at debug), statements
	// slower than SlowThreshold at warn. nil: slog.Default().
	Logger *slog.Logger
	// SlowThreshold: 0 means DefaultSlowThreshold; negative: never.
	SlowThreshold time.Duration
	// BusyTimeout is how long SQLite waits for another process's lock;
	// 0 means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// MaxOpenConns caps PostgreSQL's pool; 0 means DefaultMaxOpenConns.
	MaxOpenConns int
}

// Store is the database of gpuvmd. Its methods are safe for concurrent use.
// A Store handed to the function of Tx is bound to that transaction.
type Store struct {
	db     *gorm.DB
	driver string
	clock  func() time.Time
	log    *slog.Logger
	inTx   bool
	// pipe, in a pipelined transaction (pipeline.go), queues its inserts.
	pipe *pipeline
	// events are called after a transaction that appended events commits
	// (events.go); appended, inside a transaction, says it did.
	events   *eventWatch
	appended *bool
	// quotaGen counts the committed changes of what the quotas count
	// (quotagen.go); quotaTouched, inside a transaction, says it made one.
	quotaGen     *atomic.Uint64
	quotaTouched *bool
	// hostsGen counts the committed changes of the hosts' rows and GPU
	// drains made through this Store (HostsGeneration); hostsTouched,
	// inside a transaction, says it made one.
	hostsGen     *atomic.Uint64
	hostsTouched *bool
	// readers is SQLite's read-only pool (openReaders); nil otherwise.
	readers *sql.DB
	// ckpt checkpoints SQLite's log off the writer (checkpoint.go).
	ckpt *checkpointer
}

// Open connects to the database, migrates its schema up to the newest version
// this binary knows, and refuses a database whose schema is newer
// (ErrSchemaTooNew).
//
// SQLite is opened with one connection for writing (database/sql pool of
// size 1): SQLite allows one writer at a time, and a single connection makes
// writers queue in Go instead of failing with "database is locked".
// Transactions begin IMMEDIATE, taking the write lock up front, so that a
// transaction never fails half-way on a lock upgrade. Reads outside a
// transaction go to a second pool of read-only connections (readerConns;
// gorm's dbresolver routes them): in WAL a reader sees every transaction
// committed before it began and neither waits for the writer nor holds it
// up, so a dispatch round reading ten thousand queued VMs no longer holds
// up every create and every page behind it (issue #26). Reads inside a
// transaction (Tx) stay on it. WAL also lets other processes (sqlite3 shell,
// backups) read while gpuvmd writes, and busy_timeout makes gpuvmd wait for
// them instead of failing. An in-memory database keeps one connection for
// everything: another connection would open another database.
//
// PostgreSQL gets a pool of MaxOpenConns that keeps every connection it
// opened idle (for five minutes at most), not half: a connection closed on
// its return and opened at the next burst costs a backend, a password
// exchange and every prepared statement again (issue #26).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Driver == "" {
		cfg.Driver = DriverSQLite
	}
	if cfg.DSN == "" {
		return nil, fmt.Errorf("open %s database: empty DSN", cfg.Driver)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SlowThreshold == 0 {
		cfg.SlowThreshold = DefaultSlowThreshold
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = DefaultBusyTimeout
	}
	if cfg.MaxOpenConns <= 0 {
		cfg.MaxOpenConns = DefaultMaxOpenConns
	}
	now := cfg.Now
	s := &Store{
		driver:   cfg.Driver,
		clock:    func() time.Time { return now().UTC().Truncate(time.Microsecond) },
		log:      cfg.Logger.With("component", "store", "driver", cfg.Driver),
		events:   &eventWatch{},
		quotaGen: &atomic.Uint64{},
		hostsGen: &atomic.Uint64{},
	}

	dialector, err := dialect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	db, err := gorm.Open(dialector, &gorm.Config{
		TranslateError:         true,
		NowFunc:                s.clock,
		Logger:                 &gormLog{log: s.log, slow: cfg.SlowThreshold},
		SkipDefaultTransaction: true, // every multi-statement write runs in an explicit transaction
		PrepareStmt:            false,
		// dbresolver (openReaders) makes a statement cache for each pool
		// even without prepared statements; with any other TTL each starts
		// a cleaning goroutine that never stops.
		PrepareStmtTTL: gormNoEviction,
	})
	if err != nil {
		if sd, ok := dialector.(*sqlite.Dialector); ok {
			_ = sd.Conn.(*sql.DB).Close()
		}
		return nil, fmt.Errorf("open %s database: %w", cfg.Driver, err)
	}
	s.db = db
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", cfg.Driver, err)
	}
	if err := pool(ctx, sqlDB, cfg); err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	if err := s.checkConnection(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	if err := s.openReaders(cfg); err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	if err := s.startCheckpoints(ctx, cfg.DSN); err != nil {
		_ = s.readers.Close()
		_ = sqlDB.Close()
		return nil, err
	}
	return s, nil
}

// gormNoEviction is the TTL gorm's statement cache takes as "never evict"
// (internal/lru's noEvictionTTL).
const gormNoEviction = 10 * 365 * 24 * time.Hour

// readerConns is the size of SQLite's pool of read-only connections.
const readerConns = 4

// openReaders opens SQLite's read-only pool and routes the reads outside
// transactions to it (see Open); nothing for PostgreSQL, whose pool already
// reads and writes at once, or an in-memory database.
func (s *Store) openReaders(cfg Config) error {
	if cfg.Driver != DriverSQLite || sqliteInMemory(cfg.DSN) {
		return nil
	}
	dsn, err := sqliteReaderDSN(cfg.DSN, cfg.BusyTimeout)
	if err != nil {
		return err
	}
	readers, err := sql.Open(sqlite.DriverName, dsn)
	if err != nil {
		return fmt.Errorf("open sqlite database for reading: %w", err)
	}
	readers.SetMaxOpenConns(readerConns)
	readers.SetMaxIdleConns(readerConns)
	readers.SetConnMaxIdleTime(5 * time.Minute)
	err = s.db.Use(dbresolver.Register(dbresolver.Config{Replicas: []gorm.Dialector{sqlite.New(sqlite.Config{Conn: readers})}}))
	if err != nil {
		_ = readers.Close()
		return fmt.Errorf("open sqlite database for reading: %w", err)
	}
	s.readers = readers
	return nil
}

// sqliteInMemory says whether a SQLite DSN names an in-memory database.
func sqliteInMemory(dsn string) bool {
	path, query, _ := strings.Cut(dsn, "?")
	params, _ := url.ParseQuery(query)
	return path == ":memory:" || strings.HasPrefix(path, "file::memory:") || params.Get("mode") == "memory"
}

// sqliteReaderDSN is the DSN of the read-only pool: the database's own
// parameters, query_only, the busy timeout; the writer's journal mode and
// transaction lock are left to it.
func sqliteReaderDSN(dsn string, busy time.Duration) (string, error) {
	w, err := sqliteDSN(dsn, busy)
	if err != nil {
		return "", err
	}
	path, query, _ := strings.Cut(w, "?")
	params, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("open sqlite database: DSN %q: %w", dsn, err)
	}
	params.Del("_journal_mode")
	params.Del("_txlock")
	params.Set("_query_only", "1")
	return path + "?" + params.Encode(), nil
}

// dialect opens what gorm talks to. SQLite's pool is opened here, sized to one
// connection, and connected (see ping); PostgreSQL's is gorm's own, sized in
// pool.
func dialect(ctx context.Context, cfg Config) (gorm.Dialector, error) {
	switch cfg.Driver {
	case DriverSQLite:
		dsn, err := sqliteDSN(cfg.DSN, cfg.BusyTimeout)
		if err != nil {
			return nil, err
		}
		sqlDB, err := sql.Open(sqlite.DriverName, dsn)
		if err != nil {
			return nil, fmt.Errorf("open %s database: %w", cfg.Driver, err)
		}
		sqlDB.SetMaxOpenConns(1)
		sqlDB.SetMaxIdleConns(1)
		sqlDB.SetConnMaxLifetime(0) // an in-memory database lives as long as its connection
		sqlDB.SetConnMaxIdleTime(0)
		if err := ping(ctx, sqlDB, cfg.BusyTimeout); err != nil {
			_ = sqlDB.Close()
			return nil, fmt.Errorf("open %s database: %w", cfg.Driver, err)
		}
		return sqlite.New(sqlite.Config{Conn: sqlDB}), nil
	case DriverPostgres:
		return postgres.Open(cfg.DSN), nil
	default:
		return nil, fmt.Errorf("open database: unknown driver %q (want %q or %q)", cfg.Driver, DriverSQLite, DriverPostgres)
	}
}

// pool sizes PostgreSQL's connection pool and connects it.
func pool(ctx context.Context, sqlDB *sql.DB, cfg Config) error {
	if cfg.Driver != DriverPostgres {
		return nil
	}
	sqlDB.SetMaxOpenConns(cfg.MaxOpenConns)
	sqlDB.SetMaxIdleConns(cfg.MaxOpenConns)
	sqlDB.SetConnMaxLifetime(30 * time.Minute)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("open %s database: %w", cfg.Driver, err)
	}
	return nil
}

// ping makes the first connection. A SQLite connection sets journal_mode=WAL
// as it opens, which needs the database to itself for a moment: another
// gpuvmd opening the same new file at that instant makes it fail with
// SQLITE_BUSY without waiting (the busy handler does not cover a change of
// journal mode), so a busy first connection is tried again until the busy
// timeout has passed.
func ping(ctx context.Context, db *sql.DB, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	wait := 5 * time.Millisecond
	for {
		err := db.PingContext(ctx)
		if err == nil || !isSQLiteBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// isSQLiteBusy says whether err is SQLite's SQLITE_BUSY ("database is locked").
func isSQLiteBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrBusy
}

// sqliteDSN adds the pragmas the store relies on to a SQLite DSN, keeping any
// the DSN already sets.
func sqliteDSN(dsn string, busy time.Duration) (string, error) {
	path, query, _ := strings.Cut(dsn, "?")
	if path == "" {
		return "", fmt.Errorf("open sqlite database: DSN %q has no path", dsn)
	}
	params, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("open sqlite database: DSN %q: %w", dsn, err)
	}
	set := func(key, value string) {
		if _, ok := params[key]; !ok {
			params.Set(key, value)
		}
	}
	set("_journal_mode", "WAL")
	set("_busy_timeout", fmt.Sprint(busy.Milliseconds()))
	set("_foreign_keys", "on")
	set("_txlock", "immediate")
	set("_synchronous", "NORMAL")
	return path + "?" + params.Encode(), nil
}

// checkConnection verifies what the store cannot work without.
func (s *Store) checkConnection(ctx context.Context) error {
	if s.driver != DriverSQLite {
		return nil
	}
	var fk int
	if err := s.db.WithContext(ctx).Raw("PRAGMA foreign_keys").Scan(&fk).Error; err != nil {
		return fmt.Errorf("open sqlite database: read foreign_keys: %w", err)
	}
	if fk != 1 {
		return errors.New("open sqlite database: foreign keys are off (the DSN must not set _foreign_keys=off)")
	}
	var mode string
	if err := s.db.WithContext(ctx).Raw("PRAGMA journal_mode").Scan(&mode).Error; err != nil {
		return fmt.Errorf("open sqlite database: read journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		// An in-memory database has journal mode "memory": fine for tests.
		s.log.Warn("sqlite database is not in WAL mode", "journal_mode", mode)
	}
	return nil
}

// Close closes the database. A Store bound to a transaction cannot be closed.
func (s *Store) Close() error {
	if s.inTx {
		return errors.New("close store: inside a transaction")
	}
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	s.stopCheckpoints()
	if s.readers != nil {
		err = s.readers.Close()
	}
	return errors.Join(sqlDB.Close(), err)
}

// Driver is DriverSQLite or DriverPostgres.
func (s *Store) Driver() string { return s.driver }

// Now is the store's clock: UTC, microseconds.
func (s *Store) Now() time.Time { return s.clock() }

// Tx runs fn in one transaction: it commits when fn returns nil and rolls back
// otherwise. The Store given to fn is bound to the transaction; fn must use it,
// not the outer Store (on SQLite the transaction holds the only connection that
// writes, so a write through the outer Store would wait for it forever, and a
// read through it would not see the transaction's writes). Methods that run their own
// transaction run as a savepoint inside it, so a method that fails (a taken
// slot, say) undoes only its own writes and fn may go on.
//
// This is how the scheduler records its choice: ClaimAllocation and
// UpdateVMState(allocating) in one Tx, so that the VM never moves without its
// slots and the slots are never taken for a VM that did not move.
func (s *Store) Tx(ctx context.Context, fn func(tx *Store) error) error {
	if s.inTx {
		return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			return fn(s.with(tx))
		})
	}
	var m commitMarks
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return fn(m.bind(s.with(tx)))
	})
	if err == nil {
		s.committed(&m)
	}
	return err
}

// commitMarks are what a transaction's Store notes for its commit: it
// appended events, changed what the quotas count, changed the hosts.
type commitMarks struct{ appended, quota, hosts bool }

// bind points tx's notes at m.
func (m *commitMarks) bind(tx *Store) *Store {
	tx.appended, tx.quotaTouched, tx.hostsTouched = &m.appended, &m.quota, &m.hosts
	return tx
}

// committed tells this process what a committed transaction changed: the
// quota and hosts generations move, the events' watchers are woken.
func (s *Store) committed(m *commitMarks) {
	if m.quota {
		s.quotaGen.Add(1)
	}
	if m.hosts {
		s.hostsGen.Add(1)
	}
	if m.appended {
		s.events.fire()
	}
}

func (s *Store) with(tx *gorm.DB) *Store {
	c := *s
	c.db = tx
	c.inTx = true
	return &c
}

// gormLog routes gorm's messages to slog. Errors the store expects and turns
// into its own (a duplicate key is a taken slot or name, no row is
// ErrNotFound, a cancelled context is the caller's) go to debug; other failed
// statements to error; slow statements to warn. Parameters are never logged:
// they include token hashes and user data.
type gormLog struct {
	log  *slog.Logger
	slow time.Duration
}

var _ gormlogger.Interface = (*gormLog)(nil)

func (l *gormLog) LogMode(gormlogger.LogLevel) gormlogger.Interface { return l }

func (l *gormLog) Info(ctx context.Context, msg string, args ...any) {
	l.log.InfoContext(ctx, fmt.Sprintf(msg, args...))
}

func (l *gormLog) Warn(ctx context.Context, msg string, args ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(msg, args...))
}

func (l *gormLog) Error(ctx context.Context, msg string, args ...any) {
	l.log.ErrorContext(ctx, fmt.Sprintf(msg, args...))
}

func (l *gormLog) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	elapsed := time.Since(begin)
	var level slog.Level
	switch {
	case err != nil && expectedError(err):
		level = slog.LevelDebug
	case err != nil:
		level = slog.LevelError
	case l.slow > 0 && elapsed > l.slow:
		level = slog.LevelWarn
	default:
		level = slog.LevelDebug - 4 // every statement: only when asked for
	}
	if !l.log.Enabled(ctx, level) {
		return
	}
	sql, rows := fc()
	attrs := []slog.Attr{
		slog.Duration("elapsed", elapsed),
		slog.String("sql", sql),
		slog.Int64("rows", rows),
	}
	msg := "sql statement"
	if err != nil {
		msg = "sql statement failed"
		attrs = append(attrs, slog.String("err", err.Error()))
	} else if level == slog.LevelWarn {
		msg = "slow sql statement"
	}
	l.log.LogAttrs(ctx, level, msg, attrs...)
}

// ParamsFilter keeps parameters out of logged SQL.
func (l *gormLog) ParamsFilter(_ context.Context, sql string, _ ...any) (string, []any) {
	return sql, nil
}

// queryLimit is the size of a page a caller asks for with limit: def
// when limit is 0 or less, at most max.
func queryLimit(limit, def, max int) int {
	switch {
	case limit <= 0:
		return def
	case limit > max:
		return max
	}
	return limit
}

func expectedError(err error) bool {
	return errors.Is(err, gorm.ErrRecordNotFound) ||
		errors.Is(err, gorm.ErrDuplicatedKey) ||
		errors.Is(err, gorm.ErrForeignKeyViolated) ||
		errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}
