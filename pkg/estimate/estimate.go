// Package estimate predicts when queued VMs start: it replays the queue,
// the VMs that run and the bookings forward in time through the very
// scheduling cycle gpuvmd runs (pkg/scheduler's Cycle under the policy in
// force), as the simulator (pkg/scheduler/simulate) replays a trace, with
// no arrival after now. Each running VM ends when its lease (or the notice
// it was given) says; each cycle starts what the rules and the capacity
// allow; a queued VM's estimate is the time of the cycle that starts it.
//
// The prediction holds if nothing changes but the passing of time. What can
// change it is said in the estimate: leases that may be extended (later),
// VMs deleted before their lease ends (sooner), requests asked later that
// the queue order puts first (later), preemptions the replay assumed.
//
// It is pure: no I/O, no clock, no goroutine; the inventory given is
// cloned, never changed.
package estimate

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// Defaults of Options.
const (
	DefaultHorizon   = 14 * 24 * time.Hour
	DefaultMaxCycles = 20000
	// FarAhead: an estimate further ahead than this is uncertain whatever
	// it depends on.
	FarAhead = 24 * time.Hour
)

// State is what the replay starts from: the scheduler's inputs at Now.
type State struct {
	Now time.Time
	// Inventory is the GPUs of the hosts that are up, holding the devices
	// of the running VMs (cloned; never changed).
	Inventory *scheduler.Inventory
	// Running are the VMs that hold devices, with their lease's end
	// (Running.End; zero: no known end, they never free their devices).
	Running []scheduler.Running
	// Queue are the VMs waiting for devices, in any order: the Policy
	// orders them, as the dispatcher's rounds do.
	Queue []scheduler.Request
	// NotBefore holds queued VMs back until a time (a start asked for
	// later): they join the replay's queue then.
	NotBefore map[string]time.Time
	// Policy is the rules in force (a *policy.Engine, its bookings set);
	// it is only read.
	Policy  scheduler.Policy
	Options scheduler.Options
	// Extendable says whether a running VM's lease may still be extended
	// (its profile's lease.max is beyond its end); nil: every lease may.
	Extendable func(r *scheduler.Running) bool
	// Rank, when set, is the queue order the dispatcher's last round gave
	// (queue position, 1 = next): the replay keeps the ranked requests in
	// that order, ahead of the unranked ones, which the Policy orders (once,
	// at Now, where the order is fair share's: completeRanks). It
	// matters where the order depends on what the replay does not know
	// (fair share's past usage).
	Rank map[string]int
	// Overtake, when set, says why requests asked after now may go ahead
	// of the queue ("the queue is ordered by fair share"): every estimate
	// of a VM that waits is then uncertain, with this reason.
	Overtake string
	// Tasks are the running and queued requests, by ID, that are tasks,
	// with the time each asked for (its time limit; 0: its lease): a task
	// ends when its command does, usually before its limit. TaskRatio
	// (TaskRatios) is per user, and under "" for everyone, the part of its
	// asked time a task is expected to use; the replay ends a task then
	// (early.go), never after its lease. Either unset: every request runs
	// to its lease's end.
	Tasks     map[string]time.Duration
	TaskRatio map[string]float64
}

// Options bound the replay.
type Options struct {
	// Horizon is how far ahead the replay goes (DefaultHorizon when 0); a
	// VM not started by then has no estimate.
	Horizon time.Duration
	// Tick, when positive, runs a cycle at every multiple of it as well as
	// when a VM ends: the rules change with the time (time windows,
	// bookings, quotas over a period). 0: cycles only when a VM ends.
	Tick time.Duration
	// MaxCycles bounds the work (DefaultMaxCycles when 0).
	MaxCycles int
}

// Estimate is when one queued VM is predicted to start.
type Estimate struct {
	// At is the predicted start; zero when none is known (see NotBefore
	// and Reason).
	At time.Time `json:"at,omitzero"`
	// NotBefore, when At is zero, is how far the replay went without
	// starting the VM: it starts later, if ever.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Uncertain is true when something likely to happen may move At
	// (Reason says what).
	Uncertain bool `json:"uncertain"`
	// Reason says, in words for people, what the estimate rests on and
	// what makes it uncertain; or why there is none.
	Reason string `json:"reason"`
	// Ends counts the running VMs whose end the start waits for.
	Ends int `json:"ends"`
	// Held is true when the scheduler holds capacity for the VM now (it
	// is the large request the backfill keeps room for): requests asked
	// later cannot take that room first.
	Held bool `json:"held,omitempty"`
}

