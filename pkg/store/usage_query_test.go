package store

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// usageDay0 is midnight before the test clock's start (2026-03-01 09:00 UTC).
var usageDay0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func usageHour(h float64) time.Time { return usageDay0.Add(time.Duration(h * float64(time.Hour))) }

// usageSetNow moves a test database's clock to t (it must be ahead) and stops
// it there.
func usageSetNow(d *testDB, t time.Time) {
	d.clock.SetStep(0)
	d.clock.Advance(t.Sub(d.clock.Now()))
}

func TestListUsageSpans(t *testing.T) {
	ctx := context.Background()
	ptr := func(t time.Time) *time.Time { return &t }
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		mustUser(t, s, "alice")
		mustUser(t, s, "bob")
		a := mustVM(t, s, "alice", "a")
		b := mustVM(t, s, "bob", "b")
		recs := []*UsageRecord{
			{VMID: a.ID, User: "alice", GPUAddress: gpuC, Kind: gpu.KindPassthrough, Share: 1, StartedAt: usageHour(8), EndedAt: ptr(usageHour(11))},                 // crosses from
			{VMID: a.ID, User: "alice", GPUAddress: gpuA, Kind: gpu.KindMIG, Profile: "3g.40gb", Share: 3.0 / 7, StartedAt: usageHour(11)},                           // open
			{VMID: b.ID, User: "bob", GPUAddress: gpuB, Kind: gpu.KindVGPU, Profile: "L40S-12Q", Share: 0.25, StartedAt: usageHour(2), EndedAt: ptr(usageHour(9))},   // before from
			{VMID: b.ID, User: "bob", GPUAddress: gpuB, Kind: gpu.KindVGPU, Profile: "L40S-12Q", Share: 0.25, StartedAt: usageHour(12), EndedAt: ptr(usageHour(20))}, // crosses to
			{VMID: b.ID, User: "bob", GPUAddress: gpuB, Kind: gpu.KindVGPU, Share: 0.25, StartedAt: usageHour(19), EndedAt: ptr(usageHour(21))},                      // after to
		}
		for _, r := range recs {
			if err := s.InsertUsageRecord(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		usageSetNow(d, usageHour(13.5))
		spans, err := s.ListUsageSpans(ctx, UsageQuery{From: usageHour(10), To: usageHour(18)})
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			id       int64
			from, to float64
			open     bool
			gpuSecs  float64
		}{
			{recs[0].ID, 10, 11, false, 3600},
			{recs[1].ID, 11, 13.5, true, 3.0 / 7 * 2.5 * 3600},
			{recs[3].ID, 12, 18, false, 0.25 * 6 * 3600},
		}
		if len(spans) != len(want) {
			t.Fatalf("%d spans, want %d: %+v", len(spans), len(want), spans)
		}
		for i, w := range want {
			sp := spans[i]
			if sp.Record.ID != w.id || !sp.From.Equal(usageHour(w.from)) || !sp.To.Equal(usageHour(w.to)) || sp.Open != w.open {
				t.Errorf("span %d: record %d %s–%s open %v, want record %d %gh–%gh open %v", i, sp.Record.ID, sp.From, sp.To, sp.Open, w.id, w.from, w.to, w.open)
			}
			if math.Abs(sp.GPUSeconds()-w.gpuSecs) > 1e-6 {
				t.Errorf("span %d: %g GPU-seconds, want %g", i, sp.GPUSeconds(), w.gpuSecs)
			}
		}
		if spans[0].VMName != "a" || spans[0].VMProfile != "render-l40s" || spans[2].VMName != "b" {
			t.Errorf("VM names and profiles: %+v", spans)
		}
		mine, err := s.ListUsageSpans(ctx, UsageQuery{From: usageHour(10), To: usageHour(18), User: "bob"})
		if err != nil || len(mine) != 1 || mine[0].Record.User != "bob" {
			t.Fatalf("bob's spans: %+v, %v", mine, err)
		}
		if _, err := s.ListUsageSpans(ctx, UsageQuery{From: usageHour(10), To: usageHour(10)}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty range: %v", err)
		}
	})
}

