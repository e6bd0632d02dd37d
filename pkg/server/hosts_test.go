package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/heartbeat"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// inventoryOf is the inventory gpuvmd's heartbeat stores: its backends'.
func inventoryOf(s *Server) func(context.Context) gpu.HostInventory {
	return func(ctx context.Context) gpu.HostInventory {
		hi, _ := CollectInventory(ctx, s.Backends, s.log)
		return hi
	}
}

func TestHeartbeaterAndHostList(t *testing.T) {
	e := newAdminEnv(t)
	ctx := context.Background()
	hb := &heartbeat.Beater{Store: e.st, Inventory: inventoryOf(e.s), Host: "h1", APIURL: "http://h1:8080", Version: "1.2.3",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := hb.Register(ctx); err != nil {
		t.Fatal(err)
	}
	row, err := e.st.GetHost(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	var inv api.HostInventory
	if err := json.Unmarshal([]byte(row.Inventory), &inv); err != nil || len(inv.GPUs) != 2 || row.State != store.HostUp || row.Version != "1.2.3" {
		t.Fatalf("registered %+v (%v)", row, err)
	}
	// Another host, registered by hand as an older gpuvmd stored its
	// inventory (api.HostInventory), with MIG and vGPU capacity and a
	// drained GPU.
	other := api.HostInventory{Simulated: true, GPUs: []api.GPU{
		{Address: "0000:01:00.0", Mode: "mig", MIGEnabled: true, Backends: map[string]string{"mig": ""},
			MIGProfiles: []api.MIGProfile{{Name: "3g.40gb", Size: 4, FreeStarts: []int{4, 0}}, {Name: "1g.10gb", Size: 1, FreeStarts: []int{0, 1, 2}}}},
		{Address: "0000:02:00.0", Mode: "vgpu", Backends: map[string]string{"vgpu": ""},
			VGPUTypes: []api.VGPUType{{Name: "L40S-12Q", Available: 3}, {Name: "L40S-24Q", Available: 0}}},
		{Address: "0000:03:00.0", Mode: "idle", Backends: map[string]string{"vgpu": "", "passthrough": ""},
			VGPUTypes: []api.VGPUType{{Name: "L40S-12Q", Available: 4}}},
		{Address: "0000:04:00.0", Mode: "idle", Backends: map[string]string{"passthrough": ""}},
		{Address: "0000:05:00.0", Mode: "idle", Backends: map[string]string{"passthrough": "no vfio-pci"}},
	}, Devices: []api.Device{{ID: "x", GPU: "0000:01:00.0", Kind: "mig"}}}
	b, _ := json.Marshal(other)
	if err := e.st.RegisterHost(ctx, &store.Host{Name: "h2", APIURL: "http://h2:8080", Inventory: string(b)}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.DrainGPU(ctx, &store.GPUDrain{Host: "h2", GPUAddress: "0000:04:00.0", DrainedBy: "admin"}); err != nil {
		t.Fatal(err)
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
	e.clock.Advance(10 * time.Second)
	got := hosts(e.admin)
	h1, h2 := got["h1"], got["h2"]
	if len(got) != 2 || h1.State != "up" || h1.APIURL != "http://h1:8080" || h1.GPUs != 2 || h1.Free.IdleGPUs != 2 || h1.HeartbeatAge != 10 {
		t.Errorf("h1 %+v", h1)
	}
	wantMIG := map[string]int{"3g.40gb": 2, "1g.10gb": 3}
	wantVGPU := map[string]int{"L40S-12Q": 7}
	if h2.GPUs != 5 || h2.DrainedGPUs != 1 || h2.Free.IdleGPUs != 1 || !maps.Equal(h2.Free.MIG, wantMIG) || !maps.Equal(h2.Free.VGPU, wantVGPU) || !h2.Simulated {
		t.Errorf("h2 %+v", h2)
	}
	// Users see no API URL.
	if u := hosts(e.ann); u["h1"].APIURL != "" || u["h1"].GPUs != 2 {
		t.Errorf("as a user: %+v", u["h1"])
	}

	// A beat keeps h1 up; three intervals without one show it down.
	e.clock.Advance(config.DefaultHeartbeatTimeout)
	if err := hb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	got = hosts(e.admin)
	if got["h1"].State != "up" || got["h1"].HeartbeatAge != 0 || got["h2"].State != "down" {
		t.Errorf("after a beat: h1 %+v h2 %+v", got["h1"], got["h2"])
	}
	// A host whose row went registers again at its next beat.
	if err := e.st.Heartbeat(ctx, "gone", "{}"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("heartbeat of an unknown host: %v", err)
	}
	hb2 := &heartbeat.Beater{Store: e.st, Inventory: inventoryOf(e.s), Host: "h3", Log: hb.Log}
	if err := hb2.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := hosts(e.admin)["h3"]; !ok {
		t.Error("h3 did not register at its first beat")
	}
}

func TestMigFits(t *testing.T) {
	tests := []struct {
		size   int
		starts []int
		want   int
	}{
		{4, []int{0, 4}, 2},
		{4, []int{4, 0}, 2},
		{4, nil, 0},
		{2, []int{0, 1, 2, 6}, 3},
		{8, []int{0}, 1},
		{0, []int{0, 0}, 1},
	}
	for _, tc := range tests {
		if got := migFits(gpu.MIGOffer{Size: tc.size, FreeStarts: tc.starts}); got != tc.want {
			t.Errorf("size %d starts %v: %d, want %d", tc.size, tc.starts, got, tc.want)
		}
	}
}

func TestListenURL(t *testing.T) {
	host := defaultHost()
	tests := map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080",
		"[::1]:8080":     "http://[::1]:8080",
		"[::]:8080":      "http://" + host + ":8080",
		"0.0.0.0:80":     "http://" + host + ":80",
		":8080":          "http://" + host + ":8080",
		"gpu1:8080":      "http://gpu1:8080",
		"no-port":        "http://no-port",
	}
	for in, want := range tests {
		if got := ListenURL("http", in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
