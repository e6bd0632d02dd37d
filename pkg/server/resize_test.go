package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

const resizeConfig = `
image "cuda" {
  path         = "/images/cuda.qcow2"
  guest_driver = "550.90.07"
}
profile "slice" {
  vcpus  = 1
  memory = "1GiB"
  disk { image = "cuda" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
}
profile "whole" {
  vcpus  = 4
  memory = "8GiB"
  disk { image = "cuda" }
  network { type = "none" }
  gpu {
    kind  = "passthrough"
    model = "H100"
  }
}
profile "bobs" {
  vcpus  = 1
  memory = "1GiB"
  disk { image = "cuda" }
  network { type = "none" }
  users  = ["bob"]
}
policy {
  user "cara" {
    quota { gpus = 0 }
  }
}
`

// resizeServer is an API whose resizes a real orchestrator plans and
// queues (no worker runs them), with a stopped VM of profile slice for
// ann, one for cara and a running one for ann.
func resizeServer(t *testing.T) (*Server, *store.Store, map[string]*store.VM) {
	t.Helper()
	return resizeServerWith(t, resizeConfig)
}

// resizeServerWith is resizeServer with the configuration text.
func resizeServerWith(t *testing.T, text string) (*Server, *store.Store, map[string]*store.VM) {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(text)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := storetest.New(t, storetest.WithLogger(log))
	users := fakeAuth{"admin-token": {Name: "admin", Admin: true}, "ann-token": {Name: "ann"}, "cara-token": {Name: "cara"}}
	for _, u := range users {
		if err := st.CreateUser(ctx, &store.User{Name: u.Name, Admin: u.Admin}); err != nil {
			t.Fatal(err)
		}
	}
	mig := &backend.Mock{InventoryF: func(context.Context) (backend.Inventory, error) {
		return backend.Inventory{Backend: "mig", Host: "test", GPUs: []backend.GPU{{Address: "0000:18:00.0", Model: "H100", DeviceID: "10de:2331", Memory: 80 << 30, Mode: gpu.ModeMIG}}}, nil
	}}
	bs := fakeBackends{"mig": mig}
	orch := orchestrator.New(orchestrator.Config{Store: st, Backends: bs, Profiles: func() *config.Config { return cfg }, Host: "test", Log: log})
	vms := map[string]*store.VM{}
	for _, v := range []struct{ name, owner, state string }{{"down", "ann", store.VMStopped}, {"up", "ann", store.VMRunning}, {"caras", "cara", store.VMStopped}} {
		vm := &store.VM{Name: v.name, Owner: v.owner, Profile: "slice", Hours: 2, Spec: `{"hours":2}`}
		op, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: v.owner})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.FinishOperation(ctx, op.ID, nil); err != nil {
			t.Fatal(err)
		}
		if vms[v.name], err = st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: v.state}); err != nil {
			t.Fatal(err)
		}
	}
	return newServer(t, Deps{Auth: users, Backends: bs, Config: &fakeConfig{cfg: cfg}, Store: st, Admission: orch, Log: log}), st, vms
}

// A dry run answers the plan and changes nothing; a resize queues its
// operation (202), its audit entry and event; the VM then shows no
// previous profile until the worker has run it.
func TestResizeRoute(t *testing.T) {
	s, st, vms := resizeServer(t)
	ctx := context.Background()
	path := "/v1/vms/" + vms["down"].ID + "/actions/resize"
	rec, _ := send(t, s, "POST", path, "ann-token", `{"profile":"whole","dry_run":true}`)
	if rec.Code != 200 {
		t.Fatalf("dry run: %d %s", rec.Code, rec.Body)
	}
	var plan api.ResizeVMResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &plan); err != nil {
		t.Fatal(err)
	}
	p := plan.Plan
	if plan.Operation != nil || p.From.Profile != "slice" || p.To.Profile != "whole" || p.To.VCPUs != 4 || p.To.Kind != "passthrough" ||
		p.Driver != api.DriverNotNeeded || !strings.Contains(p.Disk, `kept: the VM's disk on image "cuda"`) ||
		len(p.From.Licences) != 1 || p.From.Licences[0].Products[0] != "NVIDIA AI Enterprise" || len(p.To.Licences[0].Products) != 0 {
		t.Errorf("plan %+v", p)
	}
	if got, _ := st.GetVM(ctx, vms["down"].ID); got.Version != vms["down"].Version {
		t.Errorf("a dry run changed the VM: %+v", got)
	}
	rec, _ = send(t, s, "POST", path, "ann-token", `{"profile":"whole"}`)
	if rec.Code != 202 {
		t.Fatalf("resize: %d %s", rec.Code, rec.Body)
	}
	var out api.ResizeVMResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Operation == nil || out.Operation.Kind != store.OpResize || out.VM == nil || out.VM.Profile != "slice" || rec.Header().Get("Location") != "/v1/operations/"+out.Operation.ID {
		t.Errorf("resize answer %s", rec.Body)
	}
	if to, _ := orchestrator.ResizeOfSpec(mustVM(t, st, vms["down"].ID).Spec); to != "whole" {
		t.Errorf("the spec does not name the target: %s", mustVM(t, st, vms["down"].ID).Spec)
	}
	entries, _, err := st.ListAudit(ctx, store.AuditFilter{Action: "vm.resize", Limit: 10})
	if err != nil || len(entries) == 0 || entries[0].Action != "vm.resize" || !strings.Contains(entries[0].Detail, "profile slice to whole") {
		t.Errorf("audit %+v %v", entries, err)
	}
	rec, body := send(t, s, "POST", path, "ann-token", `{"profile":"whole"}`)
	if rec.Code != 409 || !strings.Contains(body["detail"].(string), "unfinished resize operation") {
		t.Errorf("a second resize: %d %s", rec.Code, rec.Body)
	}
}