// Known reports whether the estimate has a start time.
func (e Estimate) Known() bool { return !e.At.IsZero() }

// Uncertainty reasons.
const (
	WhyExtended  = "leases may be extended"
	WhyPreempted = "it counts on preemptible VMs being stopped for it"
	WhyFar       = "it is more than a day ahead"
	// WhyBackfill: room is held for the largest waiting request only; any
	// other may see requests asked later take the room it waits for.
	WhyBackfill = "requests asked later may take the room first"
)

// Queue replays s and estimates the start of every VM of s.Queue, by ID.
func Queue(s State, o Options) map[string]Estimate { return queue(s, o, "") }

// queue is Queue; with until set, the replay stops once that request has
// its estimate (the others' may then be missing).
func queue(s State, o Options, until string) map[string]Estimate {
	if o.Horizon <= 0 {
		o.Horizon = DefaultHorizon
	}
	if o.MaxCycles <= 0 {
		o.MaxCycles = DefaultMaxCycles
	}
	out := make(map[string]Estimate, len(s.Queue))
	if len(s.Queue) == 0 {
		return out
	}
	if s.Inventory == nil || s.Policy == nil {
		for _, r := range s.Queue {
			out[r.ID] = Estimate{Reason: "no estimate: the GPUs or the rules are not known"}
		}
		return out
	}
	s = completeRanks(s)
	rp := replay{s: s, o: o, until: until, inv: s.Inventory.Clone(), running: make(map[string]*scheduler.Running, len(s.Running)),
		last: map[string]scheduler.Reason{}, preempted: map[string]bool{}, held: map[string]bool{}, out: out,
		byID: make(map[string]*scheduler.Request, len(s.Queue))}
	for i := range s.Running {
		r := s.Running[i]
		r.End = s.expectedEnd(&r, s.Now)
		rp.running[r.ID] = &r
	}
	rp.sorted = slices.Sorted(maps.Keys(rp.running))
	for i := range s.Queue {
		r := &s.Queue[i]
		if _, ok := rp.byID[r.ID]; ok {
			rp.twice = true
		}
		rp.index(r)
	}
	rp.policy = s.Policy
	if len(s.Rank) > 0 {
		rp.policy = rankedPolicy{s.Policy, s.Rank}
	}
	if st, ok := staticOrder(s); ok {
		rp.policy, rp.order = asOrdered{rp.policy}, st
	}
	if rf := refuserOf(s, rp.order != nil); rf != nil {
		rp.setupPrefix(rf)
		rp.unexplained = s.Options
		rp.unexplained.Unexplained = true
	}
	var later []scheduler.Request
	rp.queue = make([]scheduler.Request, 0, len(s.Queue))
	for _, r := range s.Queue {
		if t, ok := s.NotBefore[r.ID]; ok && t.After(s.Now) {
			later = append(later, r)
			continue
		}
		rp.queue = append(rp.queue, r)
		rp.pre.queued(r.ID, 1)
	}
	if rp.order != nil {
		slices.SortFunc(rp.queue, func(a, b scheduler.Request) int { return rp.order[a.ID] - rp.order[b.ID] })
	}
	sort.SliceStable(later, func(i, j int) bool { return s.NotBefore[later[i].ID].Before(s.NotBefore[later[j].ID]) })
	rp.later = later
	rp.run()
	return out
}

