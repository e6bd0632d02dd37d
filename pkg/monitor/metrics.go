package monitor

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// MetricsStore is what /metrics reads from the database at each scrape (a
// *store.Store).
type MetricsStore interface {
	CountVMsByState(ctx context.Context) (map[string]int64, error)
	CountLiveAllocations(ctx context.Context, host string) (map[gpu.Kind]int64, error)
	GetQueueStats(ctx context.Context, now time.Time) (store.QueueStats, error)
	CountFiringAlerts(ctx context.Context) (map[string]int64, error)
}

// MetricKind is how a metric behaves (its Prometheus type).
type MetricKind string

// Metric kinds.
const (
	Gauge     MetricKind = "gauge"
	Counter   MetricKind = "counter"
	Histogram MetricKind = "histogram"
)

// MetricDef describes one metric gpuvmd exports; docs/metrics.md documents
// each (a test checks both ways).
type MetricDef struct {
	Name   string
	Kind   MetricKind
	Help   string
	Labels []string
}

var (
	gpuLabels      = []string{"host", "gpu", "model"}
	instanceLabels = []string{"host", "gpu", "instance", "kind", "type", "vm", "user"}
	volumeLabels   = []string{"host", "kind", "owner", "name"}
)

// MetricDefs are every metric gpuvmd exports besides the Go runtime's and
// the process's (go_*, process_*).
var MetricDefs = []MetricDef{
	{"gpuvm_gpu_utilization_ratio", Gauge, "Fraction of the last sample period during which a kernel ran on the GPU (NVML GPU utilisation).", gpuLabels},
	{"gpuvm_gpu_memory_utilization_ratio", Gauge, "Fraction of the last sample period during which device memory was read or written.", gpuLabels},
	{"gpuvm_gpu_encoder_utilization_ratio", Gauge, "Utilisation of the GPU's video encoders.", gpuLabels},
	{"gpuvm_gpu_decoder_utilization_ratio", Gauge, "Utilisation of the GPU's video decoders.", gpuLabels},
	{"gpuvm_gpu_memory_used_bytes", Gauge, "Framebuffer memory in use.", gpuLabels},
	{"gpuvm_gpu_memory_total_bytes", Gauge, "Framebuffer memory of the GPU.", gpuLabels},
	{"gpuvm_gpu_temperature_celsius", Gauge, "GPU core temperature.", gpuLabels},
	{"gpuvm_gpu_power_watts", Gauge, "Power drawn by the GPU board.", gpuLabels},
	{"gpuvm_gpu_sm_clock_hertz", Gauge, "Current SM clock.", gpuLabels},
	{"gpuvm_gpu_xid_errors_total", Counter, "XID (critical) errors the GPU reported since gpuvmd started.", gpuLabels},
	{"gpuvm_gpu_ecc_uncorrected_errors_total", Counter, "Uncorrected ECC errors since the driver loaded (NVML volatile counter).", gpuLabels},
	{"gpuvm_gpu_info", Gauge, "1 for each GPU; whether it is in MIG mode, and the VM that holds it whole, if any.", []string{"host", "gpu", "model", "uuid", "mig", "vm", "user"}},
	{"gpuvm_vgpu_utilization_ratio", Gauge, "SM utilisation of a vGPU (time-sliced: NVML vGPU samples) or MIG instance (GPM, Hopper and later).", instanceLabels},
	{"gpuvm_vgpu_memory_utilization_ratio", Gauge, "Memory-bandwidth utilisation of a vGPU or MIG instance.", instanceLabels},
	{"gpuvm_vgpu_encoder_utilization_ratio", Gauge, "Video encoder utilisation of a vGPU.", instanceLabels},
	{"gpuvm_vgpu_decoder_utilization_ratio", Gauge, "Video decoder utilisation of a vGPU.", instanceLabels},
	{"gpuvm_vgpu_memory_used_bytes", Gauge, "Framebuffer memory a vGPU or MIG instance uses.", instanceLabels},
	{"gpuvm_vgpu_memory_total_bytes", Gauge, "Framebuffer memory of a vGPU or MIG instance.", instanceLabels},
	{"gpuvm_vgpu_licensed", Gauge, "1 while a vGPU's guest driver holds an NVIDIA vGPU software licence, 0 while it does not (in the grace period or restricted); absent while not known.", instanceLabels},
	{"gpuvm_sampling_up", Gauge, "1 when the last sampling round succeeded, 0 when it failed or the host cannot be sampled (no NVML).", []string{"host"}},
	{"gpuvm_sampling_rounds_total", Counter, "Sampling rounds run.", []string{"host"}},
	{"gpuvm_sampling_failures_total", Counter, "Sampling rounds that failed.", []string{"host"}},
	{"gpuvm_sampling_duration_seconds", Gauge, "How long the last sampling round took (read, map, write).", []string{"host"}},
	{"gpuvm_last_sample_timestamp_seconds", Gauge, "Unix time of the last sampling round that succeeded.", []string{"host"}},
	{"gpuvm_vms", Gauge, "VMs in each state (every host's; deleted ones are not counted).", []string{"state"}},
	{"gpuvm_queue_length", Gauge, "VMs waiting in the queue (every host's).", nil},
	{"gpuvm_queue_wait_seconds", Gauge, "How long the VM that has waited longest has waited (0 with none waiting).", nil},
	{"gpuvm_allocations", Gauge, "Live GPU allocations of this host by kind (vgpu, mig, passthrough).", []string{"host", "kind"}},
	{"gpuvm_alerts_firing", Gauge, "Firing alerts of each alert rule.", []string{"rule"}},
	{"gpuvm_orphans", Gauge, "Things on this host that look like gpuvm's but are not provably this installation's (domains, volumes, devices): left as they are until an admin deletes or adopts them.", []string{"host", "kind"}},
	{"gpuvm_volume_used_bytes", Gauge, "What a volume (a person's home, a share, a data disk) takes on the host's disk, measured every few minutes.", volumeLabels},
	{"gpuvm_volume_quota_bytes", Gauge, "A volume's quota (absent: none); enforcement is project (writes past it are refused) or none (only measured).", append(volumeLabels[:4:4], "enforcement")},
	{"gpuvm_api_requests_total", Counter, "API requests answered, by method, route template and status code.", []string{"method", "route", "code"}},
	{"gpuvm_api_request_duration_seconds", Histogram, "Time to answer API requests, by method and route template.", []string{"method", "route"}},
	{"gpuvm_backup_failures_total", Counter, "Scheduled backups (server.backup) that failed since gpuvmd started.", []string{"host"}},
	{"gpuvm_last_backup_timestamp_seconds", Gauge, "Unix time of the last scheduled backup that succeeded (absent until one has).", []string{"host"}},
	{"gpuvm_provisioning_seconds", Histogram, "Time from a VM's create request to the VM running, queue time included.", []string{"host"}},
	{"gpuvm_dispatch_round_seconds", Histogram, "How long each dispatch round of this gpuvmd took: reading the unfinished operations, placing the queue in one scheduling cycle, writing its order.", nil},
	{"gpuvm_estimate_replay_seconds", Histogram, "How long each replay of the queue that makes the estimated starts took (one per change of the state somebody looks at, with the NextFree probes asked for; one per probe first asked for between changes).", nil},
	{"gpuvm_audit_write_failures_total", Counter, "Audit entries that could not be written to the database (each one is logged at error), by action.", []string{"action"}},
	{"gpuvm_tunnel_udp_dropped_datagrams_total", Counter, "Datagrams UDP tunnels dropped, by direction (client_to_guest, guest_to_client) and reason: oversize (over udp_max_datagram), rate (over udp_datagrams_per_second or udp_bytes_per_second), backlog (the guest's socket could not take it at once).", []string{"direction", "reason"}},
}

