package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/gpuvm/gpuvm/pkg/clocktest"
)

// envPostgres names the DSN of a PostgreSQL database the tests may use: each
// test makes a schema of its own in it and drops it at the end.
// testdata/start-postgres.sh prepares one on a Debian machine.
const envPostgres = "GPUVM_TEST_POSTGRES_DSN"

var drivers = []string{DriverSQLite, DriverPostgres}

// newTestClock is a settable clock; each reading advances it by a
// millisecond, so that two timestamps differ.
func newTestClock() *clocktest.Clock {
	c := clocktest.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	c.SetStep(time.Millisecond)
	return c
}

// testDB is where one test's database lives: reopen it with config.
type testDB struct {
	driver string
	dsn    string
	clock  *clocktest.Clock
	log    *slog.Logger
}

func (d *testDB) config() Config {
	return Config{Driver: d.driver, DSN: d.dsn, Now: d.clock.Now, Logger: d.log}
}

func (d *testDB) open(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), d.config())
	if err != nil {
		t.Fatalf("open %s: %v", d.driver, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newTestDB makes an empty database for the driver: a file in t.TempDir() for
// SQLite, a fresh schema for PostgreSQL (skipping the test when envPostgres is
// not set).
func newTestDB(t testing.TB, driver string) *testDB {
	t.Helper()
	d := &testDB{driver: driver, clock: newTestClock(), log: testLogger(t)}
	switch driver {
	case DriverSQLite:
		d.dsn = filepath.Join(t.TempDir(), "gpuvm.db")
	case DriverPostgres:
		d.dsn = postgresSchema(t)
	default:
		t.Fatalf("unknown driver %q", driver)
	}
	return d
}

// eachDriver runs fn as a subtest per driver, on a fresh migrated store.
func eachDriver(t *testing.T, fn func(t *testing.T, s *Store, d *testDB)) {
	t.Helper()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			d := newTestDB(t, driver)
			fn(t, d.open(t), d)
		})
	}
}

func postgresSchema(t testing.TB) string {
	t.Helper()
	base := os.Getenv(envPostgres)
	if base == "" {
		t.Skipf("%s is not set: PostgreSQL tests skipped (as root: export %s=\"$(pkg/store/testdata/start-postgres.sh)\")", envPostgres, envPostgres)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	admin, err := gorm.Open(postgres.Open(base), &gorm.Config{Logger: gormlogger.Discard})
	if err != nil {
		t.Fatalf("connect to %s: %v", envPostgres, err)
	}
	sqlDB, _ := admin.DB()
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		_ = sqlDB.Close()
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if err := admin.Exec("DROP SCHEMA " + schema + " CASCADE").Error; err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		_ = sqlDB.Close()
	})
	return withSearchPath(t, base, schema)
}

// withSearchPath points a DSN (URL or key=value) at a schema.
func withSearchPath(t testing.TB, dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("%s: %v", envPostgres, err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}

// testLogger writes warnings and errors to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// mustUser creates a user with groups.
func mustUser(t testing.TB, s *Store, name string, groups ...string) *User {
	t.Helper()
	u := &User{Name: name, Groups: groups}
	if err := s.CreateUser(context.Background(), u); err != nil {
		t.Fatalf("create user %s: %v", name, err)
	}
	return u
}

// mustVM creates a queued VM of an owner.
func mustVM(t testing.TB, s *Store, owner, name string) *VM {
	t.Helper()
	vm := &VM{Name: name, Owner: owner, Profile: "render-l40s", Hours: 8}
	if _, err := s.CreateVM(context.Background(), vm, CreateVMOptions{RequestedBy: owner}); err != nil {
		t.Fatalf("create vm %s: %v", name, err)
	}
	return vm
}

func count(t testing.TB, s *Store, table string, where ...any) int64 {
	t.Helper()
	var n int64
	q := s.db.Table(table)
	if len(where) > 0 {
		q = q.Where(where[0], where[1:]...)
	}
	if err := q.Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}
