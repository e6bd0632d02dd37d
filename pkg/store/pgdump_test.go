package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"
)

// pgTool finds a PostgreSQL client program on PATH or in Debian's
// /usr/lib/postgresql/*/bin.
func pgTool(name string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	found, _ := filepath.Glob(filepath.Join("/usr/lib/postgresql", "*", "bin", name))
	if len(found) == 0 {
		return "", false
	}
	return found[len(found)-1], true
}

// pgDatabase makes a new, empty database on the server of envPostgres and
// returns its DSN; it is dropped at the end of the test.
func pgDatabase(t *testing.T, admin *gorm.DB, base *url.URL, prefix string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)").Error; err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u := *base
	u.Path = "/" + name
	return u.String()
}

// What the README's operations part says to do on PostgreSQL works: a
// database filled with gpuvm data, dumped with pg_dump -Fc and restored
// with pg_restore into a new database, opens with every row, the same
// installation ID, and takes new writes (the sequences came along).
func TestPgDumpRestore(t *testing.T) {
	dsn := os.Getenv(envPostgres)
	if dsn == "" {
		t.Skipf("%s is not set: the pg_dump/pg_restore test needs PostgreSQL (as root: export %s=\"$(bash pkg/store/testdata/start-postgres.sh)\")", envPostgres, envPostgres)
	}
	pgDump, ok1 := pgTool("pg_dump")
	pgRestore, ok2 := pgTool("pg_restore")
	if !ok1 || !ok2 {
		t.Skip("pg_dump or pg_restore is not installed (apt-get install postgresql-client): the dump/restore test is skipped")
	}
	base, err := url.Parse(dsn)
	if err != nil || (base.Scheme != "postgres" && base.Scheme != "postgresql") {
		t.Skipf("%s is not a postgres:// URL; the dump/restore test makes databases beside it", envPostgres)
	}
	admin, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: gormlogger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := admin.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}
	var canCreate bool
	if err := admin.Raw("SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&canCreate).Error; err != nil {
		t.Fatal(err)
	}
	if !canCreate {
		t.Skip("the test role may not create databases: run pkg/store/testdata/start-postgres.sh (it grants CREATEDB)")
	}
	ctx := context.Background()

	srcDSN := pgDatabase(t, admin, base, "gpuvm_dump_")
	srcDB := &testDB{driver: DriverPostgres, dsn: srcDSN, clock: newTestClock(), log: testLogger(t)}
	src := srcDB.open(t)
	fillEveryTable(t, src)
	inst, err := src.Installation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string][]map[string]any{}
	for _, c := range copiers {
		before[c.table] = rawRows(t, src, c.table, c.order)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	dump := filepath.Join(t.TempDir(), "gpuvm.pgdump")
	if out, err := exec.Command(pgDump, "-Fc", "--dbname", srcDSN, "--file", dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	dstDSN := pgDatabase(t, admin, base, "gpuvm_restore_")
	if out, err := exec.Command(pgRestore, "--no-owner", "--exit-on-error", "--dbname", dstDSN, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}

	dst := (&testDB{driver: DriverPostgres, dsn: dstDSN, clock: newTestClock(), log: testLogger(t)}).open(t)
	got, err := dst.Installation(ctx)
	if err != nil || got.ID != inst.ID || !got.CreatedAt.Equal(inst.CreatedAt) {
		t.Errorf("installation after the restore: %+v, %v; want %+v", got, err, inst)
	}
	if v, err := dst.CurrentSchemaVersion(ctx); err != nil || v != SchemaVersion() {
		t.Errorf("schema version after the restore: %d, %v", v, err)
	}
	for _, c := range copiers {
		after := rawRows(t, dst, c.table, c.order)
		if len(before[c.table]) == 0 {
			t.Errorf("table %s: the fill wrote no row", c.table)
		}
		if !reflect.DeepEqual(before[c.table], after) {
			t.Errorf("table %s after the restore:\n%v\nwant\n%v", c.table, after, before[c.table])
		}
	}
	// New rows: the sequences go on after the restored IDs.
	u := mustUser(t, dst, "after-restore")
	var maxID int64
	if err := dst.db.Raw("SELECT MAX(id) FROM users WHERE name <> ?", "after-restore").Scan(&maxID).Error; err != nil {
		t.Fatal(err)
	}
	if u.ID <= maxID {
		t.Errorf("a new user got id %d; the restored ones go up to %d", u.ID, maxID)
	}
	mustVM(t, dst, "after-restore", "new-vm")
}

// rawRows is every row of a table as column → value, in key order.
func rawRows(t *testing.T, s *Store, table, order string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	if err := s.db.Table(table).Order(order).Find(&rows).Error; err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	for _, r := range rows {
		for k, v := range r {
			r[k] = fmt.Sprint(v) // one representation for pgx's types
		}
	}
	return rows
}
