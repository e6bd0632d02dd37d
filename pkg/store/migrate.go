package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Migrations are SQL files, one per version and driver:
//
//	migrations/0002_add_console.sqlite.sql
//	migrations/0002_add_console.postgres.sql
//
// Versions start at 1 and have no gaps; both drivers have every version,
// under the same name. A migration is applied once, in one transaction with
// the schema_migrations row that records it, so a crash leaves the database at
// the previous version or the next, never between. Never edit a migration
// that was released: add the next one. Migrations are additive where they can
// be, since with PostgreSQL an older gpuvmd on another server keeps running on
// the newer schema until it restarts (and is then refused).
//
// The gorm structs in models.go are not used to create tables (no
// AutoMigrate): they describe what the newest migration built, and
// TestModelsMatchSchema keeps the two in step.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	Version int
	Name    string
	SQL     map[string]string // driver → statements
}

var migrationFile = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(sqlite|postgres)\.sql$`)

// migrations is every migration, ordered by version.
var migrations = mustLoadMigrations(migrationFS)

// SchemaVersion is the newest schema version this binary knows.
func SchemaVersion() int { return migrations[len(migrations)-1].Version }

func mustLoadMigrations(fsys fs.FS) []migration {
	m, err := loadMigrations(fsys)
	if err != nil {
		panic(err) // the embedded files are part of the binary: a test catches this
	}
	return m
}

func loadMigrations(fsys fs.FS) ([]migration, error) {
	files, err := fs.Glob(fsys, "migrations/*")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*migration{}
	for _, f := range files {
		base := path.Base(f)
		m := migrationFile.FindStringSubmatch(base)
		if m == nil {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.(sqlite|postgres).sql", base)
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &migration{Version: v, Name: m[2], SQL: map[string]string{}}
			byVersion[v] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("migration %d has two names: %q and %q", v, mig.Name, m[2])
		}
		mig.SQL[m[3]] = string(body)
	}
	var out []migration
	for _, m := range byVersion {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	if len(out) == 0 {
		return nil, errors.New("no migrations")
	}
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration versions have a gap: %d follows %d", m.Version, i)
		}
		for _, d := range []string{DriverSQLite, DriverPostgres} {
			if strings.TrimSpace(m.SQL[d]) == "" {
				return nil, fmt.Errorf("migration %04d_%s has no %s file", m.Version, m.Name, d)
			}
		}
	}
	return out, nil
}

// schemaMigration is a row of schema_migrations.
type schemaMigration struct {
	Version   int       `gorm:"column:version;primaryKey"`
	Name      string    `gorm:"column:name"`
	AppliedAt time.Time `gorm:"column:applied_at"`
}

func (schemaMigration) TableName() string { return "schema_migrations" }

// migrationLock is the PostgreSQL advisory lock that serialises gpuvmds
// migrating one database at once ("gpuvm" in ASCII).
const migrationLock = 0x6770_766d

// migrate brings the schema up to SchemaVersion, or refuses a newer one.
func (s *Store) migrate(ctx context.Context) error {
	if err := s.ensureMigrationTable(ctx); err != nil {
		return err
	}
	current, err := s.CurrentSchemaVersion(ctx)
	if err != nil {
		return err
	}
	if current > SchemaVersion() {
		return &SchemaTooNewError{Database: current, Known: SchemaVersion()}
	}
	if err := s.checkMigrationNames(ctx); err != nil {
		return err
	}
	for _, m := range migrations {
		if m.Version <= current {
			continue
		}
		applied, err := s.apply(ctx, m)
		if err != nil {
			return err
		}
		if applied {
			s.log.Info("database migrated", "version", m.Version, "name", m.Name)
		}
	}
	return nil
}

func (s *Store) ensureMigrationTable(ctx context.Context) error {
	ts := "TIMESTAMP"
	if s.driver == DriverPostgres {
		ts = "TIMESTAMPTZ"
	}
	ddl := `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at ` + ts + ` NOT NULL
)`
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.lockMigrations(tx); err != nil {
			return err
		}
		return tx.Exec(ddl).Error
	})
	if err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	return nil
}

// lockMigrations serialises concurrent migrators. SQLite needs nothing: its
// transactions begin IMMEDIATE, holding the database's write lock.
func (s *Store) lockMigrations(tx *gorm.DB) error {
	if s.driver != DriverPostgres {
		return nil
	}
	return tx.Exec("SELECT pg_advisory_xact_lock(?)", migrationLock).Error
}

// CurrentSchemaVersion is the version the database is at: 0 when empty.
func (s *Store) CurrentSchemaVersion(ctx context.Context) (int, error) {
	var v sql.NullInt64
	if err := s.db.WithContext(ctx).Raw("SELECT MAX(version) FROM schema_migrations").Row().Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

// checkMigrationNames refuses a database whose history differs from ours: a
// migration of the same version but another name comes from another branch.
func (s *Store) checkMigrationNames(ctx context.Context) error {
	var rows []schemaMigration
	if err := s.db.WithContext(ctx).Order("version").Find(&rows).Error; err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	for _, r := range rows {
		if r.Version < 1 || r.Version > len(migrations) {
			continue
		}
		if want := migrations[r.Version-1].Name; r.Name != want {
			return fmt.Errorf("database schema version %d is %q, this gpuvmd's is %q: the database was migrated by another build", r.Version, r.Name, want)
		}
	}
	return nil
}

// apply runs one migration in one transaction, unless another process applied
// it meanwhile.
func (s *Store) apply(ctx context.Context, m migration) (applied bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.lockMigrations(tx); err != nil {
			return err
		}
		var n int64
		if err := tx.Model(&schemaMigration{}).Where("version >= ?", m.Version).Count(&n).Error; err != nil {
			return err
		}
		if n > 0 {
			return nil // someone else was first
		}
		for i, stmt := range splitStatements(m.SQL[s.driver]) {
			if err := tx.Exec(stmt).Error; err != nil {
				return fmt.Errorf("statement %d: %w", i+1, err)
			}
		}
		applied = true
		return tx.Create(&schemaMigration{Version: m.Version, Name: m.Name, AppliedAt: s.clock()}).Error
	})
	if err != nil {
		return false, fmt.Errorf("migrate database to version %d (%s): %w", m.Version, m.Name, err)
	}
	return applied, nil
}

// splitStatements cuts a migration into statements: each ends with ';' at the
// end of a line, outside a $$-quoted body (a PostgreSQL function's). Comment
// lines are dropped. (Statements are sent one by one because PostgreSQL's
// extended protocol takes one statement per call.)
func splitStatements(sql string) []string {
	var out []string
	var cur strings.Builder
	inBody := false
	for line := range strings.Lines(sql) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.Count(line, "$$")%2 == 1 {
			inBody = !inBody
		}
		if !inBody && strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}
