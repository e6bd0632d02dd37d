package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func usageNear(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func usageRatioText(u *float64) string {
	if u == nil {
		return "unknown"
	}
	return fmt.Sprint(*u)
}

// The summary of day 0 of usageSchedule, worked out by hand.
func TestSummarize(t *testing.T) {
	ctx := context.Background()
	usageStores(t, func(t *testing.T, s *store.Store, clock *clocktest.Clock) {
		seedUsageSchedule(t, s, clock)
		l := NewLedger(s)
		r, err := Summarize(ctx, l, s, ReportQuery{From: usageAt(0), To: usageAt(24), IdleBelow: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		if r.Location != "UTC" || !r.GeneratedAt.Equal(usageAt(usageNow)) || r.IdleBelow != 0.5 {
			t.Errorf("header: %s %s %g", r.Location, r.GeneratedAt, r.IdleBelow)
		}
		// No host registered: the GPUs held count (two whole, MIG, vGPU).
		if r.GPUs != 4 || !usageNear(r.CapacityGPUHours, 96) {
			t.Errorf("capacity: %d GPUs, %g GPU-hours", r.GPUs, r.CapacityGPUHours)
		}
		if len(r.ByUser) != 3 || r.ByUser[0].Key != "alice" || len(r.ByGroup) != 2 || len(r.ByProfile) != 5 ||
			!usageNear(r.Total.GPUHours, 2+8.5*3/7+16.0/7+1+2) {
			t.Errorf("usage: %+v %+v %+v %+v", r.ByUser, r.ByGroup, r.ByProfile, r.Total)
		}
		// Idle under 50%: b1 at 10%, still held.
		if len(r.IdleVMs) != 1 {
			t.Fatalf("idle VMs: %+v", r.IdleVMs)
		}
		if v := r.IdleVMs[0]; v.Name != "b1" || v.Owner != "bob" || v.Profile != "small-1g" || !v.Running ||
			!usageNear(v.GPUHours, 16.0/7) || !usageNear(v.IdleGPUHours, 0.9*16/7) || !usageNear(v.Utilization, 0.1) {
			t.Errorf("idle VM: %+v", v)
		}
		wantWaits := []api.QueueWaitStats{
			{Profile: "desk-12q", Requests: 1, Started: 1},
			{Profile: "dual", Requests: 2, Started: 1, Waiting: 1, MeanSeconds: 3600, P95Seconds: 3600, MaxSeconds: 3600},
			{Profile: "small-1g", Requests: 2, Started: 1, GaveUp: 1, MeanSeconds: 1800, P95Seconds: 1800, MaxSeconds: 1800},
			{Profile: "train-3g", Requests: 1, Started: 1, MeanSeconds: 3600, P95Seconds: 3600, MaxSeconds: 3600},
			{Profile: "total", Requests: 6, Started: 4, Waiting: 1, GaveUp: 1, MeanSeconds: 2250, P95Seconds: 3600, MaxSeconds: 3600},
		}
		if len(r.QueueWaits) != len(wantWaits) {
			t.Fatalf("queue waits: %+v", r.QueueWaits)
		}
		for i, w := range wantWaits {
			if g := r.QueueWaits[i]; g != w {
				t.Errorf("queue waits %d: %+v, want %+v", i, g, w)
			}
		}
		// Monday (0) by hour, UTC.
		h := r.Heatmaps
		alloc := map[int]float64{0: 1, 1: 1, 8: 1.0 / 7, 9: 4.0 / 7, 12: 2 + 4.0/7, 16: 4.0 / 7, 17: 2.5 / 7, 18: 1.0 / 7, 20: 1.0/7 + 0.25, 23: 1.0/7 + 0.25, 2: 0, 7: 0}
		for hr, w := range alloc {
			if !usageNear(h.AllocatedGPUs[0][hr], w) {
				t.Errorf("GPUs held Monday %02d:00: %g, want %g", hr, h.AllocatedGPUs[0][hr], w)
			}
		}
		queued := map[int]float64{6: 0, 7: 0.5, 8: 1, 9: 0, 11: 1, 12: 1, 19: 1, 20: 2, 21: 2, 22: 1, 23: 1}
		for hr, w := range queued {
			if !usageNear(h.QueuedVMs[0][hr], w) {
				t.Errorf("VMs waiting Monday %02d:00: %g, want %g", hr, h.QueuedVMs[0][hr], w)
			}
		}
		util := map[int]float64{0: -1, 7: -1, 8: 0.1, 9: 0.45, 12: (0.8 + 0.1 + 0.5 + 1) / 4, 16: 0.45, 17: (6*0.8 + 12*0.1) / 18, 18: 0.1, 23: 0.1}
		for hr, w := range util {
			switch u := h.Utilization[0][hr]; {
			case w < 0 && u != nil:
				t.Errorf("utilisation Monday %02d:00: %g, want unknown", hr, *u)
			case w >= 0 && u == nil:
				t.Errorf("utilisation Monday %02d:00: unknown, want %g", hr, w)
			case w >= 0 && !usageNear(*u, w):
				t.Errorf("utilisation Monday %02d:00: %g, want %g", hr, *u, w)
			}
		}
		for d := 1; d < 7; d++ {
			for hr := range 24 {
				if h.AllocatedGPUs[d][hr] != 0 || h.QueuedVMs[d][hr] != 0 || h.Utilization[d][hr] != nil {
					t.Fatalf("day %d hour %d has data outside the range", d, hr)
				}
			}
		}
		// Daytime queues while the night idles (see TestReportNotes).
		if text := strings.Join(r.Notes, "\n"); !strings.Contains(text, "Night capacity idles while daytime requests queue") ||
			!strings.Contains(text, "Requests: 6; started: 4,") {
			t.Errorf("notes:\n%s", text)
		}

		// A registered host's inventory gives the GPUs; in Asia/Kolkata
		// (+05:30) the hour 08–09 UTC is 13:30–14:30: its samples go to
		// 14:00 (the hour that holds its middle).
		inv, _ := json.Marshal(api.HostInventory{GPUs: make([]api.GPU, 8)})
		if err := s.RegisterHost(ctx, &store.Host{Name: "gpu01", Inventory: string(inv)}); err != nil {
			t.Fatal(err)
		}
		kolkata, err := time.LoadLocation("Asia/Kolkata")
		if err != nil {
			t.Skip("no time zone data:", err)
		}
		r, err = Summarize(ctx, l, s, ReportQuery{From: usageAt(0), To: usageAt(24), Location: kolkata, LocationName: "Asia/Kolkata"})
		if err != nil {
			t.Fatal(err)
		}
		if r.GPUs != 8 || r.Location != "Asia/Kolkata" || r.IdleBelow != DefaultIdleBelow || len(r.IdleVMs) != 0 {
			t.Errorf("with a host: %d GPUs, %s, idle below %g, %d idle", r.GPUs, r.Location, r.IdleBelow, len(r.IdleVMs))
		}
		if u := r.Heatmaps.Utilization[0][14]; u == nil || !usageNear(*u, 0.1) {
			t.Errorf("Monday 14:00 in Kolkata: %s", usageRatioText(u))
		}
		// 08:00–08:30 UTC is Monday 13:30–14:00 there: b1 held 1/7 of a GPU
		// for half of the hour 13:00.
		if got := r.Heatmaps.AllocatedGPUs[0][13]; !usageNear(got, 0.5/7) {
			t.Errorf("GPUs held Monday 13:00 in Kolkata: %g", got)
		}
		if _, err := Summarize(ctx, l, s, ReportQuery{From: usageAt(1), To: usageAt(1)}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("an empty range: %v", err)
		}
	})
}

// On a simulated GPU server the utilisation is the simulator's: the
// summary counts what was held there as simulated, never as measured, used
// or idle, names no idle VM for it and leaves it out of the utilisation
// heatmap.
func TestSummarizeSimulated(t *testing.T) {
	ctx := context.Background()
	usageStores(t, func(t *testing.T, s *store.Store, clock *clocktest.Clock) {
		seedUsageSchedule(t, s, clock)
		l := NewLedger(s)
		r, err := Summarize(ctx, l, s, ReportQuery{From: usageAt(0), To: usageAt(24), IdleBelow: 0.5, SimulatedHosts: map[string]bool{"gpu01": true}})
		if err != nil {
			t.Fatal(err)
		}
		tot := r.Total
		if tot.GPUHours == 0 || !usageNear(tot.SimulatedGPUHours, tot.GPUHours) || tot.MeasuredGPUHours != 0 || tot.UsedGPUHours != 0 ||
			tot.IdleGPUHours != 0 || tot.Utilization != nil {
			t.Errorf("total: %+v", tot)
		}
		for _, row := range r.ByUser {
			if row.Utilization != nil || row.IdleGPUHours != 0 || !usageNear(row.SimulatedGPUHours, row.GPUHours) {
				t.Errorf("user %s: %+v", row.Key, row)
			}
		}
		if len(r.IdleVMs) != 0 {
			t.Errorf("idle VMs on a simulated server: %+v", r.IdleVMs)
		}
		for d := range 7 {
			for hr := range 24 {
				if u := r.Heatmaps.Utilization[d][hr]; u != nil {
					t.Errorf("utilisation day %d %02d:00: %g, want none", d, hr, *u)
				}
			}
		}
		text := strings.Join(r.Notes, "\n")
		if !strings.Contains(text, "GPU-hours were held on simulated GPU servers") || strings.Contains(text, "busy") || strings.Contains(text, "sampler") {
			t.Errorf("notes:\n%s", text)
		}
	})
}

// usageWeek builds a week of slots: every hour of the week once, with
// allocated GPU-hours and queued VM-hours for day and night hours.
func usageWeek(dayAlloc, nightAlloc, dayQueue, nightQueue float64) *week {
	w := newWeek(time.UTC)
	for d := range 7 {
		for h := range 24 {
			s := &w.slots[d][h]
			s.hours = 1
			if h >= dayStart && h < dayEnd {
				s.allocated, s.queued = dayAlloc, dayQueue
			} else {
				s.allocated, s.queued = nightAlloc, nightQueue
			}
		}
	}
	return w
}

func TestReportNotes(t *testing.T) {
	u := func(f float64) *float64 { return &f }
	base := func() *api.ReportSummary {
		return &api.ReportSummary{Location: "Europe/Berlin", GPUs: 4, CapacityGPUHours: 4 * 168, IdleBelow: 0.1,
			Total: api.UsageRow{GPUHours: 300, MeasuredGPUHours: 300, UsedGPUHours: 60, IdleGPUHours: 240, Utilization: u(0.2)}}
	}
	cases := []struct {
		name    string
		r       func() *api.ReportSummary
		w       *week
		want    []string
		notWant []string
	}{
		{"day idles, night queues", base, usageWeek(1, 3.5, 0, 0.5),
			[]string{"Daytime capacity idles while night requests queue", "08:00 and 20:00 (Europe/Berlin)", "25% allocated", "42.0 VM-hours"},
			[]string{"Night capacity idles"}},
		{"night idles, day queues", base, usageWeek(4, 0.5, 2, 0),
			[]string{"Night capacity idles while daytime requests queue", "12% allocated", "168 VM-hours", "--start-at"},
			[]string{"Daytime capacity idles"}},
		{"busy day and night", base, usageWeek(3, 3, 1, 1),
			[]string{"Day and night are in balance", "75% allocated between"},
			[]string{"idles while"}},
		{"a little queue is no queue", base, usageWeek(1, 3.5, 0, 0.005),
			[]string{"Day and night are in balance"}, []string{"idles while"}},
		{"held and measured", base, usageWeek(0, 0, 0, 0),
			[]string{"VMs held 300 GPU-hours of the 672 the 4 GPUs offered (45%).", "busy 20% of the time: 240 GPU-hours were held idle."},
			[]string{"no utilisation was reported"}},
		{"partly measured", func() *api.ReportSummary {
			r := base()
			r.Total.MeasuredGPUHours, r.Total.UsedGPUHours, r.Total.IdleGPUHours = 100, 20, 80
			return r
		}, usageWeek(0, 0, 0, 0), []string{"For the other 200 GPU-hours no utilisation was reported."}, nil},
		{"no samples", func() *api.ReportSummary {
			r := base()
			r.Total = api.UsageRow{GPUHours: 5}
			return r
		}, usageWeek(0, 0, 0, 0), []string{"No GPU reported its utilisation", "sampler"}, []string{"busy"}},
		{"all simulated", func() *api.ReportSummary {
			r := base()
			r.Total = api.UsageRow{GPUHours: 5, SimulatedGPUHours: 5}
			return r
		}, usageWeek(0, 0, 0, 0), []string{"5.0 GPU-hours were held on simulated GPU servers: their utilisation is the simulator's, not a GPU's"},
			[]string{"sampler", "busy", "no utilisation was reported"}},
		{"measured and simulated", func() *api.ReportSummary {
			r := base()
			r.Total.GPUHours, r.Total.SimulatedGPUHours = 310, 10
			return r
		}, usageWeek(0, 0, 0, 0), []string{"busy 20% of the time: 240 GPU-hours were held idle.", "10.0 GPU-hours were held on simulated GPU servers"},
			[]string{"no utilisation was reported"}},
		{"nothing held", func() *api.ReportSummary {
			r := base()
			r.Total = api.UsageRow{}
			return r
		}, usageWeek(0, 0, 0, 0), []string{"No VM held a GPU in this period."}, []string{"sampler"}},
		{"idle VMs and waits", func() *api.ReportSummary {
			r := base()
			r.IdleVMs = []api.IdleVM{{Running: true}, {}, {Running: true}}
			r.QueueWaits = []api.QueueWaitStats{{Profile: "total", Requests: 10, Started: 7, Waiting: 1, Failed: 1, GaveUp: 1, MeanSeconds: 754, P95Seconds: 3*3600 + 1200}}
			return r
		}, usageWeek(0, 0, 0, 0), []string{"3 VMs held a GPU for an hour or more at under 10% utilisation; 2 of them still hold it",
			"Requests: 10; started: 7, after waiting 12m on average (95% within 3h20m); still waiting: 1; failed: 1; deleted before they started: 1."},
			[]string{"gave up"}},
		{"one idle VM, little held, one GPU", func() *api.ReportSummary {
			r := base()
			r.GPUs, r.CapacityGPUHours = 1, 168
			r.Total = api.UsageRow{GPUHours: 0.034, MeasuredGPUHours: 0.034, UsedGPUHours: 0.001, IdleGPUHours: 0.033, Utilization: u(0.03)}
			r.IdleVMs = []api.IdleVM{{Running: true}}
			return r
		}, usageWeek(0, 0, 0, 0), []string{"VMs held 0.034 GPU-hours of the 168 the 1 GPU offered (0%).", "(0.034 GPU-hours)", "0.033 GPU-hours were held idle",
			"1 VM held a GPU for an hour or more at under 10% utilisation; it still holds it"}, []string{"1 GPUs", "0.0 "}},
		{"nobody started", func() *api.ReportSummary {
			r := base()
			r.QueueWaits = []api.QueueWaitStats{{Profile: "total", Requests: 2, Waiting: 2}}
			return r
		}, usageWeek(0, 0, 0, 0), []string{"Requests: 2; none started; still waiting: 2; failed: 0; deleted before they started: 0."}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := strings.Join(reportNotes(c.r(), c.w), "\n")
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("notes lack %q:\n%s", w, text)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(text, w) {
					t.Errorf("notes have %q:\n%s", w, text)
				}
			}
		})
	}
}

func TestHumanSeconds(t *testing.T) {
	for s, want := range map[float64]string{0: "0s", 59: "59s", 754: "12m", 3600: "1h", 3*3600 + 1200: "3h20m", 49 * 3600: "2d1h", 72 * 3600: "3d"} {
		if got := humanSeconds(s); got != want {
			t.Errorf("%gs: %q, want %q", s, got, want)
		}
	}
}
