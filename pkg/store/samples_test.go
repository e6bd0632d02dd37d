package store

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// raw is a raw sample of a device of gpu01.
func raw(gpu, instance, vm string, at time.Time, util float64) GPUSample {
	return GPUSample{Host: "gpu01", GPUAddress: gpu, Instance: instance, VMID: vm, TakenAt: at,
		GPUUtil: util, MemUtil: -1, EncUtil: -1, DecUtil: -1, Temperature: -1, PowerWatts: -1}
}

func TestInsertSamples(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		t0 := time.Date(2026, 3, 1, 9, 0, 0, 123456789, time.FixedZone("CET", 3600))
		in := []GPUSample{raw(gpuA, "", "", t0, 0.5), raw(gpuA, "mdev-1", "vm-1", t0, 0.25)}
		in[0].MemUsed, in[0].MemTotal, in[0].Temperature, in[0].PowerWatts, in[0].SMClockMHz = 10<<30, 80<<30, 61.5, 250.25, 1980
		if err := s.InsertSamples(ctx, in); err != nil {
			t.Fatal(err)
		}
		if in[0].ID == 0 || in[1].ID == 0 || in[0].ID == in[1].ID {
			t.Errorf("IDs %d, %d", in[0].ID, in[1].ID)
		}
		got, err := s.ListSamples(ctx, SampleFilter{Host: "gpu01", Since: t0.Add(-time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("%d samples", len(got))
		}
		g := got[0]
		if !g.TakenAt.Equal(t0.Truncate(time.Microsecond)) || g.SampleCount != 1 ||
			g.MemUsed != 10<<30 || g.MemTotal != 80<<30 || g.Temperature != 61.5 || g.PowerWatts != 250.25 || g.SMClockMHz != 1980 ||
			g.GPUUtil != 0.5 || g.MemUtil != -1 {
			t.Errorf("sample read back: %+v", g)
		}
		if got[1].Instance != "mdev-1" || got[1].VMID != "vm-1" {
			t.Errorf("device sample: %+v", got[1])
		}
		if only, _ := s.ListSamples(ctx, SampleFilter{Host: "gpu01", GPUsOnly: true}); len(only) != 1 || only[0].Instance != "" {
			t.Errorf("GPUs only: %+v", only)
		}
		if vm, _ := s.ListSamples(ctx, SampleFilter{Host: "gpu01", VMID: "vm-1"}); len(vm) != 1 || vm[0].VMID != "vm-1" {
			t.Errorf("vm-1: %+v", vm)
		}
		for _, tc := range []struct {
			name string
			s    GPUSample
		}{
			{"no host", GPUSample{GPUAddress: gpuA, TakenAt: t0}},
			{"no gpu", GPUSample{Host: "gpu01", TakenAt: t0}},
			{"no time", GPUSample{Host: "gpu01", GPUAddress: gpuA}},
			{"bad resolution", GPUSample{Host: "gpu01", GPUAddress: gpuA, TakenAt: t0, Resolution: -1}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := s.InsertSamples(ctx, []GPUSample{raw(gpuB, "", "", t0, 0), tc.s})
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("err = %v, want ErrInvalid", err)
				}
			})
		}
		if n := count(t, s, "gpu_samples"); n != 2 {
			t.Errorf("a refused batch wrote rows: %d", n)
		}
		if _, err := s.ListSamples(ctx, SampleFilter{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("list without a host: %v", err)
		}
	})
}

