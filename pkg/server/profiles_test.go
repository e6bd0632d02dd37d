package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

const servableHCL = `
profile "l40s-seat" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
profile "l40s-whole" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    kind  = "passthrough"
    model = "L40S"
  }
}
profile "h100-vgpu" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    kind = "vgpu"
    type = "H100-4C"
  }
}
profile "cpu" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
`

// servableEnv is a server with GPU profiles, a clock and a store, and no
// host until the test registers one.
func servableEnv(t *testing.T) (*Server, *store.Store, *clocktest.Clock) {
	t.Helper()
	return servableEnvOf(t, servableHCL)
}

// servableEnvOf is servableEnv with the profiles of hcl.
func servableEnvOf(t *testing.T, hcl string) (*Server, *store.Store, *clocktest.Clock) {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(hcl)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	clock := clocktest.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	st := storetest.New(t, storetest.WithClock(clock.Now), storetest.Quiet)
	users := fakeAuth{"admin-token": {Name: "admin", Admin: true}, "ann-token": {Name: "ann"}}
	for _, u := range users {
		if err := st.CreateUser(context.Background(), &store.User{Name: u.Name, Admin: u.Admin}); err != nil {
			t.Fatal(err)
		}
	}
	s := newServer(t, Deps{Auth: users, Backends: fakeBackends{}, Config: &fakeConfig{cfg: cfg}, Store: st, Worker: &countWaker{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return s, st, clock
}

// l40sHost registers a host of two L40S GPUs, one on vGPU and one idle,
// as its heartbeat stores it.
func l40sHost(t *testing.T, st *store.Store, name string) {
	t.Helper()
	inv := api.HostInventory{Simulated: true, GPUs: []api.GPU{
		{Address: "0000:41:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: "vgpu", Backends: map[string]string{"vgpu": ""},
			VGPUTypes: []api.VGPUType{{Name: "L40S-12Q", Available: 4}}},
		{Address: "0000:42:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: "idle", Backends: map[string]string{"vgpu": "", "passthrough": ""},
			VGPUTypes: []api.VGPUType{{Name: "L40S-12Q", Available: 4}}},
	}}
	b, _ := json.Marshal(inv)
	if err := st.RegisterHost(context.Background(), &store.Host{Name: name, APIURL: "http://" + name, Inventory: string(b)}); err != nil {
		t.Fatal(err)
	}
}

// unservableOf lists GET /v1/profiles: each profile's unservable.
func unservableOf(t *testing.T, s *Server) map[string]string {
	t.Helper()
	rec, _ := send(t, s, "GET", "/v1/profiles", "ann-token", "")
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	var ps []map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &ps); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range ps {
		name, _ := p["name"].(string)
		if p["vcpus"] == nil || p["lease"] == nil {
			t.Errorf("profile %s lost its resolved fields: %v", name, p)
		}
		if u, ok := p["unservable"]; ok {
			out[name], _ = u.(string)
			if out[name] == "" {
				t.Errorf("profile %s: unservable %v, want words or nothing", name, u)
			}
		}
	}
	if len(ps) != 4 {
		t.Errorf("%d profiles, want 4", len(ps))
	}
	return out
}

func TestProfilesMarkedUnservable(t *testing.T) {
	s, st, clock := servableEnv(t)
	// No host has reported: nothing is said.
	if got := unservableOf(t, s); len(got) != 0 {
		t.Errorf("with no host, unservable %v; want none", got)
	}
	l40sHost(t, st, "n1")
	caughtUp(t, s)
	got := unservableOf(t, s)
	want := "no GPU here can ever give H100-4C on H100 (boards: L40S; check their modes and models)"
	if len(got) != 1 || got["h100-vgpu"] != want {
		t.Errorf("unservable %v; want only h100-vgpu: %q", got, want)
	}
	// One profile says the same.
	rec, body := send(t, s, "GET", "/v1/profiles/h100-vgpu", "ann-token", "")
	if rec.Code != 200 || body["unservable"] != want || body["name"] != "h100-vgpu" {
		t.Errorf("GET one: %d %v", rec.Code, body)
	}
	rec, body = send(t, s, "GET", "/v1/profiles/l40s-whole", "ann-token", "")
	if _, ok := body["unservable"]; rec.Code != 200 || ok {
		t.Errorf("GET a servable one: %d %v", rec.Code, body)
	}
	// A full or drained GPU can still serve later: only "never" counts.
	if err := st.DrainGPU(context.Background(), &store.GPUDrain{Host: "n1", GPUAddress: "0000:42:00.0", DrainedBy: "admin"}); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, s) // the drain was written behind the server's back
	if got := unservableOf(t, s); len(got) != 1 || got["l40s-whole"] != "" {
		t.Errorf("with a GPU drained, unservable %v", got)
	}
	// The host goes down: nothing is known again.
	clock.Advance(config.DefaultHeartbeatTimeout + time.Second)
	caughtUp(t, s)
	if got := unservableOf(t, s); len(got) != 0 {
		t.Errorf("with the host down, unservable %v; want none", got)
	}
}

func TestCreateUnservableRefused(t *testing.T) {
	s, st, clock := servableEnv(t)
	// With no host up the VM queues: a host may yet report the board.
	rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"h100-vgpu","name":"early"}`)
	if rec.Code != 202 {
		t.Fatalf("with no host: %d %v", rec.Code, body)
	}
	// Its retry with the same Idempotency-Key gets the same answer.
	if rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"h100-vgpu","name":"keyed"}`, "Idempotency-Key", "k1"); rec.Code != 202 {
		t.Fatalf("with no host, keyed: %d %v", rec.Code, body)
	}
	l40sHost(t, st, "n1")
	if rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"h100-vgpu","name":"keyed"}`, "Idempotency-Key", "k1"); rec.Code != 202 || body["vm"] == nil {
		t.Errorf("the keyed retry, a host up: %d %v", rec.Code, body)
	}
	tests := []struct {
		name, body string
		status     int
		detail     string
	}{
		{"never", `{"profile":"h100-vgpu","name":"late"}`, 422, "profile h100-vgpu can never be served here: no GPU here can ever give H100-4C on H100 (boards: L40S;"},
		{"never, starting later", `{"profile":"h100-vgpu","start_at":"2026-03-01T12:00:00Z"}`, 422, "can ever give H100-4C"},
		{"servable", `{"profile":"l40s-whole","name":"whole"}`, 202, ""},
		{"no GPU", `{"profile":"cpu","name":"plain"}`, 202, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, body := send(t, s, "POST", "/v1/vms", "ann-token", tc.body)
			if rec.Code != tc.status {
				t.Fatalf("%d %v", rec.Code, body)
			}
			if tc.detail == "" {
				return
			}
			if body["type"] != ProblemBase+"validation" || body["field"] != "profile" || !strings.Contains(body["detail"].(string), tc.detail) {
				t.Errorf("%v; want a validation problem on profile with %q", body, tc.detail)
			}
		})
	}
	page, err := st.ListVMs(context.Background(), store.VMFilter{Owner: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, vm := range page.VMs {
		names[vm.Name] = true
	}
	if len(page.VMs) != 4 || !names["keyed"] || !names["early"] || !names["whole"] || !names["plain"] {
		t.Errorf("VMs %v; the refused ones were made", names)
	}
	// Another host reports in: the answer kept for the hosts before is
	// not the answer now (its board is among those named).
	inv := api.HostInventory{Simulated: true, GPUs: []api.GPU{{Address: "0000:51:00.0", Model: "H100", DeviceID: "10de:2330",
		Mode: "vgpu", Backends: map[string]string{"vgpu": ""}, VGPUTypes: []api.VGPUType{{Name: "H100-4C", Available: 20}}}}}
	b, _ := json.Marshal(inv)
	if err := st.RegisterHost(context.Background(), &store.Host{Name: "n2", APIURL: "http://n2", Inventory: string(b)}); err != nil {
		t.Fatal(err)
	}
	if rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"h100-vgpu","name":"two"}`); rec.Code != 422 ||
		!strings.Contains(fmt.Sprint(body["detail"]), "(boards: H100 SXM5 80GB, L40S;") {
		t.Errorf("with a second host: %d %v", rec.Code, body)
	}
	// Every host down, it queues again.
	clock.Advance(config.DefaultHeartbeatTimeout + time.Second)
	if rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"h100-vgpu","name":"after"}`); rec.Code != 202 {
		t.Errorf("with the host down: %d %v", rec.Code, body)
	}
}

func TestProfileAdmission(t *testing.T) {
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(servableHCL + `
policy {
  timezone = "UTC"
  window "weekend" {
    days    = "sat-sun"
    hours   = "00:00-24:00"
    classes = ["batch"]
  }
  defaults {
    quota {
      vms                = 2
      gpu_hours_per_week = 40
    }
  }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	s, st, _ := servableEnv(t)
	s.Config = &fakeConfig{cfg: cfg}
	l40sHost(t, st, "n1")
	tests := []struct {
		name, path string
		adm        *fakeAdmitter
		status     int
		answer     string
		reason     string
		hours      int
	}{
		{"starts", "/v1/profiles/l40s-whole/admission?hours=3", &fakeAdmitter{}, 200, "starts", "", 3},
		{"default hours", "/v1/profiles/l40s-whole/admission", &fakeAdmitter{}, 200, "starts", "", 8},
		{"waits", "/v1/profiles/l40s-whole/admission?hours=2", &fakeAdmitter{adm: scheduler.Admission{Reason: scheduler.Reason{Code: scheduler.CodeQuota, Detail: "user ann: runs 2 of 2 VMs"}}},
			200, "waits", "quota: user ann: runs 2 of 2 VMs", 2},
		{"refused", "/v1/profiles/l40s-whole/admission?hours=2", &fakeAdmitter{adm: scheduler.Admission{Reason: scheduler.Reason{Code: scheduler.CodeQuota, Detail: "the lease needs 50.0 GPU-hours"}, Refuse: true}},
			200, "refused", "quota: the lease needs 50.0 GPU-hours", 2},
		{"unservable", "/v1/profiles/h100-vgpu/admission", &fakeAdmitter{}, 200, "refused", "profile h100-vgpu can never be served here: no GPU here can ever give H100-4C", 8},
		{"no policy to ask", "/v1/profiles/l40s-whole/admission", nil, 200, "unknown", "", 8},
		{"too many hours", "/v1/profiles/l40s-whole/admission?hours=99", &fakeAdmitter{}, 422, "", "", 0},
		{"not a number", "/v1/profiles/l40s-whole/admission?hours=two", &fakeAdmitter{}, 422, "", "", 0},
		{"unknown profile", "/v1/profiles/nope/admission", &fakeAdmitter{}, 404, "", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.Admission = nil
			if tc.adm != nil {
				s.Admission = tc.adm
			}
			rec, _ := send(t, s, "GET", tc.path, "ann-token", "")
			if rec.Code != tc.status {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if tc.status != 200 {
				return
			}
			var a api.Admission
			if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
				t.Fatal(err)
			}
			if a.Answer != tc.answer || !strings.HasPrefix(a.Reason, tc.reason) || a.Hours != tc.hours {
				t.Errorf("%+v; want %s %q, %d hours", a, tc.answer, tc.reason, tc.hours)
			}
			if a.Quota.VMs == nil || *a.Quota.VMs != 2 || a.Quota.GPUHoursPerWeek == nil || *a.Quota.GPUHoursPerWeek != 40 || a.Quota.GPUs != nil {
				t.Errorf("quota %+v", a.Quota)
			}
			// Sunday 1 March 2026, 09:00 UTC: the week from Monday 23 February.
			if len(a.Budgets) != 1 || a.Budgets[0].Unit != "week" || a.Budgets[0].GPUHours != 40 ||
				!a.Budgets[0].Start.Equal(time.Date(2026, 2, 23, 0, 0, 0, 0, time.UTC)) || !a.Budgets[0].End.Equal(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)) {
				t.Errorf("budgets %+v", a.Budgets)
			}
			if w := a.Window; w == nil || w.Name != "weekend" || w.Allows || !slices.Equal(w.Classes, []string{"batch"}) {
				t.Errorf("window %+v", a.Window)
			}
			if f, ok := s.Admission.(*fakeAdmitter); ok && tc.answer != "refused" && (f.got[0] != "ann" || f.got[3] != tc.hours) {
				t.Errorf("admitted %v", f.got)
			}
		})
	}
}

