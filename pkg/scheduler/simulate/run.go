package simulate

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// Spec is one configuration to replay the trace with.
type Spec struct {
	Name     string             `json:"name"`
	Strategy scheduler.Strategy `json:"placement"`
	Order    string             `json:"order"`
	// Reserve is the backfill depth (0: greedy, 1: EASY).
	Reserve int `json:"reserve"`
	// Lookahead: holds go to the largest of the first Lookahead blocked.
	Lookahead int  `json:"lookahead,omitempty"`
	Preempt   bool `json:"preempt"`
	// MixedSize puts every vGPU-capable GPU in mixed-size mode.
	MixedSize bool `json:"mixed_size,omitempty"`
	// Configured marks the configuration's own queue order.
	Configured bool `json:"configured,omitempty"`
}

// Baseline is NVML's own behaviour with a greedy queue: first come first,
// whatever fits starts, at the lowest free start slot of the first GPU
// that fits.
var Baseline = Spec{Name: "first-fit", Strategy: scheduler.FirstFit, Order: config.OrderFIFO}

// PolicySpec is gpuvm's scheduling under a queue order: pack placement,
// backfill around a hold for the largest of the first blocked requests,
// preemption.
func PolicySpec(order string) Spec {
	return Spec{Name: order, Strategy: scheduler.Pack, Order: order, Reserve: scheduler.DefaultReserve, Lookahead: scheduler.DefaultLookahead, Preempt: true}
}

// Setup is what every run shares.
type Setup struct {
	Cluster *Cluster
	// Policy and Profiles come from the configuration (nil: no rules).
	Policy   *config.Policy
	Profiles map[string]*config.Profile
	// HalfLife of fairshare usage (default the policy's, else 7 days).
	HalfLife time.Duration
	// MaxWait: a request not started this long after it was submitted is
	// withdrawn and counts as refused (0: wait forever).
	MaxWait time.Duration
	// Tick is how often the scheduler runs besides on events (default 5m).
	Tick time.Duration
	// Notice and MinRuntime tune preemption (policy defaults when 0).
	Notice, MinRuntime time.Duration
	// Bucket is the resolution of the utilisation series (default: a
	// span of the trace / 100, at least an hour).
	Bucket time.Duration
	// Observe, when set, is shown the run after each cycle (pkg/estimate
	// measures its predictions with it).
	Observe func(Snapshot)
}

// Snapshot is the run after one cycle, for Setup.Observe: what the
// scheduler would see next. It is the run's own state, valid during the
// call only: clone what is kept, change nothing.
type Snapshot struct {
	Now       time.Time
	Inventory *scheduler.Inventory
	// Queue is what still waits, in submission order; Running what holds
	// devices, by ID.
	Queue   []scheduler.Request
	Running []scheduler.Running
	Policy  scheduler.Policy
	Options scheduler.Options
	// Started are the requests this cycle started.
	Started []string
}

// Result is what one run served.
type Result struct {
	Spec
	Requests          int     `json:"requests"`
	Accepted          int     `json:"accepted"`
	Refused           int     `json:"refused"`
	Acceptance        float64 `json:"acceptance"`
	GPUHoursServed    float64 `json:"gpu_hours_served"`
	GPUHoursRequested float64 `json:"gpu_hours_requested"`
	// GPUHoursGranted is what the started requests were given: each its
	// share for its lease (to a booking's or a window's end when that
	// comes first). GPUHoursGranted − GPUHoursServed is what they gave
	// back before their lease ended: runs that ended early (the runtime
	// column, or a replay as tasks), preemptions and window stops.
	GPUHoursGranted float64 `json:"gpu_hours_granted"`
	MeanWaitMin     float64 `json:"mean_wait_minutes"`
	P90WaitMin      float64 `json:"p90_wait_minutes"`
	P95WaitMin      float64 `json:"p95_wait_minutes"`
	// Utilization is the time-weighted mean of the GPUs' worth held over
	// all GPUs, from the first submission to the last end.
	Utilization float64 `json:"utilization"`
	// Stranded is the time-weighted mean number of free MIG memory slices
	// that no profile could use (on GPUs holding MIG instances);
	// StrandedShare is that over all free MIG slices.
	Stranded      float64 `json:"stranded_slices"`
	StrandedShare float64 `json:"stranded_share"`
	// VGPUFreeGiB is the time-weighted mean of the free framebuffer on GPUs
	// that hold vGPUs: in equal-size mode only their type can use it.
	VGPUFreeGiB float64 `json:"vgpu_free_gib"`
	// MIG and VGPU say whether the cluster has GPUs of each kind.
	HasMIG  bool `json:"-"`
	HasVGPU bool `json:"-"`
	// Fairness is Jain's index over users of the part of their requested
	// GPU-hours served (1: all users equally served).
	Fairness float64 `json:"fairness"`
	Types    []Type  `json:"types"`
	// RefusedAtOnce counts requests refused on arrival, by reason code;
	// Expired those withdrawn after max-wait, by the reason they waited.
	RefusedAtOnce map[string]int `json:"refused_at_once"`
	Expired       map[string]int `json:"expired"`
	Preemptions   int            `json:"preemptions"`
	WindowStops   int            `json:"window_stops"`
	// Bookings lists the bookings made ("" error) or refused.
	Bookings []BookingResult `json:"bookings,omitempty"`
	Series   []Point         `json:"series"`
	Cycles   int             `json:"cycles"`
	// Holds counts the capacity holds made, summed over cycles.
	Holds int `json:"holds"`
}

