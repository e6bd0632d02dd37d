package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// cliImages keeps image records in memory for the CLI tests (pkg/images
// and pkg/server test the real thing); it records what it was asked.
type cliImages struct {
	*images.Uploads
	recs     []store.Image
	imported []images.ImportRequest
}

func (f *cliImages) UploadOffset(name string) (int64, error) { return f.Offset(name) }
func (f *cliImages) UploadChunk(name string, off int64, r io.Reader) (int64, error) {
	return f.Write(name, off, r)
}
func (f *cliImages) DiscardUpload(name string) error { return f.Remove(name) }

func (f *cliImages) Import(_ context.Context, req images.ImportRequest) (*store.Image, error) {
	f.imported = append(f.imported, req)
	for _, r := range f.recs {
		if r.Name == req.Name {
			return nil, fmt.Errorf("import %s: %w", req.Name, store.ErrImageNameTaken)
		}
	}
	img := store.Image{ID: int64(len(f.recs) + 1), Name: req.Name, Version: 1, OS: req.OS, Firmware: req.Firmware, Format: "qcow2",
		VirtualSize: 10 << 30, ActualSize: 3 << 30, SHA256: strings.Repeat("ab", 32), Pool: "gpuvm", Volume: images.VolumeName(req.Name, 1, "qcow2"),
		Origin: store.ImageImported, SourcePath: req.Source, CreatedBy: req.By, CreatedAt: time.Now()}
	f.recs = append(f.recs, img)
	return &img, nil
}

func (f *cliImages) Publish(_ context.Context, req images.PublishRequest) (*store.Image, error) {
	return nil, fmt.Errorf("publish vm %s: %w", req.VMID, images.ErrNotStopped)
}

func (f *cliImages) List(context.Context) ([]images.Entry, error) {
	var out []images.Entry
	for _, r := range f.recs {
		out = append(out, images.Entry{Image: r, VMs: []string{"ann/desk (x)"}})
	}
	return out, nil
}

func (f *cliImages) Delete(_ context.Context, name string, version int) ([]store.Image, error) {
	return nil, &store.ImageInUseError{Image: store.ImageRef(name, version), VMs: []string{"ann/desk (x)"}}
}

func (f *cliImages) Get(_ context.Context, name string, version int) (*store.Image, error) {
	return nil, fmt.Errorf("image %s: %w", name, store.ErrNotFound)
}

func TestAdminImages(t *testing.T) {
	f := &cliImages{Uploads: &images.Uploads{Dir: t.TempDir()}}
	env := clienttest.New(t, clienttest.Options{Images: f})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})

	if out := admin.must("admin", "images"); !strings.Contains(out, "No images") {
		t.Errorf("empty: %q", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "image", "import", "/srv/u.qcow2", "--os", "linux"}, "--name"},
		{[]string{"admin", "image", "import", "/srv/u.qcow2", "--name", "u"}, "--os"},
		{[]string{"admin", "image", "publish", "vm-1"}, "--name"},
		{[]string{"admin", "image", "import", "u.qcow2", "--name", "u", "--os", "linux"}, "absolute path"},
		{[]string{"admin", "image", "delete", "u"}, "--yes"},
	} {
		if _, errOut, code := admin.run(c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want usage error naming %q", c.args, code, errOut, c.want)
		}
	}
	out := admin.must("admin", "image", "import", "/srv/u.qcow2", "--name", "ubuntu", "--os", "linux", "--sha256", strings.Repeat("AB", 32))
	if !strings.Contains(out, "Imported ubuntu@1") || !strings.Contains(out, "10GiB") {
		t.Errorf("import: %q", out)
	}
	if len(f.imported) != 1 || f.imported[0].SHA256 != strings.Repeat("ab", 32) || f.imported[0].Firmware != "uefi" || f.imported[0].By != "admin" {
		t.Errorf("asked %+v", f.imported)
	}
	if _, errOut, code := admin.run("admin", "image", "import", "/srv/u.qcow2", "--name", "ubuntu", "--os", "linux"); code != 1 || !strings.Contains(errOut, "name taken") {
		t.Errorf("taken: exit %d %q", code, errOut)
	}
	out = admin.must("admin", "images")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "IMAGE ") || !strings.Contains(lines[1], "ubuntu@1") || !strings.Contains(lines[1], "abababababab…") ||
		!strings.Contains(lines[1], "imported by admin") || !strings.HasSuffix(lines[1], " 1") {
		t.Errorf("table:\n%s", out)
	}
	var l api.ImageList
	decodeStrict(t, admin.must("admin", "images", "--json"), &l)
	if len(l.Items) != 1 || l.Items[0].VMCount != 1 || l.Items[0].SHA256 == "" {
		t.Errorf("--json: %+v", l)
	}
	if out := admin.must("admin", "images", "-q"); out != "ubuntu@1\n" {
		t.Errorf("-q: %q", out)
	}
	if _, errOut, code := admin.run("admin", "image", "delete", "ubuntu@1", "--yes"); code != 1 || !strings.Contains(errOut, "ann/desk") {
		t.Errorf("delete in use: exit %d %q", code, errOut)
	}
	if _, errOut, code := admin.run("admin", "image", "publish", "vm-1", "--name", "ubuntu"); code != 1 || !strings.Contains(errOut, "no VM") {
		t.Errorf("publish an unknown VM: exit %d %q", code, errOut)
	}
	// --upload sends a local file, resuming where the server's copy ends,
	// and asks for the import of the upload with the file's SHA-256.
	local := filepath.Join(t.TempDir(), "local.img")
	data := make([]byte, 40<<20+123)
	_, _ = rand.Read(data)
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write("desk", 0, bytes.NewReader(data[:5<<20])); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := admin.run("admin", "image", "import", local, "--upload", "--name", "desk", "--os", "linux")
	sum := sha256.Sum256(data)
	last := f.imported[len(f.imported)-1]
	if code != 0 || !strings.Contains(stderr, "Resuming the upload") || !strings.Contains(stderr, "(100%)") || !strings.Contains(stdout, "Imported desk@1") ||
		!last.Upload || last.Source != "" || last.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("upload: exit %d %q %q, asked %+v", code, stdout, stderr, last)
	}
	p := filepath.Join(f.Dir, "desk.part")
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatalf("the server's copy has %d bytes, differing from the file's %d", len(got), len(data))
	}
	if _, errOut, code := admin.run("admin", "image", "import", local, "--upload", "--name", "other", "--os", "linux", "--sha256", strings.Repeat("0", 64)); code != 1 || !strings.Contains(errOut, "nothing imported") {
		t.Errorf("upload with a wrong --sha256: exit %d %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(f.Dir, "other.part")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused upload stays: %v", err)
	}
	// Users list the basics; the admin commands are refused.
	l = api.ImageList{}
	decodeStrict(t, ann.must("admin", "images", "--json"), &l)
	if len(l.Items) != 2 || l.Items[0].SHA256 != "" || l.Items[0].VMCount != 0 {
		t.Errorf("as a user: %+v", l)
	}
	if _, errOut, code := ann.run("admin", "image", "import", "/srv/x.qcow2", "--name", "x", "--os", "linux"); code != 1 || !strings.Contains(errOut, "this needs an admin") {
		t.Errorf("import as a user: exit %d %q", code, errOut)
	}
}
