package store

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"gorm.io/gorm/schema"
)

func TestMigrateFreshReopenTooNew(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		v, err := s.CurrentSchemaVersion(ctx)
		if err != nil || v != SchemaVersion() {
			t.Fatalf("fresh database at version %d (%v), want %d", v, err, SchemaVersion())
		}
		var before []schemaMigration
		if err := s.db.Order("version").Find(&before).Error; err != nil {
			t.Fatal(err)
		}
		if len(before) != len(migrations) || before[0].Name != "initial" {
			t.Fatalf("schema_migrations = %+v", before)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		// Re-opening applies nothing.
		d.clock.Advance(time.Hour)
		s2 := d.open(t)
		var after []schemaMigration
		if err := s2.db.Order("version").Find(&after).Error; err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(before, after, func(a, b schemaMigration) bool {
			return a.Version == b.Version && a.Name == b.Name && a.AppliedAt.Equal(b.AppliedAt)
		}) {
			t.Fatalf("re-open changed schema_migrations:\n%+v\n%+v", before, after)
		}

		// A newer gpuvmd migrated the database: this one refuses it.
		newer := SchemaVersion() + 1
		if err := s2.db.Create(&schemaMigration{Version: newer, Name: "from_the_future", AppliedAt: s2.Now()}).Error; err != nil {
			t.Fatal(err)
		}
		_ = s2.Close()
		_, err = Open(ctx, d.config())
		if !errors.Is(err, ErrSchemaTooNew) {
			t.Fatalf("open newer database: %v, want ErrSchemaTooNew", err)
		}
		var tooNew *SchemaTooNewError
		if !errors.As(err, &tooNew) || tooNew.Database != newer || tooNew.Known != SchemaVersion() {
			t.Fatalf("error %#v", err)
		}
		want := "database schema is at version 2, this gpuvmd knows up to 1: upgrade gpuvmd"
		if SchemaVersion() == 1 && err.Error() != want {
			t.Fatalf("error %q, want %q", err, want)
		}
	})
}

func TestMigrateRefusesOtherHistory(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		if err := s.db.Model(&schemaMigration{}).Where("version = 1").Update("name", "something_else").Error; err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		_, err := Open(context.Background(), d.config())
		if err == nil || !strings.Contains(err.Error(), `database schema version 1 is "something_else"`) {
			t.Fatalf("open: %v", err)
		}
	})
}

// Several gpuvmds starting at once on one empty database migrate it once.
func TestMigrateConcurrentOpen(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			d := newTestDB(t, driver)
			var wg sync.WaitGroup
			errs := make(chan error, 6)
			for range 6 {
				wg.Go(func() {
					s, err := Open(context.Background(), d.config())
					if err == nil {
						err = s.Close()
					}
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			s := d.open(t)
			if n := count(t, s, "schema_migrations"); n != int64(len(migrations)) {
				t.Fatalf("%d schema_migrations rows, want %d", n, len(migrations))
			}
		})
	}
}