// Type is the result for one GPU type or profile.
type Type struct {
	Key         string  `json:"key"`
	Share       float64 `json:"share"` // of a GPU, per request (estimate)
	Requested   int     `json:"requested"`
	Accepted    int     `json:"accepted"`
	Acceptance  float64 `json:"acceptance"`
	MeanWaitMin float64 `json:"mean_wait_minutes"`
	P95WaitMin  float64 `json:"p95_wait_minutes"`
	GPUHours    float64 `json:"gpu_hours_served"`
}

// Point is one bucket of the utilisation series.
type Point struct {
	Start       time.Time `json:"start"`
	Utilization float64   `json:"utilization"`
	Stranded    float64   `json:"stranded_slices"`
	Waiting     float64   `json:"waiting"`
}

// BookingResult says whether a booking of the cluster file was made.
type BookingResult struct {
	ID    string `json:"id"`
	Error string `json:"error,omitempty"`
}

type reqState struct {
	item     *Item
	key      string
	share    float64
	accepted bool
	wait     time.Duration
	refused  string
	last     scheduler.Reason
	deadline time.Time
	served   float64 // GPU-hours
	granted  float64 // GPU-hours: share × lease (to s.End), when started
}

type vmState struct {
	st     *reqState
	run    scheduler.Running
	share  float64
	actual time.Time // when it really ends
}

