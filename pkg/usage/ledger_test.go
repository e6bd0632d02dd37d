package usage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// wantUsageRow is a usage row in hours; util < 0: unknown.
type wantUsageRow struct {
	key                  string
	held, measured, used float64
	util                 float64
	vms, running         int
}

func checkUsageRows(t *testing.T, what string, got []api.UsageRow, want []wantUsageRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d: %+v", what, len(got), len(want), got)
		return
	}
	for i, w := range want {
		checkUsageRow(t, fmt.Sprintf("%s, row %d", what, i), got[i], w)
	}
}

func checkUsageRow(t *testing.T, what string, g api.UsageRow, w wantUsageRow) {
	t.Helper()
	usageNear := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	ok := g.Key == w.key && usageNear(g.GPUHours, w.held) && usageNear(g.MeasuredGPUHours, w.measured) && usageNear(g.UsedGPUHours, w.used) &&
		usageNear(g.IdleGPUHours, w.measured-w.used) && g.VMs == w.vms && g.Running == w.running
	switch {
	case w.util < 0:
		ok = ok && g.Utilization == nil
	default:
		ok = ok && g.Utilization != nil && usageNear(*g.Utilization, w.util)
	}
	if !ok {
		u := "unknown"
		if g.Utilization != nil {
			u = fmt.Sprint(*g.Utilization)
		}
		t.Errorf("%s: %s held %.9f measured %.9f used %.9f idle %.9f util %s vms %d running %d; want %+v",
			what, g.Key, g.GPUHours, g.MeasuredGPUHours, g.UsedGPUHours, g.IdleGPUHours, u, g.VMs, g.Running, w)
	}
}

