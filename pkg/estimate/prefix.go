package estimate

import (
	"slices"
	"strings"
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
// place, for capacity, on what the prefix left, whatever the rules say of
// each request. Else the cycle runs again on a prefix twice as long. A
// request behind the prefix then waits, as it would have in the full cycle
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
// prefix: its length, the queue's, and the requests behind it refused.
var onPrefix func(p, n, refused int)

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
	kind, typ, profile, model, series, kinds string
	count                                    int
	memory                                   uint64
	lease                                    time.Duration
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
		n := r.Need
		k := shapeKey{kind: string(n.Kind), typ: n.Type, profile: n.Profile, model: n.Model, series: n.Series, count: n.Count, memory: n.Memory, lease: r.Lease}
		if len(n.Kinds) > 0 {
			var b strings.Builder
			for _, kd := range n.Kinds {
				b.WriteString(string(kd))
				b.WriteByte(',')
			}
			k.kinds = b.String()
		}
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

// decide runs the cycle at now: on a prefix of the queue when that
// decides as the whole queue would, else on the whole queue. It returns
// the decision and the length of the queue's head it took requests from.
func (rp *replay) decide(now time.Time, runList []scheduler.Running) (scheduler.Decision, int) {
	ps := &rp.pre
	ps.partial = false
	if ps.on && len(rp.dup) == 0 && !rp.mayPreempt(now, runList) {
		for p := ps.plen; p < len(rp.queue); {
			trial := rp.inv.Clone()
			d, rep := scheduler.CycleReport(now, trial, rp.queue[:p], runList, rp.policy, rp.s.Options)
			if more := rp.restWaits(now, trial, d, rep, p, runList); more > 0 {
				p = more
				continue
			}
			ps.partial, ps.prev, ps.lastRun, ps.lastNow, ps.gone = true, rp.inv, runList, now, ps.gone[:0]
			rp.inv = trial
			head := p
			rf := rp.refusedBehind(rep.Session, p)
			if len(rf) > 0 {
				d.Refused = append(d.Refused, rf...)
				head = len(rp.queue)
			}
			if onPrefix != nil {
				onPrefix(p, len(rp.queue), len(rf))
			}
			return d, head
		}
	}
	return scheduler.Cycle(now, rp.inv, rp.queue, runList, rp.policy, rp.s.Options), len(rp.queue)
}

// refusedBehind are the requests behind the first p of the queue that the
// rules, as the prefix's cycle left them, refuse.
func (rp *replay) refusedBehind(s scheduler.Session, p int) []scheduler.Refusal {
	ps := &rp.pre
	if len(ps.queuedRefused) == 0 {
		return nil
	}
	last := rp.order[rp.queue[p-1].ID]
	ids := make([]string, 0, len(ps.queuedRefused))
	for id := range ps.queuedRefused {
		if rp.order[id] > last {
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

// restWaits reports whether the requests behind the first p of the queue
// would all have waited in the cycle that decided d on the first p, and
// changed nothing (see the comment at the top of the file): 0 when they
// would; else the longer prefix to try.
func (rp *replay) restWaits(now time.Time, after *scheduler.Inventory, d scheduler.Decision, rep scheduler.Report, p int, runList []scheduler.Running) int {
	o := rp.s.Options
	if o.Reserve > 0 && o.Lookahead > o.Reserve {
		if !rep.Lookahead {
			return 2 * p
		}
	} else if rep.Reserved < o.Reserve {
		return 2 * p
	}
	last := rp.order[rp.queue[p-1].ID]
	for i := range runList {
		id := runList[i].PreemptedFor
		if id == "" {
			continue
		}
		if k, ok := rp.order[id]; ok && k > last {
			if _, done := rp.out[id]; !done {
				return 2 * p
			}
		}
	}
	ps := &rp.pre
	clear(ps.count)
	for i := range rp.queue[:p] {
		if k, ok := ps.shape[rp.queue[i].ID]; ok {
			ps.count[k]++
		}
	}
	st := o.Strategy
	if st == "" {
		st = scheduler.Pack
	}
	held := slices.Clone(d.Holds)
	var starts []int // shapes that would place
	for i, k := range ps.shapes {
		if ps.total[i] <= ps.count[i] {
			continue
		}
		_, why := after.Place(ps.needs[i], scheduler.PlaceOptions{Strategy: st, Now: now, End: now.Add(k.lease), Holds: held})
		if why.OK() || why.Code == scheduler.CodeNever || why.Code == scheduler.CodeInvalid {
			starts = append(starts, i)
		}
	}
	if len(starts) == 0 {
		return 0
	}
	// The prefix to try takes in the first request behind of each shape
	// that would place, and a little more.
	more := p
	for j := p; j < len(rp.queue) && len(starts) > 0; j++ {
		k, ok := ps.shape[rp.queue[j].ID]
		if !ok {
			continue
		}
		if i := slices.Index(starts, k); i >= 0 {
			more = j + 1
			starts = slices.Delete(starts, i, i+1)
		}
	}
	return max(more+firstPrefix/4, p+1)
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