// Run replays the trace under one spec.
func Run(setup Setup, tr *Trace, spec Spec) (*Result, error) {
	hosts := setup.Cluster.Hosts
	if spec.MixedSize {
		hosts = mixedHosts(hosts)
	}
	inv, err := scheduler.NewInventory(hosts, nil)
	if err != nil {
		return nil, err
	}
	halfLife := setup.HalfLife
	if halfLife == 0 && setup.Policy != nil {
		halfLife = setup.Policy.Queue.HalfLife
	}
	usage := policy.NewUsage(halfLife)
	ledger := &policy.Ledger{}
	eng, err := policy.New(policy.Config{Policy: setup.Policy, Order: spec.Order, Usage: usage, Ledger: ledger, Profiles: setup.Profiles})
	if err != nil {
		return nil, err
	}
	res := &Result{Spec: spec, RefusedAtOnce: map[string]int{}, Expired: map[string]int{}}
	res.Bookings = book(setup, tr, inv, eng)
	opts := runOptions(setup, spec)
	tick := setup.Tick
	if tick <= 0 {
		tick = 5 * time.Minute
	}

	tr, states, byID := prepareTrace(setup, tr, inv)
	start := tr.Items[0].Request.Submitted
	last := tr.Items[len(tr.Items)-1].Request.Submitted
	bucket := setup.Bucket
	if bucket <= 0 {
		bucket = max(time.Hour, (last.Sub(start) / 100).Truncate(time.Hour))
	}
	horizon := last.Add(60 * 24 * time.Hour) // a run never goes on forever
	gpus := float64(inv.GPUCount())

	// Windows and bookings act at times of their own: keep ticking.
	timed := len(eng.Bookings()) > 0 || (setup.Policy != nil && len(setup.Policy.Windows) > 0)
	var queue []scheduler.Request
	queued := map[string]bool{}
	running := map[string]*vmState{}
	next := 0
	now := start
	var sumUsed, sumStranded, sumFree, sumVFree, sumTime float64
	series := map[int64]*Point{}
	integrate := func(from, to time.Time) {
		if !to.After(from) {
			return
		}
		st := inv.Stats()
		for t := from; t.Before(to); {
			b := t.Sub(start) / bucket
			bEnd := start.Add((b + 1) * bucket)
			if bEnd.After(to) {
				bEnd = to
			}
			dt := bEnd.Sub(t).Hours()
			p := series[int64(b)]
			if p == nil {
				p = &Point{Start: start.Add(b * bucket)}
				series[int64(b)] = p
			}
			p.Utilization += dt * st.Used / gpus
			p.Stranded += dt * float64(st.MIGStranded)
			p.Waiting += dt * float64(len(queue))
			t = bEnd
		}
		dt := to.Sub(from).Hours()
		sumUsed += dt * st.Used
		sumStranded += dt * float64(st.MIGStranded)
		sumFree += dt * float64(st.MIGFree)
		sumVFree += dt * float64(st.VGPUFree) / (1 << 30)
		sumTime += dt
		if st.MIGSlices > 0 {
			res.HasMIG = true
		}
		if st.VGPUFree > 0 {
			res.HasVGPU = true
		}
	}
	end := func(id string, at time.Time) {
		v := running[id]
		inv.Release(id)
		delete(running, id)
		if at.After(v.run.Started) {
			usage.Charge(v.run.User, v.share, v.run.Started, at)
			ledger.Add(policy.Record{User: v.run.User, Group: v.run.Group, Share: v.share, Start: v.run.Started, End: at})
			res.GPUHoursServed += v.share * at.Sub(v.run.Started).Hours()
			v.st.servedHours(v.share * at.Sub(v.run.Started).Hours())
		}
	}
	for {
		// Ends and submissions due now.
		for _, id := range sortedIDs(running) {
			if v := running[id]; !v.actual.After(now) {
				end(id, v.actual)
			}
		}
		for next < len(tr.Items) && !tr.Items[next].Request.Submitted.After(now) {
			queue = append(queue, tr.Items[next].Request)
			queued[tr.Items[next].Request.ID] = true
			next++
		}
		runList := make([]scheduler.Running, 0, len(running))
		for _, id := range sortedIDs(running) {
			runList = append(runList, running[id].run)
		}
		d := scheduler.Cycle(now, inv, queue, runList, eng, opts)
		res.Cycles++
		res.Holds += len(d.Holds)
		gone := applyDecision(now, d, byID, running, res)
		queue = withdraw(now, queue, byID, gone, queued, res)
		for _, id := range sortedIDs(running) {
			if v := running[id]; !v.actual.After(now) {
				end(id, now)
			}
		}
		if setup.Observe != nil {
			observe(setup.Observe, now, inv, queue, running, eng, opts, d)
		}
		t, done := nextEvent(now, tick, horizon, timed, tr, next, queue, running, byID)
		if done {
			break
		}
		integrate(now, t)
		now = t
	}
	expireLeft(queue, byID, res)
	finish(res, series, bucket, gpus, sumUsed, sumStranded, sumFree, sumVFree, sumTime)
	summarise(res, states)
	return res, nil
}

// runOptions are the scheduler's options of a run: the spec's, with the
// setup's notice and minimum runtime, or the policy's defaults.
func runOptions(setup Setup, spec Spec) scheduler.Options {
	opts := scheduler.Options{Strategy: spec.Strategy, Reserve: spec.Reserve, Lookahead: spec.Lookahead, Preempt: spec.Preempt, Notice: setup.Notice, MinRuntime: setup.MinRuntime}
	if opts.Notice == 0 {
		opts.Notice = policy.DefaultNotice
	}
	if opts.MinRuntime == 0 {
		opts.MinRuntime = policy.DefaultMinRuntime
	}
	return opts
}

