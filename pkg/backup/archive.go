// Package backup writes and reads gpuvmd's backup archives: a consistent
// copy of the SQLite database (store.SnapshotSQLite) and the node's state
// that is not in the database (the backend ledgers and their caches), in one
// gzip-compressed tar file whose first entry, manifest.json, names the
// installation, the schema version and every file with its size and
// SHA-256. gpuvmd backup and the scheduled backups (server.backup) make
// them; gpuvmd restore checks every byte before it writes anything.
package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// FormatVersion is the version of the archive format this gpuvmd writes
// and the only one it reads.
const FormatVersion = 1

// Names inside an archive.
const (
	ManifestName  = "manifest.json"
	DatabaseEntry = "database/gpuvm.db"
	statePrefix   = "state/"
)

// Kinds of files in an archive.
const (
	KindDatabase = "database" // the SQLite database
	KindLedger   = "ledger"   // a backend's ledger of the devices it made (STATE_DIR/backends/NAME.json)
	KindCache    = "cache"    // a backend's cache, such as vGPU type names
)

// maxManifest bounds the manifest read before anything is checked.
const maxManifest = 4 << 20

// Manifest is manifest.json, the first entry of an archive.
type Manifest struct {
	Format       int       `json:"format"`
	GpuvmVersion string    `json:"gpuvm_version"`
	CreatedAt    time.Time `json:"created_at"`
	// InstallationID is the database's installation (empty when the
	// database was not read: PostgreSQL out of reach).
	InstallationID string `json:"installation_id,omitempty"`
	// SchemaVersion is the database's schema version (0: unknown).
	SchemaVersion int      `json:"schema_version"`
	Database      Database `json:"database"`
	Files         []File   `json:"files"`
}

// Database says what the archive holds of the database.
type Database struct {
	Driver string `json:"driver"` // store.DriverSQLite or store.DriverPostgres
	// File is the entry of the SQLite copy; "" for PostgreSQL, which
	// pg_dump backs up (Note says how).
	File   string             `json:"file,omitempty"`
	Tables []store.TableCount `json:"tables,omitempty"`
	Note   string             `json:"note,omitempty"`
}

