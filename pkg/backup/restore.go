package backup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// Target is where an archive is restored to.
type Target struct {
	// StateDir is gpuvmd's state directory: the state files go under it.
	StateDir string
	// SQLitePath is where the SQLite database goes; "" when the target
	// runs on PostgreSQL (an archive with a SQLite database is refused).
	SQLitePath string
	// Force moves what is already there aside instead of refusing.
	Force bool
	// Now names the folder things are moved aside to; nil: time.Now.
	Now func() time.Time
}

// Errors of Restore, besides ErrBadArchive.
var (
	// ErrSchemaTooNew: the archive's database is of a schema version this
	// gpuvmd does not know.
	ErrSchemaTooNew = errors.New("the backup's database is newer than this gpuvmd")
	// ErrTargetInUse: the state directory holds a database or ledgers
	// already, and Force is off.
	ErrTargetInUse = errors.New("the state directory is not empty")
)

// Restored is what Restore did.
type Restored struct {
	Manifest *Manifest
	// Written are the paths written, the database first.
	Written []string
	// Kept are the state files (ledgers, caches) that were on the host
	// already and were kept rather than replaced by the archive's: they
	// say what is on this host's GPUs now.
	Kept []string
	// Aside is the folder the earlier files were moved to ("" if none).
	Aside string
	// Moved are the earlier files moved aside, as they were named.
	Moved []string
}

// AsideName is the folder of the state directory that a forced restore
// moves the earlier files into.
func AsideName(t time.Time) string {
	return "before-restore-" + t.UTC().Format(nameLayout)
}

// Restore puts an archive's database and state files in place. It first
// reads the whole archive and checks the manifest and every file
// (Verify), and refuses one of a newer schema; then it looks at what is
// there already: a database (with its -wal and -shm) refuses the restore
// unless t.Force, which moves it into STATE_DIR/before-restore-TIME/
// (nothing is deleted). A ledger or cache already in the state directory
// is kept, not replaced by the archive's older copy: it records what the
// backends made on this host's GPUs up to now, and with it a device made
// after the backup shows as an orphan of its VM rather than as a device an
// admin made by hand. Files are written to
// a staging directory, checked again as they are written, and only then
// renamed into place; on any error before that the state directory is as
// it was.
func Restore(ctx context.Context, archive string, t Target) (*Restored, error) {
	m, dest, err := plan(archive, t)
	if err != nil {
		return nil, err
	}
	present, err := existing(t, m)
	if err != nil {
		return nil, err
	}
	kept, err := keptFiles(m, dest)
	if err != nil {
		return nil, err
	}
	if len(present) > 0 && !t.Force {
		return nil, fmt.Errorf("%w: %s holds %s already: restore into an empty state directory, or give --force to move them aside (nothing is deleted)",
			ErrTargetInUse, t.StateDir, strings.Join(present, ", "))
	}

	// Stage, checking every byte again: the archive may have changed
	// since Verify. One staging directory in each destination directory,
	// so that the final renames stay on one file system. On an error
	// before the files are moved, the directories made for them go too.
	var made []string // directories made, parents first
	placed := false
	stageDirs := map[string]string{} // destination directory -> its staging directory
	defer func() {
		for _, s := range stageDirs {
			_ = os.RemoveAll(s)
		}
		if !placed {
			for i := len(made) - 1; i >= 0; i-- {
				_ = os.Remove(made[i]) // only if empty
			}
		}
	}()
	if err := mkdirAll(t.StateDir, &made); err != nil {
		return nil, fmt.Errorf("restore: create the state directory: %w", err)
	}
	if err := makeStageDirs(dest, stageDirs, &made); err != nil {
		return nil, err
	}
	staged := func(name string) string {
		return filepath.Join(stageDirs[filepath.Dir(dest[name])], filepath.Base(dest[name]))
	}
	m2, err := Extract(archive, func(f File) string { return staged(f.Name) })
	if err != nil {
		return nil, err
	}
	if !sameFiles(m, m2) {
		return nil, fmt.Errorf("%w: %s changed while it was restored", ErrBadArchive, archive)
	}
	if m.Database.File != "" {
		if err := checkStagedDatabase(ctx, archive, m, staged(m.Database.File)); err != nil {
			return nil, err
		}
	}
	out := &Restored{Manifest: m}
	for _, f := range m.Files {
		if kept[f.Name] {
			out.Kept = append(out.Kept, dest[f.Name])
		}
	}
	placed = true
	if len(present) > 0 {
		now := time.Now
		if t.Now != nil {
			now = t.Now
		}
		out.Aside = filepath.Join(t.StateDir, AsideName(now()))
		if err := os.Mkdir(out.Aside, 0o700); err != nil {
			return nil, fmt.Errorf("restore: make the folder for the earlier files: %w", err)
		}
		if err := moveAside(t, present, out); err != nil {
			return out, err
		}
	}
	if err := place(m, dest, kept, staged, stageDirs, out); err != nil {
		return out, err
	}
	return out, nil
}

// plan checks that the archive can be restored into t, and says where each
// of its files goes.
func plan(archive string, t Target) (*Manifest, map[string]string, error) {
	m, err := Verify(archive)
	if err != nil {
		return nil, nil, err
	}
	if m.SchemaVersion > store.SchemaVersion() {
		return nil, nil, fmt.Errorf("%w: %s holds schema version %d; this gpuvmd knows up to %d: restore it with the gpuvmd that made it, or a newer one",
			ErrSchemaTooNew, archive, m.SchemaVersion, store.SchemaVersion())
	}
	if m.Database.File != "" && t.SQLitePath == "" {
		return nil, nil, fmt.Errorf("restore %s: it holds a SQLite database and this configuration uses PostgreSQL: restore it on SQLite (--database PATH), then move it with gpuvmd migrate-db", archive)
	}
	// Where each file goes.
	dest := map[string]string{}
	for _, f := range m.Files {
		switch {
		case f.Name == m.Database.File:
			dest[f.Name] = t.SQLitePath
		default:
			rel, ok := f.StatePath()
			if !ok {
				return nil, nil, fmt.Errorf("%w: %s: file %s is neither the database nor state", ErrBadArchive, archive, f.Name)
			}
			dest[f.Name] = filepath.Join(t.StateDir, rel)
		}
	}
	return m, dest, nil
}

