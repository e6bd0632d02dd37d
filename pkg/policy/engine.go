package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// Defaults of preemption (scheduler.Options), after KAI's
// min-guaranteed-runtime and Slurm's GraceTime.
const (
	DefaultNotice     = 10 * time.Minute
	DefaultMinRuntime = time.Hour
)

// Config is what an Engine applies.
type Config struct {
	// Policy is the configuration's policy block; nil is no rules: fifo,
	// no quota, no window.
	Policy *config.Policy
	// Order overrides Policy.Queue.Order when set (the simulator compares
	// orders on one policy).
	Order string
	// HalfLife overrides the fairshare half-life when set.
	HalfLife time.Duration
	// GroupTotals caps what all members of a group hold together, besides
	// the per-user limits of the policy's group blocks.
	GroupTotals map[string]config.Quota
	// Usage is the decayed usage fairshare orders by (nil: none yet).
	Usage *Usage
	// Ledger is the ended use GPU-hour budgets count (nil: none).
	Ledger *Ledger
	// Bookings are the bookings made (see Book).
	Bookings []*Booking
	// MaxLease caps leases of requests without a profile (0: no cap);
	// requests with a profile are capped by its lease.max.
	MaxLease time.Duration
	// Profiles resolves Request.Profile for lease limits.
	Profiles map[string]*config.Profile
}

// Engine applies gpuvm's rules; it implements scheduler.Policy.
type Engine struct {
	cfg     Config
	order   string
	windows Windows
	loc     *time.Location
	// plain are the VMs that hold no GPU and count against the quotas as
	// one VM each (SetWithoutGPU).
	plain []scheduler.Request
	// budgets: some quota has a GPU-hour budget, which counts what each
	// principal's running VMs have used (their tallies keep them).
	budgets bool
}

var _ scheduler.Policy = (*Engine)(nil)

// New makes an engine.
func New(c Config) (*Engine, error) {
	e := &Engine{cfg: c, order: config.OrderFIFO, loc: time.UTC}
	if c.Policy != nil {
		e.order = c.Policy.Queue.Order
		if c.Policy.Location != nil {
			e.loc = c.Policy.Location
		}
	}
	if c.Order != "" {
		e.order = c.Order
	}
	switch e.order {
	case "", config.OrderFIFO, config.OrderPriority, config.OrderSJF, config.OrderFairshare:
	default:
		return nil, fmt.Errorf("queue order %q is not fifo, priority, sjf or fairshare", e.order)
	}
	if e.order == "" {
		e.order = config.OrderFIFO
	}
	e.windows = NewWindows(c.Policy)
	e.budgets = budgeted(c)
	return e, nil
}

// budgeted reports whether a quota of c has a GPU-hour budget.
func budgeted(c Config) bool {
	for _, q := range c.GroupTotals {
		if q.HasBudget() {
			return true
		}
	}
	p := c.Policy
	if p == nil {
		return false
	}
	if p.Defaults.Quota.HasBudget() {
		return true
	}
	for _, u := range p.Users {
		if u.Quota.HasBudget() {
			return true
		}
	}
	for _, g := range p.Groups {
		if g.Quota.HasBudget() {
			return true
		}
	}
	return false
}

// Order is the queue order the engine applies.
func (e *Engine) Order() string { return e.order }

// Location is the timezone of windows and budgets.
func (e *Engine) Location() *time.Location { return e.loc }

// Windows are the policy's time windows.
func (e *Engine) Windows() Windows { return e.windows }

// SetBookings replaces the bookings.
func (e *Engine) SetBookings(b []*Booking) { e.cfg.Bookings = b }

// SetWithoutGPU replaces the live VMs that hold no GPU (their profile asks
// for none): every session counts each against its owner's and group's
// quotas as one VM, for a VM without a GPU still takes CPU, memory and
// disk. Their ID, User, Group and Groups are what counts.
func (e *Engine) SetWithoutGPU(vms []scheduler.Request) { e.plain = slices.Clone(vms) }

// AddWithoutGPU counts one more VM without a GPU (one a round started).
func (e *Engine) AddWithoutGPU(r scheduler.Request) { e.plain = append(e.plain, r) }

// AdmitWithoutGPU applies the quotas to a VM whose profile asks for no GPU:
// it counts as one VM, and holds no slice, GPU, memory or GPU-hours; the
// time windows and lease limits, which are about GPUs, do not apply. As
// Admit, refuse is true when the VM alone is over a limit.
func (e *Engine) AdmitWithoutGPU(now time.Time, running []scheduler.Running, r *scheduler.Request) (scheduler.Reason, bool) {
	s := e.Begin(now, running).(*session)
	return s.quotas(r, Footprint{VMs: 1})
}

