package bench_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	testcluster "github.com/gpuvm/gpuvm/test/internal/cluster"
)

// The scale harness on a fleet (GPUVM_SCALE_NODES with GPUVM_BENCH_PG):
// cfg.nodes gpuvmds on one PostgreSQL schema, as test/fleet runs them
// (test/internal/cluster), each with its own simulated h100x8. The creates
// go to each node in turn; every read route is timed on every node; idle
// CPU and RSS are each node's; the database's load is read from
// PostgreSQL's statistics while filling and over the idle window.

// nodeResult is one node's own figures at one size.
type nodeResult struct {
	name    string
	leader  bool
	idleCPU float64 // percent of one core
	rssMB   float64
	// idleWork is what rounds and replays ran in the idle window.
	idleWork work
}

func (n nodeResult) role() string {
	if n.leader {
		return " (leader)"
	}
	return ""
}

// measureSize fills the queue up to size (from queued) and measures it.
func (r *scaleRun) measureSize(size, queued int) sizeResult {
	cfg := r.cfg
	sr := sizeResult{}
	var fillProfile chan struct{}
	if size > queued {
		if cfg.profile != "" {
			fillProfile = make(chan struct{})
			go func() {
				defer close(fillProfile)
				r.saveProfile(filepath.Join(cfg.profile, fmt.Sprintf("fill-%d.pprof", size)), 10*time.Second)
			}()
		}
		db := r.dbStats()
		paced := 0
		if cfg.rate > 0 {
			paced = min(cfg.paced, (size-queued)/5)
		}
		sr.createRate, sr.createTimes, sr.createFails = r.fill(size - queued - paced)
		if paced > 0 {
			sr.ranked = r.waitRanked()
			if cfg.profile != "" { // what the paced creates wait for: go tool trace -pprof=sync (or sched, syscall)
				go r.saveDebug(filepath.Join(cfg.profile, fmt.Sprintf("paced-%d.trace", size)), "trace?seconds=5", "execution trace")
				// Every node's: which one takes the cores from the creates. The
				// profiled node's is refused (logged) while its fill profile still
				// runs: at 1,000 and 3,000 the fill is shorter than that profile.
				for i, addr := range r.debugAddrs {
					secs := max(1, paced/int(cfg.rate))
					go r.saveDebugOf(addr, filepath.Join(cfg.profile, fmt.Sprintf("paced-%d-n%d.pprof", size, i+1)), fmt.Sprintf("profile?seconds=%d", secs), "CPU profile")
				}
			}
			sr.pacedOffered = cfg.rate
			waits := r.sampleWaits()
			shares := r.readShares()
			sr.pacedBegan = shares.at
			sr.pacedRate, sr.pacedTimes, sr.pacedFails, sr.pacedSlowest = r.fillPaced(paced, cfg.rate)
			sr.pacedCPU = r.readShares().since(shares, r.names)
			sr.pacedWaits, sr.slowestWaits = r.waitsOf(waits, sr.pacedSlowest)
		}
		sr.fillLoad = r.dbLoadSince(db)
	}
	sr.queued = max(queued, size)
	var settleProfiles sync.WaitGroup
	if cfg.profile != "" { // what the catching up costs each node: its rounds and replays
		for i, addr := range r.debugAddrs {
			settleProfiles.Go(func() {
				r.saveDebugOf(addr, filepath.Join(cfg.profile, fmt.Sprintf("settle-%d-n%d.pprof", size, i+1)), "profile?seconds=15", "CPU profile")
			})
		}
	}
	shares := r.readShares()
	sr.settle = r.settle()
	sr.settleCPU = r.readShares().since(shares, r.names)
	if fillProfile != nil {
		<-fillProfile // Go takes one CPU profile at a time: the idle window's waits for it
	}
	settleProfiles.Wait()
	time.Sleep(time.Second) // the last creates' wake-ups
	sr.quiet, sr.tail, sr.quietOK = r.waitQuiet()
	cpus, works, load := r.idleCPU(size)
	sr.idleCPU, sr.idleLoad = cpus[0], load
	var readProfile chan struct{}
	if cfg.profile != "" { // what the reads cost the profiled node (its routes come in their turn)
		readProfile = make(chan struct{})
		go func() {
			defer close(readProfile)
			r.saveProfile(filepath.Join(cfg.profile, fmt.Sprintf("reads-%d.pprof", size)), 20*time.Second)
		}()
	}
	sr.routes = r.readRoutes()
	if readProfile != nil {
		<-readProfile
	}
	leader := ""
	if len(r.procs) > 1 {
		leader = r.leader()
	}
	for i, p := range r.procs {
		n := nodeResult{name: r.names[i], leader: r.names[i] == leader, idleCPU: cpus[i], idleWork: works[i], rssMB: -1}
		if st, err := procStatus(p.Pid()); err == nil {
			n.rssMB = st["VmRSS"]
		}
		sr.nodes = append(sr.nodes, n)
	}
	sr.rssMB = sr.nodes[0].rssMB
	if cfg.profile != "" { // after VmRSS: its GC would move it
		r.saveHeap(filepath.Join(cfg.profile, fmt.Sprintf("heap-%d.pprof", size)))
	}
	return sr
}

