package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/backend/loader"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/server"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// createProfile is a one-seat vGPU VM on the simulated l40sx4 host.
const createProfile = `
profile "l40s-seat" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
  lease {
    default = "2h"
    max     = "8h"
  }
}
`

// callTimer adds up the time spent in the external calls of a create: the
// backends' RPCs (plugin processes) and libvirt's.
type callTimer struct {
	mu      sync.Mutex
	on      bool
	create  time.Duration // backend Create
	inv     time.Duration // backend Inventory
	other   time.Duration // other backend calls (Remove, Health...)
	cache   time.Duration // reads of the loader's inventory cache
	libvirt time.Duration // hypervisor CreateVM
	hvOther time.Duration // other hypervisor calls (Lookup, List...)
	calls   map[string]int
}

func (t *callTimer) add(what string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on {
		return
	}
	t.calls[what]++
	switch what {
	case "backend.Create":
		t.create += d
	case "backend.Inventory":
		t.inv += d
	case "cache.Inventories":
		t.cache += d
	case "hypervisor.CreateVM":
		t.libvirt += d
	default:
		if len(what) > 11 && what[:11] == "hypervisor." {
			t.hvOther += d
		} else {
			t.other += d
		}
	}
}

func (t *callTimer) measure(on bool) {
	t.mu.Lock()
	t.on = on
	t.mu.Unlock()
}

// timedBackends is the loader with every backend wrapped in timedBackend.
type timedBackends struct {
	orchestrator.Backends
	t *callTimer
}

func (tb timedBackends) Backend(name string) (backend.Backend, bool) {
	b, ok := tb.Backends.Backend(name)
	if !ok {
		return b, ok
	}
	return timedBackend{b, tb.t}, true
}

// Inventories forwards to the loader's inventory cache (the backends push
// their inventories): reading it is no call to a backend, and counts in
// gpuvmd-ms/op; its time is reported apart (cache-ms/op), since a read
// may wait for a push.
func (tb timedBackends) Inventories(ctx context.Context, names []string) (map[string]backend.Inventory, []error) {
	if c, ok := tb.Backends.(backend.InventoryCache); ok {
		start := time.Now()
		defer func() { tb.t.add("cache.Inventories", time.Since(start)) }()
		return c.Inventories(ctx, names)
	}
	invs := map[string]backend.Inventory{}
	var errs []error
	for _, name := range names {
		if b, ok := tb.Backend(name); ok {
			inv, err := b.Inventory(ctx)
			if err != nil {
				errs = append(errs, fmt.Errorf("inventory of %s: %w", name, err))
				continue
			}
			invs[name] = inv
		}
	}
	return invs, errs
}

type timedBackend struct {
	backend.Backend
	t *callTimer
}

func (b timedBackend) Inventory(ctx context.Context) (backend.Inventory, error) {
	start := time.Now()
	defer func() { b.t.add("backend.Inventory", time.Since(start)) }()
	return b.Backend.Inventory(ctx)
}

func (b timedBackend) Create(ctx context.Context, req backend.CreateRequest) (backend.Device, error) {
	start := time.Now()
	defer func() { b.t.add("backend.Create", time.Since(start)) }()
	return b.Backend.Create(ctx, req)
}

func (b timedBackend) Remove(ctx context.Context, req backend.RemoveRequest) error {
	start := time.Now()
	defer func() { b.t.add("backend.Remove", time.Since(start)) }()
	return b.Backend.Remove(ctx, req)
}

func (b timedBackend) Health(ctx context.Context) (backend.Health, error) {
	start := time.Now()
	defer func() { b.t.add("backend.Health", time.Since(start)) }()
	return b.Backend.Health(ctx)
}

type timedHypervisor struct {
	orchestrator.Hypervisor
	t *callTimer
}

func (h timedHypervisor) CreateVM(ctx context.Context, req hypervisor.VMRequest) (hypervisor.Info, error) {
	start := time.Now()
	defer func() { h.t.add("hypervisor.CreateVM", time.Since(start)) }()
	return h.Hypervisor.CreateVM(ctx, req)
}