// Bookings are the bookings the engine holds capacity for.
func (e *Engine) Bookings() []*Booking { return e.cfg.Bookings }

type session struct {
	e       *Engine
	now     time.Time
	users   map[string]*tally
	groups  map[string]*tally
	running []scheduler.Running
	usage   map[string]float64
	tallies []tally // where users' and groups' tallies are made
	// The windows at now, and the batch leases that would run into a
	// window that forbids batch, looked up once per session.
	atDone    bool
	at        Stretch
	atOK      bool
	atWhy     scheduler.Reason // why the window at now holds a class back
	forbidden map[time.Duration]scheduler.Reason
}

// windowAt is the window stretch now falls in (Windows.At), once a session.
func (s *session) windowAt() (Stretch, bool) {
	if !s.atDone {
		s.at, s.atOK = s.e.windows.At(s.now)
		s.atDone = true
	}
	return s.at, s.atOK
}

// forbiddingBatch is why a batch lease from now waits: it runs into a
// window that forbids batch (Windows.Forbidding); once a session per lease.
func (s *session) forbiddingBatch(lease time.Duration) scheduler.Reason {
	if why, ok := s.forbidden[lease]; ok {
		return why
	}
	var why scheduler.Reason
	if st, ok := s.e.windows.Forbidding(config.ClassBatch, s.now, s.now.Add(lease)); ok {
		why = scheduler.Reason{Code: scheduler.CodeWindow, Detail: fmt.Sprintf("the lease would run into window %q (%s), which forbids batch; a preemptible VM could", st.Window.Name, stamp(st.Start, s.e.loc))}
	}
	if s.forbidden == nil {
		s.forbidden = map[time.Duration]scheduler.Reason{}
	}
	s.forbidden[lease] = why
	return why
}

// Begin opens a cycle.
func (e *Engine) Begin(now time.Time, running []scheduler.Running) scheduler.Session {
	n := min(len(running)+len(e.plain), 64)
	s := &session{e: e, now: now, users: make(map[string]*tally, n), groups: map[string]*tally{}, running: running,
		tallies: make([]tally, 0, n)}
	for i := range running {
		r := &running[i]
		f := PlacedFootprint(r.Placement)
		ut := s.tally(s.users, r.User)
		ut.add(f)
		if e.budgets {
			ut.running = append(ut.running, r)
		}
		if gt := s.groupTally(r.Group); gt != nil {
			gt.add(f)
			if e.budgets {
				gt.running = append(gt.running, r)
			}
		}
	}
	for i := range e.plain {
		r := &e.plain[i]
		s.tally(s.users, r.User).add(Footprint{VMs: 1})
		if gt := s.groupTally(r.Group); gt != nil {
			gt.add(Footprint{VMs: 1})
		}
	}
	return s
}

func (s *session) tally(m map[string]*tally, k string) *tally {
	t, ok := m[k]
	if !ok {
		// From a block of them: a scheduling cycle begins several
		// sessions, an estimate's replay thousands (issue #26). A full
		// block is left to the tallies that point into it.
		if len(s.tallies) == cap(s.tallies) {
			s.tallies = make([]tally, 0, max(16, 2*cap(s.tallies)))
		}
		s.tallies = append(s.tallies, tally{})
		t = &s.tallies[len(s.tallies)-1]
		m[k] = t
	}
	return t
}

func (s *session) groupTally(g string) *tally {
	if g == "" {
		return nil
	}
	return s.tally(s.groups, g)
}

// Order sorts the queue by the engine's order.
func (s *session) Order(q []scheduler.Request) []scheduler.Request {
	var factor func(string) float64
	if s.e.order == config.OrderFairshare {
		f := s.fairshare(q)
		factor = func(u string) float64 { return f[u] }
	}
	return orderQueue(s.e.order, q, s.now, factor)
}

// fairshare computes every user's factor from decayed past usage plus what
// their running VMs have used so far.
func (s *session) fairshare(q []scheduler.Request) map[string]float64 {
	usage := map[string]float64{}
	var users []string
	seen := map[string]bool{}
	note := func(u string) {
		if !seen[u] {
			seen[u] = true
			users = append(users, u)
		}
	}
	if s.e.cfg.Usage != nil {
		for _, u := range s.e.cfg.Usage.Users() {
			usage[u] = s.e.cfg.Usage.At(u, s.now)
			note(u)
		}
	}
	for _, r := range s.running {
		if s.now.After(r.Started) {
			usage[r.User] += PlacedFootprint(r.Placement).Share * s.now.Sub(r.Started).Hours()
		}
		note(r.User)
	}
	for i := range q {
		note(q[i].User)
	}
	s.usage = usage
	return fairshareFactors(usage, users)
}