// dbStats reads PostgreSQL's statistics (nil with SQLite, or when they
// cannot be read: logged).
func (r *scaleRun) dbStats() *testcluster.Stats {
	if r.cfg.dsn == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := testcluster.ReadStats(ctx, r.cfg.dsn)
	if err != nil {
		r.tb.Logf("database load: %v", err)
		return nil
	}
	return &s
}

// waitSample is how often the database's backends are sampled while the
// paced creates run.
const waitSample = 10 * time.Millisecond

// sampleWaits starts sampling what the database's backends do (nil with
// SQLite, or when it cannot: logged).
func (r *scaleRun) sampleWaits() *testcluster.WaitSampler {
	if r.cfg.dsn == "" {
		return nil
	}
	w, err := testcluster.SampleWaits(context.Background(), r.cfg.dsn, waitSample)
	if err != nil {
		r.tb.Logf("database waits: %v", err)
		return nil
	}
	return w
}

// waitsOf stops w and says what the database's backends did over the
// whole of its sampling, and while the slowest of the creates waited
// ("" when nothing was sampled). The sampling starts just before the
// paced creates: its times and theirs differ by a few milliseconds, less
// than a sample.
func (r *scaleRun) waitsOf(w *testcluster.WaitSampler, slowest []pacedCreate) (all, slow string) {
	if w == nil {
		return "", ""
	}
	samples, err := w.Stop()
	if err != nil {
		r.tb.Logf("database waits: %v", err)
	}
	all = testcluster.DescribeWaits(samples, 0, math.MaxInt64, 6)
	if all != "" && len(slowest) > 0 {
		p := slowest[0]
		slow = testcluster.DescribeWaits(samples, p.due, p.due+p.took, 6)
	}
	return all, slow
}

// dbLoadSince is the database's load since before (nil when either read
// failed).
func (r *scaleRun) dbLoadSince(before *testcluster.Stats) *testcluster.Load {
	if before == nil {
		return nil
	}
	after := r.dbStats()
	if after == nil {
		return nil
	}
	l := testcluster.Diff(*before, *after)
	return &l
}

// leader is the node GET /v1/hosts marks as leading ("none" when none is).
func (r *scaleRun) leader() string {
	var hosts api.HostList
	if _, err := r.call("GET", "/v1/hosts", r.admin, nil, &hosts); err != nil {
		r.tb.Logf("leader: %v", err)
		return "unknown"
	}
	var names []string
	for _, h := range hosts.Items {
		if h.Leader {
			names = append(names, h.Name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// nodeName is the name of the node at index i of the run's processes,
// "(leader)" after the leader's.
func (sr sizeResult) nodeName(i int) string {
	if i < 0 || i >= len(sr.nodes) {
		return fmt.Sprintf("node %d", i+1)
	}
	return sr.nodes[i].name + sr.nodes[i].role()
}
