package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/backup"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

func noEnv(string) string { return "" }

// newStateDir is a state directory as gpuvmd leaves it: a SQLite database
// with a user and a VM, a ledger, the admin token and a simulator's state.
func newStateDir(t *testing.T) (dir, installation string) {
	t.Helper()
	dir = t.TempDir()
	ctx := context.Background()
	st := storetest.Open(t, store.Config{DSN: filepath.Join(dir, "gpuvm.db"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer st.Close()
	if err := st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateVM(ctx, &store.VM{Name: "one", Owner: "ann", Profile: "p", Hours: 1}, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	inst, err := st.Installation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"backends/mig.json":   `{"gi-1": {"device": {"id": "gi-1"}, "state": "created"}}`,
		"admin.token":         "gpuvm_secret\n",
		"sim-mixed/host.json": "{}",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, inst.ID
}

func gpuvmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, noEnv, &out, &errOut)
	return out.String() + errOut.String(), err
}

// gpuvmd backup, then gpuvmd restore on a fresh state directory; a second
// restore is refused without --force and moves the first aside with it.
func TestBackupRestoreCommands(t *testing.T) {
	src, inst := newStateDir(t)
	archive := filepath.Join(t.TempDir(), "node.tar.gz")
	out, err := gpuvmd(t, "backup", "--state-dir", src, "--to", archive)
	if err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	t.Logf("gpuvmd backup:\n%s", out)
	for _, want := range []string{"Wrote " + archive, "installation    " + inst, "schema version  " + strconv.Itoa(store.SchemaVersion()),
		"database/gpuvm.db", "state/backends/mig.json"} {
		if !strings.Contains(out, want) {
			t.Errorf("backup output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "admin.token") {
		t.Errorf("the backup mentions the admin token:\n%s", out)
	}

	dst := filepath.Join(t.TempDir(), "state")
	out, err = gpuvmd(t, "restore", "--from", archive, "--state-dir", dst)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	t.Logf("gpuvmd restore:\n%s", out)
	for _, want := range []string{"installation    " + inst, "schema version  " + strconv.Itoa(store.SchemaVersion()), "users ", "vms ",
		filepath.Join(dst, "gpuvm.db"), filepath.Join(dst, "backends", "mig.json"),
		"start gpuvmd: VMs whose domains exist continue; the rest are reported as orphans or vanished, nothing is deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("restore output lacks %q:\n%s", want, out)
		}
	}
	a, _ := os.ReadFile(filepath.Join(src, "backends", "mig.json"))
	b, _ := os.ReadFile(filepath.Join(dst, "backends", "mig.json"))
	if !bytes.Equal(a, b) {
		t.Errorf("the ledger came back as %q, want %q", b, a)
	}
	if _, err := os.Stat(filepath.Join(dst, "admin.token")); err == nil {
		t.Error("the admin token was restored")
	}

	out, err = gpuvmd(t, "restore", "--from", archive, "--state-dir", dst)
	if !errors.Is(err, backup.ErrTargetInUse) || !strings.Contains(err.Error(), "--force") {
		t.Errorf("restore over a database: %v\n%s", err, out)
	}
	out, err = gpuvmd(t, "restore", "--from", archive, "--state-dir", dst, "--force")
	if err != nil {
		t.Fatalf("restore --force: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Moved aside to "+filepath.Join(dst, "before-restore-")) {
		t.Errorf("restore --force output:\n%s", out)
	}
	aside, _ := filepath.Glob(filepath.Join(dst, "before-restore-*", "gpuvm.db"))
	if len(aside) != 1 {
		t.Errorf("the earlier database aside: %v", aside)
	}
}

// backup and restore find the state directory as gpuvmd does: from the
// configuration's server block, overridden by the flags.
func TestBackupReadsTheConfiguration(t *testing.T) {
	src, inst := newStateDir(t)
	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "server.hcl"), []byte("server {\n  state_dir = \""+src+"\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "b.tar.gz")
	if out, err := gpuvmd(t, "backup", "--config", conf, "--to", archive); err != nil || !strings.Contains(out, inst) {
		t.Fatalf("backup --config: %v\n%s", err, out)
	}
	// The flag wins over the file.
	empty := t.TempDir()
	out, err := gpuvmd(t, "backup", "--config", conf, "--state-dir", empty, "--to", archive)
	if err == nil || !strings.Contains(err.Error(), "no SQLite database at "+filepath.Join(empty, "gpuvm.db")) {
		t.Errorf("backup --state-dir EMPTY: %v\n%s", err, out)
	}
	// A broken configuration is refused with its diagnostics.
	if err := os.WriteFile(filepath.Join(conf, "server.hcl"), []byte("server {\n  backup { every = \"1s\" }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = gpuvmd(t, "backup", "--config", conf, "--to", archive)
	if err == nil || !strings.Contains(out, "server.hcl:2") || !strings.Contains(out, "Invalid every") {
		t.Errorf("backup with a broken configuration: %v\n%s", err, out)
	}
}

func TestPGDumpTarget(t *testing.T) {
	for _, tc := range []struct{ dsn, want, schema string }{
		{"postgres://gpuvm:s3cret@db:5432/gpuvm?sslmode=verify-full", "postgres://gpuvm@db:5432/gpuvm?sslmode=verify-full", ""},
		{"postgres://gpuvm@db/gpuvm?search_path=t_1&sslmode=disable", "postgres://gpuvm@db/gpuvm?sslmode=disable", "t_1"},
		{"host=db user=gpuvm dbname=gpuvm", "host=db user=gpuvm dbname=gpuvm", ""},
	} {
		got, schema := pgDumpTarget(tc.dsn)
		if got != tc.want || schema != tc.schema {
			t.Errorf("pgDumpTarget(%q) = %q, %q; want %q, %q", tc.dsn, got, schema, tc.want, tc.schema)
		}
	}
}

func TestBackupArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backup"}, "--to FILE is required"},
		{[]string{"backup", "--to", "x", "now"}, `unexpected argument "now"`},
		{[]string{"backup", "--state-dir", "/nonexistent/gpuvm", "--to", "/tmp/x.tar.gz"}, "no SQLite database at /nonexistent/gpuvm/gpuvm.db"},
		{[]string{"restore"}, "--from FILE is required"},
		{[]string{"restore", "--from", "/nonexistent.tar.gz", "--state-dir", "/tmp/x"}, "no such file"},
	} {
		if out, err := gpuvmd(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q\n%s", tc.args, err, tc.want, out)
		}
	}
}

// On PostgreSQL the archive holds the node's state only, and gpuvmd says to
// dump the database with pg_dump, and how.
func TestBackupPostgres(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	ctx := context.Background()
	st := storetest.Open(t, store.Config{Driver: store.DriverPostgres, DSN: dsn, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	inst, err := st.Installation(ctx)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	state, _ := newStateDir(t)
	archive := filepath.Join(t.TempDir(), "b.tar.gz")
	out, err := gpuvmd(t, "backup", "--state-dir", state, "--database", dsn, "--to", archive)
	if err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	t.Logf("gpuvmd backup on PostgreSQL:\n%s", out)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	for _, want := range []string{"NOT in this archive", "pg_dump -Fc --dbname 'postgres://gpuvm@", "--schema '" + schema + "'", "pg_restore", "installation    " + inst.ID, "state/backends/mig.json"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "database/gpuvm.db") {
		t.Errorf("a PostgreSQL backup holds a SQLite file:\n%s", out)
	}
	if u, _ := url.Parse(dsn); u.User != nil {
		if p, ok := u.User.Password(); ok && strings.Contains(out, ":"+p+"@") {
			t.Errorf("the output shows the password:\n%s", out)
		}
	}
	m, err := backup.Verify(archive)
	if err != nil {
		t.Fatal(err)
	}
	if m.Database.Driver != store.DriverPostgres || m.Database.File != "" || m.InstallationID != inst.ID || len(m.Files) != 1 {
		t.Errorf("manifest %+v", m)
	}
	// Restored onto a PostgreSQL configuration: the ledgers, and what to do
	// with the dump.
	dst := t.TempDir()
	out, err = gpuvmd(t, "restore", "--from", archive, "--state-dir", dst, "--database", dsn)
	if err != nil || !strings.Contains(out, "holds no database: it was on PostgreSQL") || !strings.Contains(out, "pg_restore") {
		t.Errorf("restore: %v\n%s", err, out)
	}
}

// The schedule: each run writes a timestamped archive and keeps the newest
// keep of its own; a failed run is logged as an error and counted.
func TestBackupScheduler(t *testing.T) {
	state, _ := newStateDir(t)
	dir := filepath.Join(t.TempDir(), "backups")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "before-upgrade.tar.gz")
	if err := os.WriteFile(foreign, []byte("an admin's"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	now := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	type outcome struct {
		at  time.Time
		err error
	}
	var observed []outcome
	set := &config.Backup{Every: 24 * time.Hour, Keep: 2, Dir: dir}
	o := options{stateDir: state}
	s := &backupScheduler{
		settings: func() *config.Backup { return set },
		opts: func(ctx context.Context) (backup.Options, error) {
			return backupOptions(ctx, o, slog.New(slog.NewTextHandler(&logs, nil)))
		},
		now:     func() time.Time { return now },
		log:     slog.New(slog.NewTextHandler(&logs, nil)),
		observe: func(at time.Time, err error) { observed = append(observed, outcome{at, err}) },
	}
	ctx := context.Background()
	var made []string
	for i := range 4 {
		path, err := s.runOnce(ctx, set)
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, logs.String())
		}
		if want := filepath.Join(dir, backup.ScheduledName(now)); path != want {
			t.Errorf("run %d wrote %s, want %s", i, path, want)
		}
		made = append(made, filepath.Base(path))
		if _, err := backup.Verify(path); err != nil {
			t.Errorf("run %d: %v", i, err)
		}
		now = now.Add(24 * time.Hour)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"before-upgrade.tar.gz", made[2], made[3]}
	sort.Strings(want)
	if !reflect.DeepEqual(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	if !strings.Contains(logs.String(), `msg="scheduled backup written"`) || !strings.Contains(logs.String(), "pruned=["+made[0]+"]") {
		t.Errorf("logs:\n%s", logs.String())
	}
	// Due: a day after the newest archive.
	if got, want := s.due(set, time.Time{}), now; !got.Equal(want) {
		t.Errorf("due = %v, want %v", got, want)
	}

	// A run that cannot write is an error in the log and in the metric.
	logs.Reset()
	bad := &config.Backup{Every: time.Hour, Keep: 2, Dir: foreign} // a file, not a directory
	if _, err := s.runOnce(ctx, bad); err == nil {
		t.Fatal("a backup into a file went through")
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), `msg="scheduled backup failed"`) || !strings.Contains(logs.String(), "dir="+foreign) {
		t.Errorf("logs of the failure:\n%s", logs.String())
	}
	if len(observed) != 5 || observed[3].err != nil || observed[4].err == nil {
		t.Errorf("observed %+v", observed)
	}
	if b, _ := os.ReadFile(foreign); string(b) != "an admin's" {
		t.Error("the failed run changed an admin's file")
	}
	// After a failure the next try waits (an hour, at most every).
	if got, want := s.due(bad, now), now.Add(time.Hour); !got.Equal(want) {
		t.Errorf("due after a failure = %v, want %v", got, want)
	}
	// A run whose archive name is taken does not replace it.
	if _, err := s.runOnce(ctx, set); err != nil {
		t.Fatal(err)
	}
	if _, err := s.runOnce(ctx, set); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("a second run in the same second: %v", err)
	}
}

// gpuvmd serving with a backup block backs itself up while it serves: the
// first backup is due at once (there is none yet), is logged, verifies,
// and shows on /metrics.
func TestServeRunsScheduledBackups(t *testing.T) {
	dir := t.TempDir()
	server := strings.Replace(devServer, "  host {", "  backup {\n    every = \"24h\"\n    keep  = 3\n    dir   = \"backups\"\n  }\n  host {", 1)
	if err := os.WriteFile(filepath.Join(dir, "server.hcl"), []byte(server), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, errc, logs := serveConfig(t, ctx, dir)
	waitFor(t, logs, `msg="scheduled backup written"`)
	list, err := backup.ListScheduled(filepath.Join(dir, "backups"))
	if err != nil || len(list) != 1 {
		t.Fatalf("scheduled archives: %v, %v\n%s", list, err, logs.String())
	}
	m, err := backup.Verify(filepath.Join(dir, "backups", list[0].Name))
	if err != nil {
		t.Fatal(err)
	}
	if m.Database.File != backup.DatabaseEntry || m.InstallationID == "" || m.GpuvmVersion != version {
		t.Errorf("manifest %+v", m)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"gpuvm_backup_failures_total{host=", "gpuvm_last_backup_timestamp_seconds{host="} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(logs.String(), `msg="next scheduled backup"`) {
		t.Errorf("the next run is not logged:\n%s", logs.String())
	}
	// gpuvmd backup, run beside the serving gpuvmd on its configuration.
	manual := filepath.Join(t.TempDir(), "manual.tar.gz")
	if out, err := gpuvmd(t, "backup", "--config", dir, "--to", manual); err != nil || !strings.Contains(out, m.InstallationID) {
		t.Errorf("gpuvmd backup beside a serving gpuvmd: %v\n%s", err, out)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}
