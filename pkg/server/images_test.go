package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// dirVolumes is a storage pool in a directory: what pkg/images needs of
// libvirt, for the HTTP layer's tests (pkg/images tests the real libvirtd).
type dirVolumes struct{ dir string }

func (d dirVolumes) StreamVolume(_ context.Context, _, name string, size uint64, r io.Reader) (string, error) {
	path := filepath.Join(d.dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, r)
	f.Close()
	if err == nil && uint64(n) != size {
		err = fmt.Errorf("got %d of %d bytes", n, size)
	}
	if err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

func (d dirVolumes) FlattenVolume(_ context.Context, _, src, dst string) (string, error) {
	path := filepath.Join(d.dir, dst)
	if out, err := exec.Command("qemu-img", "convert", "-O", "qcow2", filepath.Join(d.dir, src), path).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	return path, nil
}

func (d dirVolumes) DeleteVolume(_ context.Context, _, name string) error {
	if err := os.Remove(filepath.Join(d.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (d dirVolumes) VolumeExists(_ context.Context, _, name string) (bool, error) {
	_, err := os.Stat(filepath.Join(d.dir, name))
	return err == nil, nil
}

func TestImageRoutes(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed")
	}
	e := newAdminEnv(t)
	ctx := context.Background()
	pool := t.TempDir()
	if code, body := e.call(t, "GET", "/v1/images", e.ann, "", nil); code != 503 {
		t.Fatalf("without images: %d %v", code, body)
	}
	e.s.Images = &images.Manager{Store: e.st, Volumes: dirVolumes{pool}, Pool: "gpuvm", DomainName: func(id string) string { return "gpuvm-" + id },
		Log: slog.New(slog.DiscardHandler)}
	l := new(config.Loader)
	cfg, diags := l.Parse(config.Source{Name: "images.hcl", Data: []byte(`
image "desk" { imported = "ubuntu" }
image "old" {
  imported = "ubuntu"
  version  = 1
}
profile "desktop" {
  disk { image = "desk" }
}
profile "legacy" {
  disk { image = "old" }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e.s.Config = &fakeConfig{cfg: cfg}

	src := filepath.Join(t.TempDir(), "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-f", "qcow2", src, "64M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	data, _ := os.ReadFile(src)
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("0", 64)

	for _, c := range []struct {
		name, token, body string
		want              int
		field             string
	}{
		{"user", e.ann, `{"source_path":"` + src + `","name":"ubuntu","os":"linux"}`, 403, ""},
		{"no source", e.admin, `{"name":"ubuntu","os":"linux"}`, 400, "source_path"},
		{"no os", e.admin, `{"source_path":"` + src + `","name":"ubuntu"}`, 400, "os"},
		{"bad checksum", e.admin, `{"source_path":"` + src + `","name":"ubuntu","os":"linux","sha256":"` + bad + `"}`, 422, ""},
		{"missing file", e.admin, `{"source_path":"/nonexistent.qcow2","name":"ubuntu","os":"linux"}`, 422, ""},
		{"unknown field", e.admin, `{"source_path":"` + src + `","name":"ubuntu","os":"linux","size":1}`, 400, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.call(t, "POST", "/v1/admin/images", c.token, c.body, nil)
			if code != c.want || (c.field != "" && !strings.Contains(fmt.Sprint(body), c.field)) {
				t.Fatalf("%d %v; want %d (%s)", code, body, c.want, c.field)
			}
			if left, _ := os.ReadDir(pool); len(left) != 0 {
				t.Fatalf("a refused import left %v", left)
			}
		})
	}
	var img api.Image
	if code, body := e.call(t, "POST", "/v1/admin/images", e.admin, `{"source_path":"`+src+`","name":"ubuntu","os":"linux","sha256":"`+good+`"}`, &img); code != 201 ||
		img.Version != 1 || img.Format != "qcow2" || img.VirtualSize != 64<<20 || img.SHA256 != good || img.CreatedBy != "admin" {
		t.Fatalf("import: %d %v %+v", code, body, img)
	}
	if code, body := e.call(t, "POST", "/v1/admin/images", e.admin, `{"source_path":"`+src+`","name":"ubuntu","os":"linux"}`, nil); code != 409 {
		t.Fatalf("name taken: %d %v", code, body)
	}

	// A VM on version 1; publishing it while it is not stopped is refused.
	vm := &store.VM{Name: "desk", Owner: "ann", Profile: "desktop", Hours: 1}
	if _, err := e.st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	rec, _ := e.st.GetImage(ctx, "ubuntu", 1)
	if err := e.st.RecordImageUse(ctx, vm.ID, rec.ID); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(pool, "gpuvm-"+vm.ID+".qcow2")
	if out, err := exec.Command("qemu-img", "create", "-f", "qcow2", "-F", "qcow2", "-b", rec.Path, overlay).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	publish := `{"vm":"` + vm.ID + `","name":"ubuntu"}`
	if code, body := e.call(t, "POST", "/v1/admin/images/publish", e.admin, publish, nil); code != 409 || !strings.Contains(fmt.Sprint(body), "not stopped") {
		t.Fatalf("publish a queued VM: %d %v", code, body)
	}
	cur, _ := e.st.GetVM(ctx, vm.ID)
	if _, err := e.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: store.VMStopped}); err != nil {
		t.Fatal(err)
	}
	if code, body := e.call(t, "POST", "/v1/admin/images/publish", e.admin, publish, &img); code != 201 || img.Version != 2 || img.SourceVM != vm.ID || img.OS != "linux" {
		t.Fatalf("publish: %d %v %+v", code, body, img)
	}

	// Admins see everything, with profiles and VMs; users the basics.
	var list api.ImageList
	if code, body := e.call(t, "GET", "/v1/images", e.admin, "", &list); code != 200 || len(list.Items) != 2 {
		t.Fatalf("admin list: %d %v", code, body)
	}
	v1, v2 := list.Items[0], list.Items[1]
	if strings.Join(v1.Profiles, ",") != "legacy" || v1.VMCount != 1 || !strings.Contains(v1.VMs[0], vm.ID) ||
		strings.Join(v2.Profiles, ",") != "desktop" || v2.VMCount != 0 || v1.SHA256 == "" || v1.Volume == "" {
		t.Fatalf("admin list %+v", list.Items)
	}
	list = api.ImageList{}
	if code, body := e.call(t, "GET", "/v1/images", e.ann, "", &list); code != 200 || len(list.Items) != 2 ||
		list.Items[0].SHA256 != "" || list.Items[0].Volume != "" || list.Items[0].VMs != nil || list.Items[0].Profiles != nil || list.Items[0].VirtualSize != 64<<20 {
		t.Fatalf("user list: %d %v %+v", code, body, list.Items)
	}

	// Delete: refused while the VM uses version 1, naming it.
	for _, ref := range []string{"ubuntu@1", "ubuntu"} {
		if code, body := e.call(t, "DELETE", "/v1/admin/images/"+ref, e.admin, "", nil); code != 409 || !strings.Contains(fmt.Sprint(body), "ann/desk") {
			t.Fatalf("delete %s in use: %d %v", ref, code, body)
		}
	}
	for _, c := range []struct {
		ref  string
		want int
	}{{"ubuntu@x", 400}, {"ubuntu@0", 400}, {"ubuntu@9", 404}, {"nope", 404}} {
		if code, body := e.call(t, "DELETE", "/v1/admin/images/"+c.ref, e.admin, "", nil); code != c.want {
			t.Errorf("delete %s: %d %v, want %d", c.ref, code, body, c.want)
		}
	}
	var gone api.DeletedImages
	if code, body := e.call(t, "DELETE", "/v1/admin/images/ubuntu@2", e.admin, "", &gone); code != 200 || len(gone.Deleted) != 1 || gone.Deleted[0].Version != 2 {
		t.Fatalf("delete v2: %d %v", code, body)
	}
	if _, err := os.Stat(filepath.Join(pool, gone.Deleted[0].Volume)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted version's volume stays: %v", err)
	}
	// The audit log has the three kinds of change.
	entries, _, err := e.st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range entries {
		seen[a.Action] = true
	}
	for _, action := range []string{"image.import", "image.publish", "image.delete"} {
		if !seen[action] {
			t.Errorf("no audit entry %s in %v", action, seen)
		}
	}
}

func TestImageUploadRoutes(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed")
	}
	e := newAdminEnv(t)
	pool := t.TempDir()
	up := &images.Uploads{Dir: t.TempDir()}
	e.s.Images = &images.Manager{Store: e.st, Volumes: dirVolumes{pool}, Pool: "gpuvm", Uploads: up, Log: slog.New(slog.DiscardHandler)}
	src := filepath.Join(t.TempDir(), "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-f", "qcow2", src, "8M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	data, _ := os.ReadFile(src)
	half := len(data) / 2
	put := func(token, offset string, chunk []byte) (*httptest.ResponseRecorder, map[string]any) {
		hdr := []string{"Content-Type", "application/octet-stream"}
		if offset != "" {
			hdr = append(hdr, api.UploadOffsetHeader, offset)
		}
		return send(t, e.s, "PUT", "/v1/admin/images/uploads/desk", token, string(chunk), hdr...)
	}
	if rec, body := put(e.ann, "0", data); rec.Code != 403 {
		t.Fatalf("a user's chunk: %d %v", rec.Code, body)
	}
	if rec, body := put(e.admin, "", data); rec.Code != 400 || !strings.Contains(fmt.Sprint(body), api.UploadOffsetHeader) {
		t.Fatalf("no offset: %d %v", rec.Code, body)
	}
	if rec, body := put(e.admin, "0", data[:half]); rec.Code != 200 || rec.Header().Get(api.UploadOffsetHeader) != fmt.Sprint(half) {
		t.Fatalf("first chunk: %d %v", rec.Code, body)
	}
	// A resent first chunk is refused with where to go on.
	if rec, body := put(e.admin, "0", data[:half]); rec.Code != 409 || rec.Header().Get(api.UploadOffsetHeader) != fmt.Sprint(half) {
		t.Fatalf("a chunk out of place: %d %v %v", rec.Code, body, rec.Header())
	}
	var st api.Upload
	if code, body := e.call(t, "GET", "/v1/admin/images/uploads/desk", e.admin, "", &st); code != 200 || st.Offset != int64(half) {
		t.Fatalf("offset: %d %v", code, body)
	}
	if rec, body := put(e.admin, fmt.Sprint(half), data[half:]); rec.Code != 200 || rec.Header().Get(api.UploadOffsetHeader) != fmt.Sprint(len(data)) {
		t.Fatalf("second chunk: %d %v", rec.Code, body)
	}
	sum := sha256.Sum256(data)
	var img api.Image
	if code, body := e.call(t, "POST", "/v1/admin/images", e.admin, `{"upload":true,"name":"desk","os":"linux","sha256":"`+hex.EncodeToString(sum[:])+`"}`, &img); code != 201 ||
		img.VirtualSize != 8<<20 || img.Format != "qcow2" {
		t.Fatalf("import of the upload: %d %v", code, body)
	}
	if code, body := e.call(t, "GET", "/v1/admin/images/uploads/desk", e.admin, "", nil); code != 404 {
		t.Fatalf("after the import: %d %v", code, body)
	}
	// Abandoned uploads go; a bad name is refused.
	if rec, _ := put(e.admin, "0", data); rec.Code != 200 {
		t.Fatal(rec.Code)
	}
	if code, body := e.call(t, "DELETE", "/v1/admin/images/uploads/desk", e.admin, "", &st); code != 200 || st.Offset != 0 {
		t.Fatalf("discard: %d %v", code, body)
	}
	if left, _ := os.ReadDir(up.Dir); len(left) != 0 {
		t.Fatalf("left in the upload directory: %v", left)
	}
	if code, body := e.call(t, "DELETE", "/v1/admin/images/uploads/desk", e.admin, "", nil); code != 404 {
		t.Fatalf("discard twice: %d %v", code, body)
	}
	if code, body := e.call(t, "GET", "/v1/admin/images/uploads/Bad%20Name", e.admin, "", nil); code != 404 {
		t.Fatalf("bad name: %d %v", code, body)
	}
}
