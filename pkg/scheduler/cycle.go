package scheduler

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Running is a VM that holds devices.
type Running struct {
	Request
	Placement Placement `json:"placement"`
	Started   time.Time `json:"started"`
	// End is when the VM stops: its lease's end, or the stop time of a
	// notice it was given.
	End time.Time `json:"end"`
	// Stopping is true once the VM was told it will be stopped (preemption
	// or a window's end); PreemptedFor names the request it makes room for.
	Stopping     bool   `json:"stopping,omitempty"`
	PreemptedFor string `json:"preempted_for,omitempty"`
	// Booking is the booking whose capacity it runs in.
	Booking string `json:"booking,omitempty"`
	// Warned is true once the owner was warned of a window's end.
	Warned bool `json:"warned,omitempty"`
}

// Policy is the rules a cycle applies; pkg/policy implements gpuvm's.
type Policy interface {
	// Begin opens a cycle at now over the VMs that run.
	Begin(now time.Time, running []Running) Session
}

// Refuser is a Policy that can say, before any cycle, which requests its
// sessions will refuse: Refusal gives the Reason a session's Admit refuses
// r with whenever it gets that far, and true; or false when no session
// ever refuses r. (Every refusal of such a policy is one no time changes;
// a session may hide it behind a reason to wait for a while.)
type Refuser interface {
	Refusal(r *Request) (why Reason, refuse bool)
}

// Session is one cycle's view of the rules. The cycle calls Order once,
// then for each request in that order Admit, Bookings and (when it starts)
// Started. A cycle may open more sessions than one (Begin again) for the
// planning passes of its lookahead; they must not share what Started
// changes.
type Session interface {
	// Order sorts the queue: the first goes first. It must be a total,
	// deterministic order (break ties by ID).
	Order(queue []Request) []Request
	// Admit says whether r may start now as far as the rules go (quotas,
	// time windows, lease limits): a zero Reason, or why it waits; refuse
	// is true when it never could.
	Admit(r *Request) (why Reason, refuse bool)
	// Bookings returns, for a VM that would run from from to to, the booked
	// capacity it must leave alone and the booked capacity it may use.
	Bookings(r *Request, from, to time.Time) (others, own []Hold)
	// Started records that r started with placement p until end.
	Started(r *Request, p Placement, end time.Time)
	// Actions are the notices due now to VMs that run (a window's end).
	Actions(running []Running) []Action
}

// Defaults of Options, from the trace experiments of pkg/scheduler/simulate
// (see test/traces/README.md).
const (
	DefaultReserve   = 1
	DefaultLookahead = 16
)

// DefaultOptions are gpuvm's: pack placement, one hold for the largest of
// the first 16 blocked requests, preemption with the given notice and
// minimum runtime.
func DefaultOptions(notice, minRuntime time.Duration) Options {
	return Options{Strategy: Pack, Reserve: DefaultReserve, Lookahead: DefaultLookahead, Preempt: true, Notice: notice, MinRuntime: minRuntime}
}

// Options tune the cycle's mechanics.
type Options struct {
	Strategy Strategy
	// Reserve is how many capacity-blocked requests get the devices they
	// will start on held for them (EASY backfill: 1); any other request may
	// start only where it does not delay them. 0 is greedy: whatever fits
	// starts, and large requests starve.
	Reserve int
	// Lookahead, when larger than Reserve, gives the holds to the largest
	// of the first Lookahead requests that cannot start, planned on the
	// GPUs as they were before this cycle's starts: small requests find
	// room in the gaps that open all the time, large ones wait for a whole
	// GPU to drain and are the ones that starve. A request ahead of the
	// holder in the queue may still start, only not on its devices unless
	// it is at least as large: a hold never lets its holder overtake a
	// request as large that is ahead of it in the queue. With
	// Lookahead ≤ Reserve the first blocked requests get the holds (plain
	// EASY).
	Lookahead int
	// Preempt lets a non-preemptible request stop preemptible VMs of lower
	// priority: each is given Notice before it stops, and none is stopped
	// before it has run MinRuntime.
	Preempt    bool
	Notice     time.Duration
	MinRuntime time.Duration
	// Unexplained leaves Decision.Waiting and Order out: for a caller that
	// reads neither (pkg/estimate's trial cycles on the head of a long
	// queue, thousands a replay).
	Unexplained bool
}