// replay is one run of Queue.
type replay struct {
	s       State
	o       Options
	until   string
	inv     *scheduler.Inventory
	running map[string]*scheduler.Running
	queue   []scheduler.Request
	later   []scheduler.Request // held back (NotBefore), by time
	last    map[string]scheduler.Reason
	out     map[string]Estimate
	// byID are the requests of the queue; policy is the rules as the
	// cycles apply them (ranked, and without sorting the queue again when
	// its order is fixed: order, each request's place in it).
	byID   map[string]*scheduler.Request
	policy scheduler.Policy
	order  map[string]int
	// waiting is why each request waited in the last cycle; last keeps,
	// for the requests whose ID also held devices (dup: the cycles skip
	// them), why they waited the last time they took part.
	waiting map[string]scheduler.Wait
	dup     map[string]bool
	startBy int  // requests of the queue with a StartBy
	twice   bool // an ID is twice in the queue: byID is made each cycle
	// pre runs the cycles on prefixes of a long queue (prefix.go), with
	// unexplained, the options without the waiting requests' reasons:
	// finalWaiting works out those of the last cycle.
	pre         prefixState
	unexplained scheduler.Options

	// sorted are the IDs of the VMs that run (running's keys), sorted:
	// kept as VMs start and end, not sorted again each cycle.
	sorted []string
	// Reused from cycle to cycle: the VMs that run, the requests a cycle
	// took off the queue.
	runList []scheduler.Running
	gone    map[string]bool

	// What the replay assumed so far.
	ends       int             // running VMs ended at their lease's end
	extendable bool            // one of them may have its lease extended
	preempted  map[string]bool // requests a preemption was assumed for
	held       map[string]bool // requests capacity is held for at Now
}

func (rp *replay) run() {
	now := rp.s.Now
	horizon := now.Add(rp.o.Horizon)
	y := scheduler.NewYielder() // the API's requests go first (issue #26)
	for cycle := 0; cycle < rp.o.MaxCycles; cycle++ {
		y.Maybe()
		rp.endDue(now)
		for len(rp.later) > 0 && !rp.s.NotBefore[rp.later[0].ID].After(now) {
			rp.join(rp.later[0])
			rp.later = rp.later[1:]
		}
		if len(rp.queue) > 0 {
			rp.cycle(now)
		}
		if len(rp.queue) == 0 && len(rp.later) == 0 {
			return
		}
		if _, done := rp.out[rp.until]; done && rp.until != "" {
			return
		}
		next, ok := rp.next(now)
		if !ok {
			break
		}
		if next.After(horizon) {
			now = horizon
			break
		}
		now = next
	}
	rp.finalWaiting()
	for _, r := range append(rp.queue, rp.later...) {
		rp.out[r.ID] = rp.unknown(r, now)
	}
}

// endDue frees the devices of the VMs whose end is due at now.
func (rp *replay) endDue(now time.Time) {
	kept := rp.sorted[:0] // filtered in place: writes trail the reads
	for _, id := range rp.sorted {
		r := rp.running[id]
		if r.End.IsZero() || r.End.After(now) {
			kept = append(kept, id)
			continue
		}
		rp.inv.Release(id)
		delete(rp.running, id)
		if r.Stopping {
			continue // told to stop: its end is not its lease's
		}
		if r.End.After(rp.s.Now) {
			rp.ends++
		}
		if rp.s.Extendable == nil || rp.s.Extendable(r) {
			rp.extendable = true
		}
	}
	rp.sorted = kept
}