// File is one file of the archive.
type File struct {
	Name   string `json:"name"` // the entry: database/gpuvm.db, state/backends/vgpu.json
	Kind   string `json:"kind"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Mode   uint32 `json:"mode"` // permission bits
}

// StatePath is where a state file of the archive goes under the state
// directory; ok false for an entry that is not one.
func (f File) StatePath() (string, bool) {
	rel, ok := strings.CutPrefix(f.Name, statePrefix)
	return filepath.FromSlash(rel), ok
}

// Source is a file to put into an archive: from Path on disk, or Data.
type Source struct {
	Name string // the entry
	Kind string
	Mode fs.FileMode
	Path string
	Data []byte
}

func (s Source) open() (io.ReadCloser, error) {
	if s.Path == "" {
		return io.NopCloser(bytes.NewReader(s.Data)), nil
	}
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.Path, err)
	}
	return f, nil
}

// Write writes an archive of the sources to path atomically: into a
// temporary file beside it (mode 0600), flushed to disk, then renamed over
// path, and the directory flushed. m's Files are filled in (size, SHA-256).
func Write(path string, m *Manifest, srcs []Source) (err error) {
	m.Format = FormatVersion
	m.Files = nil
	seen := map[string]bool{ManifestName: true}
	for _, s := range srcs {
		if err := checkName(s.Name); err != nil {
			return fmt.Errorf("write backup %s: %w", path, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("write backup %s: %s twice", path, s.Name)
		}
		seen[s.Name] = true
		size, sum, err := hashSource(s)
		if err != nil {
			return fmt.Errorf("write backup %s: %w", path, err)
		}
		m.Files = append(m.Files, File{Name: s.Name, Kind: s.Kind, Size: size, SHA256: sum, Mode: uint32(s.Mode.Perm())})
	}
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("write backup %s: encode the manifest: %w", path, err)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	buf := bufio.NewWriterSize(tmp, 1<<20)
	zw := gzip.NewWriter(buf)
	tw := tar.NewWriter(zw)
	hdr := func(name string, size int64, mode fs.FileMode) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: int64(mode.Perm()), ModTime: m.CreatedAt, Format: tar.FormatPAX}
	}
	if err := tw.WriteHeader(hdr(ManifestName, int64(len(manifest)), 0o600)); err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	if _, err := tw.Write(manifest); err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	for i, s := range srcs {
		f := m.Files[i]
		if err := tw.WriteHeader(hdr(f.Name, f.Size, fs.FileMode(f.Mode))); err != nil {
			return fmt.Errorf("write backup %s: %s: %w", path, f.Name, err)
		}
		r, err := s.open()
		if err != nil {
			return fmt.Errorf("write backup %s: %w", path, err)
		}
		h := sha256.New()
		n, err := io.Copy(tw, io.TeeReader(r, h))
		_ = r.Close()
		if err != nil {
			return fmt.Errorf("write backup %s: %s: %w", path, f.Name, err)
		}
		if n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
			return fmt.Errorf("write backup %s: %s changed while it was archived", path, f.Name)
		}
	}
	if err := errors.Join(tw.Close(), zw.Close(), buf.Flush()); err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write backup %s: flush: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write backup %s: %w", path, err)
	}
	return syncDir(dir)
}

func hashSource(s Source) (int64, string, error) {
	r, err := s.open()
	if err != nil {
		return 0, "", err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", s.Name, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// checkName accepts the entries an archive may hold: the database copy
// and the files of the backends directory StateFiles takes, under state/.
// Nothing else can be named, so a restore writes nowhere else.
func checkName(name string) error {
	if name == DatabaseEntry {
		return nil
	}
	file, ok := strings.CutPrefix(name, statePrefix+BackendsDir+"/")
	if !ok || !stateFileRE.MatchString(file) {
		return fmt.Errorf("%q is not a file a gpuvm backup holds (%s, or %s%s/NAME.json)", name, DatabaseEntry, statePrefix, BackendsDir)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("flush directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("flush directory %s: %w", dir, err)
	}
	return nil
}

// ErrBadArchive wraps every reason an archive is refused: not an archive,
// another format version, a file missing, cut short or altered.
var ErrBadArchive = errors.New("not a valid gpuvm backup")

// Verify reads the whole archive and checks its manifest and every file's
// size and SHA-256, writing nothing. The error names the file at fault.
func Verify(path string) (*Manifest, error) {
	return walk(path, func(File, io.Reader) error { return nil })
}

// Extract writes every file of the archive to the path dest gives it (which
// must not exist), checking each as Verify does. The caller writes into a
// staging directory, removes it when Extract fails, and moves the files
// into place only once Extract has succeeded, so that a bad archive changes
// nothing.
func Extract(path string, dest func(File) string) (*Manifest, error) {
	return walk(path, func(f File, r io.Reader) error {
		p := dest(f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("extract %s: %w", f.Name, err)
		}
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("extract %s: %w", f.Name, err)
		}
		_, err = io.Copy(out, r)
		err = errors.Join(err, out.Sync(), out.Close())
		if err != nil {
			_ = os.Remove(p)
			return fmt.Errorf("extract %s: %w", f.Name, err)
		}
		return nil
	})
}

// walk reads the archive, handing each file to fn as it is read and
// checking it after; a file that fails its check fails the walk, and fn's
// output for it is the caller's to discard (Extract removes it).
func walk(archive string, fn func(File, io.Reader) error) (*Manifest, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadArchive, archive, fmt.Sprintf(format, args...))
	}
	f, err := os.Open(archive)
	if err != nil {
		return nil, fmt.Errorf("read backup: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, bad("gzip: %v", err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil {
		return nil, bad("no manifest: %v", readErr(err))
	}
	if hdr.Name != ManifestName {
		return nil, bad("the first entry is %q, not %s", hdr.Name, ManifestName)
	}
	if hdr.Size > maxManifest {
		return nil, bad("%s is %d bytes; a manifest is at most %d", ManifestName, hdr.Size, maxManifest)
	}
	raw, err := io.ReadAll(tr)
	if err != nil {
		return nil, bad("%s: %v", ManifestName, readErr(err))
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, bad("%s: %v", ManifestName, err)
	}
	if m.Format != FormatVersion {
		return nil, bad("archive format version %d; this gpuvmd reads version %d", m.Format, FormatVersion)
	}
	want := map[string]File{}
	for _, mf := range m.Files {
		if err := checkName(mf.Name); err != nil {
			return nil, bad("%s: %v", ManifestName, err)
		}
		if _, dup := want[mf.Name]; dup {
			return nil, bad("%s names %s twice", ManifestName, mf.Name)
		}
		if mf.Size < 0 || len(mf.SHA256) != sha256.Size*2 {
			return nil, bad("%s: %s has no valid size and SHA-256", ManifestName, mf.Name)
		}
		want[mf.Name] = mf
	}
	if db := m.Database.File; db != "" {
		if mf, ok := want[db]; !ok || mf.Kind != KindDatabase {
			return nil, bad("%s: the database file %s is not among its files", ManifestName, db)
		}
	}
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, bad("after %d of %d files: %v", len(seen), len(want), readErr(err))
		}
		mf, ok := want[hdr.Name]
		switch {
		case !ok:
			return nil, bad("file %s is not in the manifest", hdr.Name)
		case seen[hdr.Name]:
			return nil, bad("file %s is in the archive twice", hdr.Name)
		case hdr.Typeflag != tar.TypeReg:
			return nil, bad("file %s is not a regular file", hdr.Name)
		}
		seen[hdr.Name] = true
		h := sha256.New()
		counted := &countingReader{r: io.TeeReader(io.LimitReader(tr, mf.Size+1), h)}
		fnErr := fn(mf, counted)
		var drainErr error
		if fnErr == nil {
			_, drainErr = io.Copy(io.Discard, counted)
		}
		switch {
		case errors.Is(fnErr, io.ErrUnexpectedEOF) || errors.Is(drainErr, io.ErrUnexpectedEOF):
			return nil, bad("file %s is cut short (a truncated archive)", mf.Name)
		case fnErr != nil:
			return nil, fnErr // writing it out failed
		case drainErr != nil:
			return nil, bad("file %s: %v", mf.Name, drainErr)
		}
		switch {
		case counted.n != mf.Size:
			return nil, bad("file %s is %d bytes; the manifest says %d", mf.Name, counted.n, mf.Size)
		case hex.EncodeToString(h.Sum(nil)) != mf.SHA256:
			return nil, bad("file %s: SHA-256 mismatch: it was altered or damaged", mf.Name)
		}
	}
	for _, mf := range m.Files {
		if !seen[mf.Name] {
			return nil, bad("file %s of the manifest is missing (a truncated archive?)", mf.Name)
		}
	}
	return &m, nil
}

// readErr says what a cut-short archive is.
func readErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("cut short (a truncated archive): %w", err)
	}
	return err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
