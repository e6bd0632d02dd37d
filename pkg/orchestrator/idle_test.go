package orchestrator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// A Tick's round is skipped while nothing it reads changed and no time it
// depends on came: it runs again at a new event, at a queued VM's start
// time, and at the latest maxIdleRound after the last full round.
func TestIdleRoundSkipped(t *testing.T) {
	e := newEnv(t, "l40sx4")
	var mu sync.Mutex
	now := time.Date(2030, 5, 1, 9, 0, 0, 0, time.UTC)
	e.useClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	ctx := context.Background()
	o := e.orch(nil)
	round := func() bool {
		t.Helper()
		ran := o.disp.dispatchIfChanged(ctx)
		o.disp.wait()
		return ran
	}
	at := now.Add(maxIdleRound - 5*time.Second)
	later := &store.VM{Name: "later", Owner: "ann", Profile: "l40s-whole", Hours: 2, StartAt: &at}
	if _, err := e.st.CreateVM(ctx, later, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantVM(later.ID, store.VMQueued, "starts at")
	round() // the first round's own writes (the reason) are a change
	if round() {
		t.Fatal("a round ran with nothing changed")
	}
	advance(5 * time.Second)
	if round() {
		t.Fatal("a round ran with nothing changed, 5 s later")
	}
	// A new event: a VM deleted elsewhere, or, here, one created without a wake-up.
	e.submit("bob", "nogpu", "other")
	if !round() {
		t.Fatal("no round after a new VM")
	}
	e.wantVM(later.ID, store.VMQueued, "starts at")
	round()
	if round() {
		t.Fatal("a round ran with nothing changed after the new VM's")
	}
	// Its start time comes.
	advance(at.Sub(now) + time.Second)
	if !round() {
		t.Fatal("no round at the queued VM's start time")
	}
	if vm := e.vm(later.ID); vm.State == store.VMQueued {
		t.Fatalf("the VM is still queued after its start time: %s (%s)", vm.State, vm.StateReason)
	}
	for i := 0; round(); i++ { // the VM's creation writes as it goes
		if i == 10 {
			t.Fatal("rounds keep running with nothing changing")
		}
	}
	// A device made on this host behind gpuvmd's back: its backend's
	// inventory changed, not the database.
	b, _ := e.l.Backend("vgpu")
	if _, err := b.Create(ctx, backend.CreateRequest{GPU: "0000:21:00.0", Type: "L40S-12Q", VMUUID: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	if !round() {
		t.Fatal("no round after the host's inventory changed")
	}
	for i := 0; round(); i++ {
		if i == 10 {
			t.Fatal("rounds keep running with nothing changing after the inventory's change")
		}
	}
	advance(maxIdleRound)
	if !round() {
		t.Fatal("no round after maxIdleRound")
	}
}

// A wake-up after a round waits twice the round's time, at most maxPace,
// and not at all before the first round; it gives up when its context ends.
func TestPaceRestsTwiceTheRound(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		took, least time.Duration
	}{
		{0, 0},
		{40 * time.Millisecond, 80 * time.Millisecond},
		{10 * time.Second, maxPace},
	} {
		start := time.Now()
		if !pace(ctx, tc.took) {
			t.Fatalf("pace(%v) = false with a live context", tc.took)
		}
		// Timers never fire early: the lower bound cannot flake. The
		// upper bound is loose (a busy machine), but fails on a wait of
		// the round's 10 s uncapped.
		if got := time.Since(start); got < tc.least || got > tc.least+3*time.Second {
			t.Errorf("pace(%v) waited %v, want %v (and not much more)", tc.took, got, tc.least)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if pace(cancelled, time.Hour) {
		t.Error("pace with an ended context = true, want false")
	}
}
