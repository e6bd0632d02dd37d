package alert

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/webhook"
)

// Alert metrics (config.AlertMetrics).
const (
	MetricGPUUtilization       = "gpu_utilization"
	MetricGPUMemoryUtilization = "gpu_memory_utilization"
	MetricGPUTemperature       = "gpu_temperature"
	MetricGPUPower             = "gpu_power"
	MetricGPUXIDErrors         = "gpu_xid_errors"
	MetricQueueLength          = "queue_length"
	MetricQueueWait            = "queue_wait"
	MetricVMIdle               = "vm_idle"
	MetricBackendDown          = "backend_down"
	// MetricVGPUUnlicensed is 1 while a vGPU's guest driver holds no
	// licence (grace period or restricted), 0 while it holds one; a vGPU
	// whose state is not known is not observed. A rule with `for` set to
	// the grace period finds guests left unlicensed.
	MetricVGPUUnlicensed = "vgpu_unlicensed"
)

// Store is what alert evaluation needs of the database (a
// *store.Store).
type Store interface {
	FireAlert(ctx context.Context, a *store.Alert) (bool, error)
	ResolveAlert(ctx context.Context, rule, subject string, value float64, summary string, at time.Time) (*store.Alert, error)
	ListAlerts(ctx context.Context, f store.AlertFilter) ([]store.Alert, error)
	SumXIDErrors(ctx context.Context, host string, since time.Time) (map[string]int64, error)
	ListSamples(ctx context.Context, f store.SampleFilter) ([]store.GPUSample, error)
	GetQueueStats(ctx context.Context, now time.Time) (store.QueueStats, error)
}

// BackendHealth says which GPU backends are down: name → why ("" when it
// is up).
type BackendHealth interface {
	BackendStates(ctx context.Context) map[string]string
}

// Backends gives the running GPU backends (a *loader.Loader).
type Backends interface {
	Names() []string
	Backend(name string) (backend.Backend, bool)
}

// backendHealthTimeout bounds one backend's health check.
const backendHealthTimeout = 5 * time.Second

// LoaderHealth checks the health of each backend of bs.
func LoaderHealth(bs Backends) BackendHealth { return loaderHealth{bs} }

type loaderHealth struct{ bs Backends }

func (l loaderHealth) BackendStates(ctx context.Context) map[string]string {
	out := map[string]string{}
	for _, name := range l.bs.Names() {
		b, ok := l.bs.Backend(name)
		if !ok {
			out[name] = "not running"
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, backendHealthTimeout)
		h, err := b.Health(hctx)
		cancel()
		switch {
		case err != nil:
			out[name] = err.Error()
		case !h.OK:
			out[name] = "degraded: " + h.Detail
		default:
			out[name] = ""
		}
	}
	return out
}

// Evaluator evaluates the alert rules of the policy after each sampling
// round: a rule fires about a subject (a GPU, a VM, the queue, a backend)
// once its condition has held continuously for its duration, and resolves
// as soon as it no longer holds. Every change is logged, stored (alerts
// table) and sent to the rule's webhook.
//
// How long a condition has held is kept in memory; when gpuvmd starts (or a
// rule appears) it is read back from the GPU samples of the rule's
// duration, so that a restart does not delay a GPU alert.
type Evaluator struct {
	host     string
	st       Store
	rules    func() []*config.Alert
	idle     monitor.IdleDetector // nil: vm_idle rules observe nothing
	backends BackendHealth        // nil: backend_down rules observe nothing
	notifier *webhook.Notifier    // nil: log only
	clock    monitor.Clock
	log      *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	loaded  bool
	firing  map[alertKey]*store.Alert
	pending map[alertKey]time.Time
	seen    map[string]string // rule name → its signature, as last evaluated
}

type alertKey struct{ rule, subject string }

// Config is what an Evaluator needs.
type Config struct {
	Host     string
	Store    Store
	Rules    func() []*config.Alert
	Idle     monitor.IdleDetector
	Backends BackendHealth
	Notifier *webhook.Notifier
	Clock    monitor.Clock
	Log      *slog.Logger
	// Interval is the sampling interval: samples further apart than three
	// intervals do not prove that a condition held in between.
	Interval time.Duration
}

