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
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/heartbeat"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
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
	// inventory (api.HostInventory, no spec), with MIG and vGPU capacity,
	// a drained GPU and one no backend can use.
	three, zero := 0, 0
	other := api.HostInventory{Simulated: true, GPUs: []api.GPU{
		{Address: "0000:01:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: "mig", MIGCapable: true, MIGEnabled: true, Backends: map[string]string{"mig": ""},
			MIGProfiles: []api.MIGProfile{{Name: "3g.40gb", Size: 4, FreeStarts: []int{4}}, {Name: "1g.10gb", Size: 1, FreeStarts: []int{4, 5, 6}}}},
		{Address: "0000:02:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: "vgpu", Backends: map[string]string{"vgpu": ""},
			VGPUTypes: []api.VGPUType{{Name: "L40S-12Q", Available: 3}, {Name: "L40S-24Q", Available: 0}}},
		{Address: "0000:03:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: "idle", Backends: map[string]string{"vgpu": "", "passthrough": ""},
			VGPUTypes: []api.VGPUType{{Name: "L40S-12Q", Available: 4}}},
		{Address: "0000:04:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: "idle", Backends: map[string]string{"passthrough": ""}},
		{Address: "0000:05:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: "idle", Backends: map[string]string{"passthrough": "no vfio-pci"}},
	}, Devices: []api.Device{
		{ID: "gi-1", Backend: "mig", GPU: "0000:01:00.0", Kind: "mig", Profile: "3g.40gb", Placement: &zero, GPUInstance: &three, VMUUID: "vm-x"},
		{ID: "mdev-1", Backend: "vgpu", GPU: "0000:02:00.0", Kind: "vgpu", Type: "L40S-12Q", VMUUID: "vm-y"},
	}}
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
	// The scheduler's model: beside the 3g.40gb at 0, the upper half; on
	// the L40S of one 12Q, three more; the idle L40S (vgpu or passthrough)
	// any one type.
	wantMIG := map[string]int{"1g.10gb": 3, "1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 1, "3g.40gb": 1}
	wantVGPU := map[string]int{"L40S-12Q": 3 + 4, "L40S-24Q": 2, "L40S-48Q": 1, "L40S-1Q": 32}
	if h2.GPUs != 5 || h2.DrainedGPUs != 1 || h2.Free.IdleGPUs != 1 || !maps.Equal(h2.Free.MIG, wantMIG) || !h2.Simulated {
		t.Errorf("h2 %+v", h2)
	}
	for typ, n := range wantVGPU {
		if h2.Free.VGPU[typ] != n {
			t.Errorf("h2: %d more %s, want %d (free vGPUs %v)", h2.Free.VGPU[typ], typ, n, h2.Free.VGPU)
		}
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

// cachedBackends keeps the backends' inventories, as the loader does.
type cachedBackends struct {
	fakeBackends
	invs map[string]backend.Inventory
}

func (c cachedBackends) Inventories(_ context.Context, names []string) (map[string]backend.Inventory, []error) {
	out := map[string]backend.Inventory{}
	for _, n := range names {
		out[n] = c.invs[n]
	}
	return out, nil
}

// GET /v1/gpus, /v1/hosts (through the heartbeat) and the drains read the
// inventories the backends keep current, calling no backend that pushes
// its own; the others are asked.
func TestCollectInventoryReadsTheCache(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	calls := 0
	asked := &backend.Mock{InventoryF: func(context.Context) (backend.Inventory, error) {
		calls++
		return backend.Inventory{Backend: "passthrough", GPUs: []backend.GPU{{Address: "0000:41:00.0", Model: "L40S", Mode: gpu.ModeIdle}}}, nil
	}}
	pushed := map[string]backend.Inventory{"passthrough": {Backend: "passthrough", GPUs: []backend.GPU{
		{Address: "0000:41:00.0", Model: "L40S", Mode: gpu.ModeIdle}, {Address: "0000:42:00.0", Model: "L40S", Mode: gpu.ModeIdle}}}}
	tests := []struct {
		name      string
		bs        Backends
		wantGPUs  int
		wantCalls int
	}{
		{"the loader keeps them", cachedBackends{fakeBackends{"passthrough": asked}, pushed}, 2, 0},
		{"no cache: asked", fakeBackends{"passthrough": asked}, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls = 0
			hi, failed := CollectInventory(context.Background(), tc.bs, log)
			if len(hi.GPUs) != tc.wantGPUs || failed != 0 || calls != tc.wantCalls {
				t.Errorf("%d GPUs, %d failed, %d Inventory calls; want %d, 0, %d", len(hi.GPUs), failed, calls, tc.wantGPUs, tc.wantCalls)
			}
		})
	}
}

// The free capacity GET /v1/hosts shows is the scheduler's: where the
// server's own greedy count of the backends' free starts and available
// vGPUs (before gpuvm 14's refactor) said otherwise, it was wrong.
func TestFreeCapacityIsTheSchedulers(t *testing.T) {
	h100 := func(starts map[string][]int, types ...gpu.VGPUOffer) gpu.HostGPU {
		g := gpu.HostGPU{Address: "0000:17:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: gpu.ModeMIG,
			MIGCapable: true, MIGEnabled: true, Backends: map[string]string{"mig": ""}, VGPUTypes: types}
		for name, fs := range starts {
			g.MIGProfiles = append(g.MIGProfiles, gpu.MIGOffer{Name: name, FreeStarts: fs})
		}
		return g
	}
	spec := func(s scheduler.GPUSpec) *scheduler.HostSpec {
		s.Address, s.Model = "0000:17:00.0", "10de:2331"
		return &scheduler.HostSpec{Name: "published under another name", GPUs: []scheduler.GPUSpec{s}}
	}
	all := []int{0, 1, 2, 3, 4, 5, 6}
	tests := []struct {
		name    string
		inv     storedInventory
		drained map[string]bool
		want    api.Capacity
		was     api.Capacity  // what the greedy count said
		total   *api.Capacity // nil: as want (the host holds nothing)
	}{
		{name: "one media-engine instance per GPU",
			inv:  storedInventory{HostInventory: gpu.HostInventory{GPUs: []gpu.HostGPU{h100(map[string][]int{"1g.10gb+me": all, "7g.80gb": {0}})}}},
			want: api.Capacity{MIG: map[string]int{"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}},
			was:  api.Capacity{MIG: map[string]int{"1g.10gb+me": 7, "7g.80gb": 1}}},
		{name: "a MIG-backed vGPU type is MIG capacity, not a vGPU",
			inv: storedInventory{HostInventory: gpu.HostInventory{GPUs: []gpu.HostGPU{h100(map[string][]int{"3g.40gb": {0, 4}},
				gpu.VGPUOffer{Name: "H100-3-40C", Available: 2, MIGProfile: "3g.40gb"})}},
				Spec: spec(scheduler.GPUSpec{Mode: gpu.ModeMIG, Allow: gpu.ModeMIG})},
			want: api.Capacity{MIG: map[string]int{"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}},
			was:  api.Capacity{VGPU: map[string]int{"H100-3-40C": 2}, MIG: map[string]int{"3g.40gb": 2}}},
		{name: "a MIG layout offers only its instances",
			inv: storedInventory{HostInventory: gpu.HostInventory{GPUs: []gpu.HostGPU{h100(map[string][]int{"1g.10gb": all, "3g.40gb": {0, 4}})}},
				Spec: spec(scheduler.GPUSpec{Mode: gpu.ModeMIG, Allow: gpu.ModeMIG, MIGLayout: []string{"3g.40gb", "3g.40gb"}})},
			want: api.Capacity{MIG: map[string]int{"3g.40gb": 2}},
			was:  api.Capacity{MIG: map[string]int{"1g.10gb": 7, "3g.40gb": 2}}},
		{name: "a device holds slices: free less than total",
			inv: storedInventory{HostInventory: gpu.HostInventory{GPUs: []gpu.HostGPU{h100(map[string][]int{"3g.40gb": {4}})},
				Devices: []gpu.HostDevice{{ID: "gi-1", Backend: "mig", Kind: gpu.KindMIG, GPU: "0000:17:00.0", Profile: "3g.40gb", Placement: ptrInt(0), VMUUID: "vm-1"}}},
				Spec: spec(scheduler.GPUSpec{Mode: gpu.ModeMIG, Allow: gpu.ModeMIG, MIGLayout: []string{"3g.40gb", "3g.40gb"}})},
			want:  api.Capacity{MIG: map[string]int{"3g.40gb": 1}},
			was:   api.Capacity{MIG: map[string]int{"3g.40gb": 1}},
			total: &api.Capacity{MIG: map[string]int{"3g.40gb": 2}}},
		{name: "a drained GPU gives nothing",
			inv:     storedInventory{HostInventory: gpu.HostInventory{GPUs: []gpu.HostGPU{h100(map[string][]int{"3g.40gb": {0, 4}})}}},
			drained: map[string]bool{"0000:17:00.0": true},
			want:    api.Capacity{}, was: api.Capacity{}},
		{name: "an inventory the model cannot read gives nothing",
			inv:  storedInventory{HostInventory: gpu.HostInventory{GPUs: []gpu.HostGPU{{Address: "0000:17:00.0", Model: "no such board", Backends: map[string]string{"vgpu": ""}, VGPUTypes: []gpu.VGPUOffer{{Name: "X-1Q", Available: 3}}}}}},
			want: api.Capacity{}, was: api.Capacity{VGPU: map[string]int{"X-1Q": 3}}},
	}
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, total, ndrained := s.freeCapacity("n", tc.inv, tc.drained)
			if got.IdleGPUs != tc.want.IdleGPUs || !maps.Equal(got.MIG, tc.want.MIG) || !maps.Equal(got.VGPU, tc.want.VGPU) {
				t.Errorf("free %+v, want %+v (the greedy count said %+v)", got, tc.want, tc.was)
			}
			wantTotal := tc.want
			if tc.total != nil {
				wantTotal = *tc.total
			}
			if total.IdleGPUs != wantTotal.IdleGPUs || !maps.Equal(total.MIG, wantTotal.MIG) || !maps.Equal(total.VGPU, wantTotal.VGPU) {
				t.Errorf("total %+v, want %+v", total, wantTotal)
			}
			if ndrained != len(tc.drained) {
				t.Errorf("%d drained, want %d", ndrained, len(tc.drained))
			}
		})
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

func ptrInt(i int) *int { return &i }