func TestLoadMigrations(t *testing.T) {
	ok := "CREATE TABLE a (x INTEGER);"
	tests := []struct {
		name  string
		files fstest.MapFS
		err   string
	}{
		{"good", fstest.MapFS{
			"migrations/0001_a.sqlite.sql":   {Data: []byte(ok)},
			"migrations/0001_a.postgres.sql": {Data: []byte(ok)},
			"migrations/0002_b.sqlite.sql":   {Data: []byte(ok)},
			"migrations/0002_b.postgres.sql": {Data: []byte(ok)},
		}, ""},
		{"gap", fstest.MapFS{
			"migrations/0001_a.sqlite.sql":   {Data: []byte(ok)},
			"migrations/0001_a.postgres.sql": {Data: []byte(ok)},
			"migrations/0003_c.sqlite.sql":   {Data: []byte(ok)},
			"migrations/0003_c.postgres.sql": {Data: []byte(ok)},
		}, "gap"},
		{"one driver", fstest.MapFS{
			"migrations/0001_a.sqlite.sql": {Data: []byte(ok)},
		}, "no postgres file"},
		{"two names", fstest.MapFS{
			"migrations/0001_a.sqlite.sql":   {Data: []byte(ok)},
			"migrations/0001_b.postgres.sql": {Data: []byte(ok)},
		}, "two names"},
		{"bad name", fstest.MapFS{
			"migrations/1_a.sql": {Data: []byte(ok)},
		}, "name is not"},
		{"none", fstest.MapFS{}, "no migrations"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := loadMigrations(tc.files)
			if tc.err == "" {
				if err != nil || len(ms) != 2 || ms[1].Version != 2 {
					t.Fatalf("%+v, %v", ms, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
	if _, err := loadMigrations(migrationFS); err != nil {
		t.Fatalf("embedded migrations: %v", err)
	}
}

func TestSplitStatements(t *testing.T) {
	got := splitStatements("-- header\nCREATE TABLE a (\n\tx TEXT DEFAULT 'a;b'\n);\n\n-- c\nCREATE INDEX i ON a (x);\nSELECT 1")
	want := []string{"CREATE TABLE a (\n\tx TEXT DEFAULT 'a;b'\n);", "CREATE INDEX i ON a (x);", "SELECT 1"}
	if !slices.Equal(got, want) {
		t.Fatalf("%q", got)
	}
}

// A function's $$-quoted body is one statement with its CREATE, whatever
// its lines end with.
func TestSplitStatementsFunctionBody(t *testing.T) {
	got := splitStatements("CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n\tPERFORM 1;\n\tRETURN NULL;\nEND\n$$;\nCREATE TRIGGER t AFTER INSERT ON a\n\tFOR EACH ROW EXECUTE FUNCTION f();\n")
	want := []string{"CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n\tPERFORM 1;\n\tRETURN NULL;\nEND\n$$;",
		"CREATE TRIGGER t AFTER INSERT ON a\n\tFOR EACH ROW EXECUTE FUNCTION f();"}
	if !slices.Equal(got, want) {
		t.Fatalf("%q", got)
	}
}

// The gorm structs describe exactly the tables the migrations make: the same
// columns, and every index they name exists.
func TestModelsMatchSchema(t *testing.T) {
	models := []any{&User{}, &Group{}, &GroupMember{}, &APIToken{}, &VM{}, &Operation{}, &Allocation{},
		&AllocationSlot{}, &GPUMode{}, &Reservation{}, &UsageRecord{}, &Event{}, &IdempotencyKey{}, &schemaMigration{},
		&Host{}, &GPUDrain{}, &ConsoleTicket{}, &GPUSample{}, &Alert{}, &Installation{}, &AuditEntry{}, &VMCredential{}, &Session{}, &Image{}, &ImageUse{}, &Snapshot{}, &Volume{}, &Task{}, &TaskAttempt{}}
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		m := s.db.Migrator()
		var tables []string
		for _, model := range models {
			stmt := s.db.Model(model).Statement
			if err := stmt.Parse(model); err != nil {
				t.Fatal(err)
			}
			sch := stmt.Schema
			tables = append(tables, sch.Table)
			cols, err := m.ColumnTypes(model)
			if err != nil {
				t.Fatalf("%s: %v", sch.Table, err)
			}
			var inDB, inModel []string
			for _, c := range cols {
				inDB = append(inDB, c.Name())
			}
			for _, f := range sch.Fields {
				if f.DBName != "" {
					inModel = append(inModel, f.DBName)
				}
			}
			slices.Sort(inDB)
			slices.Sort(inModel)
			if !slices.Equal(inDB, inModel) {
				t.Errorf("%s: columns in the database %v, in the model %v", sch.Table, inDB, inModel)
			}
			for _, idx := range sch.ParseIndexes() {
				if !m.HasIndex(model, idx.Name) {
					t.Errorf("%s: index %s of the model is not in the database", sch.Table, idx.Name)
					continue
				}
				checkIndex(t, s, sch, idx)
			}
		}
		// Every table of the database has a model.
		dbTables, err := m.GetTables()
		if err != nil {
			t.Fatal(err)
		}
		for _, tbl := range dbTables {
			if tbl != "sqlite_sequence" && !slices.Contains(tables, tbl) {
				t.Errorf("table %s has no model", tbl)
			}
		}
	})
}

// checkIndex compares an index's uniqueness with the model's tag.
func checkIndex(t *testing.T, s *Store, sch *schema.Schema, idx *schema.Index) {
	t.Helper()
	var unique bool
	switch s.driver {
	case DriverSQLite:
		var sql string
		if err := s.db.Raw("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", idx.Name).Row().Scan(&sql); err != nil {
			t.Errorf("%s: %v", idx.Name, err)
			return
		}
		unique = strings.HasPrefix(sql, "CREATE UNIQUE INDEX")
	case DriverPostgres:
		var def string
		if err := s.db.Raw("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?", idx.Name).Row().Scan(&def); err != nil {
			t.Errorf("%s: %v", idx.Name, err)
			return
		}
		unique = strings.HasPrefix(def, "CREATE UNIQUE INDEX")
	}
	if want := idx.Class == "UNIQUE"; unique != want {
		t.Errorf("%s.%s: unique in the database %v, in the model %v", sch.Table, idx.Name, unique, want)
	}
}

// Every database gets an installation ID of its own at the first migration:
// a UUID, the same at every open, different in another database.
func TestInstallationID(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		a, err := s.Installation(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(a.ID) {
			t.Fatalf("installation ID %q is not a UUID v4", a.ID)
		}
		if a.CreatedAt.IsZero() || time.Since(a.CreatedAt) > time.Hour || time.Since(a.CreatedAt) < -time.Hour {
			t.Fatalf("installation created at %v", a.CreatedAt)
		}
		b, err := s.Installation(ctx)
		if err != nil || b.ID != a.ID {
			t.Fatalf("second read: %v, %v", b, err)
		}
		other := newTestDB(t, DriverSQLite).open(t)
		o, err := other.Installation(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if o.ID == a.ID {
			t.Fatalf("two databases share the installation ID %s", a.ID)
		}
	})
}
