package estimate

// The replay as it was before the replay of long queues was made fast,
// kept as the reference the property test compares Queue and NextFree
// with. Do not change it: it is what "identical" means.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// refQueue is today's Queue, kept as the reference of the replay: Queue replays s and estimates the start of every VM of s.Queue, by ID.
func refQueue(s State, o Options) map[string]Estimate { return refQueueRun(s, o, "") }

// queue is Queue; with until set, the replay stops once that request has
// its estimate (the others' may then be missing).
func refQueueRun(s State, o Options, until string) map[string]Estimate {
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
	// The unranked requests of a partly ranked queue are ranked after the
	// others once, at Now: a choice of what the replay models (see
	// completeRanks), not of how it computes it.
	s = completeRanks(s)
	rp := refReplay{s: s, o: o, until: until, inv: s.Inventory.Clone(), running: make(map[string]*scheduler.Running, len(s.Running)),
		last: map[string]scheduler.Reason{}, preempted: map[string]bool{}, held: map[string]bool{}, out: out}
	for i := range s.Running {
		r := s.Running[i]
		rp.running[r.ID] = &r
	}
	var later []scheduler.Request
	for _, r := range s.Queue {
		if t, ok := s.NotBefore[r.ID]; ok && t.After(s.Now) {
			later = append(later, r)
			continue
		}
		rp.queue = append(rp.queue, r)
	}
	sort.SliceStable(later, func(i, j int) bool { return s.NotBefore[later[i].ID].Before(s.NotBefore[later[j].ID]) })
	rp.later = later
	rp.run()
	return out
}

// replay is one run of Queue.
type refReplay struct {
	s       State
	o       Options
	until   string
	inv     *scheduler.Inventory
	running map[string]*scheduler.Running
	queue   []scheduler.Request
	later   []scheduler.Request // held back (NotBefore), by time
	last    map[string]scheduler.Reason
	out     map[string]Estimate

	// What the replay assumed so far.
	ends       int             // running VMs ended at their lease's end
	extendable bool            // one of them may have its lease extended
	preempted  map[string]bool // requests a preemption was assumed for
	held       map[string]bool // requests capacity is held for at Now
}

func (rp *refReplay) run() {
	now := rp.s.Now
	horizon := now.Add(rp.o.Horizon)
	for cycle := 0; cycle < rp.o.MaxCycles; cycle++ {
		rp.endDue(now)
		for len(rp.later) > 0 && !rp.s.NotBefore[rp.later[0].ID].After(now) {
			rp.queue = append(rp.queue, rp.later[0])
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
	for _, r := range append(rp.queue, rp.later...) {
		rp.out[r.ID] = rp.unknown(r, now)
	}
}

// endDue frees the devices of the VMs whose end is due at now.
func (rp *refReplay) endDue(now time.Time) {
	for _, id := range rp.sortedRunning() {
		r := rp.running[id]
		if r.End.IsZero() || r.End.After(now) {
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
}

// cycle runs one scheduling cycle at now and records what it decides.
func (rp *refReplay) cycle(now time.Time) {
	runList := make([]scheduler.Running, 0, len(rp.running))
	for _, id := range rp.sortedRunning() {
		runList = append(runList, *rp.running[id])
	}
	pol := rp.s.Policy
	if len(rp.s.Rank) > 0 {
		pol = refRankedPolicy{pol, rp.s.Rank}
	}
	d := scheduler.Cycle(now, rp.inv, rp.queue, runList, pol, rp.s.Options)
	if now.Equal(rp.s.Now) {
		for _, h := range d.Holds {
			rp.held[h.ID] = true
		}
	}
	gone := map[string]bool{}
	byID := make(map[string]*scheduler.Request, len(rp.queue))
	for i := range rp.queue {
		byID[rp.queue[i].ID] = &rp.queue[i]
	}
	for _, st := range d.Start {
		r := byID[st.ID]
		if r == nil {
			continue
		}
		rp.running[st.ID] = &scheduler.Running{Request: *r, Placement: st.Placement, Started: now, End: st.End, Booking: st.Booking}
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
	for id, w := range d.Waiting {
		rp.last[id] = w.Reason
	}
	kept := rp.queue[:0]
	for _, r := range rp.queue {
		switch {
		case gone[r.ID]:
		case !r.StartBy.IsZero() && !now.Before(r.StartBy):
			rp.out[r.ID] = Estimate{NotBefore: r.StartBy, Reason: fmt.Sprintf("no estimate: it gives up at %s, before it could start", r.StartBy.UTC().Format(time.RFC3339))}
		default:
			kept = append(kept, r)
		}
	}
	rp.queue = kept
	// Stopping VMs told to stop now end at once.
	rp.endDue(now)
}

// next is the time of the next cycle after now: the next end of a VM, a
// held-back VM's time, or the next tick; false when nothing will change.
func (rp *refReplay) next(now time.Time) (time.Time, bool) {
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
	for _, r := range rp.queue {
		if !r.StartBy.IsZero() {
			take(r.StartBy)
		}
	}
	return t, !t.IsZero()
}

// started is the estimate of a VM the replay starts at at.
func (rp *refReplay) started(id string, at time.Time) Estimate {
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
func (rp *refReplay) unknown(r scheduler.Request, until time.Time) Estimate {
	e := Estimate{NotBefore: until}
	why := rp.last[r.ID]
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

func (rp *refReplay) sortedRunning() []string {
	ids := make([]string, 0, len(rp.running))
	for id := range rp.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// NextFree is when a request r, asked now behind the queue of s, is
// predicted to start: the earliest time the devices it needs free up for
// it. r's ID is replaced by ProbeID. now reports that it could start now.
func refNextFree(s State, r scheduler.Request, o Options) (e Estimate, now bool) {
	r.ID = ProbeID
	if r.Submitted.IsZero() {
		r.Submitted = s.Now
	}
	s.Queue = append(slices.Clone(s.Queue), r)
	e = refQueueRun(s, o, ProbeID)[ProbeID]
	return e, e.Known() && !e.At.After(s.Now)
}

// refRankedPolicy is a Policy whose queue order puts the ranked requests
// first, by rank; the rest follow in the Policy's order.
type refRankedPolicy struct {
	scheduler.Policy
	rank map[string]int
}

func (p refRankedPolicy) Begin(now time.Time, running []scheduler.Running) scheduler.Session {
	return refRankedSession{p.Policy.Begin(now, running), p.rank}
}

type refRankedSession struct {
	scheduler.Session
	rank map[string]int
}

func (s refRankedSession) Order(q []scheduler.Request) []scheduler.Request {
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