func TestLedgerUsage(t *testing.T) {
	ctx := context.Background()
	// Day 0 by hand (see usageSchedule).
	alice := wantUsageRow{"alice", 2 + 8.5*3/7, 8.5 * 3 / 7, 0.8 * 8.5 * 3 / 7, 0.8, 2, 0}
	bob := wantUsageRow{"bob", 16.0/7 + 1, 16.0 / 7, 0.1 * 16 / 7, 0.1, 2, 1}
	carol := wantUsageRow{"carol", 2, 2, 1.5, 0.75, 1, 0}
	sum := func(key string, rows ...wantUsageRow) wantUsageRow {
		out := wantUsageRow{key: key}
		for _, r := range rows {
			out.held += r.held
			out.measured += r.measured
			out.used += r.used
			out.vms += r.vms
			out.running += r.running
		}
		out.util = -1
		if out.measured > 0 {
			out.util = out.used / out.measured
		}
		return out
	}
	total := sum("total", alice, bob, carol)
	cases := []struct {
		name     string
		q        Query
		rows     []wantUsageRow
		total    wantUsageRow
		wantUser string
	}{
		{"day 0 by user", Query{From: usageAt(0), To: usageAt(24)}, []wantUsageRow{alice, bob, carol}, total, ""},
		{"day 0 by group", Query{From: usageAt(0), To: usageAt(24), By: api.UsageByGroup},
			[]wantUsageRow{sum("render", alice, carol), sum("sim", bob)}, total, ""},
		{"day 0 by profile", Query{From: usageAt(0), To: usageAt(24), By: api.UsageByProfile}, []wantUsageRow{
			{"train-3g", 8.5 * 3 / 7, 8.5 * 3 / 7, 0.8 * 8.5 * 3 / 7, 0.8, 1, 0},
			{"small-1g", 16.0 / 7, 16.0 / 7, 0.1 * 16 / 7, 0.1, 1, 1},
			{"dual", 2, 2, 1.5, 0.75, 1, 0},
			{"render-l40s", 2, 0, 0, -1, 1, 0},
			{"desk-12q", 1, 0, 0, -1, 1, 0},
		}, total, ""},
		{"day 0 by gpu", Query{From: usageAt(0), To: usageAt(24), By: api.UsageByGPU}, []wantUsageRow{
			{"gpu01/" + usageMIG, 8.5*3/7 + 16.0/7, 8.5*3/7 + 16.0/7, 0.8*8.5*3/7 + 0.1*16/7, (0.8*8.5*3/7 + 0.1*16/7) / (8.5*3/7 + 16.0/7), 2, 1},
			{"gpu01/" + usageGPU1, 3, 1, 0.5, 0.5, 2, 0},
			{"gpu01/" + usageVGPU, 1, 0, 0, -1, 1, 0},
			{"gpu01/" + usageGPU2, 1, 1, 1, 1, 1, 0},
		}, total, ""},
		{"day 0 by host", Query{From: usageAt(0), To: usageAt(24), By: api.UsageByHost},
			[]wantUsageRow{sum("gpu01", alice, bob, carol)}, total, ""},
		{"day 0 by vm", Query{From: usageAt(0), To: usageAt(24), By: api.UsageByVM}, []wantUsageRow{
			{"alice/a2", 8.5 * 3 / 7, 8.5 * 3 / 7, 0.8 * 8.5 * 3 / 7, 0.8, 1, 0},
			{"bob/b1", 16.0 / 7, 16.0 / 7, 0.1 * 16 / 7, 0.1, 1, 1},
			{"alice/a1", 2, 0, 0, -1, 1, 0},
			{"carol/c1", 2, 2, 1.5, 0.75, 1, 0},
			{"bob/b2", 1, 0, 0, -1, 1, 0},
		}, total, ""},
		{"day 0, alice only", Query{From: usageAt(0), To: usageAt(24), User: "alice"}, []wantUsageRow{alice}, sum("total", alice), "alice"},
		{"day 1 up to now", Query{From: usageAt(24), To: usageAt(48)},
			[]wantUsageRow{{"bob", 12.0/7 + 1, 12.0 / 7, 0.6 * 12 / 7, 0.6, 2, 1}},
			wantUsageRow{"total", 12.0/7 + 1, 12.0 / 7, 0.6 * 12 / 7, 0.6, 2, 1}, ""},
		{"an hour of the afternoon", Query{From: usageAt(12), To: usageAt(13)}, []wantUsageRow{
			{"carol", 2, 2, 1.5, 0.75, 1, 0},
			{"alice", 3.0 / 7, 3.0 / 7, 0.8 * 3 / 7, 0.8, 1, 0},
			{"bob", 1.0 / 7, 1.0 / 7, 0.1 / 7, 0.1, 1, 1},
		}, wantUsageRow{"total", 2 + 4.0/7, 2 + 4.0/7, 1.5 + 2.5/7, (1.5 + 2.5/7) / (2 + 4.0/7), 3, 1}, ""},
		{"before anything", Query{From: usageAt(-100), To: usageAt(-50)}, nil, wantUsageRow{"total", 0, 0, 0, -1, 0, 0}, ""},
	}
	usageStores(t, func(t *testing.T, s *store.Store, clock *clocktest.Clock) {
		seedUsageSchedule(t, s, clock)
		l := NewLedger(s)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r, err := l.Usage(ctx, c.q)
				if err != nil {
					t.Fatal(err)
				}
				by := c.q.By
				if by == "" {
					by = api.UsageByUser
				}
				if r.By != by || r.User != c.wantUser || !r.From.Equal(c.q.From) || !r.To.Equal(c.q.To) {
					t.Errorf("report %s %q %s–%s", r.By, r.User, r.From, r.To)
				}
				checkUsageRows(t, c.name, r.Rows, c.rows)
				checkUsageRow(t, c.name+", total", r.Total, c.total)
				// The same query answers the same from what the ledger kept,
				// and as a ledger that kept nothing.
				again, err := l.Usage(ctx, c.q)
				if err != nil || !reflect.DeepEqual(again, r) {
					t.Errorf("asked again: %+v, %v", again, err)
				}
				fresh, err := NewLedger(s).Usage(ctx, c.q)
				if err != nil || !reflect.DeepEqual(fresh, r) {
					t.Errorf("a fresh ledger: %+v, %v", fresh, err)
				}
			})
		}
		if _, err := l.Usage(ctx, Query{From: usageAt(0), To: usageAt(24), By: "colour"}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("by colour: %v", err)
		}
		if _, err := l.Usage(ctx, Query{From: usageAt(24), To: usageAt(0)}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("a range backwards: %v", err)
		}
	})
}