func TestUserSSHKeysAPI(t *testing.T) {
	s, _, _ := servableEnv(t)
	rec, body := send(t, s, "GET", "/v1/users/ann/ssh-keys", "ann-token", "")
	if rec.Code != 200 || len(body["keys"].([]any)) != 0 {
		t.Fatalf("none yet: %d %v", rec.Code, body)
	}
	tests := []struct {
		name, token, path, body string
		status                  int
		field                   string
	}{
		{"set", "ann-token", "/v1/users/ann/ssh-keys", `{"keys":["ssh-ed25519 AAAA ann@laptop","ssh-rsa BBBB ann@desk"]}`, 200, ""},
		{"two lines in one", "ann-token", "/v1/users/ann/ssh-keys", `{"keys":["ssh-ed25519 A\nssh-ed25519 B"]}`, 422, "keys"},
		{"unknown field", "ann-token", "/v1/users/ann/ssh-keys", `{"key":["x"]}`, 400, "key"},
		{"another user's", "ann-token", "/v1/users/admin/ssh-keys", `{"keys":["x y"]}`, 404, ""},
		{"an admin for a user", "admin-token", "/v1/users/nobody/ssh-keys", `{"keys":["x y"]}`, 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, body := send(t, s, "PUT", tc.path, tc.token, tc.body)
			if rec.Code != tc.status || (tc.field != "" && body["field"] != tc.field) {
				t.Errorf("%d %v", rec.Code, body)
			}
		})
	}
	rec, body = send(t, s, "GET", "/v1/users/ann/ssh-keys", "ann-token", "")
	if keys, _ := body["keys"].([]any); rec.Code != 200 || len(keys) != 2 || keys[1] != "ssh-rsa BBBB ann@desk" {
		t.Errorf("kept: %d %v", rec.Code, body)
	}
	if rec, _ := send(t, s, "PUT", "/v1/users/ann/ssh-keys", "ann-token", `{"keys":[]}`); rec.Code != 200 {
		t.Errorf("forget: %d", rec.Code)
	}
	if _, body = send(t, s, "GET", "/v1/users/ann/ssh-keys", "ann-token", ""); len(body["keys"].([]any)) != 0 {
		t.Errorf("forgotten: %v", body)
	}
}

