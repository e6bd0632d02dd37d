// Package monitor watches the GPUs: it samples them (NVML, or the simulated
// server), keeps the samples, exports Prometheus metrics, evaluates alert
// rules on each round and sends their webhooks, and tells which VMs' GPUs
// are idle. The usage ledger built on the samples is pkg/usage.
package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Store is everything the monitor reads and writes (a *store.Store).
type Store interface {
	SamplerStore
	MetricsStore
	IdleStore
	DownsampleSamples(ctx context.Context, host string, before time.Time, period time.Duration) (store.DownsampleResult, error)
	DeleteSamplesBefore(ctx context.Context, t time.Time) (int64, error)
	DeleteResolvedAlertsBefore(ctx context.Context, t time.Time) (int64, error)
	ListFinishedCreates(ctx context.Context, host string, after time.Time) ([]store.Operation, error)
}

// Config is what a Monitor needs.
type Config struct {
	// Host names this server in the database (the orchestrator's Host).
	Host  string
	Store Store
	// Source reads the GPUs; nil when they cannot be read (no NVML), and
	// NoSource says why (logged once).
	Source   Source
	NoSource string
	// Settings are the server's monitor block; zero fields take the
	// defaults.
	Settings config.Monitor
	Clock    Clock
	Log      *slog.Logger
}

// RoundObserver is told of each round once it is sampled: pkg/alert's
// Evaluator. The round is nil when the host is not sampled (no source) or
// its sample failed; rules on other metrics still apply then.
type RoundObserver interface {
	Evaluate(ctx context.Context, r *Round) error
}

// Monitor samples the GPUs of one gpuvmd on an interval, keeps the samples
// bounded, tells its observers (the alert rules) of each round, and serves
// the metrics.
type Monitor struct {
	cfg       Config
	log       *slog.Logger
	sampler   *Sampler // nil: not sampled
	exporter  *Exporter
	observers []RoundObserver
	idle      *Idle

	mu         sync.Mutex
	provCursor time.Time
}

// withDefaults fills the zero settings.
func withDefaults(s config.Monitor) config.Monitor {
	if s.Interval <= 0 {
		s.Interval = config.DefaultMonitorInterval
	}
	if s.RawRetention <= 0 {
		s.RawRetention = config.DefaultRawRetention
	}
	if s.Downsample <= 0 {
		s.Downsample = config.DefaultDownsample
	}
	if s.DownsampledRetention <= 0 {
		s.DownsampledRetention = config.DefaultDownsampledRetention
	}
	if s.IdleThreshold <= 0 {
		s.IdleThreshold = config.DefaultIdleThreshold
	}
	return s
}

// New builds a monitor; Run starts it.
func New(cfg Config) *Monitor {
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Settings = withDefaults(cfg.Settings)
	log := cfg.Log.With("component", "monitor")
	m := &Monitor{cfg: cfg, log: log, provCursor: cfg.Clock.Now().UTC()}
	if cfg.Source != nil {
		m.sampler = NewSampler(cfg.Host, cfg.Source, cfg.Store, cfg.Clock, log)
	}
	m.exporter = NewExporter(cfg.Host, m.sampler, cfg.Store, cfg.Clock, log)
	m.idle = NewIdle(cfg.Store, cfg.Host, cfg.Settings.IdleThreshold, cfg.Settings.Interval, cfg.Clock)
	return m
}

// Exporter serves /metrics.
func (m *Monitor) Exporter() *Exporter { return m.exporter }

// Idle tells how long running VMs have been idle (for idle stop).
func (m *Monitor) Idle() IdleDetector { return m.idle }

// Observe adds an observer of the rounds; call it before Run.
func (m *Monitor) Observe(o RoundObserver) { m.observers = append(m.observers, o) }

// Sampler samples the GPUs; nil when the host cannot be sampled.
func (m *Monitor) Sampler() *Sampler { return m.sampler }

// Settings are the settings in force, defaults filled.
func (m *Monitor) Settings() config.Monitor { return m.cfg.Settings }

// Round runs one round: sample (when the host can be), record the
// provisioning times of VMs that came up since the last round, tell the
// observers (evaluate the alert rules). The sample's failure does not stop the rest.
func (m *Monitor) Round(ctx context.Context) error {
	var errs []error
	var r *Round
	if m.sampler != nil {
		var err error
		if r, err = m.sampler.Sample(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := m.observeProvisioning(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, o := range m.observers {
		if err := o.Evaluate(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Monitor) observeProvisioning(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ops, err := m.cfg.Store.ListFinishedCreates(ctx, m.cfg.Host, m.provCursor)
	if err != nil {
		return fmt.Errorf("read provisioning times: %w", err)
	}
	for _, op := range ops {
		if op.FinishedAt == nil {
			continue
		}
		m.exporter.ObserveProvisioning(op.FinishedAt.Sub(op.CreatedAt))
		if op.FinishedAt.After(m.provCursor) {
			m.provCursor = *op.FinishedAt
		}
	}
	return nil
}

// Prune keeps the tables bounded: raw samples older than the raw
// retention become averages, and samples and resolved alerts older than
// the downsampled retention go.
func (m *Monitor) Prune(ctx context.Context) error {
	s := m.cfg.Settings
	now := m.cfg.Clock.Now().UTC()
	var errs []error
	res, err := m.cfg.Store.DownsampleSamples(ctx, m.cfg.Host, now.Add(-s.RawRetention), s.Downsample)
	if err != nil {
		errs = append(errs, err)
	}
	gone, err := m.cfg.Store.DeleteSamplesBefore(ctx, now.Add(-s.DownsampledRetention))
	if err != nil {
		errs = append(errs, err)
	}
	alerts, err := m.cfg.Store.DeleteResolvedAlertsBefore(ctx, now.Add(-s.DownsampledRetention))
	if err != nil {
		errs = append(errs, err)
	}
	if res.Raw > 0 || gone > 0 || alerts > 0 {
		m.log.Debug("pruned samples", "raw_downsampled", res.Raw, "averages_written", res.Rows, "samples_deleted", gone, "alerts_deleted", alerts)
	}
	return errors.Join(errs...)
}

// Run samples, prunes and tells the observers until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	s := m.cfg.Settings
	if m.sampler == nil {
		m.log.Warn("GPU sampling is off: alert rules on GPU metrics observe nothing", "why", m.cfg.NoSource)
	} else {
		m.log.Info("sampling GPUs", "source", m.cfg.Source.Describe(), "interval", s.Interval,
			"raw_retention", s.RawRetention, "downsample", s.Downsample, "downsampled_retention", s.DownsampledRetention)
	}
	round := func() {
		rctx, cancel := context.WithTimeout(ctx, max(s.Interval, 5*time.Second))
		defer cancel()
		if err := m.Round(rctx); err != nil && ctx.Err() == nil {
			m.log.Debug("monitor round incomplete", "err", err)
		}
	}
	prune := func() {
		if err := m.Prune(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("pruning samples failed; retried later", "err", err)
		}
	}
	round()
	prune()
	tick := time.NewTicker(s.Interval)
	defer tick.Stop()
	pruneTick := time.NewTicker(s.Downsample)
	defer pruneTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			round()
		case <-pruneTick.C:
			prune()
		}
	}
}
