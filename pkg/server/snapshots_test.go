package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/capability"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

const snapshotProfiles = capabilityProfiles + `
policy {
  defaults {
    snapshots {
      keep         = 1
      expire_after = "1d"
    }
  }
}
`

// The snapshot routes: hostile labels are refused naming the field and
// write nothing; another person's VM or snapshot is not found on every
// route, naming the field, and nothing changes; the limit refuses the next
// snapshot naming its rule; a VM whose capabilities say no is refused with
// the same reason; a restore needs the VM stopped.
func TestSnapshotRoutes(t *testing.T) {
	ctx := context.Background()
	cfg, diags := new(config.Loader).Parse(config.Source{Name: "p.hcl", Data: []byte(snapshotProfiles)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st := storetest.New(t, storetest.Quiet)
	for _, u := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: u}); err != nil {
			t.Fatal(err)
		}
	}
	vmOf := func(owner, name, profile, state string) *store.VM {
		vm := &store.VM{Name: name, Owner: owner, Profile: profile, Hours: 8}
		if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: owner}); err != nil {
			t.Fatal(err)
		}
		ops, _ := st.ListOperations(ctx, vm.ID)
		for _, op := range ops {
			if err := st.FinishOperation(ctx, op.ID, nil); err != nil {
				t.Fatal(err)
			}
		}
		next, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: state})
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	ann := vmOf("ann", "desk", "plain", store.VMStopped)
	annRunning := vmOf("ann", "up", "plain", store.VMRunning)
	noDisk := vmOf("ann", "kernel", "whole", store.VMStopped)
	bobs := vmOf("bob", "mine", "plain", store.VMStopped)
	srv := newServer(t, Deps{Auth: fakeAuth{"ann-token": {Name: "ann"}, "bob-token": {Name: "bob"}}, Backends: fakeBackends{}, Store: st, Host: "gpu01",
		Config: &fakeConfig{cfg: cfg}, Log: slog.New(slog.DiscardHandler),
		Capabilities: &capability.Host{Hypervisor: capability.HypervisorOf("QEMU", 9000000, 7002000)}})
	call := func(method, path, token, body string) (int, api.Problem, []byte) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		var p api.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		return rec.Code, p, rec.Body.Bytes()
	}
	fingerprint := func() string {
		t.Helper()
		sn, err := st.ListAllSnapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, vm := range []*store.VM{ann, annRunning, noDisk, bobs} {
			ops, _ := st.ListOperations(ctx, vm.ID)
			cur, _ := st.GetVM(ctx, vm.ID)
			j, _ := json.Marshal([]any{ops, cur.State, cur.StateReason, cur.Version})
			b.Write(j)
		}
		j, _ := json.Marshal(sn)
		return b.String() + string(j)
	}
	refused := func(name, method, path, token, body string, code int, field, says string) {
		t.Helper()
		before := fingerprint()
		got, p, raw := call(method, path, token, body)
		if got != code || p.Field != field || !strings.Contains(p.Detail, says) {
			t.Errorf("%s: %d %s; want %d field %q saying %q", name, got, raw, code, field, says)
		}
		if fingerprint() != before {
			t.Errorf("%s: the refused request changed the database", name)
		}
	}
	base := "/v1/vms/" + ann.ID + "/snapshots"
	for _, tc := range []struct{ name, label, says string }{
		{"traversal", "../../etc/passwd", `may not hold '/'`},
		{"NUL", "a\x00b", `'\x00'`},
		{"300 characters", strings.Repeat("a", 300), "300 characters long; at most 64"},
		{"newline", "a\nb", `'\n'`},
		{"leading space", " a", "begins or ends with a space"},
		{"backslash", `a\b`, `'\\'`},
		{"symbol", "ok ✓", `'✓'`},
	} {
		body, _ := json.Marshal(api.CreateSnapshotRequest{Label: tc.label})
		refused("label "+tc.name, "POST", base, "ann-token", string(body), 422, "label", tc.says)
	}
	// JSON decoding makes a byte that is not UTF-8 U+FFFD, which is no letter.
	refused("label not UTF-8", "POST", base, "ann-token", "{\"label\":\"a\xffb\"}", 422, "label", "may not hold")
	refused("unknown field", "POST", base, "ann-token", `{"name":"x"}`, 400, "name", "")
	// A Chinese label is a label.
	code, _, raw := call("POST", base, "ann-token", `{"label":"升级前"}`)
	var made api.SnapshotResponse
	if err := json.Unmarshal(raw, &made); code != 202 || err != nil || made.Snapshot.Label != "升级前" || made.Operation.Kind != store.OpSnapshot ||
		made.Snapshot.ExpiresAt == nil || made.Snapshot.State != api.SnapshotCreating {
		t.Fatalf("create: %d %s", code, raw)
	}
	snapID := made.Snapshot.ID
	// The operation is unfinished: everything else waits for it.
	refused("busy", "POST", base, "ann-token", "", 409, "", "unfinished snapshot operation")
	if err := st.FinishOperation(ctx, made.Operation.ID, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.SetSnapshotState(ctx, snapID, store.SnapReady, nil, store.SnapshotUpdate{Consistency: store.SnapQuiesced}); err != nil {
		t.Fatal(err)
	}
	refused("limit", "POST", "/v1/vms/"+annRunning.ID+"/snapshots", "ann-token", "", 409, "id", "the most allowed by policy defaults (snapshots.keep = 1)")
	refused("no disk", "POST", "/v1/vms/"+noDisk.ID+"/snapshots", "ann-token", "", 409, "id", "the VM has no disk (it boots a kernel directly)")
	refused("a snapshot of her other VM", "POST", "/v1/vms/"+annRunning.ID+"/snapshots/"+snapID+"/restore", "ann-token", "", 404, "snap", "has no snapshot")

	// Another person: on every route, ann's VM is not found (field id),
	// and ann's snapshot under bob's own VM is not found (field snap).
	routes := []struct{ method, suffix, body string }{
		{"GET", "/snapshots", ""}, {"POST", "/snapshots", `{"label":"x"}`}, {"GET", "/snapshots/" + snapID, ""},
		{"POST", "/snapshots/" + snapID + "/restore", ""}, {"DELETE", "/snapshots/" + snapID, ""},
	}
	for _, r := range routes {
		refused("bob on ann's VM "+r.method+r.suffix, r.method, "/v1/vms/"+ann.ID+r.suffix, "bob-token", r.body, 404, "id", "no VM")
		if strings.Contains(r.suffix, snapID) {
			refused("bob's VM, ann's snapshot "+r.method+r.suffix, r.method, "/v1/vms/"+bobs.ID+r.suffix, "bob-token", r.body, 404, "snap", "has no snapshot")
		}
	}
	refused("traversal in the path", "GET", base+"/..%2F..%2Fetc", "ann-token", "", 404, "", "no route")
	for _, bad := range []string{"..", "%00", strings.Repeat("x", 300), "a%0Ab"} {
		refused("bad snapshot ref "+bad[:min(3, len(bad))], "GET", base+"/"+bad, "ann-token", "", 404, "snap", "has no snapshot")
	}
	// By label, the owner's list, a restore of the stopped VM.
	code, _, raw = call("GET", base+"/升级前", "ann-token", "")
	if code != 200 || !strings.Contains(string(raw), snapID) {
		t.Fatalf("by label: %d %s", code, raw)
	}
	code, _, raw = call("GET", base, "ann-token", "")
	var list api.SnapshotList
	if err := json.Unmarshal(raw, &list); code != 200 || err != nil || len(list.Snapshots) != 1 || list.Keep == nil || *list.Keep != 1 ||
		list.Rule != "policy defaults" || list.Snapshots[0].Consistency != api.SnapshotQuiesced {
		t.Fatalf("list: %d %s", code, raw)
	}
	code, _, raw = call("POST", base+"/"+snapID+"/restore", "ann-token", "")
	if err := json.Unmarshal(raw, &made); code != 202 || err != nil || made.Operation.Kind != store.OpRestore || made.Snapshot.State != api.SnapshotRestoring {
		t.Fatalf("restore: %d %s", code, raw)
	}
}