const anyKindHCL = `
profile "tiny-any" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    memory = "20GiB"
    kinds  = ["mig", "vgpu"]
  }
}
profile "mig-small" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    kind    = "mig"
    profile = "1g.20gb"
  }
}
profile "l40s-whole" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    kind  = "passthrough"
    model = "L40S"
  }
}
`

// GET /v1/profiles says how many VMs of each profile the placers could
// place now and on the hosts holding nothing: a profile served by MIG
// instances and vGPUs counts both, by kind (not "1 free of 8 GPUs" from the
// idle GPUs); a drained GPU gives nothing now.
func TestProfilesFree(t *testing.T) {
	s, st, _ := servableEnvOf(t, anyKindHCL)
	start := 0
	inv := gpu.HostInventory{Simulated: true, GPUs: []gpu.HostGPU{
		{Address: "0000:17:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: gpu.ModeMIG, MIGCapable: true, MIGEnabled: true, Backends: map[string]string{"mig": ""}},
		{Address: "0000:18:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: gpu.ModeMIG, MIGCapable: true, MIGEnabled: true, Backends: map[string]string{"mig": ""}},
		{Address: "0000:41:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: gpu.ModeVGPU, Backends: map[string]string{"vgpu": ""}},
		{Address: "0000:42:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: gpu.ModeIdle, Backends: map[string]string{"vgpu": "", "passthrough": ""}},
	}, Devices: []gpu.HostDevice{
		{ID: "0000:17:00.4", Backend: "mig", Kind: gpu.KindMIG, GPU: "0000:17:00.0", Profile: "1g.20gb", Placement: &start, VMUUID: "vm-1", Managed: true},
	}}
	b, _ := json.Marshal(inv)
	if err := st.RegisterHost(context.Background(), &store.Host{Name: "n1", APIURL: "http://n1", Inventory: string(b)}); err != nil {
		t.Fatal(err)
	}
	free := func() map[string]*api.ProfileFree {
		t.Helper()
		rec, _ := send(t, s, "GET", "/v1/profiles", "ann-token", "")
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		var ps []struct {
			Name string           `json:"name"`
			Free *api.ProfileFree `json:"free"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &ps); err != nil {
			t.Fatal(err)
		}
		out := map[string]*api.ProfileFree{}
		for _, p := range ps {
			out[p.Name] = p.Free
		}
		return out
	}
	got := free()
	// 1g.20gb: 4 on an H100, one of them taken.
	if f := got["mig-small"]; f == nil || f.VMs != 7 || f.Total != 8 || f.ByKind["mig"] != 7 {
		t.Errorf("mig-small: %+v, want 7 of 8, all MIG", f)
	}
	if f := got["l40s-whole"]; f == nil || f.VMs != 1 || f.Total != 1 || f.ByKind["passthrough"] != 1 {
		t.Errorf("l40s-whole: %+v, want the idle L40S", f)
	}
	any := got["tiny-any"]
	if any == nil || any.ByKind["mig"] < 7 || any.ByKind["vgpu"] == 0 || any.VMs != any.ByKind["mig"]+any.ByKind["vgpu"] || any.Total <= any.VMs {
		t.Fatalf("tiny-any: %+v, want the MIG instances and the vGPUs that 20 GiB fit in", any)
	}
	t.Logf("tiny-any: %+v", any)
	if err := st.DrainGPU(context.Background(), &store.GPUDrain{Host: "n1", GPUAddress: "0000:18:00.0", DrainedBy: "admin"}); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, s)
	if f := free()["mig-small"]; f == nil || f.VMs != 3 || f.Total != 4 {
		t.Errorf("mig-small with an H100 drained: %+v, want 3 of 4", f)
	}
}

// A create's check of the hosts reads them once while nothing changes: again
// at once after this gpuvmd's own write of a host, and, for another node's
// (a second handle on the database), once hostsMaxAge has passed.
func TestUnservableHostsRead(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t, store.DriverSQLite, storetest.Quiet)
	st, other := storetest.Open(t, cfg), storetest.Open(t, cfg)
	var c unservableCache
	read := func() []store.Host {
		t.Helper()
		hosts, _, err := c.readHosts(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		return hosts
	}
	if hosts := read(); len(hosts) != 0 {
		t.Fatalf("no host yet: %v", hosts)
	}
	l40sHost(t, st, "n1")
	first := read()
	if len(first) != 1 {
		t.Fatalf("after this node's registration: %v", first)
	}
	if again := read(); &again[0] != &first[0] {
		t.Error("read again with nothing changed")
	}
	l40sHost(t, other, "n2")
	if kept := read(); len(kept) != 1 {
		t.Errorf("another node's host seen before hostsMaxAge passed: %v (what was kept is read again only then)", kept)
	}
	c.read = c.read.Add(-hostsMaxAge)
	if late := read(); len(late) != 2 {
		t.Errorf("another node's host not seen after hostsMaxAge: %v", late)
	}
	if err := st.Heartbeat(ctx, "n1", `{"simulated":true}`); err != nil {
		t.Fatal(err)
	}
	if hb := read(); len(hb) != 2 || hb[0].Inventory != `{"simulated":true}` {
		t.Errorf("this node's heartbeat not seen at once: %v", hb)
	}
}