// TestUsageSchedule: a known schedule of VMs (whole GPUs, MIG slices of
// 3/7 and 1/7, a quarter-board vGPU, a VM with two GPUs, an open record,
// records crossing either end of the range) adds up to the GPU-hours worked
// out by hand, per user and per group.
func TestUsageSchedule(t *testing.T) {
	ctx := context.Background()
	ptr := func(t time.Time) *time.Time { return &t }
	type rec struct {
		user, group, vm, gpu string
		share                float64
		from                 float64 // hours from usageDay0
		to                   float64 // hours from usageDay0; open: still open
	}
	open := math.Inf(1)
	schedule := []rec{
		{"alice", "render", "a1", gpuC, 1, -2, 2},            // crosses the start of day 0
		{"alice", "render", "a2", gpuA, 3.0 / 7, 9, 17.5},    // MIG 3g
		{"bob", "sim", "b1", gpuA, 1.0 / 7, 8, open},         // MIG 1g, still open
		{"bob", "sim", "b2", gpuB, 0.25, 20, 28},             // vGPU of a quarter, crosses the end of day 0
		{"carol", "render", "c1", gpuC, 1, 12, 13},           // two whole GPUs
		{"carol", "render", "c1", "0000:9b:00.0", 1, 12, 13}, //
		{"dave", "", "d1", gpuA, 2.0 / 7, -38, -36},          // two days before
	}
	now := 36.0 // day 1, 12:00
	cases := []struct {
		name     string
		from, to float64
		user     string
		want     map[string]float64 // GPU-hours by user
		groups   map[string]float64 // GPU-hours by group
	}{
		{"day 0", 0, 24, "",
			map[string]float64{"alice": 2 + 8.5*3/7, "bob": 16.0/7 + 4*0.25, "carol": 2},
			map[string]float64{"render": 4 + 8.5*3/7, "sim": 16.0/7 + 1}},
		{"day 1, past now", 24, 48, "",
			map[string]float64{"bob": 12.0/7 + 4*0.25},
			map[string]float64{"sim": 12.0/7 + 1}},
		{"everything", -48, 48, "",
			map[string]float64{"alice": 4 + 8.5*3/7, "bob": 28.0/7 + 8*0.25, "carol": 2, "dave": 2 * 2.0 / 7},
			map[string]float64{"render": 6 + 8.5*3/7, "sim": 4 + 2, "": 4.0 / 7}},
		{"bob only", -48, 48, "bob",
			map[string]float64{"bob": 28.0/7 + 8*0.25},
			map[string]float64{"sim": 6}},
		{"an hour inside one record", 10, 11, "",
			map[string]float64{"alice": 3.0 / 7, "bob": 1.0 / 7},
			map[string]float64{"render": 3.0 / 7, "sim": 1.0 / 7}},
		{"before anything", -100, -50, "", map[string]float64{}, map[string]float64{}},
	}
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		vms := map[string]*VM{}
		for _, r := range schedule {
			if vms[r.vm] == nil {
				if _, err := s.GetUser(ctx, r.user); errors.Is(err, ErrNotFound) {
					mustUser(t, s, r.user)
				}
				vms[r.vm] = mustVM(t, s, r.user, r.vm)
			}
			u := &UsageRecord{VMID: vms[r.vm].ID, User: r.user, Group: r.group, Host: "gpu01", GPUAddress: r.gpu, Kind: gpu.KindMIG,
				Share: r.share, StartedAt: usageHour(r.from)}
			if r.to != open {
				u.EndedAt = ptr(usageHour(r.to))
			}
			if err := s.InsertUsageRecord(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
		usageSetNow(d, usageHour(now))
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				spans, err := s.ListUsageSpans(ctx, UsageQuery{From: usageHour(c.from), To: usageHour(c.to), User: c.user})
				if err != nil {
					t.Fatal(err)
				}
				users, groups := map[string]float64{}, map[string]float64{}
				for _, sp := range spans {
					users[sp.Record.User] += sp.GPUSeconds() / 3600
					groups[sp.Record.Group] += sp.GPUSeconds() / 3600
				}
				for _, m := range []struct {
					what      string
					got, want map[string]float64
				}{{"user", users, c.want}, {"group", groups, c.groups}} {
					if len(m.got) != len(m.want) {
						t.Errorf("by %s: %v, want %v", m.what, m.got, m.want)
					}
					for k, w := range m.want {
						if math.Abs(m.got[k]-w) > 1e-9 {
							t.Errorf("by %s, %q: %.12f GPU-hours, want %.12f", m.what, k, m.got[k], w)
						}
					}
				}
			})
		}
	})
}

// usageSample is a GPU sample row for tests: util of a VM's device (instance
// set) or of a whole GPU.
func usageSample(vm, user, gpu, instance string, at time.Time, res, n int, util float64) GPUSample {
	return GPUSample{Host: "gpu01", GPUAddress: gpu, Instance: instance, VMID: vm, User: user, TakenAt: at,
		Resolution: res, SampleCount: n, GPUUtil: util, MemUtil: -1, EncUtil: -1, DecUtil: -1, Temperature: -1, PowerWatts: -1}
}