// cycle runs one scheduling cycle at now and records what it decides.
func (rp *replay) cycle(now time.Time) {
	// The VMs that run, in a slice the cycles share: what a cycle keeps
	// of it (the last cycle's, pre.lastRun) is needed only while no other
	// has begun.
	runList := rp.runList[:0]
	for _, id := range rp.sorted {
		runList = append(runList, *rp.running[id])
	}
	rp.runList = runList
	d, head := rp.decide(now, runList)
	if now.Equal(rp.s.Now) {
		for _, h := range d.Holds {
			rp.held[h.ID] = true
		}
	}
	if rp.gone == nil {
		rp.gone = map[string]bool{}
	}
	gone := rp.gone
	clear(gone)
	if rp.twice {
		for i := range rp.queue {
			rp.byID[rp.queue[i].ID] = &rp.queue[i]
		}
	}
	for _, st := range d.Start {
		r := rp.byID[st.ID]
		if r == nil {
			continue
		}
		run := &scheduler.Running{Request: *r, Placement: st.Placement, Started: now, End: st.End, Booking: st.Booking}
		run.End = rp.s.expectedEnd(run, now)
		if _, ok := rp.running[st.ID]; !ok {
			k, _ := slices.BinarySearch(rp.sorted, st.ID)
			rp.sorted = slices.Insert(rp.sorted, k, st.ID)
		}
		rp.running[st.ID] = run
		rp.out[st.ID] = rp.started(st.ID, now)
		gone[st.ID] = true
	}
	for _, rf := range d.Refused {
		rp.out[rf.ID] = Estimate{Reason: "no estimate: " + rf.Reason.Text()}
		gone[rf.ID] = true
	}
	for _, p := range d.Preempt {
		if v, ok := rp.running[p.ID]; ok {
			v.Stopping, v.PreemptedFor, v.End = true, p.For, p.StopAt
			rp.preempted[p.For] = true
		}
	}
	for _, a := range d.Actions {
		v, ok := rp.running[a.ID]
		if !ok {
			continue
		}
		switch a.Kind {
		case scheduler.ActionWarn:
			v.Warned = true
		case scheduler.ActionStop:
			v.Stopping, v.End = true, now
		}
	}
	rp.waiting = d.Waiting
	for id := range rp.dup {
		if w, ok := d.Waiting[id]; ok {
			rp.last[id] = w.Reason
		}
	}
	switch {
	case rp.startBy > 0:
		rp.dropDue(now, gone)
	case len(gone) > 0:
		rp.dropHead(head, gone)
	}
	// Stopping VMs told to stop now end at once.
	rp.endDue(now)
}

// dropDue takes off the queue the requests gone (started or refused) and
// those that give up at now.
func (rp *replay) dropDue(now time.Time, gone map[string]bool) {
	kept := rp.queue[:0]
	for _, r := range rp.queue {
		switch {
		case gone[r.ID]:
			if !r.StartBy.IsZero() {
				rp.startBy--
			}
		case !r.StartBy.IsZero() && !now.Before(r.StartBy):
			rp.out[r.ID] = Estimate{NotBefore: r.StartBy, Reason: fmt.Sprintf("no estimate: it gives up at %s, before it could start", r.StartBy.UTC().Format(time.RFC3339))}
			rp.startBy--
		default:
			kept = append(kept, r)
			continue
		}
		rp.left(r)
	}
	rp.queue = kept
}

// dropHead takes off the queue the requests gone, all among its first
// head: what is kept of the head moves up to the rest, which stays put.
func (rp *replay) dropHead(head int, gone map[string]bool) {
	w := head
	for i := head - 1; i >= 0; i-- {
		r := rp.queue[i]
		if gone[r.ID] {
			rp.left(r)
			continue
		}
		w--
		rp.queue[w] = r
	}
	clear(rp.queue[:w]) // let go of the strings
	rp.queue = rp.queue[w:]
}

// left notes that r left the queue.
func (rp *replay) left(r scheduler.Request) {
	if rp.pre.on {
		rp.pre.queued(r.ID, -1)
		if rp.pre.partial {
			rp.pre.gone = append(rp.pre.gone, r)
		}
	}
}

// next is the time of the next cycle after now: the next end of a VM, a
// held-back VM's time, or the next tick; false when nothing will change.
func (rp *replay) next(now time.Time) (time.Time, bool) {
	var t time.Time
	take := func(x time.Time) {
		if x.After(now) && (t.IsZero() || x.Before(t)) {
			t = x
		}
	}
	for _, r := range rp.running {
		if !r.End.IsZero() {
			take(r.End)
		}
	}
	if len(rp.later) > 0 {
		take(rp.s.NotBefore[rp.later[0].ID])
	}
	if rp.o.Tick > 0 {
		tk := now.Add(rp.o.Tick).Truncate(rp.o.Tick)
		if !tk.After(now) {
			tk = now.Add(rp.o.Tick)
		}
		take(tk)
	}
	if rp.startBy > 0 {
		for _, r := range rp.queue {
			if !r.StartBy.IsZero() {
				take(r.StartBy)
			}
		}
	}
	return t, !t.IsZero()
}