// Buckets of the histograms.
var (
	requestBuckets      = prometheus.DefBuckets
	provisioningBuckets = []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400}
	// workBuckets: a round or a replay of a queue of a few to tens of
	// thousands (issue #26).
	workBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

func metricDef(name string) MetricDef {
	for _, d := range MetricDefs {
		if d.Name == name {
			return d
		}
	}
	panic("monitor: no metric " + name) // a programming error: every name used is in MetricDefs
}

// Exporter serves /metrics: the latest sampling round, counts read from
// the database at each scrape, and the API's request metrics.
type Exporter struct {
	host    string
	sampler *Sampler // nil: the host is not sampled
	st      MetricsStore
	clock   Clock
	log     *slog.Logger

	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	durations    *prometheus.HistogramVec
	provisioning prometheus.Observer
	rounds       prometheus.Histogram
	replays      prometheus.Histogram
	auditFails   *prometheus.CounterVec
	udpDrops     *prometheus.CounterVec
	handler      http.Handler

	mu             sync.Mutex
	lastError      string
	orphans        func() map[string]int // nil: not exported
	volumes        map[string]func() []api.VolumeUsage
	backupFailures int
	lastBackup     time.Time
}

// ExportOrphans makes the exporter report counts() (orphans by kind, the
// reconciler's) as gpuvm_orphans at each scrape.
func (e *Exporter) ExportOrphans(counts func() map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.orphans = counts
}