// prepareTrace copies the trace (the runs share it) and makes each
// request's state, by index of the copy's items and by request ID; with a
// MaxWait, each request must start by its deadline.
func prepareTrace(setup Setup, tr *Trace, inv *scheduler.Inventory) (*Trace, []reqState, map[string]*reqState) {
	tr = &Trace{Items: append([]Item(nil), tr.Items...), Bad: tr.Bad, Start: tr.Start}
	states := make([]reqState, len(tr.Items))
	byID := make(map[string]*reqState, len(tr.Items))
	shares := map[string]float64{}
	for i := range tr.Items {
		it := &tr.Items[i]
		states[i] = reqState{item: it, key: it.Request.Need.Key(), share: shareOf(inv, it.Request.Need, shares)}
		if setup.MaxWait > 0 {
			states[i].deadline = it.Request.Submitted.Add(setup.MaxWait)
			it.Request.StartBy = states[i].deadline
		}
		byID[it.Request.ID] = &states[i]
	}
	return tr, states, byID
}

// observe shows the run after a cycle to fn.
func observe(fn func(Snapshot), now time.Time, inv *scheduler.Inventory, queue []scheduler.Request, running map[string]*vmState, eng scheduler.Policy, opts scheduler.Options, d scheduler.Decision) {
	sn := Snapshot{Now: now, Inventory: inv, Queue: queue, Policy: eng, Options: opts}
	for _, id := range sortedIDs(running) {
		sn.Running = append(sn.Running, running[id].run)
	}
	for _, s := range d.Start {
		sn.Started = append(sn.Started, s.ID)
	}
	fn(sn)
}

// applyDecision records a cycle's decision d at now: the VMs it starts,
// refuses, preempts, warns and stops, and why the others wait. It returns
// the requests that leave the queue.
func applyDecision(now time.Time, d scheduler.Decision, byID map[string]*reqState, running map[string]*vmState, res *Result) map[string]bool {
	gone := map[string]bool{}
	for _, s := range d.Start {
		st := byID[s.ID]
		st.accepted, st.wait = true, now.Sub(st.item.Request.Submitted)
		f := policy.PlacedFootprint(s.Placement)
		v := &vmState{st: st, share: f.Share, run: scheduler.Running{Request: st.item.Request, Placement: s.Placement, Started: now, End: s.End, Booking: s.Booking}}
		v.actual = now.Add(st.item.Runtime)
		if s.End.Before(v.actual) {
			v.actual = s.End
		}
		leaseEnd := now.Add(st.item.Request.Lease)
		if !s.End.IsZero() && s.End.Before(leaseEnd) {
			leaseEnd = s.End
		}
		st.granted = f.Share * leaseEnd.Sub(now).Hours()
		running[s.ID] = v
		gone[s.ID] = true
	}
	for _, r := range d.Refused {
		byID[r.ID].refused = string(r.Reason.Code)
		res.RefusedAtOnce[string(r.Reason.Code)]++
		gone[r.ID] = true
	}
	for _, p := range d.Preempt {
		if v, ok := running[p.ID]; ok {
			v.run.Stopping, v.run.PreemptedFor, v.run.End = true, p.For, p.StopAt
			if p.StopAt.Before(v.actual) {
				v.actual = p.StopAt
			}
			res.Preemptions++
		}
	}
	for _, a := range d.Actions {
		v, ok := running[a.ID]
		if !ok {
			continue
		}
		switch a.Kind {
		case scheduler.ActionWarn:
			v.run.Warned = true
		case scheduler.ActionStop:
			v.run.Stopping = true
			if now.Before(v.actual) {
				v.actual = now
				res.WindowStops++
			}
		}
	}
	for id, w := range d.Waiting {
		byID[id].last = w.Reason
	}
	return gone
}

// withdraw takes out of the queue the requests that leave it: gone, or
// whose last chance was this cycle (max wait).
func withdraw(now time.Time, queue []scheduler.Request, byID map[string]*reqState, gone, queued map[string]bool, res *Result) []scheduler.Request {
	// Withdraw requests whose last chance was this cycle.
	kept := queue[:0]
	for _, r := range queue {
		st := byID[r.ID]
		switch {
		case gone[r.ID]:
		case !st.deadline.IsZero() && !now.Before(st.deadline):
			code := string(st.last.Code)
			if code == "" {
				code = string(scheduler.CodeNoCapacity)
			}
			st.refused = "max_wait:" + code
			res.Expired[code]++
		default:
			kept = append(kept, r)
			continue
		}
		delete(queued, r.ID)
	}
	return kept
}