// Decision is what a cycle decided.
type Decision struct {
	Start   []Start      `json:"start"`
	Preempt []Preemption `json:"preempt,omitempty"`
	Refused []Refusal    `json:"refused,omitempty"`
	// Waiting explains every request that waits; Order lists them in queue
	// order.
	Waiting map[string]Wait `json:"waiting"`
	Order   []string        `json:"order"`
	Actions []Action        `json:"actions,omitempty"`
	// Holds is the capacity held for the head of the queue.
	Holds []Hold `json:"holds,omitempty"`
}

// Start is a request that starts now.
type Start struct {
	ID        string    `json:"id"`
	Placement Placement `json:"placement"`
	// End is the lease's end; a VM that runs in a booking ends with it.
	End     time.Time `json:"end"`
	Booking string    `json:"booking,omitempty"`
}

// Wait is why a request waits and where it stands.
type Wait struct {
	Reason   Reason `json:"reason"`
	Position int    `json:"position"` // 1 = next
	// Estimate is when it is planned to start, when capacity is held for it.
	Estimate time.Time `json:"estimate,omitzero"`
}

// Refusal is a request that can never start.
type Refusal struct {
	ID     string `json:"id"`
	Reason Reason `json:"reason"`
}

// Preemption tells a VM it will be stopped to make room.
type Preemption struct {
	ID     string    `json:"id"`  // the VM to stop
	For    string    `json:"for"` // the request it makes room for
	StopAt time.Time `json:"stop_at"`
}

// ActionKind is what is done to a running VM.
type ActionKind string

// Actions on running VMs.
const (
	ActionWarn ActionKind = "warn"
	ActionStop ActionKind = "stop"
)

// Action is a notice to, or the stop of, a running VM.
type Action struct {
	ID     string     `json:"id"`
	Kind   ActionKind `json:"kind"`
	At     time.Time  `json:"at"` // when it stops (warn: when it will)
	Reason string     `json:"reason"`
}

type ending struct {
	id   string
	host string
	end  time.Time
}

// Cycle runs one scheduling pass at now: it orders the queue, holds
// capacity for requests that cannot start (Options.Reserve, Lookahead),
// starts what the rules and the capacity allow in queue order (committing
// each start to inv), preempts where allowed, and explains every request
// that waits. Requests whose ID already holds devices in inv are skipped.
// To plan without effect, pass inv.Clone().
func Cycle(now time.Time, inv *Inventory, queue []Request, running []Running, pol Policy, o Options) Decision {
	d, _ := CycleReport(now, inv, queue, running, pol, o)
	return d
}

// Report is what a cycle tells, besides its Decision, of how far in the
// queue it had to look: enough to say that the requests behind those it
// was given could have changed nothing (pkg/estimate runs cycles on the
// head of a long queue).
type Report struct {
	// Lookahead is true when the cycle planned holds (Options.Lookahead)
	// and its planning pass found its Lookahead blocked requests before
	// the end of the queue: requests behind it play no part in the holds.
	Lookahead bool
	// Reserved counts the holds the main pass gave to blocked requests
	// without lookahead (at most Options.Reserve).
	Reserved int
	// Session is the session the cycle's main pass admitted the requests
	// with, as it left it: Admit on it is what a request behind those given
	// would have been told.
	Session Session
}

// CycleReport is Cycle, with its Report.
func CycleReport(now time.Time, inv *Inventory, queue []Request, running []Running, pol Policy, o Options) (Decision, Report) {
	var rep Report
	if o.Strategy == "" {
		o.Strategy = Pack
	}
	s := pol.Begin(now, running)
	d := Decision{Actions: s.Actions(running)}
	if !o.Unexplained {
		d.Waiting = make(map[string]Wait, len(queue))
	}
	ordered := s.Order(queue)

	var ends []ending
	preempting := map[string]time.Time{}
	for _, r := range running {
		ends = append(ends, ending{r.ID, r.Placement.Host, r.End})
		if r.PreemptedFor != "" {
			if t, ok := preempting[r.PreemptedFor]; !ok || r.End.After(t) {
				preempting[r.PreemptedFor] = r.End
			}
		}
	}
	var held []Hold
	lookahead := o.Reserve > 0 && o.Lookahead > o.Reserve
	if lookahead {
		held, rep.Lookahead = lookaheadHolds(now, inv, ordered, running, ends, pol, o)
	}
	waiting, held, reserved := passMain(now, inv, ordered, s, o, held, lookahead, len(held), ends, preempting, &d)
	rep.Reserved, rep.Session = reserved, s
	d.Holds = held
	if o.Preempt {
		d.Preempt = inv.preempt(now, waiting, running, s, o, held)
		for _, pr := range d.Preempt {
			for i := range waiting {
				if waiting[i].r.ID == pr.For {
					waiting[i].why = Reason{CodePreempting, "preemptible VMs were told to make room; they stop at " + pr.StopAt.UTC().Format(time.RFC3339)}
				}
			}
		}
	}
	for i, w := range waiting {
		if o.Unexplained {
			break
		}
		wt := Wait{Reason: w.why, Position: i + 1}
		for _, h := range held {
			if h.ID == w.r.ID {
				wt.Estimate = h.From
			}
		}
		d.Waiting[w.r.ID] = wt
		d.Order = append(d.Order, w.r.ID)
	}
	return d, rep
}