// Admit applies lease limits, time windows and quotas.
func (s *session) Admit(r *scheduler.Request) (scheduler.Reason, bool) {
	if why, refuse := s.e.leaseRefusal(r); refuse {
		return why, true
	}
	if why, refuse := s.window(r); !why.OK() {
		return why, refuse
	}
	return s.quotas(r, NeedFootprint(r.Need))
}

var _ scheduler.Refuser = (*Engine)(nil)

// Refusal says whether every session's Admit refuses r, and why: a lease
// out of bounds, a class no window lets start or a batch lease longer than
// any stretch free of windows that forbid batch, a need over a quota's
// limit alone. None depends on the time or on what runs; Admit says the
// same, or a reason to wait that comes first in its checks.
func (e *Engine) Refusal(r *scheduler.Request) (scheduler.Reason, bool) {
	if why, refuse := e.leaseRefusal(r); refuse {
		return why, true
	}
	if len(e.windows.list) > 0 {
		class := classOf(r)
		if why, refuse := e.windows.neverAllowed(class); refuse {
			return why, true
		}
		if why, refuse := e.windows.batchTooLong(r, class); refuse {
			return why, true
		}
	}
	need := NeedFootprint(r.Need)
	if p := e.cfg.Policy; p != nil {
		eff := p.Effective(r.User, groupsOf(r))
		if why, refuse := quotaNever("user "+r.User, eff.Quota, need, r); refuse {
			return why, true
		}
	}
	if q, ok := e.cfg.GroupTotals[r.Group]; ok && r.Group != "" {
		if why, refuse := quotaNever("group "+r.Group, q, need, r); refuse {
			return why, true
		}
	}
	return scheduler.Reason{}, false
}

// leaseRefusal refuses a lease of 0, or longer than the most allowed.
func (e *Engine) leaseRefusal(r *scheduler.Request) (scheduler.Reason, bool) {
	if r.Lease <= 0 {
		return scheduler.Reason{Code: scheduler.CodeInvalid, Detail: "a VM needs a lease longer than 0"}, true
	}
	if max := e.maxLease(r); max > 0 && r.Lease > max {
		return scheduler.Reason{Code: scheduler.CodeInvalid, Detail: fmt.Sprintf("a lease of %s is longer than the most, %s", config.FormatDuration(r.Lease), config.FormatDuration(max))}, true
	}
	return scheduler.Reason{}, false
}

// quotas checks what r needs against its user's and its group's quotas.
func (s *session) quotas(r *scheduler.Request, need Footprint) (scheduler.Reason, bool) {
	p := s.e.cfg.Policy
	if p != nil {
		eff := p.Effective(r.User, groupsOf(r))
		var ledger []Record
		if s.e.cfg.Ledger != nil {
			ledger = s.e.cfg.Ledger.byUser[r.User]
		}
		if why, refuse := checkQuota("user "+r.User, eff.Quota, s.users[r.User], ledger, need, r, s.now, s.e.loc); !why.OK() {
			return why, refuse
		}
	}
	if q, ok := s.e.cfg.GroupTotals[r.Group]; ok && r.Group != "" {
		var ledger []Record
		if s.e.cfg.Ledger != nil {
			ledger = s.e.cfg.Ledger.byGroup[r.Group]
		}
		if why, refuse := checkQuota("group "+r.Group, q, s.groups[r.Group], ledger, need, r, s.now, s.e.loc); !why.OK() {
			return why, refuse
		}
	}
	return scheduler.Reason{}, false
}

func groupsOf(r *scheduler.Request) []string {
	if r.Group == "" || contains(r.Groups, r.Group) {
		return r.Groups
	}
	return append([]string{r.Group}, r.Groups...)
}

func (e *Engine) maxLease(r *scheduler.Request) time.Duration {
	if p, ok := e.cfg.Profiles[r.Profile]; ok && p != nil && p.Lease.Max > 0 {
		return p.Lease.Max
	}
	return e.cfg.MaxLease
}

// classOf is r's class; interactive when it has none.
func classOf(r *scheduler.Request) string {
	if r.Class == "" {
		return config.ClassInteractive
	}
	return r.Class
}

