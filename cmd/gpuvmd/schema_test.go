package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// gpuvmd records the schema version of the database it opened (the
// package's preinst reads it), and refuses to start on a database a newer
// gpuvmd migrated, naming both versions.
func TestSchemaVersionRecordedAndNewerRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := options{stateDir: dir}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	st, err := openStore(ctx, o, log)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	known := store.SchemaVersion()
	recorded := func() string {
		b, err := os.ReadFile(filepath.Join(dir, SchemaVersionFile))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := recorded(); got != strconv.Itoa(known)+"\n" {
		t.Fatalf("%s holds %q, want %d", SchemaVersionFile, got, known)
	}

	// A newer gpuvmd migrated the database one version further.
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "gpuvm.db")), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", known+1, "from_the_future", time.Now()).Error; err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
	_, err = openStore(ctx, o, log)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("open a newer database: %v, want ErrSchemaTooNew", err)
	}
	for _, want := range []string{"version " + strconv.Itoa(known+1), "up to " + strconv.Itoa(known), "upgrade gpuvmd"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// gpuvmd as a whole stops there, with that error.
	err = run(ctx, []string{"--state-dir", dir, "--simulate", "a40x2", "--libvirt-uri", "test:///default", "--listen", "127.0.0.1:0"},
		func(string) string { return "" }, os.Stdout, &strings.Builder{})
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("gpuvmd on a newer database: %v, want ErrSchemaTooNew", err)
	}
}

func TestVersionNamesSchema(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"--version"}, func(string) string { return "" }, &out, &out); err != nil {
		t.Fatal(err)
	}
	if want := "(database schema " + strconv.Itoa(store.SchemaVersion()) + ")"; !strings.Contains(out.String(), want) {
		t.Errorf("gpuvmd --version: %q, want %q in it", out.String(), want)
	}
}