func TestSampleUtilization(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		rows := []GPUSample{
			// vm-a, a MIG instance: downsampled 10:00 and 10:05, raw after.
			usageSample("vm-a", "alice", gpuA, "mig-1", usageHour(10), 300, 30, 0.5),
			usageSample("vm-a", "alice", gpuA, "mig-1", usageHour(10+5.0/60), 300, 10, 0.9),
			usageSample("vm-a", "alice", gpuA, "mig-1", usageHour(10+11.0/60), 0, 1, 0.2),
			usageSample("vm-a", "alice", gpuA, "mig-1", usageHour(10+12.0/60), 0, 1, -1), // not reported
			// The MIG GPU's own row, mapped to vm-a too: apart.
			usageSample("vm-a", "alice", gpuA, "", usageHour(10), 300, 30, 1),
			// vm-c: a whole GPU, rows of the GPU only.
			usageSample("vm-c", "bob", gpuC, "", usageHour(10), 300, 30, 0.25),
			usageSample("vm-c", "bob", gpuC, "", usageHour(10+11.0/60), 0, 1, 1),
			// Nobody's GPU, and samples outside the range.
			usageSample("", "", gpuB, "", usageHour(10), 300, 30, 0.7),
			usageSample("vm-c", "bob", gpuC, "", usageHour(9), 300, 30, 0.9),
			usageSample("vm-c", "bob", gpuC, "", usageHour(11), 0, 1, 0.9),
		}
		if err := s.db.Create(&rows).Error; err != nil {
			t.Fatal(err)
		}
		// One bucket of the hour 10–11: per VM, GPU, device or whole GPU.
		got, err := s.SampleUtilizationBuckets(ctx, UsageQuery{From: usageHour(10), To: usageHour(11)}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		want := []UtilBucket{
			{Start: usageHour(10), VMID: "vm-a", Host: "gpu01", GPUAddress: gpuA, Device: false, Sum: 30, Count: 30},
			{Start: usageHour(10), VMID: "vm-a", Host: "gpu01", GPUAddress: gpuA, Device: true, Sum: 0.5*30 + 0.9*10 + 0.2, Count: 41},
			{Start: usageHour(10), VMID: "vm-c", Host: "gpu01", GPUAddress: gpuC, Device: false, Sum: 0.25*30 + 1, Count: 31},
		}
		checkBuckets := func(what string, got, want []UtilBucket) {
			t.Helper()
			if len(got) != len(want) {
				t.Fatalf("%s: got %+v, want %+v", what, got, want)
			}
			for i := range want {
				g, w := got[i], want[i]
				if !g.Start.Equal(w.Start) || g.VMID != w.VMID || g.GPUAddress != w.GPUAddress || g.Device != w.Device ||
					g.Count != w.Count || math.Abs(g.Sum-w.Sum) > 1e-9 {
					t.Errorf("%s, bucket %d: %+v, want %+v", what, i, g, w)
				}
			}
		}
		checkBuckets("10–11", got, want)
		bob, err := s.SampleUtilizationBuckets(ctx, UsageQuery{From: usageHour(10), To: usageHour(11), User: "bob"}, time.Hour)
		if err != nil || len(bob) != 1 || bob[0].VMID != "vm-c" {
			t.Fatalf("bob's: %+v, %v", bob, err)
		}
		if _, err := s.SampleUtilizationBuckets(ctx, UsageQuery{From: usageHour(11), To: usageHour(10)}, time.Hour); !errors.Is(err, ErrInvalid) {
			t.Errorf("a range that ends before it starts: %v", err)
		}
		buckets, err := s.SampleUtilizationBuckets(ctx, UsageQuery{From: usageHour(9), To: usageHour(12)}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		checkBuckets("9–12", buckets, []UtilBucket{
			{Start: usageHour(9), VMID: "vm-c", GPUAddress: gpuC, Sum: 0.9 * 30, Count: 30},
			want[0], want[1], want[2],
			{Start: usageHour(11), VMID: "vm-c", GPUAddress: gpuC, Sum: 0.9, Count: 1},
		})
		// Five-minute buckets put bob's 10:11 sample apart from the 10:00 row.
		fives, err := s.SampleUtilizationBuckets(ctx, UsageQuery{From: usageHour(10), To: usageHour(10.5), User: "bob"}, 5*time.Minute)
		if err != nil || len(fives) != 2 || !fives[0].Start.Equal(usageHour(10)) || fives[0].Count != 30 ||
			!fives[1].Start.Equal(usageHour(10+10.0/60)) || fives[1].Count != 1 {
			t.Fatalf("five-minute buckets: %+v, %v", fives, err)
		}
		if _, err := s.SampleUtilizationBuckets(ctx, UsageQuery{From: usageHour(9), To: usageHour(12)}, 1500*time.Millisecond); !errors.Is(err, ErrInvalid) {
			t.Errorf("a bucket of 1.5s: %v", err)
		}
	})
}

