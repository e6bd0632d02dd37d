package server

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/estimate"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The estimates are computed once per change of the state, not per
// request. One background worker (started by gpuvmd, StartEstimates, or
// else by the first request that needs them; stopped by Close) reads a
// cheap fingerprint of the state, the state version, every estimatePoll
// and whenever a request asks it to: the
// newest event's ID (a VM made, started, ended, queued again, its lease
// extended: every write of a VM's state appends an event, whichever gpuvmd
// of a fleet made it), the reservations' stamp, the drained GPUs, each
// host's state (up, draining, down by its heartbeat's age) and stored
// inventory, the configuration in force and the time window in force.
// When it changes, and a request has read the estimates since the last
// replay began (a change nobody looks at costs nothing: a burst of creates
// is replayed once somebody asks) or the last replay is estimateRefresh
// old, the worker replays the queue, probes
// NextFree for the user×profile pairs asked for, counts what each profile
// has free, and publishes the result. Changes that come while it computes are coalesced:
// one computation runs, at most one more follows. A computation older
// than estimateRefresh (5 minutes) is redone (the time passes: bookings start, groups
// change at sign-in).
//
// Requests read the last computation without waiting, and say when it was
// made and whether the state changed since (estimate_computed_at,
// estimate_stale). A request waits, at most estimateWait and while its
// context lasts, only for what no computation has yet: the first one, a
// queued VM made since the last one. A probe never asked for is not waited
// for: the profile says its estimate is stale until it is made.

const (
	// estimatePoll is how often the worker reads the state version.
	estimatePoll = time.Second
	// estimateRefresh is how old a computation may grow with no change.
	estimateRefresh = 5 * time.Minute
	// estimateWait bounds a request's wait for what is not computed yet.
	estimateWait = 10 * time.Second
	// estimateProbes bounds the user×profile probes kept (recomputed at
	// each change); the least recently asked for is forgotten. Each is a
	// replay of the queue with the probe at its tail.
	estimateProbes = 64
	// estimateProbeIdle: a probe not asked for this long is forgotten, not
	// recomputed at the next change (asked again, it is computed then), so
	// that the work a change costs follows the people looking now.
	estimateProbeIdle = 10 * time.Minute
)

// estimates is the worker's state, shared with the requests.
type estimates struct {
	mu   sync.Mutex
	snap *estimateSnap // the last published; nil before the first
	// gen counts the changes the worker has seen; a snapshot whose gen is
	// lower is stale.
	gen     uint64
	version string // the last state version read
	failing bool   // the last version read failed (logged once)
	// polls counts the version reads started and done: a request that
	// needs one made after its own writes waits for done > started.
	pollsStarted, pollsDone uint64
	// changed is closed and replaced when a snapshot is published or a
	// version read is done.
	changed chan struct{}
	// kick asks the worker to read the version now (capacity 1).
	kick chan struct{}
	// read is when a request last read the estimates, and wake (capacity
	// 1) tells the worker that one read a stale snapshot: a change is
	// replayed once somebody has looked since the last replay began, not
	// for every create of a burst that nobody reads (a fleet's every node
	// replayed its whole queue while creates came, issue #26).
	read time.Time
	wake chan struct{}
	// began is when the worker began the replay of the last snapshot.
	began time.Time
	// dirty: this server wrote since the last version read began. A write
	// kicks a version read only while somebody reads the estimates (see
	// noteWrite); otherwise the answers say stale until the read.
	dirty bool
	// wants are the probes asked for, by probeKey.
	wants map[string]*probeWant
	// beforeCompute, when set (tests), is called by the worker before each
	// computation, with the gen it computes for.
	beforeCompute func(gen uint64)
	// restTimes is how many times a replay's duration the worker rests
	// while changes keep coming (estimateRest; tests set more).
	restTimes int

	started, closed bool
	stopped         chan struct{} // closed when the worker returns
}

// probeWant is a NextFree probe asked for: the user (and groups) behind
// the queue, and the profile.
type probeWant struct {
	user    string
	groups  []string
	profile string
	used    time.Time // last asked for
}

func probeKey(user, profile string) string { return user + "\x00" + profile }

func newEstimates() *estimates {
	return &estimates{changed: make(chan struct{}), kick: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		wants: map[string]*probeWant{}, stopped: make(chan struct{}), restTimes: estimateRest}
}

// StartEstimates starts the estimates' worker now rather than at the first
// request that reads them, so that the first answers find them computed:
// gpuvmd calls it once it serves.
func (s *Server) StartEstimates() { s.startEstimates() }

