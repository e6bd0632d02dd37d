package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// A single server's SQLite database moves to PostgreSQL with everything in
// it, once: the second run is refused and changes nothing.
func TestMigrateDB(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gpuvm.db")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	src := storetest.Open(t, store.Config{DSN: path, Logger: quiet})
	if err := src.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	token, _, err := src.CreateToken(ctx, "ann", "laptop", nil)
	if err != nil {
		t.Fatal(err)
	}
	vm := &store.VM{Name: "one", Owner: "ann", Profile: "p", Hours: 1}
	if _, err := src.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	src.Close()

	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"migrate-db", "--from", "sqlite:" + path, "--to", dsn}, os.Getenv, &out, &errOut); err != nil {
		t.Fatalf("migrate-db: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"Copied " + path, "users ", "vms ", "events ", `driver = "postgres"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	dst := storetest.Open(t, store.Config{Driver: store.DriverPostgres, DSN: dsn, Logger: quiet})
	defer dst.Close()
	got, err := dst.GetVM(ctx, vm.ID)
	if err != nil || got.Name != "one" || got.Owner != "ann" {
		t.Errorf("the VM on PostgreSQL: %+v, %v", got, err)
	}
	if u, _, err := dst.AuthenticateToken(ctx, token); err != nil || u.Name != "ann" {
		t.Errorf("ann's token on PostgreSQL: %v, %v", u, err)
	}

	out.Reset()
	err = run(ctx, []string{"migrate-db", "--from", "sqlite:" + path, "--to", dsn}, os.Getenv, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "already holds gpuvm data") {
		t.Errorf("second run: %v", err)
	}
}

// Bad arguments are refused before anything is opened, saying what is wrong.
func TestMigrateDBArguments(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"no from", []string{"--to", "postgres://u@h/db"}, "--from is required"},
		{"no to", []string{"--from", "sqlite:" + dir + "/x.db"}, "--to is required"},
		{"missing file", []string{"--from", "sqlite:" + dir + "/missing.db", "--to", "postgres://u@h/db"}, "no SQLite database at"},
		{"a directory", []string{"--from", "sqlite:" + dir, "--to", "postgres://u@h/db"}, "is a directory"},
		{"from postgres", []string{"--from", "postgres://u@h/db", "--to", "postgres://u@h/db2"}, "pg_dump"},
		{"to a file", []string{"--from", dir + "/x.db", "--to", "/tmp/other.db"}, "--to must be a postgres:// URL"},
		{"extra argument", []string{"--from", "a", "--to", "b", "now"}, `unexpected argument "now"`},
		{"unknown flag", []string{"--force"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "x.db"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			err := run(context.Background(), append([]string{"migrate-db"}, tc.args...), os.Getenv, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v; want %q", err, tc.err)
			}
		})
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://gpuvm:s3cret@db:5432/gpuvm?sslmode=disable": "postgres://gpuvm:xxxxx@db:5432/gpuvm?sslmode=disable",
		"postgres://gpuvm@db/gpuvm":                             "postgres://gpuvm@db/gpuvm",
		"host=db user=gpuvm":                                    "host=db user=gpuvm",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}