func TestDownsampleSamples(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
		var in []GPUSample
		// 20 minutes of samples every 10 s: the GPU at i%3 × 0.25 (0, 0.25,
		// 0.5 → mean 0.25), a vGPU at 1 whose memory figure is reported
		// every other sample, and one XID error a minute.
		for i := range 120 {
			at := t0.Add(time.Duration(i) * 10 * time.Second)
			g := raw(gpuA, "", "", at, float64(i%3)*0.25)
			g.Temperature, g.PowerWatts, g.SMClockMHz, g.MemUsed, g.MemTotal, g.ECCErrors = 60, 200, 1000+i%2*100, 4<<30, 80<<30, i/60
			if i%6 == 0 {
				g.XIDErrors = 1
			}
			v := raw(gpuA, "mdev-1", "vm-1", at, 1)
			v.User = "ann"
			if i%2 == 0 {
				v.MemUtil = 0.5
			}
			// Licensed until the last sample of the first period, which
			// says nothing; in its grace period from 9:05.
			switch {
			case i < 29:
				v.License = "licensed"
			case i >= 30:
				v.License = "grace"
			}
			in = append(in, g, v)
		}
		other := raw(gpuB, "", "", t0, 0.9)
		other.Host = "gpu02"
		in = append(in, other)
		if err := s.InsertSamples(ctx, in); err != nil {
			t.Fatal(err)
		}
		// Before 9:12 rounds down to 9:10: two periods of 5 minutes.
		res, err := s.DownsampleSamples(ctx, "gpu01", t0.Add(12*time.Minute), 5*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if res.Raw != 120 || res.Rows != 4 || res.Periods != 1 {
			t.Errorf("result %+v, want 120 raw rows into 4 in one chunk", res)
		}
		down, err := s.ListSamples(ctx, SampleFilter{Host: "gpu01", Resolution: 300})
		if err != nil {
			t.Fatal(err)
		}
		if len(down) != 4 {
			t.Fatalf("%d downsampled rows: %+v", len(down), down)
		}
		for i, r := range down {
			wantAt := t0.Add(time.Duration(i/2) * 5 * time.Minute)
			if !r.TakenAt.Equal(wantAt) || r.SampleCount != 30 || r.Resolution != 300 {
				t.Errorf("row %d: at %s, %d samples, resolution %d", i, r.TakenAt, r.SampleCount, r.Resolution)
			}
			if r.Instance == "" {
				if math.Abs(r.GPUUtil-0.25) > 1e-9 || r.MemUtil != -1 || r.Temperature != 60 || r.PowerWatts != 200 ||
					r.SMClockMHz != 1050 || r.MemUsed != 4<<30 || r.MemTotal != 80<<30 || r.XIDErrors != 5 || r.ECCErrors != 0 {
					t.Errorf("GPU row %d: %+v", i, r)
				}
			} else if r.GPUUtil != 1 || r.MemUtil != 0.5 || r.VMID != "vm-1" || r.User != "ann" || r.Temperature != -1 ||
				r.License != map[bool]string{true: "licensed", false: "grace"}[i < 2] {
				t.Errorf("vGPU row %d: %+v", i, r)
			}
		}
		left, _ := s.ListSamples(ctx, SampleFilter{Host: "gpu01"})
		if len(left) != 120 || !left[0].TakenAt.Equal(t0.Add(10*time.Minute)) {
			t.Errorf("%d raw rows left, first at %v; want 120 from 9:10", len(left), left[0].TakenAt)
		}
		if o, _ := s.ListSamples(ctx, SampleFilter{Host: "gpu02"}); len(o) != 1 {
			t.Errorf("another host's rows were touched: %+v", o)
		}
		// Again: nothing left to do before 9:10.
		if res, err := s.DownsampleSamples(ctx, "gpu01", t0.Add(14*time.Minute), 5*time.Minute); err != nil || res.Raw != 0 || res.Rows != 0 {
			t.Errorf("second run: %+v, %v", res, err)
		}
		// A backlog of several hours is worked off hour by hour.
		var late []GPUSample
		for h := range 3 {
			late = append(late, raw(gpuB, "", "", t0.Add(-time.Duration(h+1)*time.Hour), 0.5))
		}
		if err := s.InsertSamples(ctx, late); err != nil {
			t.Fatal(err)
		}
		if res, err := s.DownsampleSamples(ctx, "gpu01", t0, 5*time.Minute); err != nil || res.Raw != 3 || res.Rows != 3 || res.Periods != 3 {
			t.Errorf("backlog: %+v, %v", res, err)
		}
		for _, bad := range []struct {
			host   string
			period time.Duration
		}{{"", 5 * time.Minute}, {"gpu01", 0}, {"gpu01", 1500 * time.Millisecond}} {
			if _, err := s.DownsampleSamples(ctx, bad.host, t0, bad.period); !errors.Is(err, ErrInvalid) {
				t.Errorf("DownsampleSamples(%q, %s) = %v, want ErrInvalid", bad.host, bad.period, err)
			}
		}
	})
}

func TestDeleteSamplesBefore(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
		old := raw(gpuA, "", "", t0.Add(-time.Hour), 0)
		oldDown := raw(gpuA, "", "", t0.Add(-2*time.Hour), 0)
		oldDown.Resolution = 300
		keep := raw(gpuA, "", "", t0, 0)
		keepDown := raw(gpuA, "", "", t0.Add(time.Minute), 0)
		keepDown.Resolution = 300
		if err := s.InsertSamples(ctx, []GPUSample{old, oldDown, keep, keepDown}); err != nil {
			t.Fatal(err)
		}
		n, err := s.DeleteSamplesBefore(ctx, t0)
		if err != nil || n != 2 {
			t.Fatalf("deleted %d, %v; want 2", n, err)
		}
		if c := count(t, s, "gpu_samples"); c != 2 {
			t.Errorf("%d rows left", c)
		}
	})
}