// startEstimates starts the worker once (not after Close).
func (s *Server) startEstimates() {
	e := s.estimates
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.closed || s.Config == nil {
		return
	}
	e.started = true
	go func() {
		defer close(e.stopped)
		s.runEstimates(s.ctx)
	}()
}

// stopEstimates stops the worker and waits for it (Close).
func (s *Server) stopEstimates() {
	e := s.estimates
	e.mu.Lock()
	e.closed = true
	started := e.started
	e.mu.Unlock()
	s.cancel()
	if started {
		<-e.stopped
	}
}

// kickEstimates asks the worker to look for changes now: the handlers that
// change the state call it, so that this server's own changes are seen at
// once rather than at the next poll.
func (s *Server) kickEstimates() {
	select {
	case s.estimates.kick <- struct{}{}:
	default:
	}
}

// kickOnWrite kicks the estimates' worker after a request that may have
// changed the state (any method but GET, HEAD and OPTIONS that succeeded):
// it reads the state version at once, rather than at its next poll.
func (s *Server) kickOnWrite(c *gin.Context) {
	c.Next()
	switch c.Request.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return
	}
	if c.Writer.Status() < 400 {
		s.noteWrite()
	}
}

// noteWrite notes a write of this server: the answers say stale until the
// state version is read again, which it asks for at once while somebody
// reads the estimates (a read since the last replay began), and else
// leaves to the next poll or read: a burst of creates nobody looks at costs
// the database no version reads (issue #26).
func (s *Server) noteWrite() {
	e := s.estimates
	e.mu.Lock()
	e.dirty = true
	watched := e.watched()
	e.mu.Unlock()
	if watched {
		s.kickEstimates()
	}
}

// watched: somebody has read the estimates since the last replay began, or
// none is made yet (e.mu held). A change is replayed only then, or once the
// last replay is estimateRefresh old (so that no reader ever meets one
// older than that, whatever the time since the last look).
func (e *estimates) watched() bool {
	return e.snap == nil || !e.read.Before(e.began) || time.Since(e.snap.computed) >= estimateRefresh
}

