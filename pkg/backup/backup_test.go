package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"

	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var testNow = time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)

// newNode makes a state directory as a gpuvmd leaves it: a SQLite
// database with users and VMs, two ledgers, a type-name cache, and the
// files a backup must leave out.
func newNode(t *testing.T) (stateDir string, st *store.Store) {
	t.Helper()
	stateDir = t.TempDir()
	ctx := context.Background()
	st = storetest.Open(t, store.Config{DSN: filepath.Join(stateDir, "gpuvm.db"), Logger: quiet})
	for _, name := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: name}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateVM(ctx, &store.VM{Name: name + "-vm", Owner: name, Profile: "p", Hours: 1}, store.CreateVMOptions{RequestedBy: name}); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"backends/vgpu.json":               `{"0000:41:00.0/mdev-1": {"device": {"id": "mdev-1"}, "state": "created"}}`,
		"backends/mig.json":                `{}`,
		"backends/vgpu-vgpu-types.json":    `{"558":"L40S-12Q"}`,
		"backends/vgpu.json.lock":          "",
		"backends/.ledger-123.json":        `{"half":`,
		"backends/mig.json.tmp":            "x",
		"admin.token":                      "gpuvm_secret\n",
		"host.lock":                        "",
		"sim-mixed/host.json":              `{"gpus":[]}`,
		"images/base.qcow2":                "qcow",
		"backups/gpuvm-backup-x.tar.gz":    "old",
		"backends/passthrough.json.unused": "x",
	}
	for name, data := range files {
		p := filepath.Join(stateDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return stateDir, st
}

func createBackup(t *testing.T, stateDir, to string) *Manifest {
	t.Helper()
	m, err := Create(context.Background(), to, Options{StateDir: stateDir, Driver: store.DriverSQLite,
		SQLitePath: filepath.Join(stateDir, "gpuvm.db"), Version: "1.2.3", Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// entries reads an archive's entry names and contents, in order.
func entries(t *testing.T, path string) ([]string, map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	data := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, data
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		data[h.Name] = b
	}
}

// tree is every file under dir with its content, for "nothing changed".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

// The archive holds the manifest first, the database and the ledgers and
// caches, and nothing secret or temporary; it is mode 0600.
func TestCreate(t *testing.T) {
	stateDir, st := newNode(t)
	out := filepath.Join(t.TempDir(), "b.tar.gz")
	m := createBackup(t, stateDir, out)
	inst, err := st.Installation(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.Format != FormatVersion || m.GpuvmVersion != "1.2.3" || !m.CreatedAt.Equal(testNow) || m.InstallationID != inst.ID ||
		m.SchemaVersion != store.SchemaVersion() || m.Database.Driver != store.DriverSQLite || m.Database.File != DatabaseEntry {
		t.Errorf("manifest = %+v", m)
	}
	names, data := entries(t, out)
	want := []string{ManifestName, DatabaseEntry, "state/backends/mig.json", "state/backends/vgpu-vgpu-types.json", "state/backends/vgpu.json"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("entries = %q, want %q", names, want)
	}
	var onDisk Manifest
	if err := json.Unmarshal(data[ManifestName], &onDisk); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(onDisk.Files, m.Files) || onDisk.InstallationID != inst.ID {
		t.Errorf("manifest.json = %+v, want %+v", onDisk, m)
	}
	kinds := map[string]string{}
	for _, f := range m.Files {
		kinds[f.Name] = f.Kind
		if int64(len(data[f.Name])) != f.Size {
			t.Errorf("%s: %d bytes, manifest says %d", f.Name, len(data[f.Name]), f.Size)
		}
	}
	if kinds["state/backends/vgpu.json"] != KindLedger || kinds["state/backends/vgpu-vgpu-types.json"] != KindCache || kinds[DatabaseEntry] != KindDatabase {
		t.Errorf("kinds = %v", kinds)
	}
	if m.Database.Tables == nil {
		t.Error("no row counts in the manifest")
	}
	for _, tc := range m.Database.Tables {
		if tc.Table == "vms" && tc.Rows != 2 {
			t.Errorf("manifest counts %d vms, want 2", tc.Rows)
		}
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("archive mode %v, want 0600", fi.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// Backup, restore into an empty directory: the store opens with the same
// data, the ledgers are byte-identical.
func TestRoundTrip(t *testing.T) {
	stateDir, st := newNode(t)
	ctx := context.Background()
	before, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "b.tar.gz")
	createBackup(t, stateDir, out)

	fresh := filepath.Join(t.TempDir(), "state")
	res, err := Restore(context.Background(), out, Target{StateDir: fresh, SQLitePath: filepath.Join(fresh, "gpuvm.db")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Aside != "" || len(res.Moved) != 0 {
		t.Errorf("an empty target moved %v aside to %q", res.Moved, res.Aside)
	}
	if len(res.Written) != 4 || res.Written[0] != filepath.Join(fresh, "gpuvm.db") {
		t.Errorf("written = %q", res.Written)
	}
	for _, name := range []string{"backends/vgpu.json", "backends/mig.json", "backends/vgpu-vgpu-types.json"} {
		a, _ := os.ReadFile(filepath.Join(stateDir, name))
		b, err := os.ReadFile(filepath.Join(fresh, name))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: restored %q (%v), want %q", name, b, err, a)
		}
	}
	for _, name := range []string{"admin.token", "host.lock", "sim-mixed", "images", "backups", "backends/vgpu.json.lock", "backends/.ledger-123.json", "backends/mig.json.tmp"} {
		if _, err := os.Stat(filepath.Join(fresh, name)); err == nil {
			t.Errorf("%s was restored; it is not to be in a backup", name)
		}
	}
	got := storetest.Open(t, store.Config{DSN: filepath.Join(fresh, "gpuvm.db"), Logger: quiet})
	defer got.Close()
	after, err := got.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before.Tables, after.Tables) || before.Installation.ID != after.Installation.ID || !before.Installation.CreatedAt.Equal(after.Installation.CreatedAt) {
		t.Errorf("restored database: %+v, want %+v", after, before)
	}
	page, err := got.ListVMs(ctx, store.VMFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range page.VMs {
		names = append(names, v.Name)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "ann-vm,bob-vm" {
		t.Errorf("restored VMs %v", names)
	}
	if err := got.CreateUser(ctx, &store.User{Name: "cid"}); err != nil {
		t.Errorf("a write on the restored database: %v", err)
	}
}

// rewrite copies an archive, changing entries on the way: edit returns
// the new content, or nil to drop the entry.
func rewrite(t *testing.T, src, dst string, edit func(name string, b []byte) []byte) {
	t.Helper()
	names, data := entries(t, src)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, n := range names {
		b := edit(n, data[n])
		if b == nil {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Size: int64(len(b)), Mode: 0o600}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func editManifest(t *testing.T, fn func(m map[string]any)) func(string, []byte) []byte {
	return func(name string, b []byte) []byte {
		if name != ManifestName {
			return b
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		fn(m)
		out, _ := json.Marshal(m)
		return out
	}
}

// A bad archive is refused with an error naming what is wrong, and the
// state directory is left as it was; so is a restore over an existing
// database without --force.
func TestRestoreRefusals(t *testing.T) {
	stateDir, _ := newNode(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tar.gz")
	createBackup(t, stateDir, good)
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain.tar") // the same archive, not compressed
	{
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(plain, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		make    func(path string)
		target  func(t *testing.T) Target // nil: an empty directory
		wantErr error
		want    string // in the error
	}{
		{"altered ledger", func(p string) {
			rewrite(t, good, p, func(n string, b []byte) []byte {
				if n == "state/backends/vgpu.json" {
					b = bytes.Replace(b, []byte("created"), []byte("deleted"), 1)
				}
				return b
			})
		}, nil, ErrBadArchive, "file state/backends/vgpu.json: SHA-256 mismatch"},
		{"altered database", func(p string) {
			rewrite(t, good, p, func(n string, b []byte) []byte {
				if n == DatabaseEntry {
					b = append([]byte(nil), b...)
					b[len(b)/2] ^= 0xff
				}
				return b
			})
		}, nil, ErrBadArchive, "file database/gpuvm.db: SHA-256 mismatch"},
		{"longer file", func(p string) {
			rewrite(t, good, p, func(n string, b []byte) []byte {
				if n == "state/backends/mig.json" {
					return append(b, ' ')
				}
				return b
			})
		}, nil, ErrBadArchive, "file state/backends/mig.json is 3 bytes; the manifest says 2"},
		{"truncated", func(p string) {
			if err := os.WriteFile(p, raw[:len(raw)/2], 0o600); err != nil {
				t.Fatal(err)
			}
		}, nil, ErrBadArchive, "truncated"},
		{"truncated, not compressed", func(p string) {
			b, _ := os.ReadFile(plain)
			if err := os.WriteFile(p, b[:len(b)/2], 0o600); err != nil {
				t.Fatal(err)
			}
		}, nil, ErrBadArchive, "file database/gpuvm.db is cut short"},
		{"file missing", func(p string) {
			rewrite(t, good, p, func(n string, b []byte) []byte {
				if n == "state/backends/vgpu.json" {
					return nil
				}
				return b
			})
		}, nil, ErrBadArchive, "file state/backends/vgpu.json of the manifest is missing"},
		{"file not in the manifest", func(p string) {
			rewrite(t, good, p, editManifest(t, func(m map[string]any) {
				m["files"] = m["files"].([]any)[:3]
			}))
		}, nil, ErrBadArchive, "file state/backends/vgpu.json is not in the manifest"},
		{"path escaping the state directory", func(p string) {
			rewrite(t, good, p, editManifest(t, func(m map[string]any) {
				m["files"].([]any)[1].(map[string]any)["name"] = "state/../../etc/passwd"
			}))
		}, nil, ErrBadArchive, "is not a file a gpuvm backup holds"},
		{"a state file over the database", func(p string) {
			rewrite(t, good, p, editManifest(t, func(m map[string]any) {
				m["files"].([]any)[1].(map[string]any)["name"] = "state/gpuvm.db"
			}))
		}, nil, ErrBadArchive, `"state/gpuvm.db" is not a file a gpuvm backup holds`},
		{"wrong format version", func(p string) {
			rewrite(t, good, p, editManifest(t, func(m map[string]any) { m["format"] = 2 }))
		}, nil, ErrBadArchive, "archive format version 2; this gpuvmd reads version 1"},
		{"no manifest first", func(p string) {
			rewrite(t, good, p, func(n string, b []byte) []byte {
				if n == ManifestName {
					return nil
				}
				return b
			})
		}, nil, ErrBadArchive, `the first entry is "database/gpuvm.db", not manifest.json`},
		{"not an archive", func(p string) {
			if err := os.WriteFile(p, []byte("SQLite format 3\x00 and more"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, nil, ErrBadArchive, "no manifest"},
		{"manifest lying about the installation", func(p string) {
			rewrite(t, good, p, editManifest(t, func(m map[string]any) { m["installation_id"] = "00000000-0000-0000-0000-000000000000" }))
		}, nil, ErrBadArchive, "the manifest says 00000000-0000-0000-0000-000000000000"},
		{"newer schema", func(p string) {
			rewrite(t, good, p, editManifest(t, func(m map[string]any) { m["schema_version"] = store.SchemaVersion() + 1 }))
		}, nil, ErrSchemaTooNew, "this gpuvmd knows up to"},
		{"existing database", func(p string) {
			if err := os.WriteFile(p, raw, 0o600); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T) Target {
			d, _ := newNode(t)
			return Target{StateDir: d, SQLitePath: filepath.Join(d, "gpuvm.db")}
		}, ErrTargetInUse, "gpuvm.db"},
		{"a stale -wal only", func(p string) {
			if err := os.WriteFile(p, raw, 0o600); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T) Target {
			d := t.TempDir()
			if err := os.WriteFile(filepath.Join(d, "gpuvm.db-wal"), []byte("wal"), 0o600); err != nil {
				t.Fatal(err)
			}
			return Target{StateDir: d, SQLitePath: filepath.Join(d, "gpuvm.db")}
		}, ErrTargetInUse, "gpuvm.db-wal"},
		{"SQLite archive onto PostgreSQL", func(p string) {
			if err := os.WriteFile(p, raw, 0o600); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T) Target { return Target{StateDir: t.TempDir()} }, nil, "this configuration uses PostgreSQL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			archive := filepath.Join(t.TempDir(), "a.tar.gz")
			tc.make(archive)
			target := Target{}
			if tc.target != nil {
				target = tc.target(t)
			} else {
				d := filepath.Join(t.TempDir(), "state")
				target = Target{StateDir: d, SQLitePath: filepath.Join(d, "gpuvm.db")}
			}
			before := tree(t, target.StateDir)
			_, err := Restore(context.Background(), archive, target)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("err = %v; want %v with %q", err, tc.wantErr, tc.want)
			}
			if after := tree(t, target.StateDir); !reflect.DeepEqual(before, after) {
				t.Errorf("a refused restore changed the state directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
	// The untouched archive restores, compressed or not.
	for _, a := range []string{good, plain} {
		d := filepath.Join(t.TempDir(), "state")
		if _, err := Restore(context.Background(), a, Target{StateDir: d, SQLitePath: filepath.Join(d, "gpuvm.db")}); err != nil {
			t.Errorf("%s: %v", filepath.Base(a), err)
		}
	}
}

// --force moves the earlier database and ledgers into a timestamped folder
// and deletes nothing.
func TestRestoreForce(t *testing.T) {
	src, _ := newNode(t)
	archive := filepath.Join(t.TempDir(), "b.tar.gz")
	createBackup(t, src, archive)

	target, old := newNode(t)
	ctx := context.Background()
	if err := old.CreateUser(ctx, &store.User{Name: "only-in-the-old-one"}); err != nil {
		t.Fatal(err)
	}
	oldInst, _ := old.Installation(ctx)
	old.Close()
	extra := filepath.Join(target, "backends", "passthrough.json")
	if err := os.WriteFile(extra, []byte(`{"x":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	beforeFiles := tree(t, target)

	at := time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)
	res, err := Restore(context.Background(), archive, Target{StateDir: target, SQLitePath: filepath.Join(target, "gpuvm.db"), Force: true, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	wantAside := filepath.Join(target, "before-restore-20260302T080000Z")
	if res.Aside != wantAside {
		t.Errorf("aside = %s, want %s", res.Aside, wantAside)
	}
	// Every earlier file is still somewhere, with its content: in place
	// if the restore did not replace it, else in the aside folder.
	for rel, content := range beforeFiles {
		if strings.HasSuffix(rel, "/") {
			continue
		}
		moved := contains(res.Moved, filepath.Join(target, rel))
		where := filepath.Join(target, rel)
		if moved {
			where = filepath.Join(wantAside, rel)
		}
		b, err := os.ReadFile(where)
		if err != nil || string(b) != content {
			t.Errorf("%s (moved %v): %q, %v; want the earlier content", rel, moved, b, err)
		}
	}
	if !contains(res.Moved, filepath.Join(target, "gpuvm.db")) {
		t.Errorf("the database was not moved aside: %q", res.Moved)
	}
	// The host's own ledgers say what is on its GPUs now: kept, never
	// replaced by the archive's older copies.
	for _, rel := range []string{"backends/vgpu.json", "backends/mig.json", "backends/passthrough.json"} {
		if _, err := os.Stat(filepath.Join(target, rel)); err != nil {
			continue
		}
		if contains(res.Moved, filepath.Join(target, rel)) || contains(res.Written, filepath.Join(target, rel)) {
			t.Errorf("%s was replaced: moved %q, written %q", rel, res.Moved, res.Written)
		}
	}
	if b, err := os.ReadFile(extra); err != nil || string(b) != `{"x":1}` {
		t.Errorf("the host's ledger: %q, %v; want it kept as it was", b, err)
	}
	for _, rel := range []string{"admin.token", "sim-mixed/host.json", "images/base.qcow2"} {
		if _, err := os.Stat(filepath.Join(target, rel)); err != nil {
			t.Errorf("%s: %v; a restore leaves it", rel, err)
		}
	}
	// The old database still opens, aside.
	oldAgain := storetest.Open(t, store.Config{DSN: filepath.Join(wantAside, "gpuvm.db"), Logger: quiet})
	defer oldAgain.Close()
	if _, err := oldAgain.GetUser(ctx, "only-in-the-old-one"); err != nil {
		t.Errorf("the old database aside: %v", err)
	}
	if i, _ := oldAgain.Installation(ctx); i.ID != oldInst.ID {
		t.Errorf("the old database aside is installation %s, want %s", i.ID, oldInst.ID)
	}
	// A second forced restore in the same second refuses rather than mix.
	if _, err := Restore(context.Background(), archive, Target{StateDir: target, SQLitePath: filepath.Join(target, "gpuvm.db"), Force: true, Now: func() time.Time { return at }}); err == nil {
		t.Error("a second restore into the same aside folder went through")
	}
}

// The ledgers are read under their lock: while a backend holds it, the
// backup waits (here: gives up at once, its context being done).
func TestStateFilesTakeTheLedgerLock(t *testing.T) {
	stateDir, _ := newNode(t)
	lock := flock.New(filepath.Join(stateDir, "backends", "vgpu.json.lock"))
	if err := lock.Lock(); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := StateFiles(done, stateDir); err == nil || !strings.Contains(err.Error(), "vgpu.json") {
		t.Errorf("with the ledger locked: %v", err)
	}
	if err := lock.Unlock(); err != nil {
		t.Fatal(err)
	}
	srcs, err := StateFiles(done, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 3 {
		t.Errorf("%d state files, want 3", len(srcs))
	}
	// A ledger no backend has locked yet is read as it is, and the backup
	// makes no lock file (one made by root could lock the backends out).
	if _, err := os.Stat(filepath.Join(stateDir, "backends", "mig.json.lock")); err == nil {
		t.Fatal("the test's mig.json has a lock file")
	}
	if _, err := StateFiles(context.Background(), stateDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "backends", "mig.json.lock")); err == nil {
		t.Error("the backup made mig.json.lock")
	}
}

// Pruning keeps the newest keep archives of its own names and touches no
// other file.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var ours []string
	for i := range 5 {
		n := ScheduledName(base.Add(time.Duration(i) * 24 * time.Hour))
		ours = append(ours, n)
	}
	others := []string{
		"gpuvm-backup-manual.tar.gz",        // --to with a name of its own
		"gpuvm-backup-20200101T000000Z.tar", // another extension
		"gpuvm-backup-20200101T000000Z.tar.gz.sha256",
		"my-gpuvm-backup-20200101T000000Z.tar.gz",
		"gpuvm-backup-20201399T000000Z.tar.gz", // not a time
		".gpuvm-backup-20200101T000000Z.tar.gz.tmp-1",
		"notes.txt",
	}
	for _, n := range append(append([]string{}, ours...), others...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A directory of the pattern is not an archive.
	if err := os.Mkdir(filepath.Join(dir, "gpuvm-backup-20190101T000000Z.tar.gz"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		keep        int
		wantRemoved []string
	}{
		{7, nil},
		{5, nil},
		{3, ours[:2]},
		{1, ours[2:4]},
		{1, nil},
	} {
		removed, err := Prune(dir, tc.keep)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(removed, tc.wantRemoved) {
			t.Errorf("keep %d: removed %q, want %q", tc.keep, removed, tc.wantRemoved)
		}
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	want := append([]string{ours[4], "gpuvm-backup-20190101T000000Z.tar.gz"}, others...)
	sort.Strings(want)
	if !reflect.DeepEqual(names, want) {
		t.Errorf("left %q, want %q", names, want)
	}
	if _, err := Prune(dir, 0); err == nil {
		t.Error("keep 0 went through")
	}
}

func TestNextRun(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	every := 24 * time.Hour
	for _, tc := range []struct {
		name   string
		newest *time.Time
		want   time.Time
	}{
		{"none", nil, now},
		{"recent", ptr(now.Add(-2 * time.Hour)), now.Add(22 * time.Hour)},
		{"overdue", ptr(now.Add(-3 * 24 * time.Hour)), now},
		{"from the future", ptr(now.Add(10 * 24 * time.Hour)), now.Add(every)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "unrelated.tar.gz"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.newest != nil {
				for _, at := range []time.Time{tc.newest.Add(-48 * time.Hour), *tc.newest} {
					if err := os.WriteFile(filepath.Join(dir, ScheduledName(at)), nil, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := NextRun(dir, every, now)
			if err != nil || !got.Equal(tc.want) {
				t.Errorf("NextRun = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A database restored on a host whose backends have ledgers already (the
// database was lost, the GPUs were not): no --force is needed, the
// database is written, and every ledger already there is kept as it is —
// it records the devices on this host's GPUs now, which the archive's
// older copy may lack.
func TestRestoreKeepsTheHostsLedgers(t *testing.T) {
	src, _ := newNode(t)
	archive := filepath.Join(t.TempDir(), "b.tar.gz")
	m := createBackup(t, src, archive)
	target := t.TempDir()
	if err := os.MkdirAll(filepath.Join(target, BackendsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(target, BackendsDir, "mig.json")
	const now = `{"3f0c9a5e-8a2b-4b7e-9d1c-2e3f4a5b6c7d":{"device":{"ID":"3f0c9a5e-8a2b-4b7e-9d1c-2e3f4a5b6c7d"},"state":"created"}}`
	if err := os.WriteFile(ledger, []byte(now), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Restore(context.Background(), archive, Target{StateDir: target, SQLitePath: filepath.Join(target, "gpuvm.db")})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(ledger); err != nil || string(b) != now {
		t.Fatalf("the host's ledger after the restore: %q, %v", b, err)
	}
	if !contains(res.Kept, ledger) || contains(res.Written, ledger) || res.Aside != "" {
		t.Errorf("kept %q, written %q, aside %q", res.Kept, res.Written, res.Aside)
	}
	if !contains(res.Written, filepath.Join(target, "gpuvm.db")) {
		t.Errorf("the database was not written: %q", res.Written)
	}
	// The archive's other state files, absent here, are written.
	wrote := 0
	for _, f := range m.Files {
		if rel, ok := f.StatePath(); ok && filepath.Join(target, rel) != ledger {
			if !contains(res.Written, filepath.Join(target, rel)) {
				t.Errorf("%s was not restored", rel)
			}
			wrote++
		}
	}
	if wrote == 0 {
		t.Fatal("the archive has no other state file: the test checks nothing")
	}
}

// A person's storage survives a backup and a forced restore over a later
// state: the rows of a detached data disk, of one attached to a VM and of
// a disk snapshot come back as they were at the backup (attachment and
// tag included), and their home, a directory of the state directory
// (homes/, server.storage.homes) that no backup holds, is left in place
// with what was written to it after the backup. The disks' and
// snapshots' data are in the pool and the VMs' disks, which a restore
// does not touch; the reconciler reports a restored row whose file is
// missing (orchestrator.TestDataDiskMissingFile).
func TestRestoreVolumesSnapshotsAndHome(t *testing.T) {
	stateDir, st := newNode(t)
	ctx := context.Background()
	page, err := st.ListVMs(ctx, store.VMFilter{Owner: "ann"})
	if err != nil || len(page.VMs) != 1 {
		t.Fatalf("ann's VMs: %+v %v", page.VMs, err)
	}
	vm := page.VMs[0]
	var vols []*store.Volume
	for _, name := range []string{"scratch", "data"} {
		v := &store.Volume{Owner: "ann", Name: name, SizeBytes: 1 << 30, Host: "h1", Pool: "default", CreatedBy: "ann"}
		if err := st.CreateVolume(ctx, v, store.DiskQuota{}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetVolumeState(ctx, v.ID, store.VolReady, []string{store.VolCreating}, ""); err != nil {
			t.Fatal(err)
		}
		vols = append(vols, v)
	}
	if _, err := st.AttachVolume(ctx, vols[1].ID, vm.ID); err != nil {
		t.Fatal(err)
	}
	snap := &store.Snapshot{VMID: vm.ID, Owner: "ann", Label: "before-upgrade"}
	if _, err := st.CreateSnapshot(ctx, snap, "ann", store.SnapshotLimit{}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetSnapshotState(ctx, snap.ID, store.SnapReady, []string{store.SnapCreating}, store.SnapshotUpdate{Consistency: store.SnapCrashConsists}); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(stateDir, "homes", "ann")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "notes.txt"), []byte("before"), 0o600); err != nil {
		t.Fatal(err)
	}
	rows := func(s *store.Store) ([]store.Volume, []store.Snapshot) {
		t.Helper()
		v, err := s.ListVolumes(ctx, store.VolumeFilter{Owner: "ann"})
		if err != nil {
			t.Fatal(err)
		}
		sn, err := s.ListAllSnapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v, sn
	}
	wantVols, wantSnaps := rows(st)
	archive := filepath.Join(t.TempDir(), "b.tar.gz")
	m := createBackup(t, stateDir, archive)
	for _, f := range m.Files {
		if strings.Contains(f.Name, "homes") {
			t.Errorf("the archive holds %s of a home", f.Name)
		}
	}
	counts := map[string]int64{}
	for _, c := range m.Database.Tables {
		counts[c.Table] = c.Rows
	}
	if counts["volumes"] != 2 || counts["vm_snapshots"] != 1 {
		t.Errorf("the manifest counts %d volumes and %d snapshots, want 2 and 1", counts["volumes"], counts["vm_snapshots"])
	}

	// After the backup: the disk is detached, deleted, the snapshot gone,
	// the home written to.
	if err := st.DetachVolume(ctx, vols[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := st.RemoveVolume(ctx, vols[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := st.RemoveSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "notes.txt"), []byte("after"), 0o600); err != nil {
		t.Fatal(err)
	}
	st.Close()

	res, err := Restore(ctx, archive, Target{StateDir: stateDir, SQLitePath: filepath.Join(stateDir, "gpuvm.db"), Force: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(res.Moved, res.Written...) {
		if strings.HasPrefix(p, filepath.Join(stateDir, "homes")) {
			t.Errorf("the restore moved or wrote %s, in the homes", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(home, "notes.txt")); err != nil || string(b) != "after" {
		t.Errorf("the home after the restore: %q %v; want what was written to it last", b, err)
	}
	got := storetest.Open(t, store.Config{DSN: filepath.Join(stateDir, "gpuvm.db"), Logger: quiet})
	defer got.Close()
	gotVols, gotSnaps := rows(got)
	if !reflect.DeepEqual(gotVols, wantVols) {
		t.Errorf("restored volumes:\n%+v\nwant\n%+v", gotVols, wantVols)
	}
	if !reflect.DeepEqual(gotSnaps, wantSnaps) {
		t.Errorf("restored snapshots:\n%+v\nwant\n%+v", gotSnaps, wantSnaps)
	}
	if len(gotVols) != 2 || gotVols[0].AttachedVM == nil || *gotVols[0].AttachedVM != vm.ID {
		t.Errorf("the attached disk (data) is not attached to %s after the restore: %+v", vm.ID, gotVols)
	}
}