// ExportVolumes makes the exporter report list() (the usage of the
// volumes of one kind, read from memory: never a walk) as
// gpuvm_volume_used_bytes and gpuvm_volume_quota_bytes at each scrape.
// Each kind of volume (homes, shares, data disks) registers its own under
// its name; the same name again replaces it, nil removes it.
func (e *Exporter) ExportVolumes(name string, list func() []api.VolumeUsage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.volumes == nil {
		e.volumes = map[string]func() []api.VolumeUsage{}
	}
	if list == nil {
		delete(e.volumes, name)
		return
	}
	e.volumes[name] = list
}

// NewExporter builds the registry of host's metrics. sampler may be nil
// (the host is not sampled); st may be nil (no database counts).
func NewExporter(host string, sampler *Sampler, st MetricsStore, clock Clock, log *slog.Logger) *Exporter {
	if clock == nil {
		clock = realClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	e := &Exporter{host: host, sampler: sampler, st: st, clock: clock, log: log, reg: prometheus.NewRegistry()}
	req := metricDef("gpuvm_api_requests_total")
	e.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: req.Name, Help: req.Help}, req.Labels)
	dur := metricDef("gpuvm_api_request_duration_seconds")
	e.durations = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: dur.Name, Help: dur.Help, Buckets: requestBuckets}, dur.Labels)
	prov := metricDef("gpuvm_provisioning_seconds")
	pv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prov.Name, Help: prov.Help, Buckets: provisioningBuckets}, prov.Labels)
	e.provisioning = pv.WithLabelValues(host)
	e.rounds = workHistogram("gpuvm_dispatch_round_seconds")
	e.replays = workHistogram("gpuvm_estimate_replay_seconds")
	af := metricDef("gpuvm_audit_write_failures_total")
	e.auditFails = prometheus.NewCounterVec(prometheus.CounterOpts{Name: af.Name, Help: af.Help}, af.Labels)
	ud := metricDef("gpuvm_tunnel_udp_dropped_datagrams_total")
	e.udpDrops = prometheus.NewCounterVec(prometheus.CounterOpts{Name: ud.Name, Help: ud.Help}, ud.Labels)
	e.reg.MustRegister(e.requests, e.durations, pv, e.rounds, e.replays, e.auditFails, e.udpDrops, (*collector)(e),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	e.handler = promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{ErrorLog: slogErrorLog{log}, ErrorHandling: promhttp.ContinueOnError})
	return e
}

// ServeHTTP serves the metrics in the Prometheus text format (or
// OpenMetrics, when asked for).
func (e *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.handler.ServeHTTP(w, r) }

// Registry is the registry behind the exporter (tests gather it).
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// ObserveRequest counts an API request; route is the route template
// ("/v1/vms/:id"), never the path, so that the label set stays bounded.
func (e *Exporter) ObserveRequest(method, route string, code int, d time.Duration) {
	method = normalizeMethod(method)
	if route == "" {
		route = "unmatched"
	}
	e.requests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
	e.durations.WithLabelValues(method, route).Observe(d.Seconds())
}

// ObserveAuditFailure counts an audit entry of an action (a bounded set of
// names, pkg/server's audit table) that could not be written.
func (e *Exporter) ObserveAuditFailure(action string) { e.auditFails.WithLabelValues(action).Inc() }

// ObserveUDPDrop counts a datagram a UDP tunnel dropped, by direction and
// reason (bounded sets of names, pkg/server's udp.go).
func (e *Exporter) ObserveUDPDrop(direction, reason string) {
	e.udpDrops.WithLabelValues(direction, reason).Inc()
}

// ObserveProvisioning records the time from a create request to a running
// VM.
func (e *Exporter) ObserveProvisioning(d time.Duration) {
	if d >= 0 {
		e.provisioning.Observe(d.Seconds())
	}
}

// ObserveDispatchRound records how long a dispatch round took.
func (e *Exporter) ObserveDispatchRound(d time.Duration) { e.rounds.Observe(d.Seconds()) }