// passMain is the cycle's pass: it starts what fits, in queue order,
// keeping off held capacity, and (without lookahead) holds capacity for the
// first blocked requests.
func passMain(now time.Time, inv *Inventory, ordered []Request, s Session, o Options, held []Hold, lookahead bool, reserved int, ends []ending, preempting map[string]time.Time, d *Decision) ([]blocked, []Hold, int) {
	var waiting []blocked
	var failed failures
	var against []Hold // the holds the request placed keeps off, bookings first (reused)
	yield := lookaheadYield(inv, ordered, held, lookahead)
	cpu := NewYielder()
	for i := range ordered {
		if i%256 == 255 {
			cpu.Maybe()
		}
		r := &ordered[i]
		if inv.Holds(r.ID) {
			continue
		}
		why, refuse := s.Admit(r)
		if refuse {
			d.Refused = append(d.Refused, Refusal{r.ID, why})
			continue
		}
		if !why.OK() {
			waiting = append(waiting, blocked{r, why})
			continue
		}
		end := now.Add(r.Lease)
		others, own := s.Bookings(r, now, end)
		skip, small := holdsSkipped(held, r.ID, yield[r.ID])
		key, plain := failed.key(r, others, own, skip, small)
		var p Placement
		var bk *Hold
		why, known := failed.m[key]
		if !plain || !known {
			against = holdsAgainst(append(against[:0], others...), held, r.ID, yield[r.ID])
			p, bk, why = inv.place(r.Need, PlaceOptions{Strategy: o.Strategy, Now: now, End: end, Holds: against, Own: own, Prefer: r.PreferHost})
			failed.note(plain, key, why)
		}
		if why.OK() {
			st := Start{ID: r.ID, Placement: p, End: end}
			if bk != nil {
				st.Booking = bk.ID
				if bk.To.Before(end) {
					st.End = bk.To
				}
			}
			if err := inv.Allocate(r.ID, p, st.End); err != nil {
				// Place and Allocate apply the same rules; a disagreement
				// is a bug, reported rather than acted on.
				waiting = append(waiting, blocked{r, Reason{CodeNoCapacity, "internal: " + err.Error()}})
				continue
			}
			failed.reset()
			s.Started(r, p, st.End)
			d.Start = append(d.Start, st)
			ends = append(ends, ending{r.ID, p.Host, st.End})
			continue
		}
		if why.Code == CodeNever || why.Code == CodeInvalid {
			d.Refused = append(d.Refused, Refusal{r.ID, why})
			continue
		}
		_, isPreempting := preempting[r.ID]
		if (!lookahead && reserved < o.Reserve) || (isPreempting && !heldFor(held, r.ID)) {
			if h, ok := inv.shadow(now, r, ends, s, held, o.Strategy); ok && (r.StartBy.IsZero() || !h.From.After(r.StartBy)) {
				held = append(held, h)
				failed.reset()
				if !isPreempting {
					reserved++
				}
			}
		}
		if t, ok := preempting[r.ID]; ok {
			why = Reason{CodePreempting, "preemptible VMs were told to make room; they stop at " + t.UTC().Format(time.RFC3339)}
		}
		waiting = append(waiting, blocked{r, why})
	}
	return waiting, held, reserved
}

