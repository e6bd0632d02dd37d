package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fakeVolumes keeps data disks in the store only: made ready at once.
type fakeVolumes struct{ st *store.Store }

func (f fakeVolumes) CreateVolume(ctx context.Context, v *store.Volume, quota store.DiskQuota) error {
	v.Host, v.Pool = "test", "gpuvm"
	if err := f.st.CreateVolume(ctx, v, quota); err != nil {
		return err
	}
	v.State = store.VolReady
	return f.st.SetVolumeState(ctx, v.ID, store.VolReady, []string{store.VolCreating}, "")
}

func (f fakeVolumes) DeleteVolume(ctx context.Context, id string) error {
	if _, err := f.st.BeginDeleteVolume(ctx, id); err != nil {
		return err
	}
	return f.st.RemoveVolume(ctx, id)
}

func (f fakeVolumes) ResizeVolume(ctx context.Context, id string, size int64, quota store.DiskQuota) (*store.Volume, error) {
	return f.st.ResizeVolume(ctx, id, size, quota)
}

func volumeServer(t *testing.T) (*Server, *store.Store) {
	t.Helper()
	s, st, _ := reservationServer(t)
	s.Volumes = fakeVolumes{st}
	return s, st
}

func volCall(t *testing.T, s *Server, method, path, token, body string) (int, api.Problem, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var p api.Problem
	if rec.Code >= 400 {
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
	}
	return rec.Code, p, rec.Body.Bytes()
}

