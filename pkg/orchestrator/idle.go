package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/gpuvm/gpuvm/pkg/policy"
)

// Idle rounds (issue #26). A round reads every unfinished operation and
// places the whole queue again; with thousands queued and nothing changed
// since the last round it only finds again what that one found, every
// Tick. A round that no wake-up asked for (the Tick's, and those after a
// reconcile or the timed rules) is therefore skipped when the state it
// would read is the one the last round read, and no time that changes a
// round's outcome has come since:
//
//   - the state is the newest event (every VM created, changed, queued
//     again or deleted appends one), the reservations' stamp, the drained
//     GPUs, the fleet's nodes (state, health, published inventory), this
//     host's backends' inventories as they keep them (not in the
//     database), the configuration in force and the time window now;
//   - the times are the start times of queued VMs, the ends and starts of
//     time windows, and, while a reservation is booked, every Tick (its
//     occurrences hold and release capacity as time goes);
//   - whatever else moves with time alone (fair share's decay, which
//     reorders the queue slowly; a budget's new period) is caught by a full
//     round at least every maxIdleRound.
//
// A round that failed, or lost a claim, is not taken as a state seen: the
// next Tick runs a full one.

// maxIdleRound is the longest the worker goes without a full round. With
// ten thousand queued a full round costs a tenth of a second of CPU: every
// minute is about 0.2 % of a core (issue #26), every 15 s was 0.7 %.
const maxIdleRound = time.Minute

// idleRound is what the last full round saw (guarded by roundMu).
type idleRound struct {
	stamp string    // "" when the next round must run
	due   time.Time // the next full round runs by then, changed or not
}

// dueBy brings the next full round forward to t.
func (r *idleRound) dueBy(t time.Time) {
	if r.due.IsZero() || t.Before(r.due) {
		r.due = t
	}
}

// retry makes the next round a full one.
func (r *idleRound) retry() { r.stamp = "" }

// dispatchIfChanged runs a round unless nothing it depends on changed
// since the last one (see the top of this file). It reports whether it ran
// one.
func (dp *dispatcher) dispatchIfChanged(ctx context.Context) bool {
	dp.roundMu.Lock()
	stamp, err := dp.roundStamp(ctx)
	skip := err == nil && stamp != "" && stamp == dp.idle.stamp && dp.st.Now().Before(dp.idle.due)
	dp.roundMu.Unlock()
	if skip {
		return false
	}
	dp.dispatch(ctx, false)
	return true
}

// beginRound records the state a round starts from (roundMu held): what
// changes during the round, the round's own writes included, makes the
// next one run.
func (dp *dispatcher) beginRound(ctx context.Context) {
	stamp, err := dp.roundStamp(ctx)
	if err != nil {
		dp.log.Warn("read the state version; the next round runs whatever it finds", "err", err)
	}
	dp.idle = idleRound{stamp: stamp, due: dp.st.Now().Add(maxIdleRound)}
	cfg := dp.settings().Config
	if cfg == nil {
		return
	}
	now := dp.st.Now()
	for _, s := range policy.NewWindows(&cfg.Policy).Stretches(now, now.Add(maxIdleRound)) {
		for _, t := range []time.Time{s.Start, s.End} {
			if t.After(now) {
				dp.idle.dueBy(t)
			}
		}
	}
}

// roundStamp fingerprints the state a round reads, but the queue itself:
// a change of the queue appends an event.
func (dp *dispatcher) roundStamp(ctx context.Context) (string, error) {
	var timeout time.Duration
	if dp.fleet != nil && dp.fleet.fleet != nil {
		timeout = dp.fleet.hostTimeout()
	}
	stamp, err := dp.st.StateStamp(ctx, timeout)
	if err != nil {
		return "", err
	}
	return stamp + "\x00" + dp.inventoryStamp(ctx) + "\x00" + policy.ConfigStamp(dp.settings().Config, dp.st.Now()), nil
}

// inventoryStamp fingerprints this host's backends' inventories as they
// keep them current (what a round places on): a device made or removed
// behind gpuvmd's back, a GPU's mode changed, a backend restarted. A
// backend that does not answer leaves its part out (a round says so).
func (dp *dispatcher) inventoryStamp(ctx context.Context) string {
	if dp.fleet == nil || dp.fleet.backends.Backends == nil {
		return ""
	}
	invs, _ := dp.fleet.backends.currentInventoriesOf(ctx, dp.fleet.backends.Names())
	b, err := json.Marshal(invs) // map keys sorted; pointers followed
	if err != nil {
		return ""
	}
	h := fnv.New128a()
	h.Write(b)
	return fmt.Sprintf("%x", h.Sum(nil))
}
