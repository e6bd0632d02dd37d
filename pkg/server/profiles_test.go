package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/config"
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
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(servableHCL)})
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
	s := New(Deps{Auth: users, Backends: fakeBackends{}, Config: &fakeConfig{cfg: cfg}, Store: st, Worker: &countWaker{},
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
	if got := unservableOf(t, s); len(got) != 1 || got["l40s-whole"] != "" {
		t.Errorf("with a GPU drained, unservable %v", got)
	}
	// The host goes down: nothing is known again.
	clock.Advance(config.DefaultHeartbeatTimeout + time.Second)
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
	l40sHost(t, st, "n1")
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
	if len(page.VMs) != 3 || !names["early"] || !names["whole"] || !names["plain"] {
		t.Errorf("VMs %v; the refused ones were made", names)
	}
	// The host down, it queues again.
	clock.Advance(config.DefaultHeartbeatTimeout + time.Second)
	if rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"h100-vgpu","name":"after"}`); rec.Code != 202 {
		t.Errorf("with the host down: %d %v", rec.Code, body)
	}
}
