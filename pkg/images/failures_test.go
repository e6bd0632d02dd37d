package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// These need no libvirt: the pool is a fake that fails.

// failingPool is a storage pool whose VolumeExists fails with existsErr,
// whose StreamVolume reads readFirst bytes of the source and fails with
// err, or (err nil) reads the source to its end and fails when it is not
// size bytes, as libvirt's upload does.
type failingPool struct {
	existsErr error
	readFirst int64
	err       error
	during    func() // after the first bytes read, when set
}

func (p failingPool) StreamVolume(_ context.Context, pool, name string, size uint64, r io.Reader) (string, error) {
	if p.err != nil {
		if _, err := io.CopyN(io.Discard, r, p.readFirst); err != nil {
			return "", fmt.Errorf("test pool: %w", err)
		}
		return "", p.err
	}
	n, err := io.ReadFull(r, make([]byte, 4096))
	if err != nil {
		return "", err
	}
	if p.during != nil {
		p.during()
	}
	rest, err := io.Copy(io.Discard, r)
	if err != nil {
		return "", err
	}
	if got := uint64(n) + uint64(rest); got != size {
		return "", fmt.Errorf("the source ended after %d of %d bytes", got, size)
	}
	return "", errors.New("test pool: stores nothing")
}

func (failingPool) FlattenVolume(context.Context, string, string, string) (string, error) {
	return "", errors.New("test pool: no flatten")
}
func (failingPool) DeleteVolume(context.Context, string, string) error { return nil }
func (p failingPool) VolumeExists(context.Context, string, string) (bool, error) {
	return false, p.existsErr
}

func fakeManager(t *testing.T, vols Volumes) *Manager {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed (Debian: qemu-utils)")
	}
	return &Manager{Store: storetest.New(t, storetest.Quiet), Volumes: vols, Pool: "gpuvm", Log: slog.New(slog.DiscardHandler),
		DomainName: func(id string) string { return id }}
}

// A pool that fails is ErrStorage, whenever it fails; only a source that
// changed is ErrSourceChanged.
func TestImportBlamesWhatFailed(t *testing.T) {
	src := filepath.Join(t.TempDir(), "disk.raw")
	for _, tc := range []struct {
		name string
		vols failingPool
		want error
		not  error
		says string
	}{
		{"the pool fails at create", failingPool{err: errors.New("pool is not active")}, ErrStorage, ErrInvalid, "0 of 1048576 bytes read"},
		{"the upload fails at its start", failingPool{readFirst: 4096, err: errors.New("stream send failed")}, ErrStorage, ErrInvalid, "4096 of 1048576 bytes read"},
		{"the pool cannot be asked", failingPool{existsErr: errors.New("pool refresh failed")}, ErrStorage, ErrInvalid, "looking up volume"},
		{"the source shrinks", failingPool{during: func() { _ = os.Truncate(src, 8192) }}, ErrSourceChanged, ErrStorage, "changed"},
		{"the source grows", failingPool{during: func() {
			f, _ := os.OpenFile(src, os.O_APPEND|os.O_WRONLY, 0)
			_, _ = f.Write(make([]byte, 8192))
			f.Close()
		}}, ErrSourceChanged, ErrStorage, "changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(src, make([]byte, 1<<20), 0o600); err != nil {
				t.Fatal(err)
			}
			m := fakeManager(t, tc.vols)
			_, err := m.Import(context.Background(), ImportRequest{Source: src, Name: "disk", OS: "linux"})
			if !errors.Is(err, tc.want) || errors.Is(err, tc.not) || !strings.Contains(fmt.Sprint(err), tc.says) {
				t.Fatalf("Import = %v, want %v (not %v) saying %q", err, tc.want, tc.not, tc.says)
			}
		})
	}
}

// Each refused value of an import is a *FieldError on the request's field.
func TestImportRefusalsNameTheField(t *testing.T) {
	src := filepath.Join(t.TempDir(), "disk.raw")
	if err := os.WriteFile(src, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	m := fakeManager(t, failingPool{})
	for _, tc := range []struct {
		req   ImportRequest
		field string
	}{
		{ImportRequest{Source: src, Name: "Disk", OS: "linux"}, "name"},
		{ImportRequest{Source: src, Name: "", OS: "linux"}, "name"},
		{ImportRequest{Source: src, Name: strings.Repeat("d", 64), OS: "linux"}, "name"},
		{ImportRequest{Source: src, Name: "disk", OS: "beos"}, "os"},
		{ImportRequest{Source: src, Name: "disk", OS: "linux", Firmware: "efi"}, "firmware"},
		{ImportRequest{Source: src, Name: "disk", OS: "linux", SHA256: "ABC"}, "sha256"},
		{ImportRequest{Source: "disk.raw", Name: "disk", OS: "linux"}, "source_path"},
		{ImportRequest{Source: "/nonexistent/disk.raw", Name: "disk", OS: "linux"}, "source_path"},
		{ImportRequest{Source: filepath.Dir(src), Name: "disk", OS: "linux"}, "source_path"},
		{ImportRequest{Upload: true, Name: "disk", OS: "linux"}, "upload"},
	} {
		var fe *FieldError
		if _, err := m.Import(context.Background(), tc.req); !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("Import(%+v) = %v, want a FieldError on %s", tc.req, err, tc.field)
		}
	}
}

// brokenReader gives n bytes, then fails with err.
type brokenReader struct {
	n   int
	err error
}

func (b *brokenReader) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, b.err
	}
	n := min(len(p), b.n)
	b.n -= n
	return n, nil
}

// A chunk whose reader fails is the sender's (*ChunkError, where the upload
// still ends); one the disk cannot take is not.
func TestUploadChunkFailures(t *testing.T) {
	up := &Uploads{Dir: t.TempDir()}
	if n, err := up.Write("desk", 0, strings.NewReader(strings.Repeat("a", 100))); err != nil || n != 100 {
		t.Fatalf("first chunk: %d, %v", n, err)
	}
	for _, rerr := range []error{io.ErrUnexpectedEOF, errors.New("connection reset by peer"), os.ErrDeadlineExceeded} {
		var ce *ChunkError
		end, err := up.Write("desk", 100, &brokenReader{n: 40000, err: rerr})
		if !errors.As(err, &ce) || ce.Offset != 100 || ce.Read != 40000 || !errors.Is(err, rerr) || !errors.Is(err, ErrInvalid) || end != 100 {
			t.Errorf("a reader failing with %v: %d, %v; want a ChunkError at 100 after 40000 bytes", rerr, end, err)
		}
		if off, _ := up.Offset("desk"); off != 100 {
			t.Errorf("after a broken chunk the upload has %d bytes, want 100", off)
		}
	}
	var fe *FieldError
	if _, err := up.Write("Desk", 0, strings.NewReader("a")); !errors.As(err, &fe) || fe.Field != "name" {
		t.Errorf("a bad name = %v, want a FieldError on name", err)
	}
	if _, err := os.Stat("/dev/full"); err != nil {
		return
	}
	if err := os.Symlink("/dev/full", filepath.Join(up.Dir, "full.part")); err != nil {
		t.Fatal(err)
	}
	var ce *ChunkError
	if _, err := up.Write("full", 0, strings.NewReader("data")); err == nil || errors.As(err, &ce) || errors.Is(err, ErrInvalid) {
		t.Errorf("a disk that is full = %v, want the server's error", err)
	}
}
