package server

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// GET /v1/hosts shows admins each host's NVIDIA driver as its heartbeat
// stored it; a row stored before the driver was kept shows none, and users
// see no driver.
func TestHostsDriver(t *testing.T) {
	e := newAdminEnv(t)
	ctx := context.Background()
	b, _ := json.Marshal(gpu.HostInventory{GPUs: []gpu.HostGPU{}, Devices: []gpu.HostDevice{},
		Driver: &gpu.HostDriver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}})
	for name, inv := range map[string]string{"h2": string(b), "h3": `{"host":"/sys","simulated":false,"backends":["vgpu"],"gpus":[],"devices":[]}`} {
		if err := e.st.RegisterHost(ctx, &store.Host{Name: name, APIURL: "http://" + name, Inventory: inv}); err != nil {
			t.Fatal(err)
		}
	}
	hosts := func(token string) map[string]api.Host {
		t.Helper()
		var l api.HostList
		if code, body := e.call(t, "GET", "/v1/hosts", token, "", &l); code != 200 {
			t.Fatalf("%d %v", code, body)
		}
		out := map[string]api.Host{}
		for _, h := range l.Items {
			out[h.Name] = h
		}
		return out
	}
	admin := hosts(e.admin)
	if d := admin["h2"].Driver; d == nil || *d != (api.HostDriver{Version: "550.54.16", VGPUMin: "17.0", VGPUMax: "17.3"}) {
		t.Errorf("h2's driver as an admin sees it: %+v", d)
	}
	if d := admin["h3"].Driver; d != nil {
		t.Errorf("h3 (an older row) has driver %+v", d)
	}
	for name, h := range hosts(e.ann) {
		if h.Driver != nil {
			t.Errorf("%s: a user sees the driver %+v", name, h.Driver)
		}
	}
}
