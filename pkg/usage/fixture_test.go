package usage

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/clocktest"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// The known schedule the usage and report tests share. Day 0 is Monday
// 2026-03-02 (UTC); hours are counted from its midnight.
var usageDay0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

func usageAt(h float64) time.Time { return usageDay0.Add(time.Duration(h * float64(time.Hour))) }

// usageStores runs fn on a fresh SQLite store and, when
// GPUVM_TEST_POSTGRES_DSN is set, on a fresh PostgreSQL schema, as
// pkg/store's own tests do.
func usageStores(t *testing.T, fn func(t *testing.T, s *store.Store, clock *clocktest.Clock)) {
	t.Helper()
	for _, driver := range storetest.Drivers {
		t.Run(driver, func(t *testing.T) {
			clock := clocktest.New(usageAt(-72))
			fn(t, storetest.Open(t, storetest.Config(t, driver, storetest.WithClock(clock.Now))), clock)
		})
	}
}

const (
	usageMIG  = "0000:17:00.0" // MIG, 7 slices
	usageVGPU = "0000:41:00.0" // vGPU, four L40S-12Q per board
	usageGPU1 = "0000:9a:00.0" // whole GPUs
	usageGPU2 = "0000:9b:00.0"
)

// usageVM is a VM of the schedule and the GPUs it held.
type usageVM struct {
	user, group, name, profile string
	created                    float64 // hours from day 0
	holds                      []usageHold
	// ran: when it first ran (NaN: never); left: when it was deleted
	// before running (NaN: not).
	ran, left float64
}

type usageHold struct {
	gpu, instance string // instance "" for a whole GPU
	kind          gpu.Kind
	prof          string
	share         float64
	from, to      float64 // to: usageOpen while it holds
	// util is the utilisation of its samples per day (by day index from
	// day 0; a missing day has no samples); whole-GPU rows when instance
	// is "", else the device's.
	util map[int]float64
	// gpuRowUtil, when set, adds rows of the whole GPU mapped to the VM
	// too (which the device's rows outweigh).
	gpuRowUtil float64
}

const usageOpen = 1e9

// usageSchedule, with now at hour 36 (Tuesday 12:00):
//   - alice/a1: a whole GPU from Sunday 22:00 to Monday 02:00, no samples;
//   - alice/a2: MIG 3g (3/7) Monday 09:00–17:30 at 80% (the GPU's own rows,
//     at 100%, do not count);
//   - bob/b1: MIG 1g (1/7) from Monday 08:00, still held: 10% on Monday,
//     60% on Tuesday;
//   - bob/b2: a quarter vGPU Monday 20:00 – Tuesday 04:00, no samples;
//   - carol/c1: two whole GPUs Monday 12:00–13:00 at 50% and 100%;
//   - carol/c2: asked for Monday 12:00, still waiting; bob/b3 asked for at
//     20:00 and deleted at 22:00 without running.
var usageSchedule = []usageVM{
	{user: "alice", group: "render", name: "a1", profile: "render-l40s", created: -2.5, ran: -2, left: usageNaN(), holds: []usageHold{
		{gpu: usageGPU1, kind: gpu.KindPassthrough, share: 1, from: -2, to: 2}}},
	{user: "alice", group: "render", name: "a2", profile: "train-3g", created: 8, ran: 9, left: usageNaN(), holds: []usageHold{
		{gpu: usageMIG, instance: "mig-a2", kind: gpu.KindMIG, prof: "3g.40gb", share: 3.0 / 7, from: 9, to: 17.5,
			util: map[int]float64{0: 0.8}, gpuRowUtil: 1}}},
	{user: "bob", group: "sim", name: "b1", profile: "small-1g", created: 7.5, ran: 8, left: usageNaN(), holds: []usageHold{
		{gpu: usageMIG, instance: "mig-b1", kind: gpu.KindMIG, prof: "1g.10gb", share: 1.0 / 7, from: 8, to: usageOpen,
			util: map[int]float64{0: 0.1, 1: 0.6}}}},
	{user: "bob", group: "sim", name: "b2", profile: "desk-12q", created: 20, ran: 20, left: usageNaN(), holds: []usageHold{
		{gpu: usageVGPU, instance: "vf-b2", kind: gpu.KindVGPU, prof: "L40S-12Q", share: 0.25, from: 20, to: 28}}},
	{user: "carol", group: "render", name: "c1", profile: "dual", created: 11, ran: 12, left: usageNaN(), holds: []usageHold{
		{gpu: usageGPU1, kind: gpu.KindPassthrough, share: 1, from: 12, to: 13, util: map[int]float64{0: 0.5}},
		{gpu: usageGPU2, kind: gpu.KindPassthrough, share: 1, from: 12, to: 13, util: map[int]float64{0: 1}}}},
	{user: "carol", group: "render", name: "c2", profile: "dual", created: 12, ran: usageNaN(), left: usageNaN()},
	{user: "bob", group: "sim", name: "b3", profile: "small-1g", created: 20, ran: usageNaN(), left: 22},
}