// A person makes, attaches, grows, detaches and deletes their disk; bad
// names and sizes are refused naming the field; another person's disk is
// not found on any route, and nothing of it changes.
func TestVolumeRoutes(t *testing.T) {
	s, st := volumeServer(t)
	ctx := context.Background()
	for _, tc := range []struct{ body, field string }{
		{`{"name":"../../etc","size":"1GiB"}`, "name"},
		{`{"name":"a\u0000b","size":"1GiB"}`, "name"},
		{`{"name":"` + strings.Repeat("a", 300) + `","size":"1GiB"}`, "name"},
		{`{"name":"données","size":"1GiB"}`, "name"},
		{`{"name":"ok","size":"0GiB"}`, "size"},
		{`{"name":"ok","size":"-1GiB"}`, "size"},
		{`{"name":"ok","size":"65TiB"}`, "size"},
		{`{"name":"ok","size":"99999999999999999999GiB"}`, "size"},
		{`{"name":"ok","size":"20GB"}`, "size"},
		{`{"name":"ok","size":"1000B"}`, "size"},
		{`{"name":"ok"}`, "size"},
	} {
		code, p, _ := volCall(t, s, "POST", "/v1/volumes", "ann-token", tc.body)
		if code != http.StatusUnprocessableEntity || p.Field != tc.field {
			t.Errorf("%s: %d %+v, want 422 naming %s", tc.body, code, p, tc.field)
		}
	}
	if vs, _ := st.ListVolumes(ctx, store.VolumeFilter{}); len(vs) != 0 {
		t.Fatalf("refusals made volumes: %+v", vs)
	}
	code, _, body := volCall(t, s, "POST", "/v1/volumes", "ann-token", `{"name":"scratch","size":"1GiB"}`)
	var v api.Volume
	if code != http.StatusCreated || json.Unmarshal(body, &v) != nil || v.State != api.VolumeReady || v.SizeBytes != 1<<30 || !strings.HasPrefix(v.GuestDevice, "/dev/disk/by-id/virtio-") {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, p, _ := volCall(t, s, "POST", "/v1/volumes", "ann-token", `{"name":"scratch","size":"1GiB"}`); code != http.StatusConflict || p.Field != "name" {
		t.Errorf("same name: %d %+v", code, p)
	}
	var vm1, vm2 api.CreateVMResponse
	code, _, body = volCall(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"ann-1","hours":2,"volumes":["scratch"]}`)
	if code != http.StatusAccepted || json.Unmarshal(body, &vm1) != nil {
		t.Fatalf("create ann-1 with the disk: %d %s", code, body)
	}
	// Attached to ann-1: a second VM with it, or an attach to another VM, is 409 naming ann-1.
	if code, p, _ := volCall(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"ann-x","volumes":["scratch"]}`); code != http.StatusConflict || !strings.Contains(p.Detail, "ann-1") {
		t.Errorf("a second VM with an attached disk: %d %+v", code, p)
	}
	volCall(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"ann-2","hours":2}`)
	if code, p, _ := volCall(t, s, "POST", "/v1/volumes/scratch/actions/attach", "ann-token", `{"vm":"ann-2"}`); code != http.StatusConflict || !strings.Contains(p.Detail, "ann-1") {
		t.Errorf("attach while attached: %d %+v", code, p)
	}
	if code, p, _ := volCall(t, s, "DELETE", "/v1/volumes/scratch", "ann-token", ""); code != http.StatusConflict || !strings.Contains(p.Detail, "ann-1") {
		t.Errorf("delete while attached: %d %+v", code, p)
	}
	_ = json.Unmarshal(body, &vm2)
	// Bob: ann's volume is not found on any route, by ID or name; ann's VM neither.
	before, _ := st.GetVolume(ctx, v.ID)
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/volumes/" + v.ID, ""},
		{"DELETE", "/v1/volumes/" + v.ID, ""},
		{"POST", "/v1/volumes/" + v.ID + "/actions/resize", `{"size":"2GiB"}`},
		{"POST", "/v1/volumes/" + v.ID + "/actions/attach", `{"vm":"ann-2"}`},
		{"POST", "/v1/volumes/" + v.ID + "/actions/detach", ""},
		{"POST", "/v1/volumes/scratch/actions/detach", ""},
	} {
		if code, p, _ := volCall(t, s, r.method, r.path, "bob-token", r.body); code != http.StatusNotFound || p.Field != "id" {
			t.Errorf("bob %s %s: %d %+v, want 404 naming id", r.method, r.path, code, p)
		}
	}
	if code, p, _ := volCall(t, s, "POST", "/v1/vms", "bob-token", `{"profile":"seat","name":"bob-1","volumes":["`+v.ID+`"]}`); code != http.StatusNotFound || p.Field != "volumes[0]" {
		t.Errorf("bob's VM with ann's disk: %d %+v", code, p)
	}
	if code, p, _ := volCall(t, s, "GET", "/v1/volumes/"+v.ID+"?as_admin=true", "bob-token", ""); code != http.StatusForbidden || p.Field != "as_admin" {
		t.Errorf("bob as admin: %d %+v", code, p)
	}
	if after, _ := st.GetVolume(ctx, v.ID); after.UpdatedAt != before.UpdatedAt || *after.AttachedVM != vm1.VM.ID {
		t.Errorf("bob's requests changed the volume: %+v", after)
	}
	// An admin sees it only with the explicit override.
	if code, _, _ := volCall(t, s, "GET", "/v1/volumes/"+v.ID, "admin-token", ""); code != http.StatusNotFound {
		t.Errorf("admin without override: %d", code)
	}
	if code, _, body := volCall(t, s, "GET", "/v1/volumes/"+v.ID+"?as_admin=true", "admin-token", ""); code != http.StatusOK || !strings.Contains(string(body), `"attached_vm_name":"ann-1"`) {
		t.Errorf("admin override: %d %s", code, body)
	}
	// ann-1 is queued: detach, grow, attach to ann-2, list.
	if code, _, body := volCall(t, s, "POST", "/v1/volumes/scratch/actions/detach", "ann-token", ""); code != http.StatusOK || strings.Contains(string(body), "attached_vm") {
		t.Errorf("detach: %d %s", code, body)
	}
	if code, p, _ := volCall(t, s, "POST", "/v1/volumes/scratch/actions/resize", "ann-token", `{"size":"512MiB"}`); code != http.StatusUnprocessableEntity || p.Field != "size" {
		t.Errorf("shrink: %d %+v", code, p)
	}
	if code, _, body := volCall(t, s, "POST", "/v1/volumes/scratch/actions/resize", "ann-token", `{"size":"2GiB"}`); code != http.StatusOK || !strings.Contains(string(body), `"size_bytes":2147483648`) {
		t.Errorf("grow: %d %s", code, body)
	}
	if code, _, body := volCall(t, s, "POST", "/v1/volumes/scratch/actions/attach", "ann-token", `{"vm":"ann-2"}`); code != http.StatusOK || !strings.Contains(string(body), `"attached_vm_name":"ann-2"`) {
		t.Errorf("attach to ann-2: %d %s", code, body)
	}
	code, _, body = volCall(t, s, "GET", "/v1/volumes", "ann-token", "")
	var list api.VolumeList
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Volumes) != 1 || list.UsedBytes != 2<<30 {
		t.Errorf("list: %d %s", code, body)
	}
	if code, _, body := volCall(t, s, "GET", "/v1/volumes", "bob-token", ""); code != http.StatusOK || strings.Contains(string(body), "scratch") {
		t.Errorf("bob's list: %d %s", code, body)
	}
	volCall(t, s, "POST", "/v1/volumes/scratch/actions/detach", "ann-token", "")
	if code, _, _ := volCall(t, s, "DELETE", "/v1/volumes/scratch", "ann-token", ""); code != http.StatusNoContent {
		t.Errorf("delete: %d", code)
	}
}

// fakeHomeUsage is the home quotas' last reading.
type fakeHomeUsage []api.VolumeUsage

func (f fakeHomeUsage) Usage() []api.VolumeUsage { return f }

// GET /v1/volumes shows the caller's home with its used bytes, quota and
// enforcement as the home quotas last read them, and a data disk with its
// size as used; without a reading, or without HomeUsage, the home has no
// figures.
func TestVolumeListShowsUsage(t *testing.T) {
	s, _ := volumeServer(t)
	s.config().Server.Storage.Homes = config.Homes{Enabled: true, Root: t.TempDir(), Mount: "/gpuvm/home"}
	list := func(token string) api.VolumeList {
		t.Helper()
		code, _, body := volCall(t, s, "GET", "/v1/volumes", token, "")
		var l api.VolumeList
		if code != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Fatalf("list: %d %s", code, body)
		}
		return l
	}
	if l := list("ann-token"); len(l.Volumes) != 1 || l.Volumes[0].Kind != api.VolumeHome || l.Volumes[0].UsedBytes != nil || l.Volumes[0].Enforcement != "" {
		t.Errorf("without HomeUsage: %+v", l.Volumes)
	}
	quota := uint64(10 << 30)
	s.HomeUsage = fakeHomeUsage{
		{Kind: api.VolumeHome, Owner: "ann", Name: "ann", UsedBytes: 3 << 30, QuotaBytes: &quota, Enforcement: "none", Note: "xfs without prjquota: measured, not enforced"},
		{Kind: api.VolumeHome, Owner: "bob", Name: "bob", UsedBytes: 1 << 20, Enforcement: "project"},
	}
	if code, _, body := volCall(t, s, "POST", "/v1/volumes", "ann-token", `{"name":"scratch","size":"1GiB"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	l := list("ann-token")
	if len(l.Volumes) != 2 {
		t.Fatalf("ann's list: %+v", l.Volumes)
	}
	home, disk := l.Volumes[0], l.Volumes[1]
	if home.UsedBytes == nil || *home.UsedBytes != 3<<30 || home.QuotaBytes == nil || *home.QuotaBytes != quota ||
		home.Enforcement != "none" || !strings.Contains(home.Note, "prjquota") || home.Mount != "/gpuvm/home" {
		t.Errorf("ann's home: %+v", home)
	}
	if disk.UsedBytes == nil || *disk.UsedBytes != 1<<30 || disk.QuotaBytes != nil {
		t.Errorf("ann's disk: %+v", disk)
	}
	if l := list("bob-token"); len(l.Volumes) != 1 || l.Volumes[0].UsedBytes == nil || *l.Volumes[0].UsedBytes != 1<<20 ||
		l.Volumes[0].QuotaBytes != nil || l.Volumes[0].Enforcement != "project" {
		t.Errorf("bob's home: %+v", l.Volumes)
	}
	// cara's home is not read yet: no figures.
	if l := list("cara-token"); len(l.Volumes) != 1 || l.Volumes[0].UsedBytes != nil {
		t.Errorf("cara's home: %+v", l.Volumes)
	}
}

// A running VM's disk is attached and detached through an operation of the
// VM (202, its id in the answer, audited): the row says attached, or
// detaching until the guest has let it go; a VM between states is a 409
// naming vm; a VM with an operation under way is busy.
func TestVolumePlugRunningVM(t *testing.T) {
	s, st := volumeServer(t)
	ctx := context.Background()
	code, _, body := volCall(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"ann-1","hours":2}`)
	var made api.CreateVMResponse
	if code != http.StatusAccepted || json.Unmarshal(body, &made) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	vm, _ := st.GetVM(ctx, made.VM.ID)
	host := "test"
	for _, step := range []struct{ state, want string }{{store.VMCreating, "is creating"}, {store.VMRunning, ""}} {
		ops, _ := st.ListOperations(ctx, vm.ID)
		for _, op := range ops {
			_ = st.FinishOperation(ctx, op.ID, nil)
		}
		var err error
		if vm, err = st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: step.state, Host: &host}); err != nil {
			t.Fatal(err)
		}
		if step.want != "" {
			volCall(t, s, "POST", "/v1/volumes", "ann-token", `{"name":"scratch","size":"1GiB"}`)
			if code, p, _ := volCall(t, s, "POST", "/v1/volumes/scratch/actions/attach", "ann-token", `{"vm":"ann-1"}`); code != http.StatusConflict || p.Field != "vm" || !strings.Contains(p.Detail, step.want) {
				t.Errorf("attach to a VM that is %s: %d %+v", step.state, code, p)
			}
		}
	}
	code, _, body = volCall(t, s, "POST", "/v1/volumes/scratch/actions/attach", "ann-token", `{"vm":"ann-1"}`)
	var v api.Volume
	if code != http.StatusAccepted || json.Unmarshal(body, &v) != nil || v.OperationID == "" || v.AttachedVMName != "ann-1" {
		t.Fatalf("attach to the running VM: %d %s", code, body)
	}
	op, err := st.GetOperation(ctx, v.OperationID)
	if err != nil || op.Kind != store.OpDisks || op.VMID != vm.ID || op.RequestedBy != "ann" {
		t.Fatalf("its operation: %+v %v", op, err)
	}
	// Busy until it ends: a detach names the operation.
	if code, p, _ := volCall(t, s, "POST", "/v1/volumes/scratch/actions/detach", "ann-token", ""); code != http.StatusConflict || p.Field != "id" || !strings.Contains(p.Detail, v.OperationID) {
		t.Errorf("detach while plugging: %d %+v", code, p)
	}
	_ = st.FinishOperation(ctx, op.ID, nil)
	code, _, body = volCall(t, s, "POST", "/v1/volumes/scratch/actions/detach", "ann-token", "")
	v = api.Volume{}
	if code != http.StatusAccepted || json.Unmarshal(body, &v) != nil || v.OperationID == "" || v.State != api.VolumeDetaching || v.AttachedVMName != "ann-1" {
		t.Fatalf("detach from the running VM: %d %s", code, body)
	}
	// Detaching: it cannot be detached again, grown, deleted or attached
	// elsewhere.
	_ = st.FinishOperation(ctx, v.OperationID, nil)
	if code, p, _ := volCall(t, s, "POST", "/v1/volumes/scratch/actions/detach", "ann-token", ""); code != http.StatusConflict || p.Field != "id" || !strings.Contains(p.Detail, "being unplugged") {
		t.Errorf("detach while detaching: %d %+v", code, p)
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/volumes/scratch/actions/resize", `{"size":"2GiB"}`},
		{"DELETE", "/v1/volumes/scratch", ""},
	} {
		if code, _, _ := volCall(t, s, r.method, r.path, "ann-token", r.body); code != http.StatusConflict {
			t.Errorf("%s %s while detaching: %d, want 409", r.method, r.path, code)
		}
	}
	entries, _, err := st.ListAudit(ctx, store.AuditFilter{Action: "volume.attach"})
	if err != nil || len(entries) == 0 || !strings.Contains(entries[0].Detail, "plugged into running VM ann-1") {
		t.Errorf("audit: %+v %v", entries, err)
	}
}