// lookaheadHolds finds the first o.Lookahead requests that cannot start
// (a planning pass on a copy) and plans holds for the largest of them, on
// the inventory as it is before this cycle's starts. stopped is true when
// the planning pass found its Lookahead blocked requests before the end of
// ordered.
func lookaheadHolds(now time.Time, inv *Inventory, ordered []Request, running []Running, ends []ending, pol Policy, o Options) (held []Hold, stopped bool) {
	trial := inv.trial()
	var blockedFirst []*Request
	s1 := pol.Begin(now, running)
	stopped = pass(now, trial, ordered, s1, o, func(r *Request, why Reason) bool {
		if why.Code == CodeNoCapacity || why.Code == CodeHeld || why.Code == CodeReservation {
			blockedFirst = append(blockedFirst, r)
		}
		return len(blockedFirst) < o.Lookahead
	})
	trial.drop()
	sizes := make(map[string]float64, len(blockedFirst))
	for _, r := range blockedFirst {
		sizes[r.ID] = inv.size(r.Need)
	}
	sort.SliceStable(blockedFirst, func(i, j int) bool { return sizes[blockedFirst[i].ID] > sizes[blockedFirst[j].ID] })
	if len(blockedFirst) == 0 || o.Reserve <= 0 {
		return nil, stopped
	}
	s2 := pol.Begin(now, running)
	for _, r := range blockedFirst {
		if len(held) >= o.Reserve {
			break
		}
		if h, ok := inv.shadowNow(now, r, ends, s2, held, o.Strategy); ok && (r.StartBy.IsZero() || !h.From.After(r.StartBy)) {
			held = append(held, h)
		}
	}
	return held, stopped
}

// shadowNow is shadow, trying now first.
func (inv *Inventory) shadowNow(now time.Time, r *Request, ends []ending, s Session, held []Hold, st Strategy) (Hold, bool) {
	end := now.Add(r.Lease)
	others, own := s.Bookings(r, now, end)
	if p, _, why := inv.place(r.Need, PlaceOptions{Strategy: st, Now: now, End: end, Holds: append(others, held...), Own: own, Prefer: r.PreferHost}); why.OK() {
		return Hold{ID: r.ID, Code: CodeHeld, Host: p.Host, Devices: p.Devices, From: now, To: end}, true
	}
	return inv.shadow(now, r, ends, s, held, st)
}

// lookaheadYield says, for each request, the lookahead holds it need not
// keep off: those of requests behind it in the queue that are no larger
// than it. A lookahead hold keeps the capacity a large request waits for
// from smaller requests, ahead of it in the queue or not; it must not let
// that request overtake one as large, or larger, that is ahead of it.
func lookaheadYield(inv *Inventory, ordered []Request, held []Hold, lookahead bool) map[string]map[string]bool {
	if !lookahead || len(held) == 0 {
		return nil
	}
	rank := make(map[string]int, len(ordered))
	for i := range ordered {
		rank[ordered[i].ID] = i
	}
	size := make(map[string]float64, len(held))
	for _, h := range held {
		if i, ok := rank[h.ID]; ok {
			size[h.ID] = inv.size(ordered[i].Need)
		}
	}
	out := map[string]map[string]bool{}
	for i := range ordered {
		r := &ordered[i]
		var mine float64
		sized := false
		for _, h := range held {
			j, ok := rank[h.ID]
			if !ok || j <= i {
				continue
			}
			if !sized {
				mine, sized = inv.size(r.Need), true
			}
			if size[h.ID] <= mine+1e-9 {
				if out[r.ID] == nil {
					out[r.ID] = map[string]bool{}
				}
				out[r.ID][h.ID] = true
			}
		}
	}
	return out
}

// holdsAgainst appends to out the holds request id keeps off: all of held
// but its own and those it need not keep off (yield).
func holdsAgainst(out, held []Hold, id string, yield map[string]bool) []Hold {
	for _, h := range held {
		if h.ID != id && !yield[h.ID] {
			out = append(out, h)
		}
	}
	return out
}

// holdsSkipped is the set of the holds request id need not keep off (its
// own and those it yields to; holdsAgainst keeps off the others), as bits
// by place in held: false when held is too long to say so in 64 bits.
func holdsSkipped(held []Hold, id string, yield map[string]bool) (uint64, bool) {
	if len(held) > 64 {
		return 0, false
	}
	var skip uint64
	for i, h := range held {
		if h.ID == id || yield[h.ID] {
			skip |= 1 << i
		}
	}
	return skip, true
}

// holdsExcept leaves out the holds of request id: its own.
func holdsExcept(held []Hold, id string) []Hold {
	out := make([]Hold, 0, len(held))
	for _, h := range held {
		if h.ID != id {
			out = append(out, h)
		}
	}
	return out
}

