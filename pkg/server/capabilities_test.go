package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/capability"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

const capabilityProfiles = `
image "desk" { imported = "ubuntu" }
profile "p" {
  disk { image = "desk" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
profile "whole" {
  boot { kernel = "/k" }
  gpu {
    kind  = "passthrough"
    model = "A100 SXM4 80GB"
  }
}
profile "plain" {
  disk { image = "desk" }
}
`

// GET /v1/vms/{id} says what each VM's state allows, with reasons, from
// the host's facts read at start; a VM whose profile is gone is answered
// too, and the reasons come in the request's language.
func TestGetVMCapabilities(t *testing.T) {
	ctx := context.Background()
	cfg, diags := new(config.Loader).Parse(config.Source{Name: "p.hcl", Data: []byte(capabilityProfiles)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st := storetest.New(t, storetest.Quiet)
	vgpuVM := storetest.RunningVM(t, st, "gpu01", "ann", "render", store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:41:00.0", VF: "0000:41:00.4", Profile: "L40S-12Q"}, "0000:41:00.4")
	queued := func(name, profile string) string {
		vm := &store.VM{Name: name, Owner: "ann", Profile: profile, Hours: 8}
		if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		return vm.ID
	}
	whole, plain, gone := queued("whole-1", "whole"), queued("plain-1", "plain"), queued("gone-1", "gone")
	srv := newServer(t, Deps{Auth: fakeAuth{"ann-token": {Name: "ann"}}, Backends: fakeBackends{}, Store: st, Host: "gpu01",
		Config: &fakeConfig{cfg: cfg}, Log: slog.New(slog.DiscardHandler),
		Capabilities: &capability.Host{Hypervisor: capability.HypervisorOf("QEMU", 9000000, 7002000),
			NVML: capability.NVMLFacts{Known: true, Simulated: true, Migration: map[string]bool{"0000:41:00.0": true}}}})
	get := func(id, lang string) *api.VMCapabilities {
		t.Helper()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/vms/"+id, nil)
		req.Header.Set("Authorization", "Bearer ann-token")
		if lang != "" {
			req.Header.Set("Accept-Language", lang)
		}
		srv.ServeHTTP(rec, req)
		var got api.VM
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 || got.Capabilities == nil {
			t.Fatalf("GET %s: %d %s", id, rec.Code, rec.Body)
		}
		return got.Capabilities
	}
	type want struct {
		can  bool
		says string
	}
	expect := func(name string, got api.Capability, w want) {
		t.Helper()
		if got.Can != w.can || !strings.Contains(got.Reason, w.says) {
			t.Errorf("%s: %v %q; want %v with %q", name, got.Can, got.Reason, w.can, w.says)
		}
	}
	c := get(vgpuVM.ID, "")
	expect("vGPU disk snapshot", c.DiskSnapshot, want{true, "quiesced"})
	expect("vGPU suspend", c.Suspend, want{false, "QEMU 7.2 is older than 8.1, which VFIO migration needs"})
	expect("vGPU live migration", c.LiveMigration, want{false, "QEMU 7.2 is older than 8.1"})
	if c.Basis != "libvirt 9.0.0, QEMU 7.2.0; NVIDIA driver: the simulated host's NVML reports vGPU migration support" {
		t.Errorf("basis %q", c.Basis)
	}
	c = get(whole, "")
	expect("passthrough disk snapshot", c.DiskSnapshot, want{false, "no disk"})
	expect("passthrough suspend", c.Suspend, want{false, "a passthrough GPU cannot be suspended"})
	expect("passthrough RAM snapshot", c.MemorySnapshot, want{false, "RAM snapshots are impossible"})
	c = get(plain, "")
	expect("plain suspend", c.Suspend, want{true, "no device blocks it"})
	expect("plain live migration", c.LiveMigration, want{true, "local disk is copied"})
	c = get(gone, "")
	for name, a := range map[string]api.Capability{"disk": c.DiskSnapshot, "memory": c.MemorySnapshot, "suspend": c.Suspend, "migration": c.LiveMigration} {
		expect("gone "+name, a, want{false, "profile gone is no longer configured"})
	}
	// In Chinese, every reason and the basis are said in Chinese.
	c = get(vgpuVM.ID, "zh-CN")
	expect("vGPU suspend in Chinese", c.Suspend, want{false, "QEMU 7.2 早于 VFIO 迁移所需的 8.1"})
	expect("vGPU disk in Chinese", c.DiskSnapshot, want{true, "客户机代理应答时为静默快照"})
	if c.Basis != "libvirt 9.0.0, QEMU 7.2.0；NVIDIA 驱动：模拟主机的 NVML 报告支持 vGPU 迁移" {
		t.Errorf("basis in Chinese %q", c.Basis)
	}
	expect("gone in Chinese", get(gone, "zh-CN").Suspend, want{false, "配置中已没有配置文件 gone"})
	expect("passthrough in Chinese", get(whole, "zh-CN").LiveMigration, want{false, "直通 GPU 无法热迁移"})

	// Without the host's facts (nil), the answers say so.
	bare := newServer(t, Deps{Auth: fakeAuth{"ann-token": {Name: "ann"}}, Backends: fakeBackends{}, Store: st, Host: "gpu01",
		Config: &fakeConfig{cfg: cfg}, Log: slog.New(slog.DiscardHandler)})
	srv = bare
	expect("no facts", get(vgpuVM.ID, "").Suspend, want{false, "the versions of libvirt and QEMU are not known (this server did not read its host's versions)"})
}

// A VM on another node of the fleet is not judged by this node's facts.
func TestCapabilitiesOtherNode(t *testing.T) {
	s := &Server{Deps: Deps{Host: "gpu01", Capabilities: &capability.Host{Hypervisor: capability.HypervisorOf("QEMU", 10000000, 8002000)}}}
	hv, drv := s.hostFacts(&store.VM{Host: "gpu02"}, []string{"0000:41:00.0"})
	if hv.Known || drv.Answered || !strings.Contains(hv.Note, "node gpu02") {
		t.Errorf("%+v %+v", hv, drv)
	}
	if hv, _ := s.hostFacts(&store.VM{Host: "gpu01"}, nil); !hv.Known {
		t.Errorf("%+v", hv)
	}
}

func TestVMGPUKind(t *testing.T) {
	vgpu := &config.Profile{GPU: &config.GPUNeed{Kind: gpu.KindVGPU}}
	anyKind := &config.Profile{GPU: &config.GPUNeed{Kind: gpu.KindAny}}
	held := func(k gpu.Kind, state string) store.Allocation { return store.Allocation{Kind: k, State: state} }
	for _, tc := range []struct {
		p      *config.Profile
		allocs []store.Allocation
		want   gpu.Kind
	}{
		{nil, nil, ""},
		{&config.Profile{}, nil, ""},
		{vgpu, nil, gpu.KindVGPU},
		{anyKind, nil, gpu.KindAny},
		{anyKind, []store.Allocation{held(gpu.KindMIG, "")}, gpu.KindMIG},
		{anyKind, []store.Allocation{held(gpu.KindMIG, store.AllocReleased)}, gpu.KindAny},
		{nil, []store.Allocation{held(gpu.KindVGPU, ""), held(gpu.KindPassthrough, ""), held(gpu.KindMIG, "")}, gpu.KindPassthrough},
		{nil, []store.Allocation{held(gpu.KindVGPU, ""), held(gpu.KindMIG, ""), held(gpu.KindVGPU, "")}, gpu.KindMIG},
	} {
		if got := vmGPUKind(tc.p, tc.allocs); got != tc.want {
			t.Errorf("vmGPUKind(%v, %v) = %q; want %q", tc.p, tc.allocs, got, tc.want)
		}
	}
}

// GET /v1/vms/{id} of a running vGPU VM names the driver changes announced
// ahead, with the snapshot label offered first; a withdrawn or past one is
// not named, nor does a queued VM or one without a vGPU get any.
func TestGetVMDriverChanges(t *testing.T) {
	ctx := context.Background()
	cfg, diags := new(config.Loader).Parse(config.Source{Name: "p.hcl", Data: []byte(capabilityProfiles)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st := storetest.New(t, storetest.Quiet)
	vgpuVM := storetest.RunningVM(t, st, "gpu01", "ann", "render", store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:41:00.0", VF: "0000:41:00.4", Profile: "L40S-12Q"}, "0000:41:00.4")
	plain := &store.VM{Name: "plain-1", Owner: "ann", Profile: "plain", Hours: 8}
	if _, err := st.CreateVM(ctx, plain, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, Deps{Auth: fakeAuth{"ann-token": {Name: "ann"}}, Backends: fakeBackends{}, Store: st, Host: "gpu01",
		Config: &fakeConfig{cfg: cfg}, Log: slog.New(slog.DiscardHandler)})
	get := func(id string) api.VM {
		t.Helper()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/vms/"+id, nil)
		req.Header.Set("Authorization", "Bearer ann-token")
		srv.ServeHTTP(rec, req)
		var got api.VM
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
			t.Fatalf("GET %s: %d %s", id, rec.Code, rec.Body)
		}
		return got
	}
	if got := get(vgpuVM.ID); len(got.DriverChanges) != 0 {
		t.Fatalf("none announced: %+v", got.DriverChanges)
	}
	now := st.Now()
	next := &api.DriverChange{Driver: "550.90.07", At: now.Add(72 * time.Hour), Note: "vGPU 17.4", By: "admin"}
	later := &api.DriverChange{Driver: "550.127.05", At: now.Add(240 * time.Hour), By: "admin"}
	gone := &api.DriverChange{Driver: "535.1.1", At: now.Add(48 * time.Hour), By: "admin"}
	for _, dc := range []*api.DriverChange{later, next, gone} {
		if err := st.AnnounceDriverChange(ctx, dc); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.WithdrawDriverChange(ctx, gone.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	got := get(vgpuVM.ID).DriverChanges
	if len(got) != 2 || got[0].ID != next.ID || got[0].Driver != "550.90.07" || got[0].Note != "vGPU 17.4" ||
		got[0].SnapshotLabel != "before-driver-550.90.07" || !got[0].At.Equal(next.At) || got[1].ID != later.ID {
		t.Errorf("the vGPU VM's driver changes: %+v; want 550.90.07 then 550.127.05, each with its snapshot label", got)
	}
	if got := get(plain.ID).DriverChanges; len(got) != 0 {
		t.Errorf("a queued VM without a vGPU: %+v", got)
	}
}
