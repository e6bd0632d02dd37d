package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fakeOrphans is one orphaned domain, adoptable, and one device that is not.
type fakeOrphans struct {
	items   []api.Orphan
	deleted []string
	adopted []api.AdoptRequest
	st      *store.Store
	// adoptedVolumes are the data disks adopted (AdoptVolume).
	adoptedVolumes []api.AdoptVolumeRequest
}

func (f *fakeOrphans) Installation() string { return "0f6f1a52-9a40-4c3e-8d7e-2b1f3c4d5e6f" }

func (f *fakeOrphans) CheckOrphans(context.Context) ([]api.Orphan, time.Time, error) {
	return f.items, time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC), nil
}

func (f *fakeOrphans) find(id string) (int, error) {
	for i, o := range f.items {
		if o.ID == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("orphan %s: %w", id, store.ErrNotFound)
}

func (f *fakeOrphans) DeleteOrphan(_ context.Context, id string) (api.Orphan, error) {
	i, err := f.find(id)
	if err != nil {
		return api.Orphan{}, err
	}
	o := f.items[i]
	f.items = append(f.items[:i], f.items[i+1:]...)
	f.deleted = append(f.deleted, id)
	return o, nil
}

func (f *fakeOrphans) AdoptOrphan(ctx context.Context, id string, req api.AdoptRequest, by string) (*store.VM, error) {
	i, err := f.find(id)
	if err != nil {
		return nil, err
	}
	if !f.items[i].Adoptable {
		return nil, fmt.Errorf("orphan %s: %w: not adoptable", id, store.ErrConflict)
	}
	if req.Owner == "nobody" {
		return nil, fmt.Errorf("%w: owner: no user %q", store.ErrInvalid, req.Owner)
	}
	f.adopted = append(f.adopted, req)
	vm := &store.VM{ID: f.items[i].VMID, Name: req.Name, Owner: req.Owner, Profile: "tiny", State: store.VMRunning, StateReason: "adopted by " + by}
	if err := f.st.AdoptVM(ctx, vm, nil, by); err != nil {
		return nil, err
	}
	return vm, nil
}

// AdoptVolume adopts the orphaned volume of that file (pool/name) when it
// names an installation (this fake's: adoptable), as the orchestrator does.
func (f *fakeOrphans) AdoptVolume(ctx context.Context, req api.AdoptVolumeRequest, by string) (*store.Volume, error) {
	for _, o := range f.items {
		if o.Kind != api.OrphanVolume || o.Name != req.File {
			continue
		}
		if !o.Adoptable {
			return nil, fmt.Errorf("orphan %s: %w: not adoptable: %s", o.ID, store.ErrConflict, o.Reason)
		}
		if req.Owner == "nobody" {
			return nil, fmt.Errorf("%w: owner: no user %q", store.ErrInvalid, req.Owner)
		}
		f.adoptedVolumes = append(f.adoptedVolumes, req)
		v := &store.Volume{ID: o.VMID, Owner: req.Owner, Name: req.Name, SizeBytes: 1 << 20, Host: "h", Pool: "p",
			Volume: strings.TrimPrefix(o.Name, "p/"), Installation: f.Installation(), CreatedBy: by}
		if err := f.st.AdoptVolume(ctx, v); err != nil {
			return nil, err
		}
		return v, nil
	}
	return nil, fmt.Errorf("no orphaned data disk %q: %w", req.File, store.ErrNotFound)
}

// An admin adopts an orphaned data disk of this installation as a
// person's volume; a user may not, another installation's is a conflict,
// and every bad field is named.
func TestAdoptVolumeRoute(t *testing.T) {
	e := newAdminEnv(t)
	id := "01a23326-de26-7342-b7c0-0123456789ab"
	file := "p/gpuvm-disk-" + (&fakeOrphans{}).Installation() + "-" + id + ".qcow2"
	f := &fakeOrphans{st: e.st, items: []api.Orphan{
		{ID: "volume-aaaaaaaaaaaa", Kind: api.OrphanVolume, Name: file, VMID: id, Adoptable: true, Reason: "no row"},
		{ID: "volume-bbbbbbbbbbbb", Kind: api.OrphanVolume, Name: "p/gpuvm-disk-other-x.qcow2", Reason: "a data disk made by another gpuvm installation (other)"},
	}}
	if code, body := e.call(t, "POST", "/v1/admin/volumes/adopt", e.admin, `{"file":"`+file+`","owner":"ann"}`, nil); code != 503 {
		t.Fatalf("no orchestrator: %d %v", code, body)
	}
	e.s.Orphans = f
	tests := []struct {
		name, token, body      string
		status                 int
		problem, detail, field string
	}{
		{"a user adopts", "ann", `{"file":"` + file + `","owner":"ann"}`, 403, "forbidden", "admin", ""},
		{"no file", "admin", `{"owner":"ann"}`, 400, "bad-request", "orphaned data disk", "file"},
		{"no owner", "admin", `{"file":"` + file + `"}`, 400, "bad-request", "user", "owner"},
		{"a bad owner", "admin", `{"file":"` + file + `","owner":"../root"}`, 422, "validation", "no user", "owner"},
		{"a bad name", "admin", `{"file":"` + file + `","owner":"ann","name":"Bad/Name"}`, 422, "validation", "not a volume name", "name"},
		{"unknown field", "admin", `{"file":"` + file + `","owner":"ann","size":"1GiB"}`, 400, "bad-request", "size", "size"},
		{"for nobody", "admin", `{"file":"` + file + `","owner":"nobody"}`, 422, "validation", "nobody", "owner"},
		{"not an orphan", "admin", `{"file":"p/x.qcow2","owner":"ann"}`, 404, "not-found", "p/x.qcow2", ""},
		{"another installation's", "admin", `{"file":"p/gpuvm-disk-other-x.qcow2","owner":"ann"}`, 409, "conflict", "another gpuvm installation", ""},
	}
	tokens := map[string]string{"admin": e.admin, "ann": e.ann}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.call(t, "POST", "/v1/admin/volumes/adopt", tokens[tc.token], tc.body, nil)
			detail, _ := body["detail"].(string)
			field, _ := body["field"].(string)
			if code != tc.status || body["type"] != ProblemBase+tc.problem || !strings.Contains(detail, tc.detail) || field != tc.field {
				t.Errorf("%d %v", code, body)
			}
		})
	}
	if len(f.adoptedVolumes) != 0 {
		t.Fatalf("refused requests acted: %v", f.adoptedVolumes)
	}
	var v api.Volume
	if code, body := e.call(t, "POST", "/v1/admin/volumes/adopt", e.admin, `{"file":"`+file+`","owner":"ann","name":"back"}`, &v); code != 201 || v.ID != id || v.Owner != "ann" || v.Name != "back" || v.State != store.VolReady {
		t.Fatalf("adopt: %d %v %+v", code, body, v)
	}
	if got, err := e.st.GetVolume(context.Background(), id); err != nil || got.Owner != "ann" || got.Name != "back" {
		t.Fatalf("the adopted volume in the store: %+v, %v", got, err)
	}
	entries, _, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: "volume.adopt"})
	if err != nil || len(entries) == 0 || entries[0].Outcome != "ok" || entries[0].Target != "volume/ann/back" || !strings.Contains(entries[0].Detail, file) {
		t.Fatalf("audit: %+v, %v", entries, err)
	}
}

