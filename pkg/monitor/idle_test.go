package monitor

import (
	"context"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Idle detection from injected samples.
func TestIdleVMs(t *testing.T) {
	clock := newFakeClock()
	st := newStore(t, clock)
	ctx := context.Background()
	claim := func(vf string) store.SlotClaim {
		return store.SlotClaim{Kind: gpu.KindVGPU, GPUAddress: "0000:41:00.0", VF: vf}
	}
	idle := runningVM(t, st, "ann", "idle", claim("0000:41:00.4"), "0000:41:00.4")
	busyEarlier := runningVM(t, st, "bob", "was-busy", claim("0000:41:00.5"), "0000:41:00.5")
	busyNow := runningVM(t, st, "carl", "busy", claim("0000:41:00.6"), "0000:41:00.6")
	stale := runningVM(t, st, "dora", "stale", claim("0000:41:00.7"), "0000:41:00.7")
	unknown := runningVM(t, st, "eve", "mig-no-gpm", claim("0000:42:00.4"), "0000:42:00.4")
	twoDevices := runningVM(t, st, "fay", "two", claim("0000:43:00.4"), "0000:43:00.4")
	start := clock.Now()
	sample := func(vm *store.VM, dev string, at time.Duration, util float64) store.GPUSample {
		return store.GPUSample{Host: testHost, GPUAddress: "0000:41:00.0", Instance: dev, VMID: vm.ID, User: vm.Owner,
			TakenAt: start.Add(at), GPUUtil: util, MemUtil: -1, EncUtil: -1, DecUtil: -1, Temperature: -1, PowerWatts: -1}
	}
	var rows []store.GPUSample
	for m := time.Duration(0); m <= 3*time.Hour; m += 10 * time.Minute {
		busy := 0.01
		if m <= time.Hour {
			busy = 0.6 // bob's VM is busy for its first hour
		}
		rows = append(rows,
			sample(idle, "0000:41:00.4", m, 0.02),
			sample(busyEarlier, "0000:41:00.5", m, busy),
			sample(busyNow, "0000:41:00.6", m, 0.02),
			sample(unknown, "0000:42:00.4", m, -1),
			// fay: one device idle, the other busy until 2h.
			sample(twoDevices, "a", m, 0.0),
			sample(twoDevices, "b", m, map[bool]float64{true: 0.9, false: 0}[m <= 2*time.Hour]),
		)
		if m <= time.Hour {
			rows = append(rows, sample(stale, "0000:41:00.7", m, 0))
		}
	}
	rows = append(rows, sample(busyNow, "0000:41:00.6", 3*time.Hour+5*time.Minute, 0.3))
	if err := st.InsertSamples(ctx, rows); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3*time.Hour + 5*time.Minute)
	d := NewIdle(st, testHost, 5, 10*time.Minute, clock)
	got, err := d.IdleVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		vm      *store.VM
		idleFor time.Duration
	}{
		// idle since the VM started (all of it): 3h05m
		{idle, 3*time.Hour + 5*time.Minute},
		// last busy at 1:00
		{busyEarlier, 2*time.Hour + 5*time.Minute},
		// fay's second device busy until 2:00
		{twoDevices, time.Hour + 5*time.Minute},
		// busy in its last sample
		{busyNow, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("idle VMs %+v", got)
	}
	for i, w := range want {
		g := got[i]
		if g.VMID != w.vm.ID || g.For != w.idleFor || g.Name != w.vm.Name || g.Owner != w.vm.Owner {
			t.Errorf("%d: %s (%s of %s) idle for %s, want %s idle for %s", i, g.VMID, g.Name, g.Owner, g.For, w.vm.Name, w.idleFor)
		}
	}
	// A VM that changed state (it was stopped and started) is idle only
	// since then.
	host := testHost
	next, err := st.UpdateVMState(ctx, idle.ID, idle.Version, store.VMUpdate{State: store.VMRunning, Phase: "ready", Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Minute)
	if err := st.InsertSamples(ctx, []store.GPUSample{sample(idle, "0000:41:00.4", 3*time.Hour+10*time.Minute, 0.01)}); err != nil {
		t.Fatal(err)
	}
	got, _ = d.IdleVMs(ctx)
	for _, g := range got {
		if g.VMID == idle.ID && (g.For != 5*time.Minute || !g.Since.Equal(next.UpdatedAt)) {
			t.Errorf("after a state change: %+v (changed at %s)", g, next.UpdatedAt)
		}
	}
}