// usageCountingStore counts the sample reads of a ledger.
type usageCountingStore struct {
	Store
	mu    sync.Mutex
	reads [][2]time.Time
}

func (c *usageCountingStore) SampleUtilizationBuckets(ctx context.Context, q store.UsageQuery, bucket time.Duration) ([]store.UtilBucket, error) {
	c.mu.Lock()
	c.reads = append(c.reads, [2]time.Time{q.From, q.To})
	c.mu.Unlock()
	return c.Store.SampleUtilizationBuckets(ctx, q, bucket)
}

func (c *usageCountingStore) take() [][2]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reads
	c.reads = nil
	return r
}

// The ledger reads an hour that is over once, and the current hour and the
// parts of hours at the ends of a range every time.
func TestLedgerKeepsPastHours(t *testing.T) {
	ctx := context.Background()
	usageStores(t, func(t *testing.T, s *store.Store, clock *clocktest.Clock) {
		seedUsageSchedule(t, s, clock)
		cs := &usageCountingStore{Store: s}
		l := NewLedger(cs)
		steps := []struct {
			name     string
			from, to float64
			reads    [][2]float64
		}{
			{"day 0: all of it read", 0, 24, [][2]float64{{0, 24}}},
			{"day 0 again: nothing read", 0, 24, nil},
			{"up to now: the hours since day 0, then the current one", 0, usageNow, [][2]float64{{24, 35}, {35, usageNow}}},
			{"the day before: a day at a time", -48, 24, [][2]float64{{-48, -24}, {-24, 0}}},
			{"from half past: the first half hour, then nothing kept", 9.5, 20.25, [][2]float64{{9.5, 10}, {20, 20.25}}},
		}
		for _, st := range steps {
			if _, err := l.Usage(ctx, Query{From: usageAt(st.from), To: usageAt(st.to)}); err != nil {
				t.Fatal(err)
			}
			got := cs.take()
			var want [][2]time.Time
			for _, r := range st.reads {
				want = append(want, [2]time.Time{usageAt(r[0]), usageAt(r[1])})
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: read %v, want %v", st.name, got, want)
			}
		}
		// A ledger keeps nothing beyond its horizon.
		short := NewLedger(cs)
		short.CacheHorizon = 10 * time.Hour
		if err := short.Warm(ctx, 48*time.Hour); err != nil {
			t.Fatal(err)
		}
		cs.take()
		for k := range short.hours {
			if h := time.Unix(k*3600, 0); h.Before(usageAt(usageNow - 10)) {
				t.Errorf("hour %s kept, beyond the horizon", h)
			}
		}
		if len(short.hours) != 9 { // 27:00 to 35:00 (the current hour is not over)
			t.Errorf("%d hours kept, want 9", len(short.hours))
		}
	})
}