func heldFor(held []Hold, id string) bool {
	for _, h := range held {
		if h.ID == id {
			return true
		}
	}
	return false
}

// pass is a greedy pass for planning: it starts what fits (committing to
// inv) and reports each request blocked for capacity to blocked, which says
// whether to go on: pass reports whether blocked stopped it.
func pass(now time.Time, inv *Inventory, ordered []Request, s Session, o Options, blocked func(*Request, Reason) bool) bool {
	var failed failures
	for i := range ordered {
		r := &ordered[i]
		if inv.Holds(r.ID) {
			continue
		}
		if why, refuse := s.Admit(r); refuse || !why.OK() {
			continue
		}
		end := now.Add(r.Lease)
		others, own := s.Bookings(r, now, end)
		key, plain := failed.key(r, others, own, 0, true)
		var p Placement
		var bk *Hold
		why, known := failed.m[key]
		if !plain || !known {
			p, bk, why = inv.place(r.Need, PlaceOptions{Strategy: o.Strategy, Now: now, End: end, Holds: others, Own: own, Prefer: r.PreferHost})
			failed.note(plain, key, why)
		}
		if why.OK() {
			if bk != nil && bk.To.Before(end) {
				end = bk.To
			}
			if inv.Allocate(r.ID, p, end) == nil {
				failed.reset()
				s.Started(r, p, end)
			}
			continue
		}
		if why.Code == CodeNever || why.Code == CodeInvalid {
			continue
		}
		if !blocked(r, why) {
			return true
		}
	}
	return false
}

// failures remembers, within one pass, why needs failed to place for a
// lease on the inventory as it is, against the holds the request keeps off
// (all of the pass's but those it need not: its own, those it yields to):
// placing is a function of those, so a request of the same need and lease
// that keeps off the same holds fails the same way until a start changes
// the inventory or a hold is added (reset). A request with bookings of its
// own or others' is placed as always.
type failures struct {
	m map[failKey]Reason
}

// failKey is a need, a lease and the holds not kept off (bits by place in
// the pass's holds).
type failKey struct {
	need  NeedKey
	lease time.Duration
	skip  uint64
}

// key is r's key, and whether r's placement may be remembered: no booking
// in the way or its own, the holds it does not keep off said in skip (ok).
func (f *failures) key(r *Request, others, own []Hold, skip uint64, ok bool) (failKey, bool) {
	if len(others) > 0 || len(own) > 0 || !ok {
		return failKey{}, false
	}
	return failKey{need: r.Need.MapKey(), lease: r.Lease, skip: skip}, true
}

// note remembers why a placement failed.
func (f *failures) note(plain bool, k failKey, why Reason) {
	if !plain || why.OK() {
		return
	}
	if f.m == nil {
		f.m = map[failKey]Reason{}
	}
	f.m[k] = why
}

// reset forgets: the inventory or the holds changed.
func (f *failures) reset() { clear(f.m) }

// size is the share of GPUs a need takes at least: what makes it hard to
// place.
func (inv *Inventory) size(n Need) float64 {
	cs := inv.resolve(n)
	if len(cs) == 0 {
		return 0
	}
	c := &cs[0]
	for mi, ok := range c.match {
		if !ok {
			continue
		}
		info := inv.models[mi]
		switch c.kind {
		case gpu.KindMIG:
			return migShare(info.mt.t, info.mt.t.Profiles[c.prof[mi]]) * float64(c.count)
		case gpu.KindVGPU:
			if info.m.Memory > 0 {
				return float64(c.vt[mi].Memory) / float64(info.m.Memory) * float64(c.count)
			}
		}
		return float64(c.count)
	}
	return 0
}

type blocked struct {
	r   *Request
	why Reason
}