// NewEvaluator makes an evaluator.
func NewEvaluator(c Config) *Evaluator {
	if c.Clock == nil {
		c.Clock = clocks{}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Interval <= 0 {
		c.Interval = config.DefaultMonitorInterval
	}
	if c.Rules == nil {
		c.Rules = func() []*config.Alert { return nil }
	}
	return &Evaluator{host: c.Host, st: c.Store, rules: c.Rules, idle: c.Idle, backends: c.Backends, notifier: c.Notifier,
		clock: c.Clock, log: c.Log.With("component", "alerts"), interval: c.Interval,
		firing: map[alertKey]*store.Alert{}, pending: map[alertKey]time.Time{}, seen: map[string]string{}}
}

// observation is a metric's value for one subject.
type observation struct {
	subject string
	host    string
	what    string // the subject for people: "GPU 0000:41:00.0 on gpu01"
	value   float64
}

// errNoData: the rule's metric cannot be read this round (no round, a
// failed query); its alerts keep their state.
var errNoData = errors.New("no data this round")

// BuiltinAlertRules are the alerts gpuvmd raises and resolves itself, not
// through an HCL alert rule: the evaluator leaves them alone. "orphans"
// fires while a host has things that look like gpuvm's but are not this
// installation's to remove (the reconciler's).
var BuiltinAlertRules = map[string]bool{"orphans": true}

// Evaluate evaluates every rule against round r (nil when the round failed
// or the host is not sampled: GPU rules then keep their state).
func (e *Evaluator) Evaluate(ctx context.Context, r *monitor.Round) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.loaded {
		as, err := e.st.ListAlerts(ctx, store.AlertFilter{State: store.AlertFiring})
		if err != nil {
			return fmt.Errorf("evaluate alerts: %w", err)
		}
		for i := range as {
			if BuiltinAlertRules[as[i].Rule] {
				continue // raised and resolved by gpuvmd's own code, not by a rule
			}
			if as[i].Host == e.host || as[i].Host == "" {
				e.firing[alertKey{as[i].Rule, as[i].Subject}] = &as[i]
			}
		}
		e.loaded = true
	}
	now := e.clock.Now().UTC()
	rules := e.rules()
	in := &roundInputs{e: e, r: r, now: now}
	var errs []error
	names := map[string]bool{}
	for _, rule := range rules {
		names[rule.Name] = true
		sig := signature(rule)
		if old, ok := e.seen[rule.Name]; !ok || old != sig {
			e.forgetPending(rule.Name)
			e.seen[rule.Name] = sig
			if err := e.seed(ctx, rule, now); err != nil {
				e.log.Warn("could not read back how long an alert condition has held", "rule", rule.Name, "err", err)
			}
		}
		obs, err := in.observe(ctx, rule)
		if errors.Is(err, errNoData) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %s: %w", rule.Name, err))
			continue
		}
		e.apply(ctx, rule, obs, now)
	}
	// Rules taken out of the configuration resolve what they had firing.
	for k, a := range e.firing {
		if !names[k.rule] {
			e.resolve(ctx, nil, a, a.Value, now, "the rule was removed from the configuration")
		}
	}
	for name := range e.seen {
		if !names[name] {
			delete(e.seen, name)
			e.forgetPending(name)
		}
	}
	return errors.Join(errs...)
}

func (e *Evaluator) forgetPending(rule string) {
	for k := range e.pending {
		if k.rule == rule {
			delete(e.pending, k)
		}
	}
}

// signature changes when a rule's condition does.
func signature(a *config.Alert) string {
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return strings.Join([]string{a.Metric, f(a.Above), f(a.Below), a.Duration.String()}, "|")
}

// holds tells whether a value meets a rule's condition: above `above`,
// below `below`, or (both) outside the band.
func holds(a *config.Alert, v float64) bool {
	return (a.Above != nil && v > *a.Above) || (a.Below != nil && v < *a.Below)
}

// need is how long the condition must hold: gpu_xid_errors counts over
// the duration instead, and fires at once.
func need(a *config.Alert) time.Duration {
	if a.Metric == MetricGPUXIDErrors {
		return 0
	}
	return a.Duration
}