const usageNow = 36.0

func usageNaN() float64 { return math.NaN() }

func usageIsNaN(f float64) bool { return math.IsNaN(f) }

// seedUsageSchedule writes the schedule: users, VMs with their state
// events, usage records, and five-minute downsampled samples. It leaves
// the clock at usageNow and returns the VMs' IDs by name.
func seedUsageSchedule(t *testing.T, s *store.Store, clock *clocktest.Clock) map[string]string {
	t.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	users := map[string]bool{}
	for _, v := range usageSchedule {
		if !users[v.user] {
			users[v.user] = true
			if err := s.CreateUser(ctx, &store.User{Name: v.user, Groups: []string{v.group}}); err != nil {
				t.Fatal(err)
			}
		}
		clock.Set(usageAt(v.created))
		vm := &store.VM{Name: v.name, Owner: v.user, Group: v.group, Profile: v.profile, Hours: 8}
		if _, err := s.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: v.user}); err != nil {
			t.Fatal(err)
		}
		ids[v.name] = vm.ID
		switch {
		case !usageIsNaN(v.ran):
			clock.Set(usageAt(v.ran))
			if _, err := s.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning}); err != nil {
				t.Fatal(err)
			}
		case !usageIsNaN(v.left):
			clock.Set(usageAt(v.left))
			if _, err := s.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMDeleted}); err != nil {
				t.Fatal(err)
			}
		}
		for _, h := range v.holds {
			r := &store.UsageRecord{VMID: vm.ID, User: v.user, Group: v.group, Host: "gpu01", GPUAddress: h.gpu, Kind: h.kind,
				Profile: h.prof, Share: h.share, StartedAt: usageAt(h.from)}
			if h.to != usageOpen {
				e := usageAt(h.to)
				r.EndedAt = &e
			}
			if err := s.InsertUsageRecord(ctx, r); err != nil {
				t.Fatal(err)
			}
			var rows []store.GPUSample
			end := min(h.to, usageNow)
			for m := int(h.from * 60); m < int(end*60); m += 5 {
				at := float64(m) / 60
				day := int(math.Floor(at / 24))
				if u, ok := h.util[day]; ok {
					rows = append(rows, usageSample(vm.ID, v.user, h.gpu, h.instance, usageAt(at), u))
				}
				if h.gpuRowUtil > 0 {
					rows = append(rows, usageSample(vm.ID, v.user, h.gpu, "", usageAt(at), h.gpuRowUtil))
				}
			}
			if err := s.InsertSamples(ctx, rows); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A GPU nobody holds, sampled all along: not anybody's usage.
	var idle []store.GPUSample
	for m := -48 * 60; m < usageNow*60; m += 5 {
		idle = append(idle, usageSample("", "", "0000:c1:00.0", "", usageAt(float64(m)/60), 0))
	}
	if err := s.InsertSamples(ctx, idle); err != nil {
		t.Fatal(err)
	}
	clock.Set(usageAt(usageNow))
	return ids
}

// usageSample is a five-minute downsampled row of 30 raw samples.
func usageSample(vm, user, gpu, instance string, at time.Time, util float64) store.GPUSample {
	return store.GPUSample{Host: "gpu01", GPUAddress: gpu, Instance: instance, VMID: vm, User: user, TakenAt: at,
		Resolution: 300, SampleCount: 30, GPUUtil: util, MemUtil: -1, EncUtil: -1, DecUtil: -1, Temperature: -1, PowerWatts: -1}
}
