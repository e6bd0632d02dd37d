package monitor

import (
	"context"
	"errors"
	"github.com/gpuvm/gpuvm/pkg/api"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// scrape GETs /metrics from the exporter and parses it with Prometheus's
// own text parser.
func scrape(t *testing.T, e *Exporter) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(e)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value finds the sample of a family whose labels include want; ok false
// when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// metricsEnv is a monitor with every kind of metric populated: GPUs,
// devices held by VMs, a queued VM, a firing alert, API requests and a
// provisioned VM.
func metricsEnv(t *testing.T) (*Monitor, *store.Store, *clocktest.Clock, map[string]*store.VM) {
	t.Helper()
	clock := newFakeClock()
	st := newStore(t, clock)
	ctx := context.Background()
	start := clock.Now()
	vms := map[string]*store.VM{
		"ann": runningVM(t, st, "ann", "render", store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:41:00.0", VF: "0000:41:00.4", Profile: "L40S-12Q"}, "0000:41:00.4"),
		"bob": runningVM(t, st, "bob", "train", store.SlotClaim{Kind: gpu.KindMIG, GPUAddress: "0000:17:00.0", PlacementStart: 4, PlacementSize: 4, Profile: "3g.40gb"}, "0000:17:00.4"),
	}
	// ann's create operation finishes 90 s after it was asked for.
	clock.Advance(90 * time.Second)
	ops, err := st.ListOperations(ctx, vms["ann"].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.FinishOperation(ctx, ops[0].ID, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateVM(ctx, &store.VM{Name: "waits", Owner: "ann", Profile: "p", Hours: 1}, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	src := &fixedSource{}
	src.set(func(r *Reading) {
		g := NewGPUReading("0000:41:00.0")
		g.Model, g.UUID = "NVIDIA L40S", "GPU-1"
		g.Util, g.MemUtil, g.EncUtil, g.DecUtil = 0.75, 0.5, 0.1, 0.2
		g.MemUsed, g.MemTotal, g.Temperature, g.PowerWatts, g.SMClockMHz, g.XIDErrors, g.ECCErrors = 12<<30, 48<<30, 71, 250, 2100, 1, 4
		m := NewGPUReading("0000:17:00.0")
		m.Model, m.MIG, m.Temperature = "NVIDIA A100", true, 90
		v := NewInstanceReading("0000:41:00.0", gpu.KindVGPU)
		v.ID, v.Type, v.Util, v.MemUtil, v.EncUtil, v.DecUtil, v.MemUsed, v.MemTotal = "0000:41:00.4", "L40S-12Q", 0.6, 0.3, 0, 0.05, 3<<30, 12<<30
		v.License = LicenseGrace
		mi := NewInstanceReading("0000:17:00.0", gpu.KindMIG)
		mi.GPUInstance, mi.PlacementStart, mi.Type, mi.MemTotal = 2, 4, "3g.40gb", 40<<30
		r.GPUs, r.Instances = []GPUReading{g, m}, []InstanceReading{v, mi}
	})
	log, _ := testLog(t)
	mon := New(Config{Host: testHost, Store: st, Source: src, Clock: clock, Log: log})
	mon.provCursor = start
	if _, err := st.FireAlert(ctx, &store.Alert{Rule: "hot", Subject: testHost + "/0000:17:00.0", Metric: "gpu_temperature", Value: 90}); err != nil {
		t.Fatal(err)
	}
	if err := mon.Round(ctx); err != nil {
		t.Fatal(err)
	}
	mon.Exporter().ObserveRequest("GET", "/v1/vms/:id", 200, 20*time.Millisecond)
	mon.Exporter().ObserveRequest("GET", "/v1/vms/:id", 404, 5*time.Millisecond)
	mon.Exporter().ObserveRequest("BREW", "", 404, time.Millisecond)
	mon.Exporter().ObserveAuditFailure("vm.create")
	mon.Exporter().ObserveUDPDrop("client_to_guest", "backlog")
	mon.Exporter().ObserveUDPDrop("client_to_guest", "backlog")
	mon.Exporter().ObserveDispatchRound(80 * time.Millisecond)
	mon.Exporter().ObserveEstimateReplay(600 * time.Millisecond)
	mon.Exporter().ObserveEstimateReplay(400 * time.Millisecond)
	return mon, st, clock, vms
}

func TestMetricsEndpoint(t *testing.T) {
	mon, _, _, vms := metricsEnv(t)
	fams := scrape(t, mon.Exporter())
	gpu := map[string]string{"host": testHost, "gpu": "0000:41:00.0", "model": "NVIDIA L40S"}
	vgpu := map[string]string{"host": testHost, "gpu": "0000:41:00.0", "instance": "0000:41:00.4", "kind": "vgpu", "type": "L40S-12Q",
		"vm": vms["ann"].ID, "user": "ann"}
	mig := map[string]string{"gpu": "0000:17:00.0", "instance": "0000:17:00.4", "kind": "mig", "type": "3g.40gb", "vm": vms["bob"].ID, "user": "bob"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gpuvm_gpu_utilization_ratio", gpu, 0.75},
		{"gpuvm_gpu_memory_utilization_ratio", gpu, 0.5},
		{"gpuvm_gpu_encoder_utilization_ratio", gpu, 0.1},
		{"gpuvm_gpu_decoder_utilization_ratio", gpu, 0.2},
		{"gpuvm_gpu_memory_used_bytes", gpu, 12 << 30},
		{"gpuvm_gpu_memory_total_bytes", gpu, 48 << 30},
		{"gpuvm_gpu_temperature_celsius", gpu, 71},
		{"gpuvm_gpu_power_watts", gpu, 250},
		{"gpuvm_gpu_sm_clock_hertz", gpu, 2.1e9},
		{"gpuvm_gpu_xid_errors_total", gpu, 1},
		{"gpuvm_gpu_ecc_uncorrected_errors_total", gpu, 4},
		{"gpuvm_gpu_info", map[string]string{"gpu": "0000:17:00.0", "mig": "true", "vm": ""}, 1},
		{"gpuvm_vgpu_utilization_ratio", vgpu, 0.6},
		{"gpuvm_vgpu_memory_utilization_ratio", vgpu, 0.3},
		{"gpuvm_vgpu_encoder_utilization_ratio", vgpu, 0},
		{"gpuvm_vgpu_decoder_utilization_ratio", vgpu, 0.05},
		{"gpuvm_vgpu_memory_used_bytes", vgpu, 3 << 30},
		{"gpuvm_vgpu_memory_total_bytes", vgpu, 12 << 30},
		{"gpuvm_vgpu_memory_total_bytes", mig, 40 << 30},
		{"gpuvm_vgpu_licensed", vgpu, 0}, // in its grace period: not licensed
		{"gpuvm_sampling_up", map[string]string{"host": testHost}, 1},
		{"gpuvm_sampling_rounds_total", map[string]string{"host": testHost}, 1},
		{"gpuvm_sampling_failures_total", map[string]string{"host": testHost}, 0},
		{"gpuvm_vms", map[string]string{"state": "running"}, 2},
		{"gpuvm_vms", map[string]string{"state": "queued"}, 1},
		{"gpuvm_queue_length", nil, 1},
		{"gpuvm_queue_wait_seconds", nil, 0}, // created at the clock's now
		{"gpuvm_allocations", map[string]string{"host": testHost, "kind": "vgpu"}, 1},
		{"gpuvm_allocations", map[string]string{"host": testHost, "kind": "mig"}, 1},
		{"gpuvm_allocations", map[string]string{"host": testHost, "kind": "passthrough"}, 0},
		{"gpuvm_alerts_firing", map[string]string{"rule": "hot"}, 1},
		{"gpuvm_api_requests_total", map[string]string{"method": "GET", "route": "/v1/vms/:id", "code": "200"}, 1},
		{"gpuvm_api_requests_total", map[string]string{"method": "OTHER", "route": "unmatched", "code": "404"}, 1},
		{"gpuvm_api_request_duration_seconds", map[string]string{"method": "GET", "route": "/v1/vms/:id"}, 2},
		{"gpuvm_provisioning_seconds", map[string]string{"host": testHost}, 1},
		{"gpuvm_dispatch_round_seconds", nil, 1},
		{"gpuvm_estimate_replay_seconds", nil, 2},
		{"gpuvm_audit_write_failures_total", map[string]string{"action": "vm.create"}, 1},
		{"gpuvm_tunnel_udp_dropped_datagrams_total", map[string]string{"direction": "client_to_guest", "reason": "backlog"}, 2},
	} {
		got, ok := value(fams, tc.name, tc.labels)
		if !ok {
			t.Errorf("%s%v: no sample", tc.name, tc.labels)
			continue
		}
		if !near(got, tc.want) {
			t.Errorf("%s%v = %g, want %g", tc.name, tc.labels, got, tc.want)
		}
	}
	// Not reported: left out, not 0.
	if _, ok := value(fams, "gpuvm_gpu_utilization_ratio", map[string]string{"gpu": "0000:17:00.0"}); ok {
		t.Error("an unknown utilisation was exported")
	}
	if _, ok := value(fams, "gpuvm_vgpu_utilization_ratio", mig); ok {
		t.Error("an unknown MIG utilisation was exported")
	}
	if _, ok := value(fams, "gpuvm_vgpu_licensed", mig); ok {
		t.Error("an unknown licence state was exported")
	}
	// The provisioning time lands in its bucket: 90 s.
	h := fams["gpuvm_provisioning_seconds"].Metric[0].Histogram
	if h.GetSampleSum() != 90 {
		t.Errorf("provisioning sum %g, want 90", h.GetSampleSum())
	}
	if h := fams["gpuvm_estimate_replay_seconds"].Metric[0].Histogram; !near(h.GetSampleSum(), 1) {
		t.Errorf("replays' sum %g, want 1", h.GetSampleSum())
	}
	if fams["gpuvm_gpu_xid_errors_total"].GetType() != dto.MetricType_COUNTER || fams["gpuvm_api_request_duration_seconds"].GetType() != dto.MetricType_HISTOGRAM {
		t.Error("metric types")
	}
	if fams["process_cpu_seconds_total"] == nil || fams["go_goroutines"] == nil {
		t.Error("no process or Go runtime metrics")
	}
}

// Every metric the exporter serves is defined (and documented, see
// docs_test.go), and every defined metric is served when there is
// something to say.
func TestMetricsServedAreDefined(t *testing.T) {
	mon, _, _, _ := metricsEnv(t)
	mon.Exporter().ExportOrphans(func() map[string]int { return map[string]int{"domain": 1, "volume": 0, "device": 2} })
	mon.Exporter().ObserveBackup(time.Unix(1_700_000_000, 0), nil) // the last backup's time is served once there was one
	q := uint64(1 << 30)
	mon.Exporter().ExportVolumes("home", func() []api.VolumeUsage {
		return []api.VolumeUsage{{Kind: "home", Owner: "ann", Name: "ann", UsedBytes: 5, QuotaBytes: &q, Enforcement: "project"}}
	})
	fams, err := mon.Exporter().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, f := range fams {
		name := f.GetName()
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		served[name] = true
		d, ok := findDef(name)
		if !ok {
			t.Errorf("%s is served but not in MetricDefs", name)
			continue
		}
		if want := map[MetricKind]dto.MetricType{Gauge: dto.MetricType_GAUGE, Counter: dto.MetricType_COUNTER, Histogram: dto.MetricType_HISTOGRAM}[d.Kind]; f.GetType() != want {
			t.Errorf("%s is a %s, defined as %s", name, f.GetType(), d.Kind)
		}
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName())
			}
			want := append([]string(nil), d.Labels...)
			sort.Strings(want)
			if strings.Join(labels, ",") != strings.Join(want, ",") {
				t.Errorf("%s has labels %v, defined %v", name, labels, want)
				break
			}
		}
	}
	for _, d := range MetricDefs {
		if !served[d.Name] {
			t.Errorf("%s is defined but not served", d.Name)
		}
	}
}

// Volume usage: every kind registered is served, a volume without a
// quota has no quota row, and a kind removed is no longer served.
func TestVolumeMetrics(t *testing.T) {
	e := NewExporter(testHost, nil, nil, nil, nil)
	q := uint64(16 << 20)
	e.ExportVolumes("home", func() []api.VolumeUsage {
		return []api.VolumeUsage{{Kind: "home", Owner: "ann", Name: "ann", UsedBytes: 15 << 20, QuotaBytes: &q, Enforcement: "project"},
			{Kind: "home", Owner: "bob", Name: "bob", UsedBytes: 7, Enforcement: "none"}}
	})
	e.ExportVolumes("share", func() []api.VolumeUsage { return []api.VolumeUsage{{Kind: "share", Name: "datasets", UsedBytes: 9}} })
	fams := scrape(t, e)
	ann := map[string]string{"host": testHost, "kind": "home", "owner": "ann", "name": "ann"}
	if v, ok := value(fams, "gpuvm_volume_used_bytes", ann); !ok || v != 15<<20 {
		t.Errorf("ann's home used = %v (%v)", v, ok)
	}
	ann["enforcement"] = "project"
	if v, ok := value(fams, "gpuvm_volume_quota_bytes", ann); !ok || v != 16<<20 {
		t.Errorf("ann's home quota = %v (%v)", v, ok)
	}
	if _, ok := value(fams, "gpuvm_volume_quota_bytes", map[string]string{"owner": "bob"}); ok {
		t.Error("bob's home has no quota, but one is served")
	}
	share := map[string]string{"kind": "share", "name": "datasets", "owner": ""}
	if v, ok := value(fams, "gpuvm_volume_used_bytes", share); !ok || v != 9 {
		t.Errorf("share used = %v (%v)", v, ok)
	}
	e.ExportVolumes("share", nil)
	if _, ok := value(scrape(t, e), "gpuvm_volume_used_bytes", share); ok {
		t.Error("a kind removed is still served")
	}
}

// Scheduled backups: failures are counted, the last success's time is
// served once there is one and stays when a later run fails.
func TestBackupMetrics(t *testing.T) {
	e := NewExporter(testHost, nil, nil, nil, nil)
	host := map[string]string{"host": testHost}
	fams := scrape(t, e)
	if v, ok := value(fams, "gpuvm_backup_failures_total", host); !ok || v != 0 {
		t.Errorf("failures before any backup = %v (served %v), want 0", v, ok)
	}
	if _, ok := value(fams, "gpuvm_last_backup_timestamp_seconds", host); ok {
		t.Error("a last-backup time is served before any backup")
	}
	e.ObserveBackup(time.Unix(1_700_000_000, 0), nil)
	e.ObserveBackup(time.Unix(1_700_086_400, 0), errors.New("disk full"))
	e.ObserveBackup(time.Unix(1_700_172_800, 0), errors.New("disk full"))
	fams = scrape(t, e)
	if v, _ := value(fams, "gpuvm_backup_failures_total", host); v != 2 {
		t.Errorf("failures = %v, want 2", v)
	}
	if v, _ := value(fams, "gpuvm_last_backup_timestamp_seconds", host); v != 1_700_000_000 {
		t.Errorf("last backup = %v, want 1700000000", v)
	}
}

func findDef(name string) (MetricDef, bool) {
	for _, d := range MetricDefs {
		if d.Name == name {
			return d, true
		}
	}
	return MetricDef{}, false
}

// Without a source (no NVML) the monitor says why once, samples nothing,
// exports gpuvm_sampling_up 0, and still evaluates the queue's rules.
func TestMonitorWithoutSource(t *testing.T) {
	clock := newFakeClock()
	st := newStore(t, clock)
	log, buf := testLog(t)
	mon := New(Config{Host: testHost, Store: st, NoSource: "NVML unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)",
		Settings: config.Monitor{Interval: 5 * time.Millisecond, Downsample: 5 * time.Millisecond}, Clock: clock, Log: log})
	obs := &roundCounter{}
	mon.Observe(obs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { mon.Run(ctx); close(done) }()
	time.Sleep(100 * time.Millisecond) // many rounds
	cancel()
	<-done
	if n := strings.Count(buf.String(), "GPU sampling is off"); n != 1 {
		t.Errorf("said %d times that sampling is off:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "libnvidia-ml.so.1 not found") {
		t.Errorf("the reason is not logged:\n%s", buf.String())
	}
	if rows, _ := st.ListSamples(context.Background(), store.SampleFilter{Host: testHost, Since: clock.Now().Add(-time.Hour)}); len(rows) != 0 {
		t.Errorf("%d samples written without a source", len(rows))
	}
	if rounds, withReading := obs.counts(); rounds == 0 || withReading != 0 {
		t.Errorf("observers told of %d rounds, %d with a reading; want some, none with one", rounds, withReading)
	}
	fams := scrape(t, mon.Exporter())
	if v, ok := value(fams, "gpuvm_sampling_up", nil); !ok || v != 0 {
		t.Errorf("gpuvm_sampling_up = %g, %v", v, ok)
	}
	if _, ok := fams["gpuvm_gpu_utilization_ratio"]; ok {
		t.Error("GPU metrics without a source")
	}
}

// Prune downsamples old raw samples and deletes what is past retention.
func TestMonitorPrune(t *testing.T) {
	clock := newFakeClock()
	st := newStore(t, clock)
	src := &fixedSource{}
	src.set(func(r *Reading) { r.GPUs = []GPUReading{gpuAt("0000:41:00.0")} })
	log, _ := testLog(t)
	mon := New(Config{Host: testHost, Store: st, Source: src, Clock: clock, Log: log,
		Settings: config.Monitor{Interval: time.Minute, RawRetention: time.Hour, Downsample: 10 * time.Minute, DownsampledRetention: 3 * time.Hour}})
	ctx := context.Background()
	for range 4 * 60 { // four hours, a round a minute
		if err := mon.Round(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
	}
	// An alert resolved long ago goes too.
	old := &store.Alert{Rule: "r", Subject: "s", Metric: "m"}
	if _, err := st.FireAlert(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ResolveAlert(ctx, "r", "s", 0, "", clock.Now().Add(-4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := mon.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	now := clock.Now() // 13:00
	raw, _ := st.ListSamples(ctx, store.SampleFilter{Host: testHost, Since: now.Add(-24 * time.Hour)})
	down, _ := st.ListSamples(ctx, store.SampleFilter{Host: testHost, Since: now.Add(-24 * time.Hour), Resolution: 600})
	// Raw: 12:00 to 12:59; averages: 10:00 to 11:50 (older ones past 3 h).
	if len(raw) != 60 || !raw[0].TakenAt.Equal(now.Add(-time.Hour)) {
		t.Errorf("%d raw samples from %v", len(raw), raw[0].TakenAt)
	}
	if len(down) != 12 || !down[0].TakenAt.Equal(now.Add(-3*time.Hour)) || down[0].SampleCount != 10 || !near(down[0].GPUUtil, 0.1) {
		t.Errorf("%d averages, first %+v", len(down), down[0])
	}
	if a, _ := st.ListAlerts(ctx, store.AlertFilter{}); len(a) != 0 {
		t.Errorf("old resolved alert kept: %+v", a)
	}
}

// roundCounter is a RoundObserver that counts the rounds it is told of.
type roundCounter struct {
	mu                  sync.Mutex
	rounds, withReading int
}

func (c *roundCounter) Evaluate(_ context.Context, r *Round) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rounds++
	if r != nil {
		c.withReading++
	}
	return nil
}

func (c *roundCounter) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rounds, c.withReading
}