func TestSumXIDErrorsAndVMActivity(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
		var in []GPUSample
		for i := range 10 {
			at := t0.Add(time.Duration(i) * time.Minute)
			g := raw(gpuA, "", "", at, 0.5)
			g.XIDErrors = i % 2 // 5 errors, at odd minutes
			h := raw(gpuB, "", "", at, 0.5)
			// vm-busy is busy until 9:04 then idle; vm-idle never busy;
			// vm-quiet reports no utilisation.
			busy := 0.9
			if i > 4 {
				busy = 0.01
			}
			in = append(in, g, h,
				raw(gpuA, "mdev-1", "vm-busy", at, busy),
				raw(gpuA, "mdev-2", "vm-idle", at, 0.02),
				raw(gpuB, "mig-1", "vm-quiet", at, -1))
		}
		if err := s.InsertSamples(ctx, in); err != nil {
			t.Fatal(err)
		}
		xid, err := s.SumXIDErrors(ctx, "gpu01", t0.Add(4*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if len(xid) != 1 || xid[gpuA] != 3 { // minutes 5, 7, 9
			t.Errorf("XID errors since 9:04: %v", xid)
		}
		act, err := s.ListVMActivity(ctx, []string{"vm-busy", "vm-idle", "vm-quiet", "vm-none"}, t0.Add(time.Minute), 0.05)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]VMActivity{
			"vm-busy": {VMID: "vm-busy", First: t0.Add(time.Minute), Last: t0.Add(9 * time.Minute), LastBusy: t0.Add(4 * time.Minute)},
			"vm-idle": {VMID: "vm-idle", First: t0.Add(time.Minute), Last: t0.Add(9 * time.Minute)},
		}
		if len(act) != len(want) {
			t.Errorf("activity of %d VMs: %+v", len(act), act)
		}
		for id, w := range want {
			g := act[id]
			if !g.First.Equal(w.First) || !g.Last.Equal(w.Last) || !g.LastBusy.Equal(w.LastBusy) {
				t.Errorf("%s: %+v, want %+v", id, g, w)
			}
		}
	})
}

func TestScanTime(t *testing.T) {
	want := time.Date(2026, 3, 1, 9, 0, 0, 250000000, time.UTC)
	for _, tc := range []struct {
		in   any
		want time.Time
		err  bool
	}{
		{nil, time.Time{}, false},
		{want, want, false},
		{"2026-03-01 09:00:00.25+00:00", want, false},
		{[]byte("2026-03-01 10:00:00.25+01:00"), want, false},
		{"2026-03-01T09:00:00.25Z", want, false},
		{"yesterday", time.Time{}, true},
		{42, time.Time{}, true},
	} {
		got, err := scanTime(tc.in)
		if (err != nil) != tc.err || !got.Equal(tc.want) {
			t.Errorf("scanTime(%v) = %v, %v", tc.in, got, err)
		}
	}
}

func TestMonitorCounts(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		a := mustVM(t, s, "ann", "a")
		b := mustVM(t, s, "ann", "b")
		later := mustVM(t, s, "ann", "later")
		mustVM(t, s, "ann", "c")
		// later may start only in an hour; a is placed and runs.
		future := d.clock.Now().Add(time.Hour)
		if err := s.db.Model(&VM{}).Where("id = ?", later.ID).Update("start_at", future).Error; err != nil {
			t.Fatal(err)
		}
		claims := []SlotClaim{mig(gpuA, 0, 1), mig(gpuA, 1, 1)}
		if _, err := s.ClaimAllocation(ctx, a.ID, claims); err != nil {
			t.Fatal(err)
		}
		host := "gpu01"
		vm, err := s.UpdateVMState(ctx, a.ID, a.Version, VMUpdate{State: VMRunning, Host: &host})
		if err != nil {
			t.Fatal(err)
		}
		ops, _ := s.ListOperations(ctx, a.ID)
		before := d.clock.Now()
		if err := s.FinishOperation(ctx, ops[0].ID, nil); err != nil {
			t.Fatal(err)
		}
		states, err := s.CountVMsByState(ctx)
		if err != nil || states[VMQueued] != 3 || states[VMRunning] != 1 || len(states) != 2 {
			t.Errorf("states %v, %v", states, err)
		}
		allocs, err := s.CountLiveAllocations(ctx, "gpu01")
		if err != nil || allocs[gpu.KindMIG] != 2 || len(allocs) != 1 {
			t.Errorf("allocations %v, %v", allocs, err)
		}
		if none, _ := s.CountLiveAllocations(ctx, "gpu02"); len(none) != 0 {
			t.Errorf("gpu02 allocations %v", none)
		}
		q, err := s.GetQueueStats(ctx, d.clock.Now())
		if err != nil || q.Length != 3 || q.Waiting != 2 || !q.OldestSince.Equal(b.CreatedAt) {
			t.Errorf("queue %+v (b created %s), %v", q, b.CreatedAt, err)
		}
		done, err := s.ListFinishedCreates(ctx, "gpu01", before.Add(-time.Second))
		if err != nil || len(done) != 1 || done[0].VMID != vm.ID || done[0].FinishedAt == nil {
			t.Errorf("finished creates %+v, %v", done, err)
		}
		if done, _ := s.ListFinishedCreates(ctx, "gpu02", before.Add(-time.Second)); len(done) != 0 {
			t.Errorf("gpu02 creates %+v", done)
		}
		if done, _ := s.ListFinishedCreates(ctx, "", d.clock.Now()); len(done) != 0 {
			t.Errorf("creates after now %+v", done)
		}
	})
}