// apply moves each subject's alert of a rule on by one round.
func (e *Evaluator) apply(ctx context.Context, rule *config.Alert, obs []observation, now time.Time) {
	observed := map[string]bool{}
	for _, o := range obs {
		observed[o.subject] = true
		k := alertKey{rule.Name, o.subject}
		if !holds(rule, o.value) {
			delete(e.pending, k)
			if a, ok := e.firing[k]; ok {
				e.resolve(ctx, rule, a, o.value, now, fmt.Sprintf("%s: %s is %s again", o.what, rule.Metric, formatValue(rule.Metric, o.value)))
			}
			continue
		}
		since, ok := e.pending[k]
		if !ok {
			since = now
			e.pending[k] = now
		}
		held := now.Sub(since)
		if held < need(rule) {
			continue
		}
		summary := describe(rule, o, held)
		if cur, ok := e.firing[k]; ok && cur.Value == o.value {
			continue // firing, nothing new to record
		}
		a := &store.Alert{Rule: rule.Name, Subject: o.subject, Host: o.host, Metric: rule.Metric, Value: o.value, Summary: summary, StartedAt: now}
		fired, err := e.st.FireAlert(ctx, a)
		if err != nil {
			e.log.Error("could not record a firing alert", "rule", rule.Name, "subject", o.subject, "err", err)
			continue
		}
		_, known := e.firing[k]
		e.firing[k] = a
		if fired || !known {
			e.log.Warn("alert firing", "rule", rule.Name, "subject", o.subject, "metric", rule.Metric, "value", o.value, "summary", summary)
			if fired {
				e.notify(rule, a)
			}
		}
	}
	// Subjects no longer observed (a GPU gone, a VM stopped or deleted).
	for k, a := range e.firing {
		if k.rule == rule.Name && !observed[k.subject] {
			e.resolve(ctx, rule, a, a.Value, now, a.Subject+" is no longer observed")
		}
	}
	for k := range e.pending {
		if k.rule == rule.Name && !observed[k.subject] {
			delete(e.pending, k)
		}
	}
}

// resolve resolves a firing alert (rule nil: the rule is gone).
func (e *Evaluator) resolve(ctx context.Context, rule *config.Alert, a *store.Alert, value float64, now time.Time, why string) {
	k := alertKey{a.Rule, a.Subject}
	r, err := e.st.ResolveAlert(ctx, a.Rule, a.Subject, value, why, now)
	switch {
	case errors.Is(err, store.ErrNotFound):
		delete(e.firing, k) // resolved already (another gpuvmd, an admin)
		return
	case err != nil:
		e.log.Error("could not record a resolved alert", "rule", a.Rule, "subject", a.Subject, "err", err)
		return
	}
	delete(e.firing, k)
	e.log.Info("alert resolved", "rule", a.Rule, "subject", a.Subject, "value", value, "summary", why)
	if rule != nil {
		e.notify(rule, r)
	}
}

func (e *Evaluator) notify(rule *config.Alert, a *store.Alert) {
	if e.notifier == nil || rule.Webhook == "" {
		return
	}
	e.notifier.Notify(rule.Webhook, api.AlertNotification{Rule: rule.Name, Metric: rule.Metric, Above: rule.Above, Below: rule.Below,
		DurationSeconds: int64(rule.Duration / time.Second), Subject: a.Subject, Host: a.Host, State: a.State, Value: a.Value,
		Summary: a.Summary, AlertID: a.ID, StartedAt: a.StartedAt, ResolvedAt: a.ResolvedAt, SentAt: e.clock.Now().UTC()})
}

// describe is a firing alert's summary.
func describe(rule *config.Alert, o observation, held time.Duration) string {
	var cond []string
	if rule.Above != nil {
		cond = append(cond, "above "+formatValue(rule.Metric, *rule.Above))
	}
	if rule.Below != nil {
		cond = append(cond, "below "+formatValue(rule.Metric, *rule.Below))
	}
	s := fmt.Sprintf("%s: %s is %s, %s", o.what, rule.Metric, formatValue(rule.Metric, o.value), strings.Join(cond, " or "))
	switch {
	case rule.Metric == MetricGPUXIDErrors:
		s += " within " + config.HumanDuration(rule.Duration)
	case held > 0:
		s += " for " + config.HumanDuration(held)
	}
	return s
}

