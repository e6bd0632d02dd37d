package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/doctor"
)

// gpuvm admin doctor's exit status: 2 for wrong usage, 1 when it finds a
// problem (an empty sysfs tree has no IOMMU groups), with --json parseable.
func TestAdminDoctorExitStatus(t *testing.T) {
	if _, _, code := runCLI(t, "admin", "doctor", "--simulate", "a40x2", "--sysfs-root", t.TempDir()); code != exitUsage {
		t.Errorf("--simulate with --sysfs-root: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := runCLI(t, "admin", "doctor", "extra"); code != exitUsage {
		t.Errorf("an argument: exit %d, want %d", code, exitUsage)
	}
	out, errOut, code := runCLI(t, "admin", "doctor", "--config", "../../pkg/doctor/testdata/config", "--sysfs-root", t.TempDir(), "--json")
	if code != exitFailure {
		t.Fatalf("empty tree: exit %d, want %d\n%s%s", code, exitFailure, out, errOut)
	}
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	found := false
	for _, f := range r.Findings {
		if f.Check == "iommu" && f.Severity == doctor.Error && strings.Contains(f.Fix, "intel_iommu=on") {
			found = true
		}
	}
	if !found {
		t.Errorf("no IOMMU error with its fix in %+v", r.Findings)
	}
}

func TestParseGpuvmdVersion(t *testing.T) {
	tests := []struct {
		out    string
		schema int
		name   string
		ok     bool
	}{
		{"gpuvmd 1.2.0 (database schema 9)\n", 9, "gpuvmd 1.2.0", true},
		{"gpuvmd 0.0~git20261202.abc+dirty (database schema 12)", 12, "gpuvmd 0.0~git20261202.abc+dirty", true},
		{"gpuvmd 1.1.0\n", 0, "", false}, // before gpuvmd named its schema
		{"gpuvmd 1.2.0 (database schema x)", 0, "", false},
	}
	for _, tc := range tests {
		n, name, ok := parseGpuvmdVersion(tc.out)
		if n != tc.schema || name != tc.name || ok != tc.ok {
			t.Errorf("parseGpuvmdVersion(%q) = %d, %q, %v; want %d, %q, %v", tc.out, n, name, ok, tc.schema, tc.name, tc.ok)
		}
	}
}

// The schema versions on SQLite: the database's as gpuvmd recorded it, the
// installed gpuvmd's from its --version.
func TestSchemaProbeSQLite(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "gpuvmd"), []byte("#!/bin/sh\necho 'gpuvmd 1.2.0 (database schema 9)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	state := t.TempDir()
	cfg := &config.Config{}
	cfg.Server.StateDir = state
	probe := schemaProbe(cfg, &pgConn{})
	v, why := probe(context.Background())
	if v.Binary != 9 || v.BinaryFrom != "gpuvmd 1.2.0 ("+filepath.Join(bin, "gpuvmd")+")" || v.Database != -1 || !strings.Contains(why, "not written yet") {
		t.Errorf("no database yet: %+v, %q", v, why)
	}
	if err := os.WriteFile(filepath.Join(state, "schema-version"), []byte("10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, why = probe(context.Background())
	if v.Database != 10 || !strings.Contains(v.DatabaseFrom, "schema-version") || why != "" {
		t.Errorf("recorded: %+v, %q", v, why)
	}
}

// The PostgreSQL server's clock and schema, on the test server.
func TestPostgresClockAndSchema(t *testing.T) {
	dsn := os.Getenv("GPUVM_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("GPUVM_TEST_POSTGRES_DSN is not set")
	}
	pg := &pgConn{dsn: dsn}
	defer pg.close()
	c := pgClock{pg}
	if !strings.HasPrefix(c.Describe(), "PostgreSQL at 127.0.0.1:5432") {
		t.Errorf("Describe() = %q", c.Describe())
	}
	before := time.Now()
	remote, err := c.Now(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The same machine's clock: within the round trip.
	if remote.Before(before.Add(-time.Second)) || remote.After(time.Now().Add(time.Second)) {
		t.Errorf("server time %v, local %v", remote, before)
	}
	if _, err := pg.schemaVersion(context.Background()); err != nil {
		t.Errorf("schema version: %v", err)
	}
	if _, err := (&pgConn{dsn: "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}).schemaVersion(context.Background()); err == nil {
		t.Error("an unreachable server answered")
	}
}