// nextEvent is the time of the next cycle after now; done when the run is
// over.
func nextEvent(now time.Time, tick time.Duration, horizon time.Time, timed bool, tr *Trace, next int, queue []scheduler.Request, running map[string]*vmState, byID map[string]*reqState) (time.Time, bool) {
	t := now.Add(tick).Truncate(tick)
	if !t.After(now) {
		t = now.Add(tick)
	}
	if len(queue) == 0 && len(running) > 0 && !timed {
		t = horizon // nothing waits and no rule depends on the time: only events matter
	}
	if next < len(tr.Items) && tr.Items[next].Request.Submitted.Before(t) {
		t = tr.Items[next].Request.Submitted
	}
	for _, v := range running {
		if v.actual.Before(t) {
			t = v.actual
		}
	}
	for _, r := range queue {
		if dl := byID[r.ID].deadline; !dl.IsZero() && dl.Before(t) {
			t = dl
		}
	}
	if next >= len(tr.Items) && len(running) == 0 && (len(queue) == 0 || now.After(horizon)) {
		return t, true
	}
	if len(queue) == 0 && len(running) == 0 && next < len(tr.Items) {
		t = tr.Items[next].Request.Submitted
	}
	if !t.After(now) {
		t = now.Add(time.Second)
	}
	return t, false
}

// expireLeft refuses what is still queued at the end of the run (only
// when max-wait is 0 and the horizon passed).
func expireLeft(queue []scheduler.Request, byID map[string]*reqState, res *Result) {
	for _, r := range queue {
		st := byID[r.ID]
		st.refused = "max_wait:" + string(st.last.Code)
		res.Expired[string(st.last.Code)]++
	}
}

// finish turns the time integrals and the series into the result's figures.
func finish(res *Result, series map[int64]*Point, bucket time.Duration, gpus, sumUsed, sumStranded, sumFree, sumVFree, sumTime float64) {
	if sumTime > 0 {
		res.Utilization = sumUsed / sumTime / gpus
		res.Stranded = sumStranded / sumTime
		res.VGPUFreeGiB = round(sumVFree/sumTime, 1)
		if sumFree > 0 {
			res.StrandedShare = sumStranded / sumFree
		}
	}
	keys := make([]int64, 0, len(series))
	for k := range series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		p := *series[k]
		h := bucket.Hours()
		p.Utilization, p.Stranded, p.Waiting = round(p.Utilization/h, 4), round(p.Stranded/h, 3), round(p.Waiting/h, 2)
		res.Series = append(res.Series, p)
	}
}

func (s *reqState) servedHours(h float64) { s.served += h }

// shareOf is the share of GPUs a need gets on this cluster when it is
// empty (the estimate of pkg/policy when nothing here can give it).
func shareOf(inv *scheduler.Inventory, n scheduler.Need, cache map[string]float64) float64 {
	k := fmt.Sprintf("%s/%d/%s", n.Key(), n.Count, n.Model)
	if s, ok := cache[k]; ok {
		return s
	}
	s := policy.NeedFootprint(n).Share
	if p, why := inv.Place(n, scheduler.PlaceOptions{}); why.OK() {
		s = p.Share()
	}
	cache[k] = s
	return s
}

func sortedIDs(m map[string]*vmState) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func mixedHosts(hosts []scheduler.HostSpec) []scheduler.HostSpec {
	out := make([]scheduler.HostSpec, len(hosts))
	for i, h := range hosts {
		out[i] = h
		out[i].GPUs = append([]scheduler.GPUSpec(nil), h.GPUs...)
		for j := range out[i].GPUs {
			g := &out[i].GPUs[j]
			if g.Allow == gpu.ModeVGPU || g.Mode == gpu.ModeVGPU {
				g.MixedSize = true
			}
		}
	}
	return out
}