// started is the estimate of a VM the replay starts at at.
func (rp *replay) started(id string, at time.Time) Estimate {
	e := Estimate{At: at, Ends: rp.ends, Held: rp.held[id]}
	var why []string
	if at.After(rp.s.Now) {
		if rp.ends > 0 && rp.extendable {
			why = append(why, WhyExtended)
		}
		if rp.preempted[id] {
			why = append(why, WhyPreempted)
		}
		if !rp.held[id] && rp.s.Overtake == "" {
			why = append(why, WhyBackfill)
		}
		if rp.s.Overtake != "" {
			why = append(why, rp.s.Overtake)
		}
		if at.Sub(rp.s.Now) > FarAhead {
			why = append(why, WhyFar)
		}
	}
	e.Uncertain = len(why) > 0
	var basis string
	switch {
	case !at.After(rp.s.Now):
		basis = "it can start at the next scheduling round"
	case rp.ends == 0:
		basis = "when the rules let it start"
	case rp.ends == 1:
		basis = "when 1 running VM's lease ends (sooner if it is deleted early)"
	default:
		basis = fmt.Sprintf("when %d running VMs' leases end (sooner if some are deleted early)", rp.ends)
	}
	if e.Held {
		basis += "; room is held for it"
	}
	e.Reason = basis
	if e.Uncertain {
		e.Reason = "uncertain: " + strings.Join(why, ", ") + "; " + basis
	}
	return e
}

// unknown is the estimate of a VM the replay did not start by until.
func (rp *replay) unknown(r scheduler.Request, until time.Time) Estimate {
	e := Estimate{NotBefore: until}
	why := rp.last[r.ID]
	if w, ok := rp.waiting[r.ID]; ok {
		why = w.Reason
	}
	switch {
	case len(rp.running) == 0 && why.Code == scheduler.CodeNoCapacity:
		e.Reason = "no estimate: it does not fit even with every running VM gone (" + why.Text() + ")"
	case !why.OK():
		e.Reason = fmt.Sprintf("no estimate: not started by %s (%s)", until.UTC().Format(time.RFC3339), why.Text())
	default:
		e.Reason = fmt.Sprintf("no estimate: not started by %s", until.UTC().Format(time.RFC3339))
	}
	return e
}

// ProbeID is the ID of the request NextFree adds to the queue.
const ProbeID = "estimate:probe"

// NextFree is when a request r, asked now behind the queue of s, is
// predicted to start: the earliest time the devices it needs free up for
// it. r's ID is replaced by ProbeID. now reports that it could start now.
func NextFree(s State, r scheduler.Request, o Options) (e Estimate, now bool) {
	r.ID = ProbeID
	if r.Submitted.IsZero() {
		r.Submitted = s.Now
	}
	s.Queue = append(slices.Clone(s.Queue), r)
	e = queue(s, o, ProbeID)[ProbeID]
	return e, e.Known() && !e.At.After(s.Now)
}

// rankedPolicy is a Policy whose queue order puts the ranked requests
// first, by rank; the rest follow in the Policy's order.
type rankedPolicy struct {
	scheduler.Policy
	rank map[string]int
}

func (p rankedPolicy) Begin(now time.Time, running []scheduler.Running) scheduler.Session {
	return rankedSession{p.Policy.Begin(now, running), p.rank}
}

type rankedSession struct {
	scheduler.Session
	rank map[string]int
}

func (s rankedSession) Order(q []scheduler.Request) []scheduler.Request {
	out := s.Session.Order(q)
	sort.SliceStable(out, func(i, j int) bool {
		ri, iok := s.rank[out[i].ID]
		rj, jok := s.rank[out[j].ID]
		switch {
		case iok && jok:
			return ri < rj
		default:
			return iok && !jok
		}
	})
	return out
}

// join adds a held-back request to the queue, in its place when the
// queue's order is fixed.
func (rp *replay) join(r scheduler.Request) {
	rp.index(&r)
	rp.pre.queued(r.ID, 1)
	if rp.order == nil {
		rp.queue = append(rp.queue, r)
		return
	}
	i, _ := slices.BinarySearchFunc(rp.queue, rp.order[r.ID], func(q scheduler.Request, k int) int { return rp.order[q.ID] - k })
	rp.queue = slices.Insert(rp.queue, i, r)
}