func (h timedHypervisor) DeleteVM(ctx context.Context, uuid string, timeout time.Duration) error {
	start := time.Now()
	defer func() { h.t.add("hypervisor.DeleteVM", time.Since(start)) }()
	return h.Hypervisor.DeleteVM(ctx, uuid, timeout)
}

func (h timedHypervisor) Lookup(ctx context.Context, uuid string) (hypervisor.Info, error) {
	start := time.Now()
	defer func() { h.t.add("hypervisor.Lookup", time.Since(start)) }()
	return h.Hypervisor.Lookup(ctx, uuid)
}

func (h timedHypervisor) List(ctx context.Context) ([]hypervisor.Info, error) {
	start := time.Now()
	defer func() { h.t.add("hypervisor.List", time.Since(start)) }()
	return h.Hypervisor.List(ctx)
}

// fixedConfig is a server.Config that never changes.
type fixedConfig struct{ c *config.Config }

func (f fixedConfig) Load() *config.Config    { return f.c }
func (f fixedConfig) Reload() (string, error) { return "", nil }

// createRig is what BenchmarkCreate and BenchmarkTaskDispatch share: the
// real SQLite store and server (behind httptest), the real backend plugin
// binaries on a simulated l40sx4 host, libvirt's test:///default driver,
// and an orchestrator run inline (Drain) whose backends and hypervisor
// are wrapped in the timing decorators.
type createRig struct {
	cfg    *config.Config
	st     *store.Store
	loader *loader.Loader
	hv     *hypervisor.Conn
	timer  *callTimer
	o      *orchestrator.Orchestrator
	srv    *httptest.Server
	client *http.Client
	token  string
	dir    string
}

// newCreateRig starts a rig whose configuration is profiles (HCL).
func newCreateRig(b *testing.B, profiles string) *createRig {
	b.Helper()
	ctx := context.Background()
	r := &createRig{dir: b.TempDir(), client: &http.Client{}, timer: &callTimer{calls: map[string]int{}}}
	log := quietLog()

	cfg, diags := config.Parse(config.Source{Name: "bench.hcl", Data: []byte(profiles)})
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	r.cfg = cfg
	r.st = openStore(b, filepath.Join(r.dir, "gpuvm.db"))
	b.Cleanup(func() { r.st.Close() })
	r.token = adminToken(b, r.st, r.dir)

	r.loader = loader.New(loader.Config{Dir: plugins(b), Logger: log,
		Backend: backend.Config{Simulate: "l40sx4", StateDir: r.dir, NVML: backend.NVMLAuto}})
	b.Cleanup(r.loader.Close)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := r.loader.Start(sctx)
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	// A running gpuvmd has long had its backends' first pushes; the
	// benchmark waits for them before it measures.
	if _, errs := r.loader.Inventories(ctx, r.loader.Names()); len(errs) > 0 {
		b.Fatal(errs)
	}
	if r.hv, err = hypervisor.Open(ctx, "test:///default", log); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.hv.Close() })
	// The domain type is the connection's accelerator check's (on the
	// test driver: software emulation), never an assumed kvm.
	accel, err := r.hv.Accel(ctx)
	if err != nil {
		b.Fatal(err)
	}
	r.o = orchestrator.New(orchestrator.Config{
		Store: r.st, Backends: timedBackends{r.loader, r.timer}, Hypervisor: timedHypervisor{r.hv, r.timer},
		Profiles: func() *config.Config { return cfg }, Host: "bench-host", DomainPrefix: "bench-",
		DomainType: accel.Type, Log: log, ShutdownTimeout: time.Second,
	})
	// No Worker: the benchmark runs the orchestrator itself (Drain), so
	// that the measured create is not waiting for a loop to wake up.
	r.srv = httptest.NewServer(server.New(server.Deps{Auth: r.st, Backends: r.loader, Config: fixedConfig{cfg}, Store: r.st, Log: log,
		TaskLogs: filepath.Join(r.dir, "tasks")}))
	b.Cleanup(r.srv.Close)
	return r
}

// call is call on the rig's server with its admin token.
func (r *createRig) call(method, path, body string, want int, out any) error {
	return call(r.client, method, r.srv.URL+path, r.token, body, want, out)
}