// shadow finds when and where r could start if the VMs that run ended as
// planned: the devices it would start on, held from then for its lease.
func (inv *Inventory) shadow(now time.Time, r *Request, ends []ending, s Session, held []Hold, st Strategy) (Hold, bool) {
	sorted := append([]ending(nil), ends...)
	slices.SortFunc(sorted, func(a, b ending) int {
		if c := a.end.Compare(b.end); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	c := inv.trial()
	defer c.drop()
	for k := 0; k < len(sorted); {
		at := sorted[k].end
		if at.IsZero() || !at.Before(never) {
			break
		}
		hosts := map[int]bool{}
		for ; k < len(sorted) && sorted[k].end.Equal(at); k++ {
			if c.Release(sorted[k].id) {
				if hi, ok := c.byName[sorted[k].host]; ok {
					hosts[hi] = true
				}
			}
		}
		if at.Before(now) {
			at = now
		}
		end := at.Add(r.Lease)
		others, own := s.Bookings(r, at, end)
		o := PlaceOptions{Strategy: st, Now: at, End: end, Holds: append(others, held...), Own: own}
		his := make([]int, 0, len(hosts))
		for hi := range hosts {
			his = append(his, hi)
		}
		sort.Ints(his)
		var best Placement
		found := false
		for _, hi := range his {
			if p, _, why := c.placeOn(r.Need, o, hi); why.OK() {
				best, found = p, true
				break
			}
		}
		if found {
			return Hold{ID: r.ID, Code: CodeHeld, Host: best.Host, Devices: best.Devices, From: at, To: end}, true
		}
	}
	return Hold{}, false
}

// preempt chooses, for blocked non-preemptible requests in queue order,
// preemptible VMs of lower priority whose stopping makes room; each victim
// serves one request.
func (inv *Inventory) preempt(now time.Time, waiting []blocked, running []Running, s Session, o Options, held []Hold) []Preemption {
	if !slices.ContainsFunc(running, func(v Running) bool { return v.Preemptible && !v.Stopping }) {
		return nil // no VM to stop: most cycles
	}
	var out []Preemption
	// future is inv with the preemptions chosen so far; only read (each
	// try is on a copy).
	future := inv
	taken := map[string]bool{}
	pending := map[string]bool{}
	for _, r := range running {
		if r.PreemptedFor != "" {
			pending[r.PreemptedFor] = true
		}
	}
	stopAt := now.Add(o.Notice)
	for _, w := range waiting {
		r := w.r
		if r.Preemptible || pending[r.ID] || (w.why.Code != CodeNoCapacity && w.why.Code != CodeHeld) {
			continue
		}
		var cands []*Running
		for i := range running {
			v := &running[i]
			if v.Stopping || taken[v.ID] || !v.Preemptible || v.Priority >= r.Priority || !future.Holds(v.ID) {
				continue
			}
			if v.Started.Add(o.MinRuntime).After(stopAt) || !v.End.After(stopAt) {
				continue // too young to stop, or it ends by itself first
			}
			cands = append(cands, v)
		}
		if len(cands) == 0 {
			continue
		}
		sort.SliceStable(cands, func(i, j int) bool {
			a, b := cands[i], cands[j]
			if a.Priority != b.Priority {
				return a.Priority < b.Priority
			}
			if !a.Started.Equal(b.Started) {
				return a.Started.After(b.Started) // youngest first: least work lost
			}
			return a.ID < b.ID
		})
		end := stopAt.Add(r.Lease)
		others, own := s.Bookings(r, stopAt, end)
		po := PlaceOptions{Strategy: o.Strategy, Now: stopAt, End: end, Holds: append(others, holdsExcept(held, r.ID)...), Own: own}
		trial := future.Clone()
		var victims []*Running
		var p Placement
		ok := false
		for _, v := range cands {
			trial.Release(v.ID)
			victims = append(victims, v)
			var why Reason
			if p, _, why = trial.place(r.Need, po); why.OK() {
				ok = true
				break
			}
		}
		if !ok {
			continue
		}
		// Spare every victim the placement does not need, last chosen first.
		for i := len(victims) - 1; i >= 0; i-- {
			v := victims[i]
			t2 := trial.Clone()
			if t2.Allocate(v.ID, v.Placement, v.End) != nil {
				continue
			}
			if p2, _, why := t2.place(r.Need, po); why.OK() {
				trial, p = t2, p2
				victims = append(victims[:i], victims[i+1:]...)
			}
		}
		// Never stop more of the GPUs than the request will use: preemption
		// moves capacity to whom the rules favour, it does not idle it.
		freed := 0.0
		for _, v := range victims {
			freed += v.Placement.Share()
		}
		if freed > p.Share()+1e-9 {
			continue
		}
		if trial.Allocate(r.ID, p, end) != nil {
			continue
		}
		future = trial
		for _, v := range victims {
			taken[v.ID] = true
			out = append(out, Preemption{ID: v.ID, For: r.ID, StopAt: stopAt})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
