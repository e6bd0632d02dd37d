package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// GET /v1/vms/{id} says each vGPU's licence state from the newest sample
// of the last ten minutes; a state older than that, or none, is left out.
func TestGetVMLicenses(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t, storetest.Quiet)
	vm := storetest.RunningVM(t, st, "gpu01", "ann", "render", store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:41:00.0", VF: "0000:41:00.4", Profile: "L40S-12Q"}, "0000:41:00.4")
	other := storetest.RunningVM(t, st, "gpu01", "ann", "render-2", store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:41:00.0", VF: "0000:41:00.5", Profile: "L40S-12Q"}, "0000:41:00.5")
	now := time.Now()
	sample := func(vmID, dev string, at time.Time, lic string) store.GPUSample {
		return store.GPUSample{Host: "gpu01", GPUAddress: "0000:41:00.0", Instance: dev, VMID: vmID, User: "ann", TakenAt: at,
			GPUUtil: 0.5, MemUtil: -1, EncUtil: -1, DecUtil: -1, Temperature: -1, PowerWatts: -1, License: lic}
	}
	if err := st.InsertSamples(ctx, []store.GPUSample{
		sample(vm.ID, "0000:41:00.4", now.Add(-2*time.Minute), api.VGPULicensed),
		sample(vm.ID, "0000:41:00.4", now.Add(-time.Minute), api.VGPUUnlicensed),
		sample(other.ID, "0000:41:00.5", now.Add(-time.Hour), api.VGPULicensed), // too old to say
	}); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, Deps{Auth: fakeAuth{"ann-token": {Name: "ann"}}, Backends: fakeBackends{}, Store: st, Log: slog.New(slog.DiscardHandler)})
	defer srv.Close()
	for _, tc := range []struct {
		id, want string
	}{{vm.ID, api.VGPUUnlicensed}, {other.ID, ""}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/vms/"+tc.id, nil)
		req.Header.Set("Authorization", "Bearer ann-token")
		srv.ServeHTTP(rec, req)
		var got api.VM
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
			t.Fatalf("GET: %d %s", rec.Code, rec.Body)
		}
		if len(got.GPUs) != 1 || got.GPUs[0].License != tc.want {
			t.Errorf("VM %s: GPUs %+v, want licence %q", tc.id, got.GPUs, tc.want)
		}
	}
}
