package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/portal"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// GET /v1/hosts, as an admin, draws every GPU: a MIG GPU's instances at
// their slices with the VM, owner and profile holding each, a vGPU GPU's
// types used and free, a passed-through GPU's holder, drains; users see
// none of it.
func TestHostsGPUDetail(t *testing.T) {
	e := newAdminEnv(t)
	ctx := context.Background()
	ip := func(i int) *int { return &i }
	inv := gpu.HostInventory{GPUs: []gpu.HostGPU{
		{Address: "0000:01:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: gpu.ModeMIG, MIGCapable: true, MIGEnabled: true},
		{Address: "0000:02:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: gpu.ModeVGPU,
			VGPUTypes: []gpu.VGPUOffer{{Name: "L40S-12Q", Available: 2}, {Name: "L40S-24Q", Available: 0}}},
		{Address: "0000:03:00.0", Model: "L40S", DeviceID: "10de:26b9", Mode: gpu.ModePassthrough},
		{Address: "0000:04:00.0", Model: "L40S", DeviceID: "10de:26b9"},
	}, Devices: []gpu.HostDevice{
		{ID: "gi-4", Kind: gpu.KindMIG, GPU: "0000:01:00.0", Profile: "3g.40gb", Placement: ip(4), VMUUID: "vm-b"},
		{ID: "gi-0", Kind: gpu.KindMIG, GPU: "0000:01:00.0", Profile: "1g.10gb", Placement: ip(0), VMUUID: "vm-a"},
		{ID: "gi-bad", Kind: gpu.KindMIG, GPU: "0000:01:00.0", Profile: "9g.1gb", Placement: ip(1), VMUUID: "not-ours"},
		{ID: "mdev-1", Kind: gpu.KindVGPU, GPU: "0000:02:00.0", Type: "L40S-12Q", VMUUID: "vm-c"},
		{ID: "0000:03:00.0", Kind: gpu.KindPassthrough, GPU: "0000:03:00.0", VMUUID: "vm-d"},
	}}
	b, _ := json.Marshal(inv)
	if err := e.st.RegisterHost(ctx, &store.Host{Name: "h2", APIURL: "http://h2:8080", Inventory: string(b)}); err != nil {
		t.Fatal(err)
	}
	for _, vm := range []store.VM{{ID: "vm-a", Name: "one", Owner: "ann", Profile: "mig-small"}, {ID: "vm-b", Name: "three", Owner: "bob", Profile: "mig-half"},
		{ID: "vm-c", Name: "desk", Owner: "ann", Profile: "l40s-12q"}, {ID: "vm-d", Name: "whole", Owner: "bob", Profile: "l40s"}} {
		if _, err := e.st.CreateVM(ctx, &vm, store.CreateVMOptions{RequestedBy: vm.Owner}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.DrainGPU(ctx, &store.GPUDrain{Host: "h2", GPUAddress: "0000:04:00.0", DrainedBy: "admin", Reason: "fan"}); err != nil {
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
	got := hosts(e.admin)["h2"]
	if got.ThisNode || len(got.GPUDetail) != 4 {
		t.Fatalf("h2: this node %v, %d GPUs", got.ThisNode, len(got.GPUDetail))
	}
	user := func(id, name, owner, profile string) *api.DeviceUser {
		return &api.DeviceUser{ID: id, Name: name, Owner: owner, Profile: profile, State: store.VMQueued}
	}
	migGPU := got.GPUDetail[0]
	wantHeld := []api.HeldDevice{
		{ID: "gi-0", Kind: "mig", Type: "1g.10gb", MIG: &api.MIGPlacement{MemoryStart: 0, MemorySize: 1, ComputeStart: 0, ComputeSize: 1}, VMID: "vm-a", VM: user("vm-a", "one", "ann", "mig-small")},
		{ID: "gi-4", Kind: "mig", Type: "3g.40gb", MIG: &api.MIGPlacement{MemoryStart: 4, MemorySize: 4, ComputeStart: 4, ComputeSize: 3}, VMID: "vm-b", VM: user("vm-b", "three", "bob", "mig-half")},
		{ID: "gi-bad", Kind: "mig", Type: "9g.1gb", VMID: "not-ours"}, // no placement for an unknown profile; no VM gpuvm knows
	}
	if migGPU.Mode != "mig" || migGPU.MIGComputeSlices != 7 || migGPU.MIGMemorySlices != 8 || !reflect.DeepEqual(migGPU.Held[:2], wantHeld[:2]) ||
		len(migGPU.Held) != 3 || !reflect.DeepEqual(migGPU.Held[2], wantHeld[2]) {
		j, _ := json.MarshalIndent(migGPU, "", " ")
		t.Errorf("MIG GPU:\n%s", j)
	}
	vg := got.GPUDetail[1]
	if !reflect.DeepEqual(vg.VGPUTypes, []api.VGPUUse{{Type: "L40S-12Q", Used: 1, Free: 2}, {Type: "L40S-24Q", Used: 0, Free: 0}}) ||
		len(vg.Held) != 1 || vg.Held[0].VM == nil || vg.Held[0].VM.Owner != "ann" || vg.MIGMemorySlices != 0 {
		t.Errorf("vGPU GPU %+v", vg)
	}
	if pt := got.GPUDetail[2]; pt.Mode != "passthrough" || len(pt.Held) != 1 || pt.Held[0].VM == nil || pt.Held[0].VM.Name != "whole" {
		t.Errorf("passthrough GPU %+v", pt)
	}
	if idle := got.GPUDetail[3]; idle.Mode != "idle" || len(idle.Held) != 0 || idle.Drained == nil || idle.Drained.Reason != "fan" || idle.Drained.By != "admin" {
		t.Errorf("idle drained GPU %+v", idle)
	}
	// A user sees the host, not what is on it.
	if u := hosts(e.ann)["h2"]; u.GPUDetail != nil || u.ThisNode || u.GPUs != 4 {
		t.Errorf("as a user: %+v", u)
	}
}

// The answer's this_node is the node that answered.
func TestHostsThisNode(t *testing.T) {
	e := newAdminEnv(t)
	ctx := context.Background()
	for _, name := range []string{"h1", "h9"} {
		if err := e.st.RegisterHost(ctx, &store.Host{Name: name, APIURL: "http://" + name, Inventory: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	var l api.HostList
	if code, body := e.call(t, "GET", "/v1/hosts", e.admin, "", &l); code != 200 || len(l.Items) != 2 {
		t.Fatalf("%d %v", code, body)
	}
	for _, h := range l.Items {
		if h.ThisNode != (h.Name == "h1") {
			t.Errorf("%s: this_node %v", h.Name, h.ThisNode)
		}
	}
}

// A refused reload lists its diagnostics one by one, each at file:line;
// an accepted one lists its warnings.
func TestReloadConfigDiagnostics(t *testing.T) {
	cfg, diags := config.Parse(config.Source{Name: "x.hcl", Data: []byte(`profile "open" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	fc := &diagConfig{fakeConfig: fakeConfig{cfg: cfg}}
	s := testServer(t, &fc.fakeConfig)
	s.Config = fc
	rec, body := do(t, s, "POST", "/v1/admin/reload", "admin-token")
	if rec.Code != 200 || body["config"] == "" {
		t.Fatalf("reload: %d %v", rec.Code, body)
	}
	var ok api.ReloadResult
	if err := json.Unmarshal(rec.Body.Bytes(), &ok); err != nil || len(ok.ConfigDiagnostics) != 1 || ok.ConfigDiagnostics[0].Severity != "warning" {
		t.Errorf("accepted reload %+v (%v)", ok, err)
	}
	fc.broken = true
	rec, _ = do(t, s, "POST", "/v1/admin/reload", "admin-token")
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != 422 || p.Diagnostics == "" {
		t.Fatalf("refused reload: %d %s", rec.Code, rec.Body)
	}
	want := []api.ConfigDiagnostic{{Severity: "error", Summary: "Unsupported block type", File: "x.hcl", Line: 3, Column: 1}}
	if !reflect.DeepEqual(p.ConfigDiagnostics, want) {
		t.Errorf("config_diagnostics %+v, want %+v", p.ConfigDiagnostics, want)
	}
	// A Config that gives only the text still answers with it.
	s.Config = &fc.fakeConfig
	rec, body = do(t, s, "POST", "/v1/admin/reload", "admin-token")
	if rec.Code != 422 || body["diagnostics"] == "" || body["config_diagnostics"] != nil {
		t.Errorf("text-only refused reload: %d %v", rec.Code, body)
	}
}

type diagConfig struct{ fakeConfig }

func (d *diagConfig) ReloadDiagnosed() (string, []api.ConfigDiagnostic, error) {
	text, err := d.Reload()
	if err != nil {
		return text, []api.ConfigDiagnostic{{Severity: "error", Summary: "Unsupported block type", File: "x.hcl", Line: 3, Column: 1}}, err
	}
	return text, []api.ConfigDiagnostic{{Severity: "warning", Summary: "w", File: "x.hcl", Line: 1, Column: 1}}, nil
}

// The review report as HTML: the page gpuvm report writes, for admins,
// with a CSP that lets its inline styles and nothing else.
func TestReportSummaryHTML(t *testing.T) {
	e := newUsageEnv(t)
	for _, tc := range []struct {
		token string
		code  int
	}{{e.tokens["admin"], 200}, {e.tokens["ann"], 403}} {
		req := httptest.NewRequest("GET", "/v1/reports/summary.html", nil)
		req.Header.Set("Authorization", "Bearer "+tc.token)
		rec := httptest.NewRecorder()
		e.s.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		if tc.code != http.StatusOK {
			continue
		}
		if ct := rec.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script") {
			t.Errorf("CSP %q", csp)
		}
		if b := rec.Body.String(); !strings.HasPrefix(b, "<!DOCTYPE html>") || !strings.Contains(b, "GPU usage report") || strings.Contains(b, "<script") {
			t.Errorf("body %.300s", b)
		}
	}
	req := httptest.NewRequest("GET", "/v1/reports/summary.html?tz=Mars/Base", nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens["admin"])
	rec := httptest.NewRecorder()
	e.s.ServeHTTP(rec, req)
	if rec.Code != 422 || !strings.Contains(rec.Body.String(), "tz") {
		t.Errorf("bad tz: %d %s", rec.Code, rec.Body)
	}
}

// The review report as HTML follows the request's language as the portal
// does: Accept-Language, else the language cookie; in Chinese its
// headings, labels and notes are Chinese and no English sentence is left.
func TestReportSummaryHTMLInChinese(t *testing.T) {
	e := newUsageEnv(t)
	get := func(set func(*http.Request)) string {
		req := httptest.NewRequest("GET", "/v1/reports/summary.html?from=2026-03-09T00:00:00Z&to=2026-03-10T00:00:00Z", nil)
		req.Header.Set("Authorization", "Bearer "+e.tokens["admin"])
		set(req)
		rec := httptest.NewRecorder()
		e.s.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	english := []string{"GPU usage report", "What stands out", "Idle VMs", "Queue waits", "When GPUs are wanted", "GPU-hours per user",
		"Weekdays and hours are in", "VMs held", "Requests:", "Day and night", "Mon", "no data", "Total"}
	for name, set := range map[string]func(*http.Request){
		"Accept-Language": func(r *http.Request) { r.Header.Set("Accept-Language", "zh-CN,zh;q=0.9,en;q=0.5") },
		"the cookie":      func(r *http.Request) { r.AddCookie(&http.Cookie{Name: portal.LangCookie, Value: "zh-CN"}) },
	} {
		b := get(set)
		for _, want := range []string{`<html lang="zh-CN">`, "<h1>GPU 使用报告</h1>", "<h2>值得注意的情况</h2>", "<h2>排队等待</h2>", "虚拟机占用了", "周一"} {
			if !strings.Contains(b, want) {
				t.Errorf("%s: the Chinese report lacks %q", name, want)
			}
		}
		for _, en := range english {
			if strings.Contains(b, en) {
				t.Errorf("%s: the Chinese report says %q", name, en)
			}
		}
	}
	b := get(func(*http.Request) {})
	if !strings.Contains(b, `<html lang="en">`) || !strings.Contains(b, "What stands out") || !strings.Contains(b, "VMs held") {
		t.Errorf("without a language the report is not in English: %.300s", b)
	}
}

// Drains and undrains are events for the admins' fleet pages, and no
// user's.
func TestDrainEvents(t *testing.T) {
	e := newAdminEnv(t)
	ctx := context.Background()
	if err := e.st.RegisterHost(ctx, &store.Host{Name: "h1", APIURL: "http://h1", Inventory: "{}"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/admin/gpus/0000:41:00.0/drain"}, {"DELETE", "/v1/admin/gpus/0000:41:00.0/drain"},
		{"POST", "/v1/admin/hosts/h1/drain"}, {"DELETE", "/v1/admin/hosts/h1/drain"},
		{"DELETE", "/v1/admin/hosts/h1/drain"}, // not drained: refused, no event
	} {
		e.call(t, c.method, c.path, e.admin, "", nil)
	}
	evs, err := e.st.ListEventsSince(ctx, 0, store.EventFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		var p api.DrainEventPayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil || ev.Owner != "" {
			t.Fatalf("event %+v (%v)", ev, err)
		}
		got = append(got, fmt.Sprintf("%s %s %s %v %s", ev.Type, p.Host, p.GPU, p.Drained, p.By))
	}
	want := []string{"gpu.drain h1 0000:41:00.0 true admin", "gpu.drain h1 0000:41:00.0 false admin", "host.drain h1  true admin", "host.drain h1  false admin"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if mine, _ := e.st.ListEventsSince(ctx, 0, store.EventFilter{Owner: "ann", Limit: 100}); len(mine) != 0 {
		t.Errorf("ann's events: %+v", mine)
	}
}

// A device an inventory lists twice (an older node's heartbeat: the mig
// backend's record, with its VM, and the vgpu backend's of the same VF,
// with none) is drawn once, as the VM's, by its type's name.
func TestGPUDetailShowsADeviceOnce(t *testing.T) {
	start := 4
	inv := gpu.HostInventory{GPUs: []gpu.HostGPU{
		{Address: "0000:18:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: gpu.ModeMIG, MIGCapable: true, MIGEnabled: true},
	}, Devices: []gpu.HostDevice{
		{ID: "0000:18:00.4", Backend: "vgpu", Kind: gpu.KindVGPU, GPU: "0000:18:00.0", Type: "type 2316"},
		{ID: "0000:18:00.4", Backend: "mig", Kind: gpu.KindMIG, GPU: "0000:18:00.0", Type: "H100-3-40C", Profile: "3g.40gb", Placement: &start, VMUUID: "vm-1", Managed: true},
	}}
	vms := map[string]*store.VM{"vm-1": {ID: "vm-1", Name: "train", Owner: "ann", Profile: "h100-mig", State: store.VMRunning}}
	got := gpuDetail("h", inv, nil, vms)
	if len(got) != 1 || len(got[0].Held) != 1 {
		t.Fatalf("%+v, want one GPU holding one device", got)
	}
	d := got[0].Held[0]
	if d.VM == nil || d.VM.Name != "train" || d.Type != "H100-3-40C" || d.MIG == nil || d.MIG.MemoryStart != 4 {
		t.Errorf("held %+v (VM %+v), want vm train's H100-3-40C at slice 4", d, d.VM)
	}
	for _, v := range got[0].VGPUTypes {
		if v.Used > 0 {
			t.Errorf("a time-sliced vGPU type in use on a MIG GPU: %+v", v)
		}
	}
}