func TestOrphanRoutes(t *testing.T) {
	e := newAdminEnv(t)
	f := &fakeOrphans{st: e.st, items: []api.Orphan{
		{ID: "domain-aaaaaaaaaaaa", Kind: api.OrphanDomain, Name: "gpuvm-0123456789ab", VMID: "01a23326-de26-7342-b7c0-0123456789ab", Adoptable: true, Reason: "no row"},
		{ID: "device-bbbbbbbbbbbb", Kind: api.OrphanDevice, Name: "mig/x", Installation: "other", Reason: "made by another gpuvm installation (other)"},
	}}
	// Without an orchestrator: 503.
	if code, body := e.call(t, "GET", "/v1/admin/orphans", e.admin, "", nil); code != 503 {
		t.Fatalf("no orchestrator: %d %v", code, body)
	}
	e.s.Orphans = f

	var list api.OrphanList
	if code, body := e.call(t, "GET", "/v1/admin/orphans", e.admin, "", &list); code != 200 || len(list.Items) != 2 || list.Installation != f.Installation() || list.CheckedAt == nil {
		t.Fatalf("list: %d %v %+v", code, body, list)
	}
	tests := []struct {
		name, method, path, token, body string
		status                          int
		problem, detail, field          string
	}{
		{"a user lists", "GET", "/v1/admin/orphans", "ann", "", 403, "forbidden", "admin", ""},
		{"a user deletes", "DELETE", "/v1/admin/orphans/device-bbbbbbbbbbbb", "ann", "", 403, "forbidden", "admin", ""},
		{"a user adopts", "POST", "/v1/admin/orphans/domain-aaaaaaaaaaaa/adopt", "ann", `{"owner":"ann"}`, 403, "forbidden", "admin", ""},
		{"unknown orphan", "DELETE", "/v1/admin/orphans/domain-000000000000", "admin", "", 404, "not-found", "domain-000000000000", ""},
		{"adopt without owner", "POST", "/v1/admin/orphans/domain-aaaaaaaaaaaa/adopt", "admin", `{}`, 400, "bad-request", "user", "owner"},
		{"adopt with a bad name", "POST", "/v1/admin/orphans/domain-aaaaaaaaaaaa/adopt", "admin", `{"owner":"ann","name":"Bad Name"}`, 422, "validation", "lower-case", "name"},
		{"adopt with an unknown field", "POST", "/v1/admin/orphans/domain-aaaaaaaaaaaa/adopt", "admin", `{"owner":"ann","host":"x"}`, 400, "bad-request", "host", "host"},
		{"adopt for nobody", "POST", "/v1/admin/orphans/domain-aaaaaaaaaaaa/adopt", "admin", `{"owner":"nobody"}`, 422, "validation", "nobody", "owner"},
		{"adopt a device", "POST", "/v1/admin/orphans/device-bbbbbbbbbbbb/adopt", "admin", `{"owner":"ann"}`, 409, "conflict", "not adoptable", ""},
	}
	tokens := map[string]string{"admin": e.admin, "ann": e.ann}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.call(t, tc.method, tc.path, tokens[tc.token], tc.body, nil)
			detail, _ := body["detail"].(string)
			field, _ := body["field"].(string)
			if code != tc.status || body["type"] != ProblemBase+tc.problem || !strings.Contains(detail, tc.detail) || field != tc.field {
				t.Errorf("%d %v", code, body)
			}
		})
	}
	if len(f.deleted)+len(f.adopted) != 0 {
		t.Fatalf("refused requests acted: deleted %v, adopted %v", f.deleted, f.adopted)
	}

	var vm api.VM
	if code, body := e.call(t, "POST", "/v1/admin/orphans/domain-aaaaaaaaaaaa/adopt", e.admin, `{"owner":"ann","name":"back"}`, &vm); code != 201 || vm.Name != "back" || vm.Owner != "ann" || vm.State != store.VMRunning {
		t.Fatalf("adopt: %d %v %+v", code, body, vm)
	}
	if got, err := e.st.GetVM(context.Background(), vm.ID); err != nil || got.Owner != "ann" {
		t.Fatalf("the adopted VM in the store: %+v, %v", got, err)
	}
	var gone api.Orphan
	if code, body := e.call(t, "DELETE", "/v1/admin/orphans/device-bbbbbbbbbbbb", e.admin, "", &gone); code != 200 || gone.Kind != api.OrphanDevice {
		t.Fatalf("delete: %d %v", code, body)
	}
	if len(f.deleted) != 1 || f.deleted[0] != "device-bbbbbbbbbbbb" {
		t.Errorf("deleted %v", f.deleted)
	}
}