// window applies the time windows: the class must be allowed to start now,
// and a batch VM that is not preemptible must not run into a window that
// forbids batch.
func (s *session) window(r *scheduler.Request) (scheduler.Reason, bool) {
	w := s.e.windows
	if len(w.list) == 0 {
		return scheduler.Reason{}, false
	}
	class := classOf(r)
	if why, refuse := w.neverAllowed(class); refuse {
		return why, true
	}
	if st, ok := s.windowAt(); ok && !st.Window.Allows(class) {
		// The same words for every request the window holds back, made
		// once a session (thousands wait behind a long queue's head).
		if s.atWhy.Detail == "" {
			s.atWhy = scheduler.Reason{Code: scheduler.CodeWindow, Detail: fmt.Sprintf("window %q lets only %s start, until %s", st.Window.Name, classList(st.Window), stamp(st.End, s.e.loc))}
		}
		return s.atWhy, false
	}
	if class == config.ClassBatch && !r.Preemptible {
		if why, refuse := w.batchTooLong(r, class); refuse {
			return why, true
		}
		if why := s.forbiddingBatch(r.Lease); !why.OK() {
			return why, false
		}
	}
	return scheduler.Reason{}, false
}

// neverAllowed refuses a class no time of the week lets start.
func (w Windows) neverAllowed(class string) (scheduler.Reason, bool) {
	if !w.AllowedSomewhere(class) {
		return scheduler.Reason{Code: scheduler.CodeWindow, Detail: fmt.Sprintf("no time of the week lets %s VMs start", class)}, true
	}
	return scheduler.Reason{}, false
}

// batchTooLong refuses a batch VM that is not preemptible whose lease is
// longer than any stretch of the week free of windows that forbid batch.
func (w Windows) batchTooLong(r *scheduler.Request, class string) (scheduler.Reason, bool) {
	if class != config.ClassBatch || r.Preemptible {
		return scheduler.Reason{}, false
	}
	if l := w.LongestAllowed(class); l >= 0 && r.Lease > time.Duration(l)*time.Minute {
		return scheduler.Reason{Code: scheduler.CodeWindow, Detail: fmt.Sprintf("a batch lease of %s always runs into a window that forbids batch (the longest free stretch is %s)", config.FormatDuration(r.Lease), config.FormatDuration(time.Duration(l)*time.Minute))}, true
	}
	return scheduler.Reason{}, false
}

func classList(w *config.Window) string {
	if len(w.Classes) == 0 {
		return "nothing"
	}
	return strings.Join(w.Classes, " and ")
}

// Bookings splits the booked capacity over [from, to) into the request's
// own and everyone else's. The own come in the order a VM should use them:
// those that hold at from before those that start later, then the user's
// own before their groups', then by start.
func (s *session) Bookings(r *scheduler.Request, from, to time.Time) (others, own []scheduler.Hold) {
	group := map[string]bool{}
	for _, b := range s.e.cfg.Bookings {
		hs := b.holds(from, to, s.e.loc)
		if len(hs) == 0 {
			continue
		}
		if b.Owner.Includes(r) && (b.Profile == "" || b.Profile == r.Profile) {
			own = append(own, hs...)
			group[b.ID] = b.Owner.Kind == OwnerGroup
		} else {
			others = append(others, hs...)
		}
	}
	sort.SliceStable(own, func(i, j int) bool {
		a, b := own[i], own[j]
		if na, nb := !a.From.After(from), !b.From.After(from); na != nb {
			return na
		}
		if group[a.ID] != group[b.ID] {
			return !group[a.ID]
		}
		return a.From.Before(b.From)
	})
	return others, own
}

// Started counts a start against the quotas of the rest of the cycle.
func (s *session) Started(r *scheduler.Request, p scheduler.Placement, end time.Time) {
	f := PlacedFootprint(p)
	for _, t := range []*tally{s.tally(s.users, r.User), s.groupTally(r.Group)} {
		if t == nil {
			continue
		}
		t.add(f)
		t.started = append(t.started, startedVM{f.Share, s.now, end})
	}
}

func (t *tally) add(f Footprint) { t.Footprint.add(f) }

// Actions warns and stops VMs at the end of the window they started in,
// as the window's at_end says.
func (s *session) Actions(running []scheduler.Running) []scheduler.Action {
	var out []scheduler.Action
	w := s.e.windows
	for _, r := range running {
		st, ok := w.At(r.Started)
		if !ok || st.Window.AtEnd == config.AtEndNothing || st.Window.AtEnd == "" || !r.End.After(st.End) {
			continue
		}
		warnAt := st.End.Add(-st.Window.WarnBefore)
		why := fmt.Sprintf("window %q ends at %s", st.Window.Name, stamp(st.End, s.e.loc))
		if st.Window.AtEnd == config.AtEndStop {
			if !s.now.Before(st.End) {
				out = append(out, scheduler.Action{ID: r.ID, Kind: scheduler.ActionStop, At: st.End, Reason: why})
				continue
			}
			why += "; the VM will be stopped then"
		}
		if !r.Warned && !s.now.Before(warnAt) && s.now.Before(st.End) {
			out = append(out, scheduler.Action{ID: r.ID, Kind: scheduler.ActionWarn, At: st.End, Reason: why})
		}
	}
	return out
}