// book makes the cluster file's bookings at the trace's start, as an admin
// would have: each is checked against capacity and the others.
func book(setup Setup, tr *Trace, inv *scheduler.Inventory, eng *policy.Engine) []BookingResult {
	var out []BookingResult
	var made []*policy.Booking
	for _, bs := range setup.Cluster.Bookings {
		b := bs.Booking
		if bs.Offset != nil {
			b.Start = tr.Start.Add(*bs.Offset)
		}
		b.End = b.Start.Add(bs.Length)
		if bs.Until != nil {
			b.Repeat.Until = tr.Start.Add(*bs.Until)
		}
		if b.Profile != "" && b.Need.Kind == "" {
			if p, ok := setup.Profiles[b.Profile]; ok && p.GPU != nil {
				b.Need = policy.NeedFromProfile(p.GPU)
			}
		}
		var rules *config.Reservations
		if setup.Policy != nil {
			rules = setup.Policy.Reservations
		}
		nb, err := policy.Book(b, policy.BookOptions{Now: tr.Items[0].Request.Submitted, Rules: rules, Admin: true, Location: eng.Location(), Inventory: inv, Existing: made})
		if err != nil {
			out = append(out, BookingResult{ID: b.ID, Error: strings.ReplaceAll(err.Error(), "\n", "; ")})
			continue
		}
		made = append(made, nb)
		out = append(out, BookingResult{ID: b.ID})
	}
	eng.SetBookings(made)
	return out
}

func summarise(res *Result, states []reqState) {
	type acc struct {
		t     Type
		waits []float64
	}
	byKey := map[string]*acc{}
	served := map[string]float64{}
	asked := map[string]float64{}
	var waits []float64
	for i := range states {
		s := &states[i]
		r := &s.item.Request
		a := byKey[s.key]
		if a == nil {
			a = &acc{t: Type{Key: s.key, Share: s.share}}
			byKey[s.key] = a
		}
		a.t.Requested++
		res.Requests++
		asked[r.User] += s.share * r.Lease.Hours()
		res.GPUHoursRequested += s.share * r.Lease.Hours()
		if s.accepted {
			a.t.Accepted++
			res.Accepted++
			w := s.wait.Minutes()
			a.waits = append(a.waits, w)
			waits = append(waits, w)
		} else {
			res.Refused++
		}
	}
	for i := range states {
		s := &states[i]
		byKey[s.key].t.GPUHours += s.served
		served[s.item.Request.User] += s.served
		res.GPUHoursGranted += s.granted
	}
	users := make([]string, 0, len(asked))
	for u := range asked {
		users = append(users, u)
	}
	sort.Strings(users)
	var xs []float64
	for _, u := range users {
		if asked[u] > 0 {
			xs = append(xs, served[u]/asked[u])
		}
	}
	res.Fairness = round(Jain(xs), 4)
	if res.Requests > 0 {
		res.Acceptance = round(float64(res.Accepted)/float64(res.Requests), 4)
	}
	res.MeanWaitMin, res.P95WaitMin = meanP95(waits)
	res.P90WaitMin = round(quantile(waits, 0.9), 1)
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := byKey[keys[i]].t, byKey[keys[j]].t
		if a.Share != b.Share {
			return a.Share > b.Share
		}
		return a.Key < b.Key
	})
	for _, k := range keys {
		a := byKey[k]
		a.t.Acceptance = round(float64(a.t.Accepted)/float64(a.t.Requested), 4)
		a.t.MeanWaitMin, a.t.P95WaitMin = meanP95(a.waits)
		a.t.Share = round(a.t.Share, 4)
		a.t.GPUHours = round(a.t.GPUHours, 2)
		res.Types = append(res.Types, a.t)
	}
	res.GPUHoursServed = round(res.GPUHoursServed, 2)
	res.GPUHoursRequested = round(res.GPUHoursRequested, 2)
	res.GPUHoursGranted = round(res.GPUHoursGranted, 2)
	res.Utilization = round(res.Utilization, 4)
	res.Stranded = round(res.Stranded, 3)
	res.StrandedShare = round(res.StrandedShare, 4)
}

func meanP95(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	idx := int(math.Ceil(0.95*float64(len(s)))) - 1
	return round(sum/float64(len(s)), 1), round(s[max(idx, 0)], 1)
}

// quantile is the q-quantile of xs (nearest rank; 0 for none).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// Jain is Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all are
// equal, 1/n when one gets everything.
func Jain(xs []float64) float64 {
	if len(xs) == 0 {
		return 1
	}
	s, s2 := 0.0, 0.0
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}
