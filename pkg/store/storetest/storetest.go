// Package storetest opens the stores of the tests: a fresh SQLite database in
// the test's temporary directory, or a fresh PostgreSQL schema of its own in
// $GPUVM_TEST_POSTGRES_DSN's database, each closed (and the schema dropped)
// when the test ends.
package storetest

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

	"github.com/jackc/pgx/v5"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// EnvPostgres names the DSN of a PostgreSQL database the tests may use: each
// test makes a schema of its own in it and drops it at the end.
// pkg/store/testdata/start-postgres.sh prepares one on a Debian machine.
const EnvPostgres = "GPUVM_TEST_POSTGRES_DSN"

// Drivers are the databases Each runs on, in order.
var Drivers = []string{store.DriverSQLite, store.DriverPostgres}

// Option changes the configuration of a test store.
type Option func(*store.Config)

// WithClock makes now the store's clock.
func WithClock(now func() time.Time) Option { return func(c *store.Config) { c.Now = now } }

// WithLogger makes log the store's logger (the default writes warnings and
// errors to the test's output).
func WithLogger(log *slog.Logger) Option { return func(c *store.Config) { c.Logger = log } }

// Quiet is the option of a test whose store's messages are expected noise.
var Quiet Option = WithLogger(slog.New(slog.DiscardHandler))

// Config is the configuration of a fresh, empty database for driver: a file
// in t.TempDir() for SQLite (or ""), a schema of its own for PostgreSQL
// (the test is skipped when EnvPostgres is not set).
func Config(t testing.TB, driver string, opts ...Option) store.Config {
	t.Helper()
	cfg := store.Config{Driver: driver, Logger: Logger(t)}
	switch driver {
	case "", store.DriverSQLite:
		cfg.Driver, cfg.DSN = store.DriverSQLite, filepath.Join(t.TempDir(), "gpuvm.db")
	case store.DriverPostgres:
		cfg.DSN = PostgresDSN(t)
	default:
		t.Fatalf("storetest: unknown driver %q", driver)
	}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// Open opens (and migrates) the store of cfg, and closes it when the test
// ends.
func Open(t testing.TB, cfg store.Config) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("storetest: open %s %s: %v", cfg.Driver, cfg.DSN, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// New opens a fresh SQLite store in t.TempDir().
func New(t testing.TB, opts ...Option) *store.Store {
	t.Helper()
	return Open(t, Config(t, store.DriverSQLite, opts...))
}

// Each runs fn as a subtest per driver of Drivers, each on a fresh store;
// the PostgreSQL subtest is skipped when EnvPostgres is not set.
func Each(t *testing.T, fn func(t *testing.T, st *store.Store), opts ...Option) {
	t.Helper()
	for _, driver := range Drivers {
		t.Run(driver, func(t *testing.T) {
			fn(t, Open(t, Config(t, driver, opts...)))
		})
	}
}

// PostgresDSN makes a fresh schema in EnvPostgres's database, dropped when
// the test ends, and returns a DSN whose search_path is that schema; it skips
// the test when EnvPostgres is not set.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvPostgres)
	if base == "" {
		t.Skipf("%s is not set: PostgreSQL tests skipped (as root: export %s=\"$(bash pkg/store/testdata/start-postgres.sh)\")", EnvPostgres, EnvPostgres)
	}
	return SchemaDSN(t, base)
}

// SchemaDSN makes a fresh schema in base's database, dropped when the test
// ends (over a new connection, so the server may have restarted meanwhile),
// and returns a DSN (URL or key=value, as base) whose search_path is it.
func SchemaDSN(t testing.TB, base string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	if err := exec(base, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("storetest: create schema: %v", err)
	}
	t.Cleanup(func() {
		if err := exec(base, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("storetest: drop schema %s: %v", schema, err)
		}
	})
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatalf("storetest: %s: %v", EnvPostgres, err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return base + " search_path=" + schema
}

// exec runs one statement on a connection of its own to dsn.
func exec(dsn, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// Logger writes a store's warnings and errors to the test's output.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// RunningVM makes a running VM of owner (made when missing) on host holding
// claim, its device made as deviceID: what monitoring and alert tests watch.
func RunningVM(t testing.TB, st *store.Store, host, owner, name string, claim store.SlotClaim, deviceID string) *store.VM {
	t.Helper()
	ctx := context.Background()
	if _, err := st.GetUser(ctx, owner); err != nil {
		if err := st.CreateUser(ctx, &store.User{Name: owner}); err != nil {
			t.Fatalf("create user %s: %v", owner, err)
		}
	}
	vm := &store.VM{Name: name, Owner: owner, Profile: "p", Hours: 8}
	if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: owner}); err != nil {
		t.Fatalf("create VM %s: %v", name, err)
	}
	claim.Host = host
	if claim.Backend == "" {
		claim.Backend = string(claim.Kind)
	}
	allocs, err := st.ClaimAllocation(ctx, vm.ID, []store.SlotClaim{claim})
	if err != nil {
		t.Fatalf("claim for VM %s: %v", name, err)
	}
	if err := st.MarkAllocationCreated(ctx, allocs[0].ID, deviceID, "{}"); err != nil {
		t.Fatalf("device of VM %s: %v", name, err)
	}
	vm, err = st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Host: &host})
	if err != nil {
		t.Fatalf("start VM %s: %v", name, err)
	}
	return vm
}