// BenchmarkUsage: the usage report by user of 100 users over 90 days on
// SQLite, each user holding a GPU slice 8 hours a day, sampled every 5
// minutes (downsampled rows), plus the 8 GPUs' own rows. "cold" is a
// ledger that has kept nothing (the first query after gpuvmd starts), "warm"
// one that answered before.
func BenchmarkUsage(b *testing.B) {
	ctx := context.Background()
	clock := clocktest.New(time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC))
	s := storetest.New(b, storetest.WithClock(clock.Now), func(c *store.Config) { c.SlowThreshold = -1 })
	end := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	records, samples := seedBenchUsage(b, s, clock, 100, 90, end)
	clock.Set(end.Add(30 * time.Minute))
	q := Query{From: end.Add(-90 * 24 * time.Hour), To: end.Add(30 * time.Minute)}
	b.Logf("%d usage records, %d sample rows", records, samples)
	check := func(r *api.UsageReport, err error) {
		if err != nil || len(r.Rows) != 100 || r.Total.Utilization == nil {
			b.Fatalf("%+v, %v", r, err)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			check(NewLedger(s).Usage(ctx, q))
		}
	})
	b.Run("warm", func(b *testing.B) {
		l := NewLedger(s)
		check(l.Usage(ctx, q))
		b.ResetTimer()
		for b.Loop() {
			check(l.Usage(ctx, q))
		}
	})
}

// seedBenchUsage writes users × days of usage through the store's API: each
// user's VM holds a slice (1, 3/7, 1/7 or 2/7 of a GPU) 8 hours a day, with
// a downsampled sample every 5 minutes, the last day's still held; and the
// 8 GPUs' own rows, mapped to no VM.
func seedBenchUsage(b *testing.B, s *store.Store, clock *clocktest.Clock, users, days int, end time.Time) (records, samples int) {
	ctx := context.Background()
	start := end.Add(-time.Duration(days) * 24 * time.Hour)
	shares := []float64{1, 3.0 / 7, 1.0 / 7, 2.0 / 7}
	for u := range users {
		if err := s.CreateUser(ctx, &store.User{Name: fmt.Sprintf("user%03d", u), Groups: []string{fmt.Sprintf("team%d", u%7)}}); err != nil {
			b.Fatal(err)
		}
	}
	var batch []store.GPUSample
	flush := func() {
		if err := s.InsertSamples(ctx, batch); err != nil {
			b.Fatal(err)
		}
		samples += len(batch)
		batch = batch[:0]
	}
	for day := range days {
		for u := range users {
			user := fmt.Sprintf("user%03d", u)
			t0 := start.Add(time.Duration(day)*24*time.Hour + time.Duration(6+u%12)*time.Hour)
			t1 := t0.Add(8 * time.Hour)
			clock.Set(t0.Add(-10 * time.Minute))
			vm := &store.VM{Name: fmt.Sprintf("vm-%d", day), Owner: user, Group: fmt.Sprintf("team%d", u%7), Profile: fmt.Sprintf("profile-%d", u%4), Hours: 8}
			if _, err := s.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: user}); err != nil {
				b.Fatal(err)
			}
			addr := fmt.Sprintf("0000:%02x:00.0", u%8)
			r := &store.UsageRecord{VMID: vm.ID, User: user, Group: vm.Group, Host: "gpu01", GPUAddress: addr, Kind: gpu.KindMIG,
				Profile: "3g.40gb", Share: shares[u%len(shares)], StartedAt: t0}
			if day < days-1 {
				r.EndedAt = &t1
			}
			if err := s.InsertUsageRecord(ctx, r); err != nil {
				b.Fatal(err)
			}
			records++
			for ts := t0; ts.Before(t1) && ts.Before(end); ts = ts.Add(5 * time.Minute) {
				batch = append(batch, usageSample(vm.ID, user, addr, "mig-"+vm.ID[len(vm.ID)-8:], ts, float64((u*7+day)%100)/100))
			}
		}
		for g := range 8 {
			for ts := start.Add(time.Duration(day) * 24 * time.Hour); ts.Before(start.Add(time.Duration(day+1) * 24 * time.Hour)); ts = ts.Add(5 * time.Minute) {
				batch = append(batch, usageSample("", "", fmt.Sprintf("0000:%02x:00.0", g), "", ts, 0.5))
			}
		}
		flush()
	}
	return records, samples
}
