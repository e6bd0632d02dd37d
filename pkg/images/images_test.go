package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// The libvirt test driver cannot upload volumes (virStorageVolUpload is
// "not supported"), so these tests run against the system libvirtd with a
// directory pool of their own in a temporary directory. GPUVM_TEST_LIBVIRT
// overrides the URI; they skip where none answers or qemu-img is missing.
const defaultURI = "qemu:///system"

type env struct {
	t    testing.TB
	ctx  context.Context
	conn *hypervisor.Conn
	st   *store.Store
	m    *Manager
	pool string
	dir  string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed (Debian: qemu-utils)")
	}
	uri := os.Getenv("GPUVM_TEST_LIBVIRT")
	if uri == "" {
		uri = defaultURI
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := hypervisor.Open(ctx, uri, log)
	if err != nil {
		t.Skipf("libvirt at %s: %v", uri, err)
	}
	t.Cleanup(func() { conn.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	pool := "gpuvm-imgtest-" + hex.EncodeToString(b[:])
	dir := filepath.Join(t.TempDir(), "pool")
	if err := conn.EnsurePool(ctx, pool, dir); err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(func() {
		if err := conn.DeletePool(context.Background(), pool); err != nil {
			t.Errorf("delete pool: %v", err)
		}
	})
	st := storetest.New(t, storetest.Quiet)
	if err := st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	m := &Manager{Store: st, Volumes: conn, Pool: pool, DomainName: func(id string) string { return "gpuvm-" + id }, Log: log}
	return &env{t: t, ctx: ctx, conn: conn, st: st, m: m, pool: pool, dir: dir}
}

// qemuImg runs qemu-img, failing the test on an error.
func qemuImg(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("qemu-img", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// source writes a 4 MiB raw disk of random bytes and returns its path,
// converted to format (qcow2, vmdk) unless "raw".
func source(t *testing.T, format string) string {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	data := make([]byte, 4<<20)
	_, _ = rand.Read(data[:1<<20]) // the rest zero: sparse in qcow2
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if format == "raw" {
		return raw
	}
	out := filepath.Join(dir, "disk."+format)
	qemuImg(t, "convert", "-f", "raw", "-O", format, raw, out)
	return out
}

func sumOf(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// state is what a refused operation must leave as it was.
func (e *env) state() (vols []string, imgs []string) {
	e.t.Helper()
	vols, err := e.conn.Volumes(e.ctx, e.pool)
	if err != nil {
		e.t.Fatal(err)
	}
	slices.Sort(vols)
	list, err := e.st.ListImages(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, img := range list {
		imgs = append(imgs, store.ImageRef(img.Name, img.Version))
	}
	entries, _ := os.ReadDir(e.dir)
	for _, de := range entries {
		vols = append(vols, "file:"+de.Name())
	}
	return vols, imgs
}

func TestImportFormats(t *testing.T) {
	e := newEnv(t)
	iso, err := cloudinit.ISO("TESTISO", []cloudinit.File{{Name: "hello.txt", Data: []byte("hello")}}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	isoPath := filepath.Join(t.TempDir(), "disk.img") // the name says nothing
	if err := os.WriteFile(isoPath, iso, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, src, want string
		virtual         int64
	}{
		{"q", source(t, "qcow2"), FormatQCOW2, 4 << 20},
		{"r", source(t, "raw"), FormatRaw, 4 << 20},
		{"i", isoPath, FormatISO, int64(len(iso))},
	} {
		t.Run(c.want, func(t *testing.T) {
			sum := sumOf(t, c.src)
			img, err := e.m.Import(e.ctx, ImportRequest{Source: c.src, Name: c.name, OS: "linux", SHA256: sum, By: "root"})
			if err != nil {
				t.Fatal(err)
			}
			if img.Format != c.want || img.VirtualSize != c.virtual || img.SHA256 != sum || img.Version != 1 ||
				img.Firmware != "uefi" || img.Origin != store.ImageImported || img.SourcePath != c.src || img.ActualSize <= 0 {
				t.Fatalf("imported %+v", img)
			}
			if got := sumOf(t, img.Path); got != sum {
				t.Fatalf("the volume's SHA-256 is %s, the source's %s", got, sum)
			}
			if filepath.Dir(img.Path) != e.dir || img.Volume != VolumeName(c.name, 1, c.want) {
				t.Fatalf("stored at %s (volume %s), want in %s", img.Path, img.Volume, e.dir)
			}
		})
	}
}

func TestImportRefused(t *testing.T) {
	e := newEnv(t)
	good := source(t, "qcow2")
	if _, err := e.m.Import(e.ctx, ImportRequest{Source: good, Name: "taken", OS: "linux", By: "root"}); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(t.TempDir(), "overlay.qcow2")
	qemuImg(t, "create", "-f", "qcow2", "-F", "qcow2", "-b", good, overlay)
	wrongSum := sumOf(t, good)
	if wrongSum[63] == '0' {
		wrongSum = wrongSum[:63] + "1"
	} else {
		wrongSum = wrongSum[:63] + "0"
	}

	for _, c := range []struct {
		name string
		req  ImportRequest
		// during, when set, runs after the first chunk was copied.
		during func(path string)
		want   error
	}{
		{"bad checksum", ImportRequest{Source: good, Name: "a", OS: "linux", SHA256: wrongSum}, nil, ErrChecksum},
		{"unknown format", ImportRequest{Source: source(t, "vmdk"), Name: "a", OS: "linux"}, nil, ErrInvalid},
		{"overlay", ImportRequest{Source: overlay, Name: "a", OS: "linux"}, nil, ErrInvalid},
		{"name taken", ImportRequest{Source: good, Name: "taken", OS: "linux"}, nil, store.ErrImageNameTaken},
		{"truncated half-way", ImportRequest{Source: source(t, "raw"), Name: "a", OS: "linux"},
			func(p string) { _ = os.Truncate(p, 1<<20) }, ErrSourceChanged},
		{"removed half-way", ImportRequest{Source: source(t, "raw"), Name: "a", OS: "linux"},
			func(p string) { _ = os.Remove(p) }, ErrSourceChanged},
		{"grown half-way", ImportRequest{Source: source(t, "raw"), Name: "a", OS: "linux"},
			func(p string) {
				f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
				_, _ = f.Write(bytes.Repeat([]byte{1}, 1<<20))
				f.Close()
			}, ErrSourceChanged},
		{"missing source", ImportRequest{Source: "/nonexistent/disk.qcow2", Name: "a", OS: "linux"}, nil, ErrInvalid},
		{"relative source", ImportRequest{Source: "disk.qcow2", Name: "a", OS: "linux"}, nil, ErrInvalid},
		{"bad name", ImportRequest{Source: good, Name: "Bad Name", OS: "linux"}, nil, ErrInvalid},
		{"bad os", ImportRequest{Source: good, Name: "a", OS: "plan9"}, nil, ErrInvalid},
		{"bad firmware", ImportRequest{Source: good, Name: "a", OS: "linux", Firmware: "coreboot"}, nil, ErrInvalid},
		{"bad sum", ImportRequest{Source: good, Name: "a", OS: "linux", SHA256: "abc"}, nil, ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			vols, imgs := e.state()
			e.m.copied = nil
			if c.during != nil {
				once := false
				e.m.copied = func(int64) {
					if !once {
						once = true
						c.during(c.req.Source)
					}
				}
			}
			img, err := e.m.Import(e.ctx, c.req)
			if !errors.Is(err, c.want) {
				t.Fatalf("Import = %+v, %v; want %v", img, err, c.want)
			}
			t.Logf("refused: %v", err)
			v2, i2 := e.state()
			if !slices.Equal(vols, v2) || !slices.Equal(imgs, i2) {
				t.Fatalf("a refused import left something: volumes %v → %v, images %v → %v", vols, v2, imgs, i2)
			}
		})
	}
}

// TestLifecycle imports an image, makes a VM's overlay on it (as the
// orchestrator does), publishes the stopped VM's disk as version 2, and
// deletes them once no VM uses them.
func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	src := source(t, "qcow2")
	base, err := e.m.Import(ctx, ImportRequest{Source: src, Name: "ubuntu", OS: "linux", Firmware: "bios", By: "root"})
	if err != nil {
		t.Fatal(err)
	}
	vm := &store.VM{Name: "desk", Owner: "ann", Profile: "desktop", Hours: 1}
	if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.conn.CreateOverlay(ctx, hypervisor.Overlay{Pool: e.pool, Name: e.m.DomainName(vm.ID) + ".qcow2", Base: base.Path}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.RecordImageUse(ctx, vm.ID, base.ID); err != nil {
		t.Fatal(err)
	}

	// Publishing a VM that is not stopped is refused.
	if _, err := e.m.Publish(ctx, PublishRequest{VMID: vm.ID, Name: "ubuntu", OS: "linux", By: "root"}); !errors.Is(err, ErrNotStopped) {
		t.Fatalf("publish a queued VM = %v, want ErrNotStopped", err)
	}
	cur, _ := e.st.GetVM(ctx, vm.ID)
	if cur, err = e.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: store.VMStopped}); err != nil {
		t.Fatal(err)
	}
	pub, err := e.m.Publish(ctx, PublishRequest{VMID: vm.ID, Name: "ubuntu", OS: "linux", Firmware: "bios", By: "root"})
	if err != nil {
		t.Fatal(err)
	}
	if pub.Version != 2 || pub.Format != FormatQCOW2 || pub.SourceVM != vm.ID || pub.Origin != store.ImagePublished ||
		pub.VirtualSize != base.VirtualSize || pub.SHA256 != sumOf(t, pub.Path) {
		t.Fatalf("published %+v", pub)
	}
	// Flattened: no backing file, and the same disk contents as the base.
	info, err := e.m.info(ctx, pub.Path)
	if err != nil || info.BackingFilename != "" {
		t.Fatalf("published image info %+v, %v: want no backing file", info, err)
	}
	qemuImg(t, "compare", "-U", base.Path, pub.Path)

	// The list says which VMs use which version.
	list, err := e.m.List(ctx)
	if err != nil || len(list) != 2 || len(list[0].VMs) != 1 || len(list[1].VMs) != 0 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	// Deleting version 1, or the whole image, is refused while the VM
	// uses it; version 2 may go.
	for _, v := range []int{1, 0} {
		var inUse *store.ImageInUseError
		if _, err := e.m.Delete(ctx, "ubuntu", v); !errors.As(err, &inUse) || len(inUse.VMs) != 1 {
			t.Fatalf("delete ubuntu@%d in use = %v", v, err)
		}
	}
	if done, err := e.m.Delete(ctx, "ubuntu", 2); err != nil || len(done) != 1 {
		t.Fatalf("delete v2 = %v, %v", done, err)
	}
	if ok, _ := e.conn.VolumeExists(ctx, e.pool, pub.Volume); ok {
		t.Fatal("the volume of a deleted image stays")
	}
	// The VM deleted (and its overlay), the base goes too.
	if err := e.conn.DeleteVolume(ctx, e.pool, e.m.DomainName(vm.ID)+".qcow2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: store.VMDeleted}); err != nil {
		t.Fatal(err)
	}
	if done, err := e.m.Delete(ctx, "ubuntu", 0); err != nil || len(done) != 1 {
		t.Fatalf("delete ubuntu = %v, %v", done, err)
	}
	vols, imgs := e.state()
	if len(vols) != 0 || len(imgs) != 0 {
		t.Fatalf("left after deleting everything: volumes %v, images %v", vols, imgs)
	}
	if _, err := e.m.Delete(ctx, "ubuntu", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete again = %v, want ErrNotFound", err)
	}
}

// TestImportNameTakenMeanwhile: another import of the name recorded while
// this one copied; this one is refused at the end and its copy removed.
func TestImportNameTakenMeanwhile(t *testing.T) {
	e := newEnv(t)
	src := source(t, "raw")
	e.m.copied = func(n int64) {
		if n == 1<<20 {
			other := &store.Image{Name: "race", OS: "linux", Firmware: "uefi", Format: "raw", SHA256: "x", Pool: e.pool,
				Volume: "elsewhere.raw", Path: "/elsewhere", Origin: store.ImageImported, CreatedBy: "bob"}
			if err := e.st.CreateImage(e.ctx, other, true); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := e.m.Import(e.ctx, ImportRequest{Source: src, Name: "race", OS: "linux"}); !errors.Is(err, store.ErrImageNameTaken) {
		t.Fatalf("Import = %v, want ErrImageNameTaken", err)
	}
	vols, imgs := e.state()
	if len(vols) != 0 || !slices.Equal(imgs, []string{"race@1"}) {
		t.Fatalf("left volumes %v, images %v; want none and the other import's", vols, imgs)
	}
}

// TestImportUpload: a file sent in chunks (one out of place, refused; one
// over the limit, dropped whole) is imported like a source, and the upload
// is gone afterwards whether the import took it or refused it.
func TestImportUpload(t *testing.T) {
	e := newEnv(t)
	up := &Uploads{Dir: t.TempDir(), MaxBytes: 8 << 20}
	e.m.Uploads = up
	data, err := os.ReadFile(source(t, "qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	half := int64(len(data) / 2)
	if n, err := up.Write("desk", 0, bytes.NewReader(data[:half])); err != nil || n != half {
		t.Fatalf("first chunk: %d, %v", n, err)
	}
	var oe *OffsetError
	if _, err := up.Write("desk", 0, bytes.NewReader(data)); !errors.As(err, &oe) || oe.Want != half {
		t.Fatalf("a chunk out of place = %v, want an OffsetError at %d", err, half)
	}
	if _, err := up.Write("desk", half, bytes.NewReader(make([]byte, 9<<20))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a chunk over the limit = %v", err)
	}
	if off, _ := up.Offset("desk"); off != half {
		t.Fatalf("after a refused chunk the upload has %d bytes, want %d", off, half)
	}
	if n, err := up.Write("desk", half, bytes.NewReader(data[half:])); err != nil || n != int64(len(data)) {
		t.Fatalf("second chunk: %d, %v", n, err)
	}
	sum := sha256.Sum256(data)
	img, err := e.m.Import(e.ctx, ImportRequest{Upload: true, Name: "desk", OS: "linux", SHA256: hex.EncodeToString(sum[:]), By: "root"})
	if err != nil || img.Format != FormatQCOW2 || img.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("import of the upload: %+v, %v", img, err)
	}
	if off, _ := up.Offset("desk"); off != 0 {
		t.Fatalf("the imported upload stays (%d bytes)", off)
	}
	// A refused one goes too, and leaves no volume.
	if _, err := up.Write("other", 0, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	vols, imgs := e.state()
	if _, err := e.m.Import(e.ctx, ImportRequest{Upload: true, Name: "other", OS: "linux", SHA256: strings.Repeat("0", 64)}); !errors.Is(err, ErrChecksum) {
		t.Fatalf("import of a corrupt upload = %v, want ErrChecksum", err)
	}
	if off, _ := up.Offset("other"); off != 0 {
		t.Fatal("a refused upload stays")
	}
	if v2, i2 := e.state(); !slices.Equal(vols, v2) || !slices.Equal(imgs, i2) {
		t.Fatalf("a refused upload left volumes %v → %v, images %v → %v", vols, v2, imgs, i2)
	}
	if _, err := e.m.Import(e.ctx, ImportRequest{Upload: true, Source: "/x", Name: "x", OS: "linux"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("upload and source = %v", err)
	}
}

// TestImportCancelled: a client that goes away half-way stops the copy,
// which is removed.
func TestImportCancelled(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(e.ctx)
	e.m.copied = func(int64) { cancel() }
	if _, err := e.m.Import(ctx, ImportRequest{Source: source(t, "raw"), Name: "gone", OS: "linux"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Import = %v, want context.Canceled", err)
	}
	if vols, imgs := e.state(); len(vols) != 0 || len(imgs) != 0 {
		t.Fatalf("a cancelled import left volumes %v, images %v", vols, imgs)
	}
}
