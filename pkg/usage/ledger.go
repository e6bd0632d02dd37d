// Package usage is the usage ledger (GPU time held per VM, weighted by
// share, and the utilisation achieved) that usage reports and quotas read,
// and the periodic review's summary built on it (Summarize).
package usage

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Usage accounting: the GPU time each VM held (usage records, weighted by
// the share of the GPU it held) and the utilisation its GPU reported
// meanwhile (samples mapped to the VM), so that what is held but idle is
// visible.

// Store is what the ledger reads (pkg/store).
type Store interface {
	Now() time.Time
	ListUsageSpans(ctx context.Context, q store.UsageQuery) ([]store.UsageSpan, error)
	SampleUtilizationBuckets(ctx context.Context, q store.UsageQuery, bucket time.Duration) ([]store.UtilBucket, error)
}

// Defaults of the ledger.
const (
	// DefaultSettle is how long after an hour ends its samples are taken
	// as all written (every sampler writes within a round or two).
	DefaultSettle = 5 * time.Minute
	// DefaultCacheHorizon bounds how far back hours are kept in memory:
	// beyond the samples' longest retention nothing is left to read.
	DefaultCacheHorizon = 100 * 24 * time.Hour
)

// Ledger answers usage questions from the store. The utilisation of hours
// that are over (and settled) does not change any more (downsampling keeps
// a period's mean), so the ledger keeps each past hour's sums in memory
// once read: a query reads from the database only the hours it has not
// seen and the current one. It is safe for concurrent use.
type Ledger struct {
	st Store
	// Settle and CacheHorizon: see DefaultSettle and DefaultCacheHorizon;
	// set them before the first query.
	Settle, CacheHorizon time.Duration

	mu    sync.Mutex
	hours map[int64][]store.UtilBucket // by Unix hour: every VM's sums of that hour
}

// NewLedger returns a ledger of the store.
func NewLedger(st Store) *Ledger {
	return &Ledger{st: st, Settle: DefaultSettle, CacheHorizon: DefaultCacheHorizon, hours: map[int64][]store.UtilBucket{}}
}

// Charge is one usage span (a VM holding one GPU, clipped to the range)
// with the utilisation the GPU reported for the VM in the range.
type Charge struct {
	Span store.UsageSpan
	// GPUSeconds is the span's GPU time, weighted by its share.
	GPUSeconds float64
	// Measured: the VM's GPU reported utilisation (samples mapped to the
	// VM on that GPU) in the range; Utilization is their mean, 0..1.
	Measured    bool
	Utilization float64
	// Simulated: the span was held on a simulated GPU server, whose
	// utilisation is the simulator's (0 unless a test or demo set it), not
	// a GPU's: it is counted apart and never as measured.
	Simulated bool
}

// UsedSeconds is the GPU time the VM used: held × utilisation (0 when not
// measured).
func (c Charge) UsedSeconds() float64 {
	if !c.Measured {
		return 0
	}
	return c.GPUSeconds * c.Utilization
}

// Charges lists what every VM held in [q.From, q.To) (q.User's only, when
// set), by usage record, with its utilisation.
func (l *Ledger) Charges(ctx context.Context, q store.UsageQuery) ([]Charge, error) {
	spans, err := l.st.ListUsageSpans(ctx, q)
	if err != nil {
		return nil, err
	}
	util := map[utilKey]*utilSums{}
	if len(spans) > 0 {
		vms := make(map[string]bool, len(spans))
		for _, sp := range spans {
			vms[sp.Record.VMID] = true
		}
		err := l.utilization(ctx, q.From, q.To, func(_ time.Time, b store.UtilBucket) {
			if vms[b.VMID] {
				k := utilKey{b.VMID, b.Host, b.GPUAddress, b.Device}
				util[k] = util[k].add(b.Sum, b.Count)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	withDevices := withDeviceSamples(util)
	out := make([]Charge, len(spans))
	for i, sp := range spans {
		c := Charge{Span: sp, GPUSeconds: sp.GPUSeconds()}
		k := utilKey{sp.Record.VMID, sp.Record.Host, sp.Record.GPUAddress, withDevices[sp.Record.VMID]}
		if s := util[k]; s != nil && s.n > 0 {
			c.Measured, c.Utilization = true, s.mean()
		}
		out[i] = c
	}
	return out, nil
}

// utilKey names the samples of a VM on a GPU: of its device or of the
// whole GPU.
type utilKey struct {
	vm, host, gpu string
	device        bool
}

// utilSums accumulates Σ utilisation × samples and the samples.
type utilSums struct {
	sum float64
	n   int64
}

func (s *utilSums) add(sum float64, n int64) *utilSums {
	if s == nil {
		s = &utilSums{}
	}
	s.sum += sum
	s.n += n
	return s
}

func (s *utilSums) mean() float64 { return s.sum / float64(s.n) }

// withDeviceSamples says which VMs have samples of their own devices: their
// rows of the whole GPU, which other VMs may share, are not theirs to count.
func withDeviceSamples(util map[utilKey]*utilSums) map[string]bool {
	out := map[string]bool{}
	for k, s := range util {
		if k.device && s.n > 0 {
			out[k.vm] = true
		}
	}
	return out
}

// utilization calls fn with the per-hour utilisation sums of every VM over
// [from, to) (each bucket starting on the hour, the first and last possibly
// covering part of it only), reading from the database only what it has not
// kept.
func (l *Ledger) utilization(ctx context.Context, from, to time.Time, fn func(hour time.Time, b store.UtilBucket)) error {
	from, to = from.UTC(), to.UTC()
	read := func(from, to time.Time) ([]store.UtilBucket, error) {
		if !to.After(from) {
			return nil, nil
		}
		return l.st.SampleUtilizationBuckets(ctx, store.UsageQuery{From: from, To: to}, time.Hour)
	}
	emit := func(bs []store.UtilBucket) {
		for _, b := range bs {
			fn(b.Start, b)
		}
	}
	now := l.st.Now().UTC()
	// Whole hours, over and settled, and not beyond the horizon, are kept.
	first := ceilHour(from)
	if h := ceilHour(now.Add(-l.CacheHorizon)); h.After(first) {
		first = h
	}
	last := to.Truncate(time.Hour)
	if h := now.Add(-l.Settle).Truncate(time.Hour); h.Before(last) {
		last = h
	}
	if !last.After(first) {
		bs, err := read(from, to)
		emit(bs)
		return err
	}
	head, err := read(from, first)
	if err != nil {
		return err
	}
	emit(head)
	if err := l.fill(ctx, first, last, now); err != nil {
		return err
	}
	l.mu.Lock()
	for h := first; h.Before(last); h = h.Add(time.Hour) {
		for _, b := range l.hours[h.Unix()/3600] {
			fn(h, b)
		}
	}
	l.mu.Unlock()
	tail, err := read(last, to)
	emit(tail)
	return err
}

// fillChunk is the most time one read of the hours to keep covers.
const fillChunk = 24 * time.Hour

// ceilHour is the first full hour at or after t.
func ceilHour(t time.Time) time.Time {
	h := t.Truncate(time.Hour)
	if h.Before(t) {
		h = h.Add(time.Hour)
	}
	return h
}

// fill reads the hours of [first, last) that are not kept, a run of
// missing hours at a time, and keeps them (an hour without samples too).
func (l *Ledger) fill(ctx context.Context, first, last, now time.Time) error {
	var runs [][2]time.Time
	l.mu.Lock()
	for h := first; h.Before(last); h = h.Add(time.Hour) {
		if _, ok := l.hours[h.Unix()/3600]; ok {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1][1].Equal(h) {
			runs[n-1][1] = h.Add(time.Hour)
		} else {
			runs = append(runs, [2]time.Time{h, h.Add(time.Hour)})
		}
	}
	l.mu.Unlock()
	for _, r := range runs {
		// A day at a time: on SQLite one connection serves everybody, and
		// a long read would hold up the API and the sampler meanwhile.
		for from := r[0]; from.Before(r[1]); from = from.Add(fillChunk) {
			to := earlier(from.Add(fillChunk), r[1])
			bs, err := l.st.SampleUtilizationBuckets(ctx, store.UsageQuery{From: from, To: to}, time.Hour)
			if err != nil {
				return err
			}
			byHour := map[int64][]store.UtilBucket{}
			for h := from; h.Before(to); h = h.Add(time.Hour) {
				byHour[h.Unix()/3600] = []store.UtilBucket{}
			}
			for _, b := range bs {
				k := b.Start.Unix() / 3600
				byHour[k] = append(byHour[k], b)
			}
			l.mu.Lock()
			for k, v := range byHour {
				l.hours[k] = v
			}
			l.mu.Unlock()
		}
	}
	// Forget what is beyond the horizon.
	horizon := now.Add(-l.CacheHorizon).Unix() / 3600
	l.mu.Lock()
	for k := range l.hours {
		if k < horizon {
			delete(l.hours, k)
		}
	}
	l.mu.Unlock()
	return nil
}

// Warm reads the utilisation of the hours of the last `back` into memory, so
// that the first usage query after gpuvmd starts is as quick as the others.
func (l *Ledger) Warm(ctx context.Context, back time.Duration) error {
	now := l.st.Now()
	return l.utilization(ctx, now.Add(-back), now, func(time.Time, store.UtilBucket) {})
}

// Query asks for a usage report.
type Query struct {
	From, To time.Time
	// By is one of api.UsageGroupings (default api.UsageByUser).
	By string
	// User restricts the report to one user's VMs; empty: everyone's.
	User string
	// SimulatedHosts are the hosts that are simulated GPU servers: what
	// was held on them is counted as simulated, its utilisation not
	// measured.
	SimulatedHosts map[string]bool
}

// Usage is the usage report of q: GPU-hours held per key of the grouping,
// with the utilisation achieved.
func (l *Ledger) Usage(ctx context.Context, q Query) (*api.UsageReport, error) {
	if q.By == "" {
		q.By = api.UsageByUser
	}
	if !slices.Contains(api.UsageGroupings, q.By) {
		return nil, fmt.Errorf("usage report: %w: grouping %q is not one of %v", store.ErrInvalid, q.By, api.UsageGroupings)
	}
	charges, err := l.Charges(ctx, store.UsageQuery{From: q.From, To: q.To, User: q.User})
	if err != nil {
		return nil, fmt.Errorf("usage report by %s: %w", q.By, err)
	}
	for i := range charges {
		if q.SimulatedHosts[charges[i].Span.Record.Host] {
			charges[i].Simulated, charges[i].Measured, charges[i].Utilization = true, false, 0
		}
	}
	rows, total := GroupCharges(charges, q.By)
	return &api.UsageReport{From: q.From.UTC(), To: q.To.UTC(), By: q.By, User: q.User, Rows: rows, Total: total}, nil
}

// usageKeyOf is the key of a charge in a grouping ("-" for none).
func usageKeyOf(c Charge, by string) string {
	r := c.Span.Record
	k := ""
	switch by {
	case api.UsageByUser:
		k = r.User
	case api.UsageByGroup:
		k = r.Group
	case api.UsageByProfile:
		k = cmp.Or(c.Span.VMProfile, r.Profile)
	case api.UsageByGPU:
		k = r.GPUAddress
		if r.Host != "" {
			k = r.Host + "/" + k
		}
	case api.UsageByHost:
		k = r.Host
	case api.UsageByVM:
		k = r.User + "/" + cmp.Or(c.Span.VMName, r.VMID)
	}
	return cmp.Or(k, "-")
}

// usageAcc accumulates a row in seconds.
type usageAcc struct {
	held, measured, used, simulated, task float64
	vms, running                          map[string]bool
}

func (a *usageAcc) add(c Charge) {
	a.held += c.GPUSeconds
	if c.Simulated {
		a.simulated += c.GPUSeconds
	}
	if c.Span.Task {
		a.task += c.GPUSeconds
	}
	if c.Measured {
		a.measured += c.GPUSeconds
		a.used += c.UsedSeconds()
	}
	a.vms[c.Span.Record.VMID] = true
	if c.Span.Open {
		a.running[c.Span.Record.VMID] = true
	}
}

func (a *usageAcc) row(key string) api.UsageRow {
	r := api.UsageRow{Key: key, GPUHours: a.held / 3600, MeasuredGPUHours: a.measured / 3600, UsedGPUHours: a.used / 3600,
		IdleGPUHours: (a.measured - a.used) / 3600, SimulatedGPUHours: a.simulated / 3600, TaskGPUHours: a.task / 3600, VMs: len(a.vms), Running: len(a.running)}
	if a.measured > 0 {
		u := a.used / a.measured
		r.Utilization = &u
	}
	return r
}

func newUsageAcc() *usageAcc { return &usageAcc{vms: map[string]bool{}, running: map[string]bool{}} }

// Group utilSums charges by a grouping: rows by GPU-hours, most first, then by
// key, and the total.
func GroupCharges(charges []Charge, by string) ([]api.UsageRow, api.UsageRow) {
	accs := map[string]*usageAcc{}
	total := newUsageAcc()
	for _, c := range charges {
		k := usageKeyOf(c, by)
		if accs[k] == nil {
			accs[k] = newUsageAcc()
		}
		accs[k].add(c)
		total.add(c)
	}
	rows := make([]api.UsageRow, 0, len(accs))
	for k, a := range accs {
		rows = append(rows, a.row(k))
	}
	slices.SortFunc(rows, func(a, b api.UsageRow) int {
		return cmp.Or(cmp.Compare(b.GPUHours, a.GPUHours), cmp.Compare(a.Key, b.Key))
	})
	return rows, total.row("total")
}

// earlier and later are the earlier and the later of two times.
func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