// index records a queued request: by its ID, in the count of requests with
// a start-by time, and among those the inventory already holds.
func (rp *replay) index(r *scheduler.Request) {
	rp.byID[r.ID] = r
	if !r.StartBy.IsZero() {
		rp.startBy++
	}
	if rp.inv.Holds(r.ID) {
		if rp.dup == nil {
			rp.dup = map[string]bool{}
		}
		rp.dup[r.ID] = true
	}
}

// completeRanks ranks the requests the dispatcher has not ranked yet
// (asked for since its last round: a burst of creates, an array of tasks)
// after the ranked ones, in the order the Policy gives them now, when the
// order is not by the requests' own fields (fair share) and some are
// ranked — or none is, under one of pkg/policy's orders: a burst onto an
// empty queue before the dispatcher's first round ranks it, in the order
// that round will give it. The replay then keeps the whole queue in one
// order, as it keeps the ranked ones: it models fair share's changes of
// order for neither (estimates under fair share are uncertain, Overtake).
// Before, each cycle of the replay ordered the unranked ones again,
// sorting the whole queue: with ten thousand queued, twenty seconds a
// replay (issue #26); twelve with none ranked.
func completeRanks(s State) State {
	o, known := s.Policy.(interface{ Order() string })
	if known && fixedOrders[o.Order()] || len(s.Rank) == 0 && !known {
		return s
	}
	last := 0
	var unranked []scheduler.Request
	for _, r := range s.Queue {
		if k, ok := s.Rank[r.ID]; ok {
			last = max(last, k)
		} else {
			unranked = append(unranked, r)
		}
	}
	if len(unranked) == 0 {
		return s
	}
	rank := make(map[string]int, len(s.Rank)+len(unranked))
	maps.Copy(rank, s.Rank)
	for i, r := range s.Policy.Begin(s.Now, s.Running).Order(unranked) {
		rank[r.ID] = last + 1 + i
	}
	s.Rank = rank
	return s
}

// staticOrder is each request's place in the queue order when the order
// is fixed: a comparison of the requests' own fields (fifo, priority,
// sjf; or every request ranked, each at its own rank), which neither the
// time, nor the VMs that run, nor the other requests waiting change. The
// cycles then need not sort the queue again: it is kept in that order.
// False when the order may change (fair share), or is not known.
func staticOrder(s State) (map[string]int, bool) {
	all := make([]scheduler.Request, 0, len(s.Queue))
	all = append(all, s.Queue...)
	ids := make(map[string]bool, len(all))
	ranks := map[int]bool{}
	ranked := true
	for _, r := range all {
		if ids[r.ID] {
			return nil, false // the order of two of one ID is not theirs
		}
		ids[r.ID] = true
		k, ok := s.Rank[r.ID]
		if !ok || ranks[k] {
			ranked = false
		}
		ranks[k] = true
	}
	o, ok := s.Policy.(interface{ Order() string })
	if !ranked && (!ok || !fixedOrders[o.Order()]) {
		return nil, false
	}
	var pol scheduler.Policy = s.Policy
	if len(s.Rank) > 0 {
		pol = rankedPolicy{pol, s.Rank}
	}
	sorted := pol.Begin(s.Now, s.Running).Order(all)
	out := make(map[string]int, len(sorted))
	for i, r := range sorted {
		out[r.ID] = i
	}
	return out, true
}

// fixedOrders are pkg/policy's orders by the requests' own fields.
var fixedOrders = map[string]bool{config.OrderFIFO: true, config.OrderPriority: true, config.OrderSJF: true}

// asOrdered is a Policy whose sessions take the queue as it comes: the
// replay keeps it in the order the Policy gives.
type asOrdered struct{ scheduler.Policy }

func (p asOrdered) Begin(now time.Time, running []scheduler.Running) scheduler.Session {
	return orderedSession{p.Policy.Begin(now, running)}
}

type orderedSession struct{ scheduler.Session }

func (orderedSession) Order(q []scheduler.Request) []scheduler.Request { return q }
