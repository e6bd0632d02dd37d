package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

type countWaker struct{ n atomic.Int32 }

func (w *countWaker) Wake() { w.n.Add(1) }

// leaderWaker is a fleet's node's Waker: Wake wakes every node, WakeLeader
// the leader alone.
type leaderWaker struct{ all, leader atomic.Int32 }

func (w *leaderWaker) Wake()       { w.all.Add(1) }
func (w *leaderWaker) WakeLeader() { w.leader.Add(1) }

// In a fleet a create wakes the leader alone, which places the queue; a
// delete wakes every node (the VM's own makes it go).
func TestCreateWakesTheLeaderAlone(t *testing.T) {
	s, _, _ := vmServer(t)
	w := &leaderWaker{}
	s.Worker = w
	rec, m := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"one"}`)
	if rec.Code != 202 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	if w.leader.Load() != 1 || w.all.Load() != 0 {
		t.Errorf("a create woke the leader %d times and every node %d times; want the leader once", w.leader.Load(), w.all.Load())
	}
	id := m["vm"].(map[string]any)["id"].(string)
	if rec, _ := send(t, s, "DELETE", "/v1/vms/"+id, "ann-token", ""); rec.Code != 202 || w.all.Load() != 1 {
		t.Errorf("delete: %d, every node woken %d times; want once", rec.Code, w.all.Load())
	}
}

func vmServer(t *testing.T) (*Server, *store.Store, *countWaker) {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
profile "seat" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  lease {
    default = "2h"
    max     = "8h"
  }
}
template "pw" {
  content = "#cloud-config\npassword: ${password_hash}\n"
}
template "keys" {
  content = "#cloud-config\nuser: ${user}\n"
}
profile "desk" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  cloud_init { template = "pw" }
  desktop { protocol = "vnc" }
}
profile "tiny" {
  vcpus = 1
  memory = "256MiB"
  boot { kernel = "/k" }
  cloud_init { template = "keys" }
}
profile "headless" {
  vcpus = 1
  memory = "256MiB"
  boot { kernel = "/k" }
  display { type = "none" }
  network { type = "none" }
}
profile "staff-only" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  users = ["bob"]
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st := storetest.New(t)
	users := fakeAuth{"admin-token": {Name: "admin", Admin: true}, "ann-token": {Name: "ann"}, "bob-token": {Name: "bob"}}
	for _, u := range users {
		if err := st.CreateUser(context.Background(), &store.User{Name: u.Name, Admin: u.Admin}); err != nil {
			t.Fatal(err)
		}
	}
	w := &countWaker{}
	return newServer(t, Deps{Auth: users, Backends: fakeBackends{}, Config: &fakeConfig{cfg: cfg}, Store: st, Worker: w}), st, w
}

func send(t *testing.T, s *Server, method, path, token, body string, hdr ...string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var m map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return rec, m
}

func TestCreateVMValidation(t *testing.T) {
	s, _, w := vmServer(t)
	tests := []struct {
		name, token, body string
		status            int
		problem, field    string
	}{
		{"unknown field", "ann-token", `{"profile":"seat","gpu":"all"}`, 400, "bad-request", "gpu"},
		{"wrong type", "ann-token", `{"profile":"seat","hours":"8"}`, 400, "bad-request", "hours"},
		{"not JSON", "ann-token", `{profile`, 400, "bad-request", ""},
		{"two values", "ann-token", `{"profile":"seat"} {}`, 400, "bad-request", ""},
		{"no profile", "ann-token", `{}`, 422, "validation", "profile"},
		{"unknown profile", "ann-token", `{"profile":"nope"}`, 404, "not-found", "profile"},
		{"profile of others", "ann-token", `{"profile":"staff-only"}`, 404, "not-found", "profile"},
		{"too many hours", "ann-token", `{"profile":"seat","hours":9}`, 422, "validation", "hours"},
		{"negative hours", "ann-token", `{"profile":"seat","hours":-1}`, 422, "validation", "hours"},
		// time.Duration(2562048)*time.Hour overflows to a negative duration.
		{"hours overflowing a duration", "ann-token", `{"profile":"seat","hours":2562048}`, 422, "validation", "hours"},
		{"hours at the int64 maximum", "ann-token", `{"profile":"seat","hours":9223372036854775807}`, 422, "validation", "hours"},
		{"hours past int64", "ann-token", `{"profile":"seat","hours":9223372036854775808}`, 400, "bad-request", "hours"},
		{"fractional hours", "ann-token", `{"profile":"seat","hours":2.5}`, 400, "bad-request", "hours"},
		{"exponent hours", "ann-token", `{"profile":"seat","hours":1e3}`, 400, "bad-request", "hours"},
		{"hours past the default maximum", "bob-token", `{"profile":"staff-only","hours":2562048}`, 422, "validation", "hours"},
		{"start far ahead", "ann-token", `{"profile":"seat","start_at":"9999-12-31T23:59:59Z"}`, 422, "validation", "start_at"},
		{"start long ago", "ann-token", `{"profile":"seat","start_at":"0001-01-01T00:00:00Z"}`, 422, "validation", "start_at"},
		{"duplicate key", "ann-token", `{"profile":"seat","hours":1,"hours":2}`, 400, "bad-request", "hours"},
		{"duplicate key in a list", "ann-token", `{"profile":"seat","ssh_keys":[{"a":1,"a":2}]}`, 400, "bad-request", "ssh_keys[0].a"},
		{"trailing garbage", "ann-token", `{"profile":"seat"}garbage`, 400, "bad-request", ""},
		{"too many SSH keys", "ann-token", `{"profile":"seat","ssh_keys":[` + strings.Repeat(`"ssh-ed25519 AAAA",`, maxSSHKeys) + `"x"]}`, 422, "validation", "ssh_keys"},
		{"a huge SSH key", "ann-token", `{"profile":"seat","ssh_keys":["ssh-rsa ` + strings.Repeat("A", maxSSHKeyBytes) + `"]}`, 422, "validation", "ssh_keys[0]"},
		{"bad name", "ann-token", `{"profile":"seat","name":"Bad Name"}`, 422, "validation", "name"},
		{"bad key", "ann-token", `{"profile":"seat","ssh_keys":["a\nb"]}`, 422, "validation", "ssh_keys[0]"},
		{"too large", "ann-token", `{"profile":"seat","name":"` + strings.Repeat("a", api.MaxRequestBytes) + `"}`, 413, "too-large", ""},
		{"no token", "", `{"profile":"seat"}`, 401, "unauthenticated", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, body := send(t, s, "POST", "/v1/vms", tc.token, tc.body)
			if rec.Code != tc.status || body["type"] != ProblemBase+tc.problem || (body["field"] != nil && body["field"] != tc.field) || (tc.field != "" && body["field"] != tc.field) {
				t.Errorf("%d %v", rec.Code, body)
			}
			if rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("Content-Type %q", rec.Header().Get("Content-Type"))
			}
		})
	}
	if w.n.Load() != 0 {
		t.Error("the worker was woken for refused requests")
	}
}

func TestVMLifecycleAPI(t *testing.T) {
	s, st, w := vmServer(t)
	rec, _ := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"box","hours":8,"ssh_keys":["ssh-ed25519 AAAA ann"]}`)
	if rec.Code != 202 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	var created api.CreateVMResponse
	json.Unmarshal(rec.Body.Bytes(), &created)
	if created.VM.State != "queued" || created.VM.Owner != "ann" || created.VM.Hours != 8 || created.Operation.Kind != "create" || created.Operation.VMID != created.VM.ID {
		t.Fatalf("%+v", created)
	}
	if w.n.Load() != 1 {
		t.Errorf("woken %d times", w.n.Load())
	}
	// Default name and hours.
	rec, _ = send(t, s, "POST", "/v1/vms", "bob-token", `{"profile":"staff-only"}`)
	var bobs api.CreateVMResponse
	json.Unmarshal(rec.Body.Bytes(), &bobs)
	if rec.Code != 202 || !strings.HasPrefix(bobs.VM.Name, "staff-only-") || bobs.VM.Hours < 1 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	// The same name again is a conflict.
	if rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"box"}`); rec.Code != 409 || body["field"] != "name" {
		t.Errorf("same name: %d %v", rec.Code, body)
	}

	// Idempotency: same key and body → the same answer; another body → 409.
	body := `{"profile":"seat","name":"idem"}`
	rec1, _ := send(t, s, "POST", "/v1/vms", "ann-token", body, "Idempotency-Key", "k1")
	rec2, _ := send(t, s, "POST", "/v1/vms", "ann-token", body, "Idempotency-Key", "k1")
	var a1, a2 api.CreateVMResponse
	json.Unmarshal(rec1.Body.Bytes(), &a1)
	json.Unmarshal(rec2.Body.Bytes(), &a2)
	if rec1.Code != 202 || rec2.Code != 202 || a1.VM.ID != a2.VM.ID || a1.Operation.ID != a2.Operation.ID {
		t.Errorf("replay: %d %d %s %s", rec1.Code, rec2.Code, a1.VM.ID, a2.VM.ID)
	}
	if rec, b := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"other"}`, "Idempotency-Key", "k1"); rec.Code != 409 || b["type"] != ProblemBase+"conflict" {
		t.Errorf("reused key: %d %v", rec.Code, b)
	}
	// Keys are per user.
	if rec, _ := send(t, s, "POST", "/v1/vms", "bob-token", `{"profile":"seat","name":"idem"}`, "Idempotency-Key", "k1"); rec.Code != 202 {
		t.Errorf("bob's k1: %d", rec.Code)
	}

	id := created.VM.ID
	// Reads: own by ID or name; others' are not found; admins see all.
	for _, tc := range []struct {
		token, path string
		status      int
	}{
		{"ann-token", "/v1/vms/" + id, 200},
		{"ann-token", "/v1/vms/box", 200},
		{"bob-token", "/v1/vms/" + id, 404},
		{"bob-token", "/v1/vms/box", 404},
		{"admin-token", "/v1/vms/" + id, 200},
		{"ann-token", "/v1/operations/" + created.Operation.ID, 200},
		{"bob-token", "/v1/operations/" + created.Operation.ID, 404},
		{"admin-token", "/v1/operations/" + created.Operation.ID, 200},
		{"ann-token", "/v1/operations/nope", 404},
		{"bob-token", "/v1/vms?state=bogus", 400},
		{"bob-token", "/v1/vms?limit=0", 400},
		{"bob-token", "/v1/vms?after=!!", 400},
	} {
		if rec, b := send(t, s, "GET", tc.path, tc.token, ""); rec.Code != tc.status {
			t.Errorf("%s GET %s: %d %v", tc.token, tc.path, rec.Code, b)
		}
	}
	list := func(token, query string) api.VMList {
		t.Helper()
		rec, _ := send(t, s, "GET", "/v1/vms"+query, token, "")
		if rec.Code != 200 {
			t.Fatalf("list: %d %s", rec.Code, rec.Body)
		}
		var l api.VMList
		json.Unmarshal(rec.Body.Bytes(), &l)
		return l
	}
	if l := list("ann-token", ""); len(l.Items) != 2 {
		t.Errorf("ann sees %d VMs", len(l.Items))
	}
	if l := list("admin-token", ""); len(l.Items) != 4 {
		t.Errorf("admin sees %d VMs", len(l.Items))
	}
	// owner, as documented: admins see one user's; a user sees their own
	// whatever they ask.
	if l := list("admin-token", "?owner=ann"); len(l.Items) != 2 || l.Items[0].Owner != "ann" || l.Items[1].Owner != "ann" {
		t.Errorf("admin asks for ann's: %+v", l.Items)
	}
	if l := list("bob-token", "?owner=ann"); len(l.Items) != 2 || l.Items[0].Owner != "bob" {
		t.Errorf("bob asks for ann's: %+v", l.Items)
	}
	p1 := list("admin-token", "?limit=3")
	p2 := list("admin-token", "?limit=3&after="+p1.Next)
	if len(p1.Items) != 3 || p1.Next == "" || len(p2.Items) != 1 || p2.Next != "" || p2.Items[0].ID == p1.Items[2].ID {
		t.Errorf("pages: %d %q, %d %q", len(p1.Items), p1.Next, len(p2.Items), p2.Next)
	}
	if l := list("ann-token", "?state=running"); len(l.Items) != 0 {
		t.Errorf("running: %d", len(l.Items))
	}

	// Delete: not others'; twice gives the same operation.
	if rec, _ := send(t, s, "DELETE", "/v1/vms/"+id, "bob-token", ""); rec.Code != 404 {
		t.Errorf("bob deletes ann's VM: %d", rec.Code)
	}
	rec, _ = send(t, s, "DELETE", "/v1/vms/box", "ann-token", "")
	var d1, d2 api.OperationResponse
	json.Unmarshal(rec.Body.Bytes(), &d1)
	rec2, _ = send(t, s, "DELETE", "/v1/vms/"+id, "ann-token", "")
	json.Unmarshal(rec2.Body.Bytes(), &d2)
	if rec.Code != 202 || rec2.Code != 202 || d1.Operation.Kind != "delete" || d1.Operation.ID != d2.Operation.ID {
		t.Errorf("delete: %d %d %+v %+v", rec.Code, rec2.Code, d1, d2)
	}
	if ops, _ := st.ListUnfinishedOperations(context.Background()); len(ops) != 5 {
		t.Errorf("%d unfinished operations", len(ops))
	}
}