// formatValue writes a metric's value with its unit.
func formatValue(metric string, v float64) string {
	switch metric {
	case MetricGPUUtilization, MetricGPUMemoryUtilization:
		return fmt.Sprintf("%.0f%%", v)
	case MetricGPUTemperature:
		return fmt.Sprintf("%.0f °C", v)
	case MetricGPUPower:
		return fmt.Sprintf("%.0f W", v)
	case MetricQueueWait, MetricVMIdle:
		return config.HumanDuration(time.Duration(v * float64(time.Second)))
	case MetricBackendDown:
		if v > 0 {
			return "down"
		}
		return "up"
	case MetricVGPUUnlicensed:
		if v > 0 {
			return "unlicensed"
		}
		return "licensed"
	}
	return fmt.Sprintf("%g", v)
}

// gpuValue is a GPU metric's value from a reading; false when not reported.
func gpuValue(metric string, g monitor.GPUReading) (float64, bool) {
	var v float64
	switch metric {
	case MetricGPUUtilization:
		v = g.Util * 100
	case MetricGPUMemoryUtilization:
		if g.MemTotal <= 0 {
			return 0, false
		}
		v = float64(g.MemUsed) / float64(g.MemTotal) * 100
	case MetricGPUTemperature:
		v = g.Temperature
	case MetricGPUPower:
		v = g.PowerWatts
	default:
		return 0, false
	}
	return v, v >= 0 && !math.IsNaN(v)
}

// gpuSubject names a GPU in alerts.
func gpuSubject(host, addr string) string { return host + "/" + addr }

// seed reads back, for a GPU rule with a duration, since when its
// condition has held on each GPU, from the raw samples: the start of the
// last run of samples that meet it, with no gap of more than three
// intervals, reaching the newest sample.
func (e *Evaluator) seed(ctx context.Context, rule *config.Alert, now time.Time) error {
	switch rule.Metric {
	case MetricGPUUtilization, MetricGPUMemoryUtilization, MetricGPUTemperature, MetricGPUPower:
	default:
		return nil
	}
	if rule.Duration <= 0 {
		return nil
	}
	gap := 3 * e.interval
	samples, err := e.st.ListSamples(ctx, store.SampleFilter{Host: e.host, GPUsOnly: true, Since: now.Add(-rule.Duration - gap)})
	if err != nil {
		return err
	}
	type run struct{ start, last time.Time }
	runs := map[string]*run{}
	for _, s := range samples {
		g := monitor.GPUReading{Util: s.GPUUtil, MemUsed: s.MemUsed, MemTotal: s.MemTotal, Temperature: s.Temperature, PowerWatts: s.PowerWatts}
		v, ok := gpuValue(rule.Metric, g)
		cur := runs[s.GPUAddress]
		if cur == nil {
			cur = &run{}
			runs[s.GPUAddress] = cur
		}
		if !cur.last.IsZero() && s.TakenAt.Sub(cur.last) > gap {
			cur.start = time.Time{}
		}
		cur.last = s.TakenAt
		switch {
		case !ok:
			cur.start = time.Time{}
		case holds(rule, v):
			if cur.start.IsZero() {
				cur.start = s.TakenAt
			}
		default:
			cur.start = time.Time{}
		}
	}
	for addr, r := range runs {
		if !r.start.IsZero() && now.Sub(r.last) <= gap {
			e.pending[alertKey{rule.Name, gpuSubject(e.host, addr)}] = r.start
		}
	}
	return nil
}

// roundInputs reads what rules need, once per round.
type roundInputs struct {
	e   *Evaluator
	r   *monitor.Round
	now time.Time

	queue    *store.QueueStats
	queueErr error
	idle     []monitor.VMIdle
	idleErr  error
	idleRead bool
	backends map[string]string
}