func TestSampleUtilizationRawOnly(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		rows := []GPUSample{
			usageSample("vm-c", "bob", gpuC, "", usageHour(10), 0, 1, 0.4),
			usageSample("vm-c", "bob", gpuC, "", usageHour(10.5), 0, 1, 0.6),
		}
		if err := s.db.Create(&rows).Error; err != nil {
			t.Fatal(err)
		}
		got, err := s.SampleUtilizationBuckets(ctx, UsageQuery{From: usageHour(0), To: usageHour(24)}, 24*time.Hour)
		if err != nil || len(got) != 1 || got[0].Count != 2 || math.Abs(got[0].Sum-1) > 1e-9 || !got[0].Start.Equal(usageHour(0)) {
			t.Fatalf("raw only: %+v, %v", got, err)
		}
		none, err := s.SampleUtilizationBuckets(ctx, UsageQuery{From: usageHour(11), To: usageHour(24)}, time.Hour)
		if err != nil || len(none) != 0 {
			t.Fatalf("no samples: %+v, %v", none, err)
		}
	})
}

func TestListQueueWaits(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		mustUser(t, s, "alice")
		mustUser(t, s, "bob")
		// The clock is at 09:00 and moves a millisecond a read; each VM is
		// created, then the clock moves on.
		d.clock.SetStep(0)
		move := func(to time.Time) { d.clock.Advance(to.Sub(d.clock.Now())) }
		state := func(vm *VM, st string) *VM {
			t.Helper()
			next, err := s.UpdateVMState(ctx, vm.ID, vm.Version, VMUpdate{State: st})
			if err != nil {
				t.Fatal(err)
			}
			return next
		}
		move(usageHour(10))
		ran := mustVM(t, s, "alice", "ran") // waits 30 min, runs, stops, runs again
		gaveUp := mustVM(t, s, "bob", "gave-up")
		mustVM(t, s, "bob", "waiting")
		move(usageHour(10.5))
		ran = state(state(ran, VMAllocating), VMRunning)
		move(usageHour(11))
		ran = state(state(ran, VMStopped), VMRunning)
		gaveUp = state(gaveUp, VMDeleted)
		// pruned: created at 10:00, its events gone, a usage record from 12:00.
		pruned := mustVM(t, s, "alice", "pruned")
		rec := &UsageRecord{VMID: pruned.ID, User: "alice", GPUAddress: gpuC, Kind: gpu.KindPassthrough, Share: 1, StartedAt: usageHour(12)}
		if err := s.InsertUsageRecord(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Model(&VM{}).Where("id = ?", pruned.ID).Update("created_at", usageHour(10)).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.db.Where("vm_id = ?", pruned.ID).Delete(&Event{}).Error; err != nil {
			t.Fatal(err)
		}

		waits, err := s.ListQueueWaits(ctx, UsageQuery{From: usageHour(0), To: usageHour(24)})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]QueueWait{}
		for _, w := range waits {
			byName[w.Name] = w
		}
		check := func(name string, ran, left *time.Time) {
			t.Helper()
			w, ok := byName[name]
			if !ok {
				t.Errorf("no wait of %s in %+v", name, waits)
				return
			}
			eq := func(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }
			if !eq(w.Ran, ran) || !eq(w.Left, left) || !w.Since.Equal(usageHour(10)) {
				t.Errorf("%s: since %s ran %v left %v, want since 10:00 ran %v left %v", name, w.Since, w.Ran, w.Left, ran, left)
			}
		}
		tp := func(h float64) *time.Time { t := usageHour(h); return &t }
		check("ran", tp(10.5), nil)
		check("gave-up", nil, tp(11))
		check("waiting", nil, nil)
		check("pruned", tp(12), nil)
		if len(waits) != 4 {
			t.Errorf("%d waits, want 4", len(waits))
		}
		alice, err := s.ListQueueWaits(ctx, UsageQuery{From: usageHour(0), To: usageHour(24), User: "alice"})
		if err != nil || len(alice) != 2 {
			t.Fatalf("alice's waits: %+v, %v", alice, err)
		}
		later, err := s.ListQueueWaits(ctx, UsageQuery{From: usageHour(10.25), To: usageHour(24)})
		if err != nil || len(later) != 0 {
			t.Fatalf("VMs asked for after 10:15: %+v, %v", later, err)
		}
	})
}