// deleteVM deletes a VM (DELETE and Drain) and checks it is gone.
func (r *createRig) deleteVM(b *testing.B, id string) {
	b.Helper()
	ctx := context.Background()
	if err := r.call(http.MethodDelete, "/v1/vms/"+id, "", http.StatusAccepted, nil); err != nil {
		b.Fatal(err)
	}
	r.o.Drain(ctx)
	if vm, err := r.st.GetVM(ctx, id); err != nil || vm.State != store.VMDeleted {
		b.Fatalf("after delete: %+v, %v", vm, err)
	}
}

// report reports n operations that took total, split by the timer into
// the backend's and libvirt's calls and gpuvmd's own time (the metrics
// BenchmarkCreate documents); extra is more external time to take out of
// gpuvmd's (reported by the caller).
func (r *createRig) report(b *testing.B, total time.Duration, n int, extra time.Duration) {
	t := r.timer
	per := func(d time.Duration) float64 { return ms(d) / float64(max(n, 1)) }
	ext := t.create + t.libvirt + extra
	b.ReportMetric(per(total), "total-ms/op")
	b.ReportMetric(per(t.create), "backend-create-ms/op")
	b.ReportMetric(per(t.libvirt), "libvirt-ms/op")
	b.ReportMetric(per(t.create+t.libvirt), "backend+libvirt-ms/op")
	b.ReportMetric(per(total-ext), "gpuvmd-ms/op")
	b.ReportMetric(per(t.inv), "inventory-ms/op")
	b.ReportMetric(per(t.cache), "cache-ms/op")
	b.ReportMetric(per(total-ext-t.inv-t.other-t.hvOther), "gpuvmd-own-ms/op")
	b.ReportMetric(0, "ns/op")
	b.Logf("external calls in %d operations: %v", n, t.calls)
}

// BenchmarkCreate measures what gpuvmd adds to a VM create over the backend
// and libvirt calls it makes. One iteration: POST /v1/vms (the real handler
// on the real SQLite store, behind httptest) and the orchestrator run inline
// (Drain) until the VM is running, on a simulated l40sx4 host served by the
// real backend plugin binaries, with libvirt's test:///default driver. The
// backends and the hypervisor the orchestrator gets are wrapped in timing
// decorators (createRig). The VM is then deleted (DELETE and Drain, not
// timed) to free the host for the next one.
//
// Metrics, per create:
//
//	total-ms/op           POST to running
//	backend-create-ms/op  backend Create (the plugin RPC that makes the device)
//	libvirt-ms/op         hypervisor CreateVM (define and start the domain)
//	backend+libvirt-ms/op the two above
//	gpuvmd-ms/op          total minus backend+libvirt: gpuvmd's cost (target < 10 ms)
//	inventory-ms/op       backend Inventory RPCs gpuvmd makes to place and
//	                      check the device (counted in gpuvmd-ms/op: gpuvmd
//	                      chooses to make them)
//	cache-ms/op           reads of the loader's inventory cache, which the
//	                      backends keep current (counted in gpuvmd-ms/op and
//	                      gpuvmd-own-ms/op); a read waits for the push that
//	                      follows a Remove
//	gpuvmd-own-ms/op      total minus every external call, Inventory included
func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	r := newCreateRig(b, createProfile)
	var total time.Duration
	n := 0
	for b.Loop() {
		r.timer.measure(true)
		start := time.Now()
		var resp api.CreateVMResponse
		if err := r.call(http.MethodPost, "/v1/vms", `{"profile":"l40s-seat"}`, http.StatusAccepted, &resp); err != nil {
			b.Fatal(err)
		}
		r.o.Drain(ctx)
		total += time.Since(start)
		r.timer.measure(false)
		n++

		b.StopTimer()
		vm, err := r.st.GetVM(ctx, resp.VM.ID)
		if err != nil || vm.State != store.VMRunning {
			b.Fatalf("after create: %+v, %v", vm, err)
		}
		r.deleteVM(b, vm.ID)
		b.StartTimer()
	}
	r.report(b, total, n, 0)
}

// call sends a request with a JSON body (none when empty) and decodes the
// answer into out (when not nil), which must have status want.
func call(client *http.Client, method, u, token, body string, want int, out any) error {
	var r io.Reader
	if body != "" {
		r = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}