// keptFiles are the archive's state files already at their destination,
// which restore leaves as they are.
func keptFiles(m *Manifest, dest map[string]string) (map[string]bool, error) {
	kept := map[string]bool{}
	for _, f := range m.Files {
		if f.Name == m.Database.File {
			continue
		}
		if _, err := os.Lstat(dest[f.Name]); err == nil {
			kept[f.Name] = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("restore: look at %s: %w", dest[f.Name], err)
		}
	}
	return kept, nil
}

// makeStageDirs makes a staging directory in each destination directory
// (recorded in stageDirs), so that the final renames stay on one file
// system; the directories it makes on the way are appended to made.
func makeStageDirs(dest map[string]string, stageDirs map[string]string, made *[]string) error {
	for _, p := range dest {
		d := filepath.Dir(p)
		if _, ok := stageDirs[d]; ok {
			continue
		}
		if err := mkdirAll(d, made); err != nil {
			return fmt.Errorf("restore: stage the files: %w", err)
		}
		s, err := os.MkdirTemp(d, ".gpuvm-restore-")
		if err != nil {
			return fmt.Errorf("restore: stage the files: %w", err)
		}
		stageDirs[d] = s
	}
	return nil
}

// checkStagedDatabase checks the staged copy of the database itself, not
// only its manifest: it must be what the manifest says.
func checkStagedDatabase(ctx context.Context, archive string, m *Manifest, path string) error {
	// The copy itself, not only its manifest, must be what it says.
	info, err := store.Inspect(ctx, store.Config{Driver: store.DriverSQLite, DSN: path})
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s: the database: %v", ErrBadArchive, archive, err)
	case info.SchemaVersion > store.SchemaVersion():
		return fmt.Errorf("%w: %s: its database is of schema version %d; this gpuvmd knows up to %d",
			ErrSchemaTooNew, archive, info.SchemaVersion, store.SchemaVersion())
	case info.SchemaVersion != m.SchemaVersion || info.Installation.ID != m.InstallationID:
		return fmt.Errorf("%w: %s: its database is installation %s at schema version %d; the manifest says %s at %d",
			ErrBadArchive, archive, info.Installation.ID, info.SchemaVersion, m.InstallationID, m.SchemaVersion)
	}
	return nil
}

// moveAside moves the files present at the target into out.Aside, a
// folder of their own in the state directory (nothing is deleted).
func moveAside(t Target, present []string, out *Restored) error {
	for _, p := range present {
		to := filepath.Join(out.Aside, asideRel(t, p))
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			return fmt.Errorf("restore: move %s aside: %w", p, err)
		}
		if err := os.Rename(p, to); err != nil {
			return fmt.Errorf("restore: move %s aside to %s: %w (the files moved so far are there)", p, out.Aside, err)
		}
		out.Moved = append(out.Moved, p)
	}
	return nil
}

// place renames the staged files to their destinations, the database
// first, and syncs the directories.
func place(m *Manifest, dest map[string]string, kept map[string]bool, staged func(string) string, stageDirs map[string]string, out *Restored) error {
	names := make([]string, 0, len(m.Files))
	for _, f := range m.Files {
		names = append(names, f.Name)
	}
	sort.SliceStable(names, func(i, j int) bool { return names[i] == m.Database.File && names[j] != m.Database.File })
	mode := map[string]fs.FileMode{}
	for _, f := range m.Files {
		mode[f.Name] = fs.FileMode(f.Mode).Perm()
	}
	for _, n := range names {
		if kept[n] {
			continue
		}
		if err := os.Chmod(staged(n), mode[n]|0o600); err != nil {
			return fmt.Errorf("restore %s: %w", dest[n], err)
		}
		if err := os.Rename(staged(n), dest[n]); err != nil {
			return fmt.Errorf("restore %s: %w", dest[n], err)
		}
		out.Written = append(out.Written, dest[n])
	}
	for d := range stageDirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// mkdirAll is os.MkdirAll that appends the directories it made to made.
func mkdirAll(dir string, made *[]string) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		*made = append(*made, missing[i])
	}
	return nil
}

// existing lists what a restore would replace: the SQLite database with
// its companion files. (State files already there are kept.)
func existing(t Target, m *Manifest) ([]string, error) {
	var out []string
	add := func(p string) error {
		_, err := os.Lstat(p)
		switch {
		case err == nil:
			out = append(out, p)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("restore: look at %s: %w", p, err)
		}
		return nil
	}
	if t.SQLitePath != "" && m.Database.File != "" {
		for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
			if err := add(t.SQLitePath + suffix); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// asideRel is where an earlier file goes in the aside folder: state files
// keep their path under the state directory, the database its name.
func asideRel(t Target, p string) string {
	if rel, err := filepath.Rel(t.StateDir, p); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return filepath.Base(p)
}

func sameFiles(a, b *Manifest) bool {
	if len(a.Files) != len(b.Files) {
		return false
	}
	for i := range a.Files {
		if a.Files[i] != b.Files[i] {
			return false
		}
	}
	return true
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