// Every refused resize names why (and the field), and changes nothing.
func TestResizeRouteRefusals(t *testing.T) {
	s, st, vms := resizeServer(t)
	ctx := context.Background()
	down, up, caras := vms["down"].ID, vms["up"].ID, vms["caras"].ID
	for _, tc := range []struct {
		name, vm, token, body string
		status                int
		field, detail         string
	}{
		{"running", up, "ann-token", `{"profile":"whole"}`, 409, "", `VM "up" is running: only a stopped VM can be resized`},
		{"unknown profile", down, "ann-token", `{"profile":"nope"}`, 404, "profile", `unknown profile "nope"`},
		{"not open to the owner", down, "ann-token", `{"profile":"bobs"}`, 404, "profile", "unknown profile"},
		{"past a quota", caras, "cara-token", `{"profile":"whole"}`, 403, "profile", "quota: user cara"},
		{"past a quota, dry run", caras, "cara-token", `{"profile":"whole","dry_run":true}`, 403, "profile", "quota: user cara"},
		{"same profile", down, "ann-token", `{"profile":"slice"}`, 422, "profile", "already has profile"},
		{"no profile", down, "ann-token", `{}`, 422, "profile", "name the profile"},
		{"NUL byte", down, "ann-token", `{"profile":"whole\u0000"}`, 422, "profile", "no control characters"},
		{"long name", down, "ann-token", `{"profile":"` + strings.Repeat("p", 1<<20-100) + `"}`, 422, "profile", "at most 200 characters"},
		{"1 MB name", down, "ann-token", `{"profile":"` + strings.Repeat("p", 1<<20) + `"}`, 413, "", "at most"},
		{"profile a number", down, "ann-token", `{"profile":7}`, 400, "profile", "string"},
		{"unknown field", down, "ann-token", `{"profile":"whole","gpu":"big"}`, 400, "gpu", ""},
		{"dry_run a string", down, "ann-token", `{"profile":"whole","dry_run":"yes"}`, 400, "dry_run", ""},
		{"another's VM", caras, "ann-token", `{"profile":"whole"}`, 404, "", ""},
	} {
		before := mustVM(t, st, tc.vm)
		rec, body := send(t, s, "POST", "/v1/vms/"+tc.vm+"/actions/resize", tc.token, tc.body)
		field, _ := body["field"].(string)
		detail, _ := body["detail"].(string)
		if rec.Code != tc.status || field != tc.field || !strings.Contains(detail, tc.detail) {
			t.Errorf("%s: %d field %q %.200q, want %d %q %q", tc.name, rec.Code, field, detail, tc.status, tc.field, tc.detail)
		}
		if after := mustVM(t, st, tc.vm); after.Version != before.Version || after.Profile != before.Profile || after.Spec != before.Spec {
			t.Errorf("%s: the refusal changed the VM: %+v", tc.name, after)
		}
		if ops, _ := st.ListOperations(ctx, tc.vm); ops[len(ops)-1].Kind == store.OpResize {
			t.Errorf("%s: a refused resize left an operation", tc.name)
		}
	}
	// An admin may move ann's VM to a profile not open to her.
	if rec, _ := send(t, s, "POST", "/v1/vms/"+down+"/actions/resize", "admin-token", `{"profile":"bobs","dry_run":true}`); rec.Code != 200 {
		t.Errorf("an admin's dry run: %d %s", rec.Code, rec.Body)
	}
}

func mustVM(t *testing.T, st *store.Store, id string) *store.VM {
	t.Helper()
	vm, err := st.GetVM(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}