// The guest's SSH host key that the orchestrator recorded in the VM's spec
// is on GET /v1/vms/{id} and in lists; a VM without one has no field.
func TestVMShowsSSHHostKeys(t *testing.T) {
	s, st, _ := vmServer(t)
	ctx := context.Background()
	rec, _ := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"box","hours":8,"ssh_keys":["ssh-ed25519 AAAA ann"]}`)
	var created api.CreateVMResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &created); err != nil || rec.Code != 202 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if rec, _ := send(t, s, "GET", "/v1/vms/box", "ann-token", ""); strings.Contains(rec.Body.String(), "ssh_host_keys") {
		t.Errorf("a VM without host keys: %s", rec.Body)
	}
	vm, err := st.GetVM(ctx, created.VM.ID)
	if err != nil {
		t.Fatal(err)
	}
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKbdq gpuvm-" + vm.ID
	spec := `{"hours":8,"ssh_keys":["ssh-ed25519 AAAA ann"],"ssh_host_keys":["` + key + `"]}`
	if _, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: vm.State, Phase: vm.Phase, Spec: &spec}); err != nil {
		t.Fatal(err)
	}
	rec, _ = send(t, s, "GET", "/v1/vms/box", "ann-token", "")
	var got api.VM
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || len(got.SSHHostKeys) != 1 || got.SSHHostKeys[0] != key {
		t.Errorf("GET: %d %s; want ssh_host_keys [%q]", rec.Code, rec.Body, key)
	}
	rec, _ = send(t, s, "GET", "/v1/vms", "ann-token", "")
	var l api.VMList
	if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || len(l.Items) != 1 || len(l.Items[0].SSHHostKeys) != 1 {
		t.Errorf("list: %d %s", rec.Code, rec.Body)
	}
}

// A name made up for an unnamed VM that one of the person's VMs has already
// is made up again: the create succeeds. A name the person gave is refused.
func TestCreateVMNameMadeUpAgain(t *testing.T) {
	s, _, _ := vmServer(t)
	names := []string{"seat-000001", "seat-000001", "seat-000002"}
	made := 0
	newVMName = func(string) string { made++; return names[min(made, len(names))-1] }
	t.Cleanup(func() { newVMName = generatedName })
	for _, want := range []string{"seat-000001", "seat-000002"} {
		rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat"}`)
		vm, _ := body["vm"].(map[string]any)
		if rec.Code != 202 || vm == nil || vm["name"] != want {
			t.Fatalf("%d %v, want %s", rec.Code, body, want)
		}
	}
	if made != 3 {
		t.Errorf("%d names made up, want 3 (the second taken)", made)
	}
	if rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"seat-000002"}`); rec.Code != 409 || body["field"] != "name" {
		t.Errorf("a name given twice: %d %v", rec.Code, body)
	}
}

// allocRecorder records the VMs whose allocations a request asked for.
type allocRecorder struct {
	Store
	asked [][]string
}

func (r *allocRecorder) ListAllocationsForVMs(ctx context.Context, ids []string) (map[string][]store.Allocation, error) {
	r.asked = append(r.asked, slices.Clone(ids))
	return r.Store.ListAllocationsForVMs(ctx, ids)
}

// A page of VMs asks for the allocations of its placed VMs only: a queued
// VM holds no GPU (every way back to the queue gives it back first), so
// the admin's queue page asks for none (issue #26); a running VM's GPU is
// still in the page.
func TestListVMsAsksAllocationsOfPlacedVMsOnly(t *testing.T) {
	s, st, _ := vmServer(t)
	ctx := context.Background()
	ids := map[string]string{}
	for _, name := range []string{"waits", "runs"} {
		rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","name":"`+name+`"}`)
		if rec.Code != 202 {
			t.Fatalf("create %s: %d %s", name, rec.Code, rec.Body)
		}
		ids[name] = body["vm"].(map[string]any)["id"].(string)
	}
	vm, err := st.GetVM(ctx, ids["runs"])
	if err != nil {
		t.Fatal(err)
	}
	host := "gpu-01"
	if _, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Host: &host}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimAllocation(ctx, vm.ID, []store.SlotClaim{{Host: host, GPUAddress: "0000:41:00.0", Backend: "passthrough", Kind: gpu.KindPassthrough}}); err != nil {
		t.Fatal(err)
	}
	rec := &allocRecorder{Store: s.Store}
	s.Store = rec
	for _, tc := range []struct {
		query     string
		wantAsked string // the IDs asked for, per call
		wantGPUs  map[string]int
	}{
		{"?state=queued&limit=1000", "", map[string]int{"waits": 0}},
		{"", "[" + ids["runs"] + "]", map[string]int{"waits": 0, "runs": 1}},
		{"?state=running", "[" + ids["runs"] + "]", map[string]int{"runs": 1}},
	} {
		rec.asked = nil
		resp, _ := send(t, s, "GET", "/v1/vms"+tc.query, "admin-token", "")
		var list api.VMList
		if resp.Code != 200 || json.Unmarshal(resp.Body.Bytes(), &list) != nil {
			t.Fatalf("GET /v1/vms%s: %d %s", tc.query, resp.Code, resp.Body)
		}
		got := map[string]int{}
		for _, vm := range list.Items {
			got[vm.Name] = len(vm.GPUs)
		}
		asked := ""
		for _, a := range rec.asked {
			asked += fmt.Sprint(a)
		}
		if asked != tc.wantAsked || !maps.Equal(got, tc.wantGPUs) {
			t.Errorf("GET /v1/vms%s: asked allocations of %q, GPUs %v; want %q, %v", tc.query, asked, got, tc.wantAsked, tc.wantGPUs)
		}
	}
}