// ObserveEstimateReplay records how long a replay of the queue for the
// estimates took.
func (e *Exporter) ObserveEstimateReplay(d time.Duration) { e.replays.Observe(d.Seconds()) }

func workHistogram(name string) prometheus.Histogram {
	d := metricDef(name)
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: workBuckets})
}

// ObserveBackup records a scheduled backup's outcome: err nil for one that
// succeeded at at.
func (e *Exporter) ObserveBackup(at time.Time, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.backupFailures++
		return
	}
	e.lastBackup = at
}

func normalizeMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// collector turns the last round and the database counts into metrics at
// each scrape.
type collector Exporter

var collectorDescs = func() map[string]*prometheus.Desc {
	out := map[string]*prometheus.Desc{}
	for _, d := range MetricDefs {
		if d.Kind != Histogram && d.Name != "gpuvm_api_requests_total" && d.Name != "gpuvm_audit_write_failures_total" &&
			d.Name != "gpuvm_tunnel_udp_dropped_datagrams_total" {
			out[d.Name] = prometheus.NewDesc(d.Name, d.Help, d.Labels, nil)
		}
	}
	return out
}()

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range collectorDescs {
		ch <- d
	}
}

// scrapeTimeout bounds the database queries of one scrape.
const scrapeTimeout = 5 * time.Second

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	emit := func(name string, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(collectorDescs[name], t, v, labels...)
	}
	c.collectRound(emit)
	c.mu.Lock()
	orphans := c.orphans
	emit("gpuvm_backup_failures_total", prometheus.CounterValue, float64(c.backupFailures), c.host)
	if !c.lastBackup.IsZero() {
		emit("gpuvm_last_backup_timestamp_seconds", prometheus.GaugeValue, float64(c.lastBackup.Unix()), c.host)
	}
	volumes := make([]func() []api.VolumeUsage, 0, len(c.volumes))
	for _, k := range sortedKeys(c.volumes) {
		volumes = append(volumes, c.volumes[k])
	}
	c.mu.Unlock()
	for _, list := range volumes {
		for _, v := range list() {
			emit("gpuvm_volume_used_bytes", prometheus.GaugeValue, float64(v.UsedBytes), c.host, v.Kind, v.Owner, v.Name)
			if v.QuotaBytes != nil {
				emit("gpuvm_volume_quota_bytes", prometheus.GaugeValue, float64(*v.QuotaBytes), c.host, v.Kind, v.Owner, v.Name, v.Enforcement)
			}
		}
	}
	if orphans != nil {
		counts := orphans()
		for _, k := range sortedKeys(counts) {
			emit("gpuvm_orphans", prometheus.GaugeValue, float64(counts[k]), c.host, k)
		}
	}
	if c.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var errs []string
	if states, err := c.st.CountVMsByState(ctx); err != nil {
		errs = append(errs, err.Error())
	} else {
		for _, s := range sortedKeys(states) {
			emit("gpuvm_vms", prometheus.GaugeValue, float64(states[s]), s)
		}
	}
	if q, err := c.st.GetQueueStats(ctx, c.clock.Now()); err != nil {
		errs = append(errs, err.Error())
	} else {
		emit("gpuvm_queue_length", prometheus.GaugeValue, float64(q.Length))
		wait := 0.0
		if !q.OldestSince.IsZero() {
			wait = max(0, c.clock.Now().Sub(q.OldestSince).Seconds())
		}
		emit("gpuvm_queue_wait_seconds", prometheus.GaugeValue, wait)
	}
	if allocs, err := c.st.CountLiveAllocations(ctx, c.host); err != nil {
		errs = append(errs, err.Error())
	} else {
		for _, k := range []gpu.Kind{gpu.KindVGPU, gpu.KindMIG, gpu.KindPassthrough} {
			emit("gpuvm_allocations", prometheus.GaugeValue, float64(allocs[k]), c.host, string(k))
		}
	}
	if firing, err := c.st.CountFiringAlerts(ctx); err != nil {
		errs = append(errs, err.Error())
	} else {
		for _, r := range sortedKeys(firing) {
			emit("gpuvm_alerts_firing", prometheus.GaugeValue, float64(firing[r]), r)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(errs) > 0 && errs[0] != c.lastError {
		c.log.Warn("metrics: reading the database failed; those metrics are left out", "err", errs[0], "failures", len(errs))
		c.lastError = errs[0]
	} else if len(errs) == 0 {
		c.lastError = ""
	}
}

func (c *collector) collectRound(emit func(string, prometheus.ValueType, float64, ...string)) {
	h := c.host
	if c.sampler == nil {
		emit("gpuvm_sampling_up", prometheus.GaugeValue, 0, h)
		return
	}
	rounds, failures := c.sampler.Stats()
	emit("gpuvm_sampling_rounds_total", prometheus.CounterValue, float64(rounds), h)
	emit("gpuvm_sampling_failures_total", prometheus.CounterValue, float64(failures), h)
	r := c.sampler.Last()
	up := 0.0
	if r != nil && c.sampler.Healthy() {
		up = 1
	}
	emit("gpuvm_sampling_up", prometheus.GaugeValue, up, h)
	if r == nil {
		return
	}
	emit("gpuvm_sampling_duration_seconds", prometheus.GaugeValue, r.Duration.Seconds(), h)
	emit("gpuvm_last_sample_timestamp_seconds", prometheus.GaugeValue, float64(r.At.UnixNano())/1e9, h)
	xids := c.sampler.XIDTotal()
	for _, g := range r.GPUs {
		l := []string{h, g.Address, g.Model}
		ratio := func(name string, v float64) {
			if v >= 0 {
				emit(name, prometheus.GaugeValue, v, l...)
			}
		}
		ratio("gpuvm_gpu_utilization_ratio", g.Util)
		ratio("gpuvm_gpu_memory_utilization_ratio", g.MemUtil)
		ratio("gpuvm_gpu_encoder_utilization_ratio", g.EncUtil)
		ratio("gpuvm_gpu_decoder_utilization_ratio", g.DecUtil)
		ratio("gpuvm_gpu_temperature_celsius", g.Temperature)
		ratio("gpuvm_gpu_power_watts", g.PowerWatts)
		if g.MemTotal > 0 {
			emit("gpuvm_gpu_memory_used_bytes", prometheus.GaugeValue, float64(g.MemUsed), l...)
			emit("gpuvm_gpu_memory_total_bytes", prometheus.GaugeValue, float64(g.MemTotal), l...)
		}
		if g.SMClockMHz > 0 {
			emit("gpuvm_gpu_sm_clock_hertz", prometheus.GaugeValue, float64(g.SMClockMHz)*1e6, l...)
		}
		emit("gpuvm_gpu_xid_errors_total", prometheus.CounterValue, float64(xids[g.Address]), l...)
		emit("gpuvm_gpu_ecc_uncorrected_errors_total", prometheus.CounterValue, float64(g.ECCErrors), l...)
		emit("gpuvm_gpu_info", prometheus.GaugeValue, 1, h, g.Address, g.Model, g.UUID, strconv.FormatBool(g.MIG), g.VMID, g.User)
	}
	for _, in := range r.Instances {
		l := []string{h, in.GPUAddress, in.Key, string(in.Kind), in.Type, in.VMID, in.User}
		ratio := func(name string, v float64) {
			if v >= 0 {
				emit(name, prometheus.GaugeValue, v, l...)
			}
		}
		ratio("gpuvm_vgpu_utilization_ratio", in.Util)
		ratio("gpuvm_vgpu_memory_utilization_ratio", in.MemUtil)
		ratio("gpuvm_vgpu_encoder_utilization_ratio", in.EncUtil)
		ratio("gpuvm_vgpu_decoder_utilization_ratio", in.DecUtil)
		if in.MemTotal > 0 || in.MemUsed > 0 {
			emit("gpuvm_vgpu_memory_used_bytes", prometheus.GaugeValue, float64(in.MemUsed), l...)
		}
		if in.MemTotal > 0 {
			emit("gpuvm_vgpu_memory_total_bytes", prometheus.GaugeValue, float64(in.MemTotal), l...)
		}
		switch in.License {
		case LicenseLicensed:
			emit("gpuvm_vgpu_licensed", prometheus.GaugeValue, 1, l...)
		case LicenseGrace, LicenseUnlicensed:
			emit("gpuvm_vgpu_licensed", prometheus.GaugeValue, 0, l...)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// slogErrorLog hands promhttp's errors to slog.
type slogErrorLog struct{ log *slog.Logger }

func (l slogErrorLog) Println(v ...any) {
	l.log.Warn("metrics: serving /metrics", "err", slogJoin(v))
}

func slogJoin(v []any) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		if e, ok := x.(error); ok {
			s += e.Error()
		} else if str, ok := x.(string); ok {
			s += str
		}
	}
	return s
}