// runEstimates is the worker: it reads the state version, and computes
// what is behind, until ctx ends.
func (s *Server) runEstimates(ctx context.Context) {
	e := s.estimates
	t := time.NewTicker(estimatePoll)
	defer t.Stop()
	s.pollEstimates(ctx)
	var rs rest
	for ctx.Err() == nil {
		e.mu.Lock()
		sn := e.snap
		behind := sn == nil || sn.gen < e.gen && e.watched()
		missing := sn != nil && len(e.missingProbes(sn)) > 0
		version, times := e.version, e.restTimes
		e.mu.Unlock()
		switch {
		case missing: // asked for by a waiting request: first
			s.addProbes(ctx)
			continue
		case behind && rs.over(time.Now()):
			start := time.Now()
			s.computeEstimates(ctx)
			rs = newRest(time.Now(), time.Since(start), times)
			s.pollEstimates(ctx) // what changed while it ran: the rest's first look
			continue
		case behind:
			rs.seen(version)
			select {
			case <-ctx.Done():
				return
			case <-time.After(rs.wait(time.Now())):
				if rs.checkQuiet(time.Now()) {
					s.pollEstimates(ctx)
					e.mu.Lock()
					rs.quiet(time.Now(), e.version)
					e.mu.Unlock()
				}
			case <-e.kick: // a request may wait for a probe: see to it
				s.pollEstimates(ctx)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-e.wake: // a stale snapshot was read: see what changed, replay now
			s.pollEstimates(ctx)
			continue
		case <-e.kick:
		case <-t.C:
		}
		s.pollEstimates(ctx)
	}
}

// estimateRest is how many times a replay's duration the worker rests
// before the next while changes keep coming.
const estimateRest = 2

// rest is the worker's pause after a replay that the state changed under:
// estimateRest times the replay's duration, so that a stream of changes
// (creates arriving) gets at most a third of a core's worth of replays,
// and the creates the rest of the machine; meanwhile the answers say they
// are stale. Cut to the replay's duration when the state has not changed
// since the worker first saw the replay stale: the changes came while it
// ran (a burst's last creates, the rounds that rank them) and have
// stopped, and the next replay catches up (at most half a core while it
// does). The zero rest is over.
type rest struct {
	until, early time.Time
	version      string // the state version the worker first saw stale; "" until then
}

// newRest is the rest after a replay that ended at end and took took.
func newRest(end time.Time, took time.Duration, times int) rest {
	return rest{until: end.Add(time.Duration(times) * took), early: end.Add(took)}
}

// over reports whether the rest is over at now.
func (r *rest) over(now time.Time) bool { return !now.Before(r.until) }

// seen notes the state version the worker saw stale, the first time.
func (r *rest) seen(version string) {
	if r.version == "" {
		r.version = version
	}
}

// wait is how long the worker waits before it looks again: to the
// replay's duration (to see whether the state was quiet), then to the end.
func (r *rest) wait(now time.Time) time.Duration {
	if !r.early.IsZero() && now.Before(r.early) {
		return r.early.Sub(now)
	}
	return r.until.Sub(now)
}

// checkQuiet reports whether it is time to read the state version and see
// whether it was quiet.
func (r *rest) checkQuiet(now time.Time) bool {
	return !r.early.IsZero() && !now.Before(r.early) && now.Before(r.until)
}

// quiet is told the state version read at the replay's duration: the
// same as first seen stale, the rest is over.
func (r *rest) quiet(now time.Time, version string) {
	if r.version != "" && version == r.version {
		r.until = now
	}
	r.early = time.Time{}
}

// pollEstimates reads the state version; a new one is a change.
func (s *Server) pollEstimates(ctx context.Context) {
	e := s.estimates
	e.mu.Lock()
	e.pollsStarted++
	e.dirty = false // a write from now on is read next time
	e.mu.Unlock()
	v, err := s.stateVersion(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pollsDone++
	close(e.changed)
	e.changed = make(chan struct{})
	if err != nil {
		if ctx.Err() == nil && !e.failing {
			s.log.Warn("estimates: read the state version", "err", err)
		}
		e.failing = true
		return
	}
	e.failing = false
	sn := e.snap
	if v != e.version || (sn != nil && (sn.err != nil || time.Since(sn.computed) >= estimateRefresh)) {
		e.version = v
		e.gen++
	}
}

// stateVersion is the fingerprint of what the estimates are computed
// from (see the top of this file).
func (s *Server) stateVersion(ctx context.Context) (string, error) {
	stamp, err := s.Store.StateStamp(ctx, s.hostTimeout())
	if err != nil {
		return "", err
	}
	var cfg *config.Config
	if s.Config != nil {
		cfg = s.Config.Load()
	}
	return stamp + "\x00" + policy.ConfigStamp(cfg, s.Store.Now()), nil
}

// computeEstimates makes a new snapshot of the state now and publishes it.
func (s *Server) computeEstimates(ctx context.Context) {
	e := s.estimates
	s.pollEstimates(ctx) // what is read next has seen at least this
	e.mu.Lock()
	gen, hook, prev := e.gen, e.beforeCompute, e.snap
	wants := make([]probeWant, 0, len(e.wants))
	for k, w := range e.wants {
		if time.Since(w.used) > estimateProbeIdle {
			delete(e.wants, k)
			continue
		}
		wants = append(wants, *w)
	}
	e.mu.Unlock()
	if hook != nil {
		hook(gen)
	}
	start := time.Now()
	e.mu.Lock()
	e.began = start
	e.mu.Unlock()
	sn := s.replayQueue(ctx)
	if sn.err != nil && ctx.Err() != nil {
		return // stopping
	}
	sn.gen = gen
	sn.probes = make(map[string]estimate.Estimate, len(wants))
	sn.oldProbes = map[string]bool{}
	for _, w := range wants {
		k := probeKey(w.user, w.profile)
		// Not asked for since the last snapshot: its answer is carried
		// over (said stale) and redone when asked for again, so that a
		// change costs the probes people are looking at, not all.
		if prev != nil && w.used.Before(prev.computed) {
			if old, ok := prev.probes[k]; ok {
				sn.probes[k], sn.oldProbes[k] = old, true
				continue
			}
		}
		sn.probes[k] = probe(sn, w)
	}
	models := s.hostModels(ctx, true)
	ps := sn.cfg.SortedProfiles()
	sn.never, sn.free = models.unservable(ps), models.free(ps)
	sn.computed = time.Now()
	if s.Metrics != nil {
		s.Metrics.ObserveEstimateReplay(sn.computed.Sub(start))
	}
	s.log.Debug("estimates computed", "queued", len(sn.state.Queue), "probes", len(wants), "took", sn.computed.Sub(start), "err", sn.err)
	if sn.err != nil {
		s.log.Warn("estimate the queued VMs' starts", "err", sn.err)
	}
	s.publish(sn)
}

// addProbes computes the probes asked for that the last snapshot lacks,
// on its state, and publishes it with them.
func (s *Server) addProbes(ctx context.Context) {
	e := s.estimates
	e.mu.Lock()
	old := e.snap
	missing := e.missingProbes(old)
	e.mu.Unlock()
	sn := *old
	sn.probes = make(map[string]estimate.Estimate, len(old.probes)+len(missing))
	sn.oldProbes = make(map[string]bool, len(old.oldProbes))
	for k, v := range old.probes {
		sn.probes[k] = v
	}
	for k := range old.oldProbes {
		sn.oldProbes[k] = true
	}
	for _, w := range missing {
		k := probeKey(w.user, w.profile)
		began := time.Now()
		sn.probes[k] = probe(&sn, w) // a replay, the probe at the queue's tail
		if s.Metrics != nil {
			s.Metrics.ObserveEstimateReplay(time.Since(began))
		}
		delete(sn.oldProbes, k)
	}
	if ctx.Err() == nil {
		s.publish(&sn)
	}
}

// missingProbes are the wants sn has no probe of, or only one carried
// over from an earlier snapshot that was asked for since (e.mu held).
func (e *estimates) missingProbes(sn *estimateSnap) []probeWant {
	var out []probeWant
	for k, w := range e.wants {
		if _, ok := sn.probes[k]; !ok || sn.oldProbes[k] && w.used.After(sn.computed) {
			out = append(out, *w)
		}
	}
	return out
}

func (s *Server) publish(sn *estimateSnap) {
	e := s.estimates
	e.mu.Lock()
	defer e.mu.Unlock()
	e.snap = sn
	close(e.changed)
	e.changed = make(chan struct{})
}

// probe is when a device of the want's profile is predicted to free up for
// its user behind the queue of sn.
func probe(sn *estimateSnap, w probeWant) estimate.Estimate {
	if sn.err != nil || sn.cfg == nil {
		return estimate.Estimate{}
	}
	p := sn.cfg.Profiles[w.profile]
	if p == nil || p.GPU == nil {
		return estimate.Estimate{}
	}
	groups := sn.groups[w.user]
	if groups == nil {
		groups = w.groups
	}
	hours := int(max(p.Lease.Default, time.Hour) / time.Hour)
	r := requestOf(sn.cfg, &store.VM{ID: estimate.ProbeID, Owner: w.user, Group: firstOf(groups), Profile: p.Name, Hours: hours, CreatedAt: sn.state.Now}, groups)
	est, _ := estimate.NextFree(sn.state, r, sn.opts)
	return est
}

// want records that the probes of user u for profiles are asked for now,
// forgetting the least recently asked for beyond estimateProbes.
func (e *estimates) want(user string, groups []string, profiles []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	for _, p := range profiles {
		k := probeKey(user, p)
		if w := e.wants[k]; w != nil {
			w.used, w.groups = now, groups
			continue
		}
		e.wants[k] = &probeWant{user: user, groups: groups, profile: p, used: now}
	}
	if len(e.wants) <= estimateProbes {
		return
	}
	keys := make([]string, 0, len(e.wants))
	for k := range e.wants {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return e.wants[keys[i]].used.Before(e.wants[keys[j]].used) })
	for _, k := range keys[:len(keys)-estimateProbes] {
		delete(e.wants, k)
	}
}

// awaitEstimates is the last snapshot, and whether it is stale, once have
// accepts it; fresh also stops the wait when a snapshot that has seen
// every change made before the call is published (have then is what it
// says). It waits at most limit and while ctx lasts; the snapshot is nil
// when none is made by then.
func (s *Server) awaitEstimates(ctx context.Context, limit time.Duration, fresh bool, have func(*estimateSnap) bool) (*estimateSnap, bool) {
	e := s.estimates
	if s.Config == nil {
		return nil, false
	}
	s.startEstimates()
	e.mu.Lock()
	e.read = time.Now()
	sn, after := e.snap, e.pollsStarted
	if sn != nil && have(sn) {
		stale := sn.gen < e.gen || e.dirty
		e.mu.Unlock()
		if stale {
			select {
			case e.wake <- struct{}{}:
			default:
			}
		}
		return sn, stale
	}
	e.mu.Unlock()
	s.kickEstimates()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		e.mu.Lock()
		sn = e.snap
		caughtUp := sn != nil && e.pollsDone > after && sn.gen >= e.gen
		stale := sn != nil && (sn.gen < e.gen || e.dirty)
		ch := e.changed
		e.mu.Unlock()
		if sn != nil && (have(sn) || fresh && caughtUp) {
			return sn, stale
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return sn, stale
		case <-s.ctx.Done():
			return sn, stale
		case <-timer.C:
			return sn, stale
		}
	}
}
