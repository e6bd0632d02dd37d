package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
)

func TestDrainAndUndrain(t *testing.T) {
	e := newAdminEnv(t)
	var st api.GPUDrainState
	code, body := e.call(t, "POST", "/v1/admin/gpus/41:00.0/drain", e.admin, `{"reason":"fan replacement"}`, &st)
	if code != 200 || st.Host != "h1" || st.Address != "0000:41:00.0" || st.Drained == nil || st.Drained.Reason != "fan replacement" ||
		st.Drained.By != "admin" || !st.Drained.Since.Equal(e.clock.Now()) {
		t.Fatalf("drain: %d %v %+v", code, body, st)
	}
	if e.worker.n.Load() != 1 {
		t.Errorf("worker woken %d times", e.worker.n.Load())
	}
	since := st.Drained.Since
	// Again, with no body: the reason is replaced, the time kept.
	e.clock.Advance(3600e9)
	var again api.GPUDrainState
	if code, body := e.call(t, "POST", "/v1/admin/gpus/0000:41:00.0/drain", e.admin, "", &again); code != 200 || again.Drained.Reason != "" || !again.Drained.Since.Equal(since) {
		t.Fatalf("drain again: %d %v %+v", code, body, again.Drained)
	}

	// GET /v1/gpus shows it.
	var hi api.HostInventory
	if code, _ := e.call(t, "GET", "/v1/gpus", e.admin, "", &hi); code != 200 || len(hi.GPUs) != 2 {
		t.Fatalf("gpus: %d %+v", code, hi)
	}
	if d := hi.GPUs[0].Drained; d == nil || d.By != "admin" || !d.Since.Equal(since) || hi.GPUs[1].Drained != nil {
		t.Errorf("gpus: %+v %+v", hi.GPUs[0].Drained, hi.GPUs[1].Drained)
	}
	drains, _ := e.st.ListGPUDrains(context.Background(), "h1")
	if len(drains) != 1 || drains[0].GPUAddress != "0000:41:00.0" {
		t.Errorf("store: %+v", drains)
	}

	tests := []struct {
		name, method, path, body string
		status                   int
		problem, detail          string
	}{
		{"unknown GPU", "POST", "/v1/admin/gpus/0000:99:00.0/drain", "", 404, "not-found", "host h1 has no GPU 0000:99:00.0: its GPUs are 0000:41:00.0, 0000:42:00.0"},
		{"not an address", "POST", "/v1/admin/gpus/gpu0/drain", "", 404, "not-found", `"gpu0" is not a GPU's PCI address`},
		{"reason on two lines", "POST", "/v1/admin/gpus/0000:42:00.0/drain", `{"reason":"a\nb"}`, 422, "validation", "one line"},
		{"reason too long", "POST", "/v1/admin/gpus/0000:42:00.0/drain", `{"reason":"` + strings.Repeat("x", 201) + `"}`, 422, "validation", "200"},
		{"unknown field", "POST", "/v1/admin/gpus/0000:42:00.0/drain", `{"why":"x"}`, 400, "bad-request", "why"},
		{"undrain unknown GPU", "DELETE", "/v1/admin/gpus/0000:99:00.0/drain", "", 404, "not-found", "has no GPU 0000:99:00.0"},
		{"undrain GPU not drained", "DELETE", "/v1/admin/gpus/0000:42:00.0/drain", "", 404, "not-found", "GPU 0000:42:00.0 of host h1 is not drained"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.call(t, tc.method, tc.path, e.admin, tc.body, nil)
			if code != tc.status || body["type"] != ProblemBase+tc.problem || !strings.Contains(body["detail"].(string), tc.detail) {
				t.Errorf("%d %v", code, body)
			}
		})
	}

	// Undrain, then it is not drained any more.
	woken := e.worker.n.Load()
	st = api.GPUDrainState{}
	if code, body := e.call(t, "DELETE", "/v1/admin/gpus/0000:41:00.0/drain", e.admin, "", &st); code != 200 || st.Drained != nil || st.Address != "0000:41:00.0" {
		t.Fatalf("undrain: %d %v %+v", code, body, st)
	}
	if e.worker.n.Load() != woken+1 {
		t.Error("the worker was not woken by the undrain")
	}
	if code, _ := e.call(t, "DELETE", "/v1/admin/gpus/0000:41:00.0/drain", e.admin, "", nil); code != 404 {
		t.Errorf("undrain twice: %d", code)
	}
	hi = api.HostInventory{}
	e.call(t, "GET", "/v1/gpus", e.admin, "", &hi)
	if len(hi.GPUs) != 2 || hi.GPUs[0].Drained != nil {
		t.Errorf("still drained: %+v", hi.GPUs[0].Drained)
	}

	// A backend that does not answer: the server cannot say the GPU is
	// unknown.
	e.inventoryErr = errors.New("plugin restarting")
	if code, body := e.call(t, "POST", "/v1/admin/gpus/0000:41:00.0/drain", e.admin, "", nil); code != 503 || !strings.Contains(body["detail"].(string), "plugin restarting") {
		t.Errorf("backend down: %d %v", code, body)
	}
}

func TestPCIAddressForms(t *testing.T) {
	tests := map[string]string{
		"0000:41:00.0": "0000:41:00.0",
		"41:00.0":      "0000:41:00.0",
		"0000:C1:1F.7": "0000:c1:1f.7",
		"0001:41:00.1": "0001:41:00.1",
		"41:00.8":      "",
		"41:20.0":      "",
		"41:00":        "",
		"":             "",
		"../etc":       "",
	}
	for in, want := range tests {
		got, ok := normalizePCIAddress(in)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", in, got, ok, want)
		}
	}
}
