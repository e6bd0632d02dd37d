package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Capacity counts, for each slot, how many VMs of a reservation's need (r
// names a profile or a GPU need) a booking of that slot alone could get,
// at most most each: policy.FreeVMs on the state Book decides on (the
// inventory the rounds place on, the VMs whose leases run into the slot,
// the reservations made). It checks no rule: it is what the GPUs can give,
// not what the caller may book. When no GPU here could ever give the need
// the error is a *policy.CapacityError with Never set.
func (rl *rulesLoop) Capacity(ctx context.Context, r *store.Reservation, slots []policy.Interval, most int) ([]int, error) {
	cfg := rl.settings().Config
	loc := cfg.Policy.Location
	if loc == nil {
		loc = time.UTC
	}
	need, err := ReservationNeed(r, cfg)
	if err != nil {
		return nil, fmt.Errorf("free capacity: %w", err)
	}
	st, err := rl.placement.placementState(ctx, cfg, rl.st.Now(), rl.backends.Names())
	if err != nil {
		return nil, fmt.Errorf("free capacity: %w", err)
	}
	o := policy.BookOptions{Now: st.now, Location: loc, Inventory: st.inv, Running: st.running, Existing: st.engine.Bookings()}
	out := make([]int, len(slots))
	for i, s := range slots {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("free capacity: %w", err)
		}
		n, never, err := policy.FreeVMs(need, s.Start, s.End, o, most)
		if err != nil {
			return nil, fmt.Errorf("free capacity from %s: %w", s.Start.Format(time.RFC3339), err)
		}
		if never != "" {
			return nil, &policy.CapacityError{Need: need, Want: 1, Never: true, Cause: never}
		}
		out[i] = n
	}
	return out, nil
}

// Capacity counts the free capacity of slots (rulesLoop.Capacity).
func (o *Orchestrator) Capacity(ctx context.Context, r *store.Reservation, slots []policy.Interval, most int) ([]int, error) {
	return o.rules.Capacity(ctx, r, slots, most)
}