// The queue's wait counts a VM with a start time from that time once it
// has come, from its creation when the time came before it, and not at all
// before; deleted and running VMs are not in it.
func TestQueueStatsStartTimes(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		t0 := d.clock.Now()
		timed := mustVM(t, s, "ann", "timed") // created at t0, may start at t0+1h
		d.clock.Advance(30 * time.Minute)
		plain := mustVM(t, s, "ann", "plain") // created at t0+30m
		d.clock.Advance(time.Minute)
		early := mustVM(t, s, "ann", "early") // created at t0+31m, start time t0 (before)
		gone := mustVM(t, s, "ann", "gone")
		setStart := func(id string, at time.Time) {
			t.Helper()
			if err := s.db.Model(&VM{}).Where("id = ?", id).Update("start_at", at).Error; err != nil {
				t.Fatal(err)
			}
		}
		setStart(timed.ID, t0.Add(time.Hour))
		setStart(early.ID, t0)
		if err := s.db.Model(&VM{}).Where("id = ?", gone.ID).Updates(map[string]any{"state": VMDeleted, "queue_position": 3}).Error; err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			now     time.Time
			waiting int
			oldest  time.Time
		}{
			{t0.Add(45 * time.Minute), 2, plain.CreatedAt},
			{t0.Add(2 * time.Hour), 3, plain.CreatedAt},
		} {
			q, err := s.GetQueueStats(ctx, tc.now)
			if err != nil || q.Length != 3 || q.Waiting != tc.waiting || !q.OldestSince.Equal(tc.oldest) {
				t.Errorf("at %s: queue %+v, %v; want 3 long, %d waiting since %s", tc.now, q, err, tc.waiting, tc.oldest)
			}
		}
		// Without plain, timed waits longest (since t0+1h), and early since its creation.
		if err := s.db.Model(&VM{}).Where("id = ?", plain.ID).Update("state", VMRunning).Error; err != nil {
			t.Fatal(err)
		}
		q, err := s.GetQueueStats(ctx, t0.Add(2*time.Hour))
		if err != nil || q.Length != 2 || q.Waiting != 2 || !q.OldestSince.Equal(early.CreatedAt) {
			t.Errorf("queue %+v, %v; want 2 waiting since %s", q, err, early.CreatedAt)
		}
		setStart(early.ID, t0.Add(90*time.Minute))
		q, err = s.GetQueueStats(ctx, t0.Add(2*time.Hour))
		if err != nil || q.Waiting != 2 || !q.OldestSince.Equal(t0.Add(time.Hour)) {
			t.Errorf("queue %+v, %v; want 2 waiting since %s", q, err, t0.Add(time.Hour))
		}
		q, err = s.GetQueueStats(ctx, t0.Add(20*time.Minute))
		if err != nil || q.Waiting != 0 || !q.OldestSince.IsZero() {
			t.Errorf("queue %+v, %v; want none waiting", q, err)
		}
	})
}

// A VM's vGPU licence states: the newest known per device, within the
// window; samples that know none, other VMs' and old ones are left out.
func TestVGPULicenses(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
		mk := func(instance, vm string, at time.Time, lic string) GPUSample {
			r := raw(gpuA, instance, vm, at, 0.5)
			r.License = lic
			return r
		}
		rows := []GPUSample{
			mk("mdev-1", "vm-1", t0, "licensed"),
			mk("mdev-1", "vm-1", t0.Add(time.Minute), "grace"),
			mk("mdev-1", "vm-1", t0.Add(2*time.Minute), ""), // says nothing
			mk("mdev-2", "vm-1", t0.Add(-time.Hour), "unlicensed"),
			mk("mdev-3", "vm-2", t0.Add(time.Minute), "licensed"),
		}
		if err := s.InsertSamples(ctx, rows); err != nil {
			t.Fatal(err)
		}
		got, err := s.VGPULicenses(ctx, "vm-1", t0.Add(-10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got["mdev-1"] != "grace" {
			t.Errorf("licences %v, want mdev-1 grace only", got)
		}
	})
}
