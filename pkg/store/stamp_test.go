package store

import (
	"context"
	"testing"
	"time"
)

// The state stamp changes with each thing a placement reads, and only then.
func TestStateStamp(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		if err := s.RegisterHost(ctx, &Host{Name: "node1", Inventory: `{"gpus":[]}`}); err != nil {
			t.Fatal(err)
		}
		stamp := func(timeout time.Duration) string {
			t.Helper()
			v, err := s.StateStamp(ctx, timeout)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		steps := []struct {
			name    string
			timeout time.Duration
			change  func() error
			same    bool
		}{
			{"nothing", time.Hour, func() error { return nil }, true},
			{"an event", time.Hour, func() error { return s.AppendEvent(ctx, &Event{Type: "vm.queued", Owner: "ann"}) }, false},
			{"a drained GPU", time.Hour, func() error {
				return s.DrainGPU(ctx, &GPUDrain{Host: "node1", GPUAddress: "0000:01:00.0", Reason: "fan", DrainedBy: "root"})
			}, false},
			{"a new inventory", time.Hour, func() error { return s.Heartbeat(ctx, "node1", `{"gpus":[{}]}`) }, false},
			{"a heartbeat with the same inventory", time.Hour, func() error { return s.Heartbeat(ctx, "node1", `{"gpus":[{}]}`) }, true},
			{"a heartbeat too old", time.Hour, func() error { d.clock.Advance(2 * time.Hour); return nil }, false},
		}
		before := stamp(time.Hour)
		for _, st := range steps {
			if err := st.change(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			after := stamp(st.timeout)
			if (after == before) != st.same {
				t.Errorf("%s: stamp %q then %q, want the same: %t", st.name, before, after, st.same)
			}
			before = after
		}
		// Without a fleet (no host timeout) the nodes are not read.
		noFleet := stamp(0)
		if err := s.Heartbeat(ctx, "node1", `{"gpus":[{},{}]}`); err != nil {
			t.Fatal(err)
		}
		if got := stamp(0); got != noFleet {
			t.Errorf("without a fleet an inventory changed the stamp: %q then %q", noFleet, got)
		}
	})
}