// observe reads a rule's metric for every subject.
func (in *roundInputs) observe(ctx context.Context, rule *config.Alert) ([]observation, error) {
	e := in.e
	switch rule.Metric {
	case MetricGPUUtilization, MetricGPUMemoryUtilization, MetricGPUTemperature, MetricGPUPower:
		if in.r == nil {
			return nil, errNoData
		}
		var out []observation
		for _, g := range in.r.GPUs {
			if v, ok := gpuValue(rule.Metric, g.GPUReading); ok {
				out = append(out, in.gpuObservation(g.Address, v))
			}
		}
		return out, nil
	case MetricGPUXIDErrors:
		if in.r == nil {
			return nil, errNoData
		}
		counts := map[string]int64{}
		if rule.Duration > 0 {
			sums, err := e.st.SumXIDErrors(ctx, e.host, in.now.Add(-rule.Duration))
			if err != nil {
				return nil, err
			}
			counts = sums
		} else {
			for _, g := range in.r.GPUs {
				counts[g.Address] = int64(g.XIDErrors)
			}
		}
		var out []observation
		for _, g := range in.r.GPUs {
			out = append(out, in.gpuObservation(g.Address, float64(counts[g.Address])))
		}
		return out, nil
	case MetricQueueLength, MetricQueueWait:
		if in.queue == nil && in.queueErr == nil {
			q, err := e.st.GetQueueStats(ctx, in.now)
			in.queue, in.queueErr = &q, err
		}
		if in.queueErr != nil {
			return nil, in.queueErr
		}
		v := float64(in.queue.Length)
		if rule.Metric == MetricQueueWait {
			v = 0
			if !in.queue.OldestSince.IsZero() {
				v = max(0, in.now.Sub(in.queue.OldestSince).Seconds())
			}
		}
		return []observation{{subject: "queue", what: "the queue", value: v}}, nil
	case MetricVMIdle:
		if e.idle == nil {
			return nil, errNoData
		}
		if !in.idleRead {
			in.idle, in.idleErr = e.idle.IdleVMs(ctx)
			in.idleRead = true
		}
		if in.idleErr != nil {
			return nil, in.idleErr
		}
		out := make([]observation, 0, len(in.idle))
		for _, v := range in.idle {
			out = append(out, observation{subject: "vm/" + v.VMID, host: e.host,
				what: fmt.Sprintf("VM %s of %s", v.Name, v.Owner), value: v.For.Seconds()})
		}
		return out, nil
	case MetricVGPUUnlicensed:
		if in.r == nil {
			return nil, errNoData
		}
		var out []observation
		for _, d := range in.r.Instances {
			if d.License == "" {
				continue
			}
			v := 1.0
			if d.License == monitor.LicenseLicensed {
				v = 0
			}
			what := fmt.Sprintf("vGPU %s %s on GPU %s of %s", d.Type, d.Key, d.GPUAddress, e.host)
			if d.VMID != "" {
				what = fmt.Sprintf("vGPU %s of VM %s (%s) on GPU %s of %s", d.Type, d.VMID, d.User, d.GPUAddress, e.host)
			}
			out = append(out, observation{subject: gpuSubject(e.host, d.GPUAddress) + "/" + d.Key, host: e.host, what: what, value: v})
		}
		return out, nil
	case MetricBackendDown:
		if e.backends == nil {
			return nil, errNoData
		}
		if in.backends == nil {
			in.backends = e.backends.BackendStates(ctx)
		}
		names := slices.Sorted(maps.Keys(in.backends))
		out := make([]observation, 0, len(names))
		for _, n := range names {
			v, what := 0.0, "backend "+n+" on "+e.host
			if in.backends[n] != "" {
				v, what = 1, what+" ("+in.backends[n]+")"
			}
			out = append(out, observation{subject: "backend/" + n, host: e.host, what: what, value: v})
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown metric %q", rule.Metric)
}

func (in *roundInputs) gpuObservation(addr string, v float64) observation {
	return observation{subject: gpuSubject(in.e.host, addr), host: in.e.host, what: "GPU " + addr + " on " + in.e.host, value: v}
}

// Firing lists the alerts the evaluator holds as firing, by rule and
// subject (for tests and status).
func (e *Evaluator) Firing() []store.Alert {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]store.Alert, 0, len(e.firing))
	for _, a := range e.firing {
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rule != out[j].Rule {
			return out[i].Rule < out[j].Rule
		}
		return out[i].Subject < out[j].Subject
	})
	return out
}

// clocks is the wall clock.
type clocks struct{}

func (clocks) Now() time.Time { return time.Now() }
