package estimate

import (
	"slices"
	"time"

	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// A long queue is replayed a head at a time. Each cycle runs on a prefix of
// the queue (in its fixed order) and keeps the decision when nothing behind
// the prefix could have changed it: the cycle's lookahead found its blocked
// requests inside the prefix (or, without lookahead, every hold was given),
// no request behind is the one running VMs were told to make room for, no
// preemption can be chosen, and no request behind could start or be
// refused: each shape (need and lease) of the requests behind fails to
// place, for capacity, on what the prefix left, or the rules, as the prefix
// left them, make each request of it wait. Else, when a request behind
// could start, the cycle runs again on the prefix and that request (the
// first such; those skipped for it would have waited at their place), one
// at a time (decide); when the holds are not settled inside the prefix, on
// a prefix twice as long. A request behind then waits, as it would have in
// the full cycle
// (the requests behind change nothing that a request behind them sees); why
// it waits is worked out only where the estimate says it, after the last
// cycle, by running that cycle again on the whole queue.
//
// A refusal by the rules may hide behind a reason to wait for a while (a
// batch lease too long for any night waits by day, a user's quota hides a
// refusal by the group's) and come out at a cycle only the whole queue
// would see. The policy says up front (scheduler.Refuser) which requests it
// will refuse: those never start, and each cycle asks the rules, as the
// prefix left them, about those of them behind the prefix; a refusal is
// then the cycle's, as in the full cycle.
//
// It needs a fixed queue order, IDs each once in the queue and none also
// running, no bookings (the holds a request keeps off depend on who asks),
// and a policy that is a scheduler.Refuser; else every cycle runs on the
// whole queue.

// firstPrefix is the prefix a cycle is run on first (a variable for the
// tests, which make it short).
var firstPrefix = 64

// onPrefix, when set (by the tests), is told of each cycle kept from a
// head: its length, the queue's, the requests behind it refused, and the
// requests it picked behind the queue's first p.
var onPrefix func(p, n, refused, picked int)

// bookingLister is a Policy that says its bookings (pkg/policy's Engine).
type bookingLister interface {
	Bookings() []*policy.Booking
}

// refuserOf is the policy's Refuser when the replay may run cycles on
// prefixes of s's queue (see above); nil when it may not.
func refuserOf(s State, static bool) scheduler.Refuser {
	rf, ok := s.Policy.(scheduler.Refuser)
	if !ok || !static {
		return nil
	}
	if b, ok := s.Policy.(bookingLister); !ok || len(b.Bookings()) > 0 {
		return nil
	}
	ids := make(map[string]bool, len(s.Queue))
	for _, r := range s.Queue {
		if ids[r.ID] || s.Inventory.Holds(r.ID) {
			return nil
		}
		ids[r.ID] = true
	}
	return rf
}

// shapeKey is what a request's placement depends on, without bookings.
type shapeKey struct {
	need  scheduler.NeedKey
	lease time.Duration
}

// prefixState is what the replay keeps to run cycles on prefixes.
type prefixState struct {
	on     bool
	shape  map[string]int // request ID → its shape (not the refused)
	shapes []shapeKey
	needs  []scheduler.Need // each shape's need
	total  []int            // requests of each shape in the queue
	count  []int            // scratch: of each shape in the prefix
	// refused are the requests the policy will refuse; queuedRefused those
	// of them in the queue, by place in the queue order.
	refused       map[string]bool
	queuedRefused map[string]bool
	// maxPrio is the highest priority of the non-preemptible requests:
	// preemptible VMs of that priority or more can never be preempted.
	maxPrio int
	plen    int
	// The last cycle, when it ran on a prefix: the inventory before it,
	// the VMs that ran, its time, and the requests it took off the queue.
	partial bool
	prev    *scheduler.Inventory
	// spare is an inventory nothing uses, whose memory the next trial of
	// a prefix reuses (nil: none).
	spare *scheduler.Inventory
	// picks are the places in the queue of the requests behind the first
	// p that the head being tried takes in, ascending; head is where it is
	// put together.
	picks   []int
	head    []scheduler.Request
	lastRun []scheduler.Running
	lastNow time.Time
	gone    []scheduler.Request
}

// setupPrefix notes the requests the policy will refuse, and the shapes of
// the others.
func (rp *replay) setupPrefix(rf scheduler.Refuser) {
	ps := &rp.pre
	ps.on, ps.shape, ps.plen = true, map[string]int{}, firstPrefix
	ps.refused, ps.queuedRefused = map[string]bool{}, map[string]bool{}
	index := map[shapeKey]int{}
	first := true
	for _, r := range rp.s.Queue {
		if _, refuse := rf.Refusal(&r); refuse {
			ps.refused[r.ID] = true
			continue
		}
		if !r.Preemptible && (first || r.Priority > ps.maxPrio) {
			ps.maxPrio, first = r.Priority, false
		}
		k := shapeKey{need: r.Need.MapKey(), lease: r.Lease}
		i, ok := index[k]
		if !ok {
			i = len(ps.shapes)
			index[k] = i
			ps.shapes = append(ps.shapes, k)
			ps.needs = append(ps.needs, r.Need)
			ps.total = append(ps.total, 0)
		}
		ps.shape[r.ID] = i
	}
	ps.count = make([]int, len(ps.shapes))
}

// queued counts r in (d 1) or out of (d -1) the queue.
func (ps *prefixState) queued(id string, d int) {
	if !ps.on {
		return
	}
	if i, ok := ps.shape[id]; ok {
		ps.total[i] += d
		return
	}
	if d > 0 {
		ps.queuedRefused[id] = true
	} else {
		delete(ps.queuedRefused, id)
	}
}

// decide runs the cycle at now: on a head of the queue when that decides
// as the whole queue would, else on the whole queue. It returns the
// decision and the length of the queue's head it took requests from.
//
// The head is the queue's first p and, further back, requests picked one
// at a time: the first behind the head that could start (restWaits), with
// the requests the rules refuse before it. Every request skipped for it
// would have waited, at its place in the whole cycle, on what the head
// left; so picked, a request that starts deep in a long queue (a vGPU type
// whose requests all wait behind thousands of others, a lease the queue
// order puts last) costs a cycle on the head and it, not on all the queue
// down to it.
func (rp *replay) decide(now time.Time, runList []scheduler.Running) (scheduler.Decision, int) {
	ps := &rp.pre
	ps.partial = false
	if ps.on && len(rp.dup) == 0 && !rp.mayPreempt(now, runList) {
		ps.picks = ps.picks[:0]
		for p := ps.plen; p < len(rp.queue); {
			head, last := rp.head(p)
			trial := rp.inv.CloneInto(ps.spare)
			ps.spare = nil
			d, rep := scheduler.CycleReport(now, trial, head, runList, rp.policy, rp.unexplained)
			more, pick := rp.restWaits(now, trial, d, rep, p, last, runList)
			if pick != nil && len(ps.picks)+len(pick) <= maxPicks {
				ps.picks, ps.spare = append(ps.picks, pick...), trial
				continue
			}
			if pick != nil { // many starts deep in the queue: take all down to them
				more = max(pick[len(pick)-1]+1+firstPrefix/4, p+1)
			}
			if more > 0 {
				p, ps.spare, ps.picks = more, trial, ps.picks[:0]
				continue
			}
			ps.spare = ps.prev // the inventory before the last cycle kept from a prefix: no longer needed
			ps.partial, ps.prev, ps.lastRun, ps.lastNow, ps.gone = true, rp.inv, runList, now, ps.gone[:0]
			rp.inv = trial
			took := last + 1
			rf := rp.refusedBehind(rep.Session, last)
			if len(rf) > 0 {
				d.Refused = append(d.Refused, rf...)
				took = len(rp.queue)
			}
			if onPrefix != nil {
				onPrefix(len(head), len(rp.queue), len(rf), len(ps.picks))
			}
			return d, took
		}
	}
	return scheduler.Cycle(now, rp.inv, rp.queue, runList, rp.policy, rp.s.Options), len(rp.queue)
}

// maxPicks is how many requests behind the first p a head takes in one at
// a time before it takes all the queue down to them.
const maxPicks = 32

// head is the head a cycle runs on: the first p of the queue and the
// requests picked behind them, in queue order; last is the place in the
// queue of its last request.
func (rp *replay) head(p int) (head []scheduler.Request, last int) {
	ps := &rp.pre
	if len(ps.picks) == 0 {
		return rp.queue[:p], p - 1
	}
	ps.head = append(ps.head[:0], rp.queue[:p]...)
	for _, j := range ps.picks {
		ps.head = append(ps.head, rp.queue[j])
	}
	return ps.head, ps.picks[len(ps.picks)-1]
}

// refusedBehind are the requests behind the head (the queue's request at
// last and those before it) that the rules, as the head's cycle left
// them, refuse.
func (rp *replay) refusedBehind(s scheduler.Session, last int) []scheduler.Refusal {
	ps := &rp.pre
	if len(ps.queuedRefused) == 0 {
		return nil
	}
	lastOrder := rp.order[rp.queue[last].ID]
	ids := make([]string, 0, len(ps.queuedRefused))
	for id := range ps.queuedRefused {
		if rp.order[id] > lastOrder {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return rp.order[a] - rp.order[b] })
	var out []scheduler.Refusal
	for _, id := range ids {
		if why, refuse := s.Admit(rp.byID[id]); refuse {
			out = append(out, scheduler.Refusal{ID: id, Reason: why})
		}
	}
	return out
}

// mayPreempt reports whether the cycle at now could choose a preemption:
// a preemptible VM that may be stopped, of a priority under a request's.
func (rp *replay) mayPreempt(now time.Time, runList []scheduler.Running) bool {
	o := rp.s.Options
	if !o.Preempt {
		return false
	}
	stopAt := now.Add(o.Notice)
	for i := range runList {
		v := &runList[i]
		if v.Preemptible && !v.Stopping && v.Priority < rp.pre.maxPrio && !v.Started.Add(o.MinRuntime).After(stopAt) && v.End.After(stopAt) {
			return true
		}
	}
	return false
}

// restWaits reports whether the requests behind the head (the queue's
// first p, the picks, down to the queue's request at last) would all have
// waited in the cycle that decided d on the head, and changed nothing (see
// the comment at the top of the file): more is 0 and pick nil when they
// would. Else pick, when set, is what to add to the head, in queue order:
// the first request behind it that could start — of a shape that would
// place on what the head left, and that the rules, as the head left them,
// let try (rep.Session's Admit: what the whole cycle would have told it at
// its place) — and the requests the rules refuse before it; or more is the
// longer prefix to try.
func (rp *replay) restWaits(now time.Time, after *scheduler.Inventory, d scheduler.Decision, rep scheduler.Report, p, last int, runList []scheduler.Running) (more int, pick []int) {
	o := rp.s.Options
	if o.Reserve > 0 && o.Lookahead > o.Reserve {
		if !rep.Lookahead {
			return 2 * p, nil
		}
	} else if rep.Reserved < o.Reserve {
		return 2 * p, nil
	}
	ps := &rp.pre
	dense := rp.order[rp.queue[p-1].ID]
	for i := range runList {
		id := runList[i].PreemptedFor
		if id == "" {
			continue
		}
		if k, ok := rp.order[id]; ok && k > dense && !rp.picked(k) {
			if _, done := rp.out[id]; !done {
				return 2 * p, nil
			}
		}
	}
	starts := rp.placing(now, after, d, p)
	if len(starts) == 0 {
		return 0, nil
	}
	var refused []int
	for j := last + 1; j < len(rp.queue); j++ {
		r := &rp.queue[j]
		k, ok := ps.shape[r.ID]
		if !ok {
			if ps.queuedRefused[r.ID] {
				refused = append(refused, j)
			}
			continue
		}
		if !slices.Contains(starts, k) {
			continue
		}
		if why, refuse := rep.Session.Admit(r); !refuse && !why.OK() {
			continue // the rules make it wait: it changes nothing
		}
		return 0, append(refused, j)
	}
	return 0, nil
}

// picked reports whether the request at place k of the queue order is
// among the picks.
func (rp *replay) picked(k int) bool {
	for _, j := range rp.pre.picks {
		if rp.order[rp.queue[j].ID] == k {
			return true
		}
	}
	return false
}

// placing are the shapes of which some request is behind the head (the
// queue's first p and the picks) that would place, or be refused for
// good, on what the head's cycle left.
func (rp *replay) placing(now time.Time, after *scheduler.Inventory, d scheduler.Decision, p int) []int {
	ps := &rp.pre
	clear(ps.count)
	for i := range rp.queue[:p] {
		if k, ok := ps.shape[rp.queue[i].ID]; ok {
			ps.count[k]++
		}
	}
	for _, j := range ps.picks {
		if k, ok := ps.shape[rp.queue[j].ID]; ok {
			ps.count[k]++
		}
	}
	st := rp.s.Options.Strategy
	if st == "" {
		st = scheduler.Pack
	}
	held := slices.Clone(d.Holds)
	var starts []int
	for i, k := range ps.shapes {
		if ps.total[i] <= ps.count[i] {
			continue
		}
		_, why := after.Place(ps.needs[i], scheduler.PlaceOptions{Strategy: st, Now: now, End: now.Add(k.lease), Holds: held})
		if why.OK() || why.Code == scheduler.CodeNever || why.Code == scheduler.CodeInvalid {
			starts = append(starts, i)
		}
	}
	return starts
}

// finalWaiting is why each request waited in the last cycle, when that
// cycle ran on a prefix: it runs again on the whole queue as it was.
func (rp *replay) finalWaiting() {
	ps := &rp.pre
	if !ps.partial {
		return
	}
	q := make([]scheduler.Request, 0, len(rp.queue)+len(ps.gone))
	q = append(append(q, rp.queue...), ps.gone...)
	slices.SortStableFunc(q, func(a, b scheduler.Request) int { return rp.order[a.ID] - rp.order[b.ID] })
	d := scheduler.Cycle(ps.lastNow, ps.prev.Clone(), q, ps.lastRun, rp.policy, rp.s.Options)
	rp.waiting = d.Waiting
	ps.partial = false
}
