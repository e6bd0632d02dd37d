package bench_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
	testcluster "github.com/gpuvm/gpuvm/test/internal/cluster"
	"github.com/gpuvm/gpuvm/test/internal/daemon"
)

// The scale harness (issue #26, "a queue of ten thousand"): one real gpuvmd
// on a simulated h100x8 whose MIG slices are all taken, with the queue filled
// through the API by many users to each of a list of sizes; at each size it
// times creates, every read route a person or the portal uses, gpuvmd's idle
// CPU and its resident memory. BenchmarkScale prints the figures (make
// bench-scale); TestScaleGrowth runs it small in `go test` and fails only
// when a route's time grows far faster than the queue.

// scaleProfile is the profile every VM of the harness is made from: the
// smallest MIG instance of an H100, which the h100x8 preset's four MIG-mode
// GPUs hold 28 of. No policy file: no quota.
const scaleProfile = `
profile "scale-mig" {
  description = "The scale harness: the smallest MIG instance of an H100"
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
  lease {
    default = "1h"
    max     = "4h"
  }
}
`

// scaleSlices is how many 1g.10gb instances one simulated h100x8 holds;
// the admin asks for scaleSlices+4 VMs a node first, to fill the servers.
const scaleSlices = 28

// fillers is how many VMs the admin asks for first: every node's slices
// and 4 more, which stay queued.
func (c scaleConfig) fillers() int { return scaleSlices*c.nodes + 4 }

type scaleConfig struct {
	sizes   []int         // queue sizes, ascending
	users   int           // users that queue, each with its own token
	clients int           // concurrent create clients
	samples int           // requests per read route and size
	budget  time.Duration // a read route's time per size, after which it stops sampling
	timeout time.Duration // one request's limit
	idle    time.Duration // how long gpuvmd's idle CPU is read over
	dsn     string        // --database: "" (SQLite in the state directory) or a PostgreSQL DSN
	profile string        // a directory: each idle window's CPU profile of gpuvmd is saved there
	nodes   int           // gpuvmd nodes on one PostgreSQL schema (a fleet), 1 by default
	// profiled is the node (0: n1) whose profiles are saved with profile.
	profiled int
	// rate is the steady rate (creates a second) of the paced creates that
	// end each fill, timed from when each was due; paced is how many (at
	// most a fifth of the fill). 0: none.
	rate  float64
	paced int
}

// routeResult is one read route's timings at one size.
type routeResult struct {
	name     string
	whole    bool            // its answer holds every queued VM (readRoute.whole)
	times    []time.Duration // sorted, timeouts and failures left out
	timeouts int
	failures int
	lastErr  string
}

func (r routeResult) p(q float64) float64 { return percentileMS(r.times, q) }

// sizeResult is what one queue size measured.
type sizeResult struct {
	queued      int
	createRate  float64         // creates a second while filling up to this size
	createTimes []time.Duration // sorted
	createFails int
	// pacedOffered, pacedRate, pacedTimes and pacedFails are the paced
	// creates' (the rate asked for and achieved, their sorted times from
	// when each was due).
	pacedOffered float64
	pacedRate    float64
	pacedTimes   []time.Duration
	pacedSlowest []pacedCreate // the slowest few, slowest first
	// pacedWaits and slowestWaits say what the database's backends were
	// doing, on average, while the paced creates ran and while the slowest
	// of them waited (PostgreSQL only).
	pacedWaits, slowestWaits string
	// pacedCPU is the CPU each process took while the paced creates ran,
	// from pacedBegan (to match with the database's log).
	pacedCPU   string
	pacedBegan time.Time
	// ranked is how long after the fill its last VM was ranked, which
	// the paced creates wait for (0: not within settleLimit).
	ranked     time.Duration
	pacedFails int
	routes     []routeResult
	idleCPU    float64 // percent of one core (the first node's)
	// nodes are each node's own figures when there are several; routes
	// then hold every node's, each name prefixed by its node's.
	nodes []nodeResult
	// fillLoad and idleLoad are the database's load while filling and
	// over the idle window (PostgreSQL only).
	fillLoad, idleLoad *testcluster.Load
	// settle is how long after the fill the estimates caught up with it
	// (the last VM's estimate computed and not stale); 0: they did not
	// within settleLimit.
	settle time.Duration
	// settleCPU is the CPU each process took while they caught up.
	settleCPU string
	// quiet is how long after that every node had run no round and no
	// replay for a while (the idle window opens then), tail what ran
	// meanwhile; quietOK is false when they did not go quiet.
	quiet   time.Duration
	tail    work
	quietOK bool
	rssMB   float64
}

// scaleEnv reads the harness's knobs from the environment.
func scaleEnv(tb testing.TB, sizes []int) scaleConfig {
	tb.Helper()
	c := scaleConfig{sizes: sizes, users: 200, clients: 8, samples: 30, budget: 15 * time.Second,
		timeout: 60 * time.Second, idle: 10 * time.Second, dsn: os.Getenv("GPUVM_BENCH_PG"),
		profile: os.Getenv("GPUVM_SCALE_PROFILE"), nodes: 1, rate: 200, paced: 2000}
	if v := envInts(tb, "GPUVM_SCALE_SIZES"); v != nil {
		c.sizes = v
	}
	if v := envInts(tb, "GPUVM_SCALE_USERS"); v != nil {
		c.users = v[0]
	}
	if v := envInts(tb, "GPUVM_SCALE_CLIENTS"); v != nil {
		c.clients = v[0]
	}
	if v := envInts(tb, "GPUVM_SCALE_NODES"); v != nil {
		c.nodes = v[0]
	}
	if c.nodes < 1 || c.nodes > 9 {
		tb.Fatalf("GPUVM_SCALE_NODES=%d: give 1 to 9 nodes", c.nodes)
	}
	c.profiled = envCount(tb, "GPUVM_SCALE_PROFILE_NODE", 1) - 1
	if c.profiled < 0 || c.profiled >= c.nodes {
		tb.Fatalf("GPUVM_SCALE_PROFILE_NODE=%d: give a node from 1 to %d", c.profiled+1, c.nodes)
	}
	if c.nodes > 1 && c.dsn == "" {
		tb.Fatalf("GPUVM_SCALE_NODES=%d: a fleet shares one PostgreSQL database; set GPUVM_BENCH_PG to its DSN", c.nodes)
	}
	if v := envInts(tb, "GPUVM_SCALE_SAMPLES"); v != nil {
		c.samples = v[0]
	}
	c.budget = envDuration(tb, "GPUVM_SCALE_BUDGET", c.budget)
	c.timeout = envDuration(tb, "GPUVM_SCALE_TIMEOUT", c.timeout)
	c.idle = envDuration(tb, "GPUVM_SCALE_IDLE", c.idle)
	c.rate = float64(envCount(tb, "GPUVM_SCALE_RATE", int(c.rate)))
	c.paced = envCount(tb, "GPUVM_SCALE_PACED", c.paced)
	slices.Sort(c.sizes)
	c.sizes = slices.Compact(c.sizes)
	if c.dsn != "" {
		c.dsn = storetest.SchemaDSN(tb, c.dsn) // a schema of its own, dropped afterwards
	}
	return c
}

// BenchmarkScale runs the scale harness at $GPUVM_SCALE_SIZES (default
// 1000,3000,10000) and prints its table. One iteration whatever -benchtime
// says: an iteration is the whole run.
func BenchmarkScale(b *testing.B) {
	cfg := scaleEnv(b, []int{1000, 3000, 10000})
	var res []sizeResult
	for b.Loop() {
		if res == nil {
			res = runScale(b, cfg, os.Stdout)
		}
	}
	printGrowth(os.Stdout, res)
	b.ReportMetric(0, "ns/op")
}

// scaleRun is one gpuvmd of the harness and its clients.
type scaleRun struct {
	tb     testing.TB
	cfg    scaleConfig
	proc   *daemon.Process   // the first node's (procs[0])
	procs  []*daemon.Process // every node's
	names  []string          // each node's name (n1, n2, …; "" for a lone gpuvmd)
	hc     *http.Client
	admin  string   // admin token
	tokens []string // a token per user, users[i] = "u%03d"
	cookie *http.Cookie
	mu     sync.Mutex
	queue  []queuedVM // VMs queued by the users, in the order their creates returned
	// debugAddr is the profiled node's --debug-listen, with cfg.profile;
	// debugAddrs every node's.
	debugAddr  string
	debugAddrs []string
	failures   atomic.Int64 // failed creates, the first few logged
}

// queuedVM is a VM a user queued, and that user's token.
type queuedVM struct{ id, token string }

// runScale starts gpuvmd, fills it, and measures each size; it writes each
// size's figures to out as they come.
func runScale(tb testing.TB, cfg scaleConfig, out io.Writer) []sizeResult {
	tb.Helper()
	r := &scaleRun{tb: tb, cfg: cfg, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.clients + 4}}}
	r.start()
	defer r.stop()
	db := "SQLite"
	if cfg.dsn != "" {
		db = "PostgreSQL"
	}
	what := "gpuvmd on a simulated h100x8"
	if cfg.nodes > 1 {
		what = fmt.Sprintf("a fleet of %d gpuvmd nodes, each on a simulated h100x8, on one schema", cfg.nodes)
	}
	fmt.Fprintf(out, "scale harness: %s (%s), %d users, %d create clients, sizes %v\n", what, db, cfg.users, cfg.clients, cfg.sizes)
	begin := time.Now()
	held := r.fillServer()
	r.makeUsers()
	fmt.Fprintf(out, "servers full: %d VMs hold their slices, %d of the admin's queued; %d users made (%v)\n",
		cfg.fillers()-held, held, cfg.users, time.Since(begin).Round(time.Millisecond))
	if cfg.nodes > 1 {
		fmt.Fprintf(out, "nodes %s; the leader (it places the queue) is %s; creates go to each node in turn, every read route is timed on each\n",
			strings.Join(r.names, ", "), r.leader())
	}
	var res []sizeResult
	queued := held
	for _, size := range cfg.sizes {
		sr := r.measureSize(size, queued)
		queued = sr.queued
		printSize(out, sr)
		res = append(res, sr)
	}
	fmt.Fprintf(out, "total %v\n", time.Since(begin).Round(time.Second))
	return res
}

// start starts gpuvmd, or cfg.nodes of them one after the other on one
// database (the first makes the admin and leads).
func (r *scaleRun) start() {
	tb := r.tb
	gpuvmd, err := daemon.Gpuvmd()
	if err != nil {
		tb.Fatal(err)
	}
	pluginDir, err := daemon.Plugins()
	if err != nil {
		tb.Fatal(err)
	}
	for i := range r.cfg.nodes {
		conf, state := tb.TempDir(), tb.TempDir()
		name, db := "", r.cfg.dsn
		if r.cfg.nodes > 1 {
			name = fmt.Sprintf("n%d", i+1)
			if err := (testcluster.Node{Name: name, Profiles: scaleProfile}).WriteConfig(conf); err != nil {
				tb.Fatal(err)
			}
			if db, err = testcluster.WithApplication(db, "gpuvmd-pool/"+name); err != nil {
				tb.Fatal(err)
			}
		} else if err := os.WriteFile(filepath.Join(conf, "profiles.hcl"), []byte(scaleProfile), 0o644); err != nil {
			tb.Fatal(err)
		}
		if db == "" {
			db = filepath.Join(state, "gpuvm.db")
		}
		args := []string{"--config", conf, "--state-dir", state, "--database", db, "--libvirt-uri", "test:///default",
			"--simulate", "h100x8", "--plugin-dir", pluginDir}
		if r.cfg.profile != "" {
			addr := freeLoopback(tb)
			args = append(args, "--debug-listen", addr)
			r.debugAddrs = append(r.debugAddrs, addr)
			if i == r.cfg.profiled {
				r.debugAddr = addr
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		p, err := daemon.Start(ctx, daemon.Config{Binary: gpuvmd, ReadyTimeout: time.Minute, Args: args,
			Env: []string{fmt.Sprintf("GPUVM_TEST_DOMAIN_PREFIX=scale%d-", i+1)}})
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
		r.procs, r.names = append(r.procs, p), append(r.names, name)
		if i == 0 {
			r.proc = p
			tok, err := os.ReadFile(filepath.Join(state, "admin.token"))
			if err != nil {
				tb.Fatalf("gpuvmd wrote no admin token: %v", err)
			}
			r.admin = strings.TrimSpace(string(tok))
		}
	}
}

// stop stops every node and logs what they logged as errors.
func (r *scaleRun) stop() {
	for i, p := range r.procs {
		if err := p.Stop(30 * time.Second); err != nil {
			r.tb.Logf("gpuvmd %s exited: %v", r.names[i], err)
		}
		if logs := p.Logs(); strings.Contains(logs, "level=ERROR") {
			r.tb.Logf("gpuvmd %s logged errors (last 4000 bytes):\n%s", r.names[i], logs[max(0, len(logs)-4000):])
		}
	}
}

// call makes one request of the first node (callOn).
func (r *scaleRun) call(method, path, token string, body, out any) (time.Duration, error) {
	return r.callOn(0, method, path, token, body, out)
}

// callOn makes one request of node i with the harness's per-request
// timeout and decodes a 2xx answer's JSON into out (when out is not nil).
// It returns how long the request took (to the end of the body).
func (r *scaleRun) callOn(i int, method, path, token string, body, out any) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.procs[i].URL()+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if token == "" && r.cookie != nil {
		req.AddCookie(r.cookie)
	}
	start := time.Now()
	resp, err := r.hc.Do(req)
	if err != nil {
		return time.Since(start), err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		return took, err
	}
	if resp.StatusCode/100 != 2 {
		return took, fmt.Errorf("%s %s: %s: %.300s", method, path, resp.Status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return took, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return took, nil
}

func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || strings.Contains(fmt.Sprint(err), "Client.Timeout")
}

// fillServer has the admin ask for cfg.fillers() VMs (through each node in
// turn) and waits until the worker has placed what fits: the servers are
// then full. It returns how many of them stay queued.
func (r *scaleRun) fillServer() int {
	tb := r.tb
	fillers := r.cfg.fillers()
	for i := range fillers {
		if _, err := r.callOn(i%len(r.procs), "POST", "/v1/vms", r.admin, api.CreateVMRequest{Profile: "scale-mig", Name: fmt.Sprintf("fill-%02d", i)}, nil); err != nil {
			tb.Fatalf("filler %d: %v", i, err)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var list api.VMList
		if _, err := r.call("GET", "/v1/vms?limit=1000", r.admin, nil, &list); err != nil {
			tb.Fatal(err)
		}
		count := map[string]int{}
		for _, vm := range list.Items {
			count[vm.State]++
		}
		if count[api.VMRunning]+count[api.VMQueued] == fillers && count[api.VMQueued] > 0 {
			return count[api.VMQueued]
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the server did not fill within 3 minutes: %v", count)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// makeUsers makes the users and a token for each.
func (r *scaleRun) makeUsers() {
	tb := r.tb
	r.tokens = make([]string, r.cfg.users)
	for i := range r.cfg.users {
		name := fmt.Sprintf("u%03d", i)
		if _, err := r.call("POST", "/v1/users", r.admin, api.CreateUserRequest{Name: name}, nil); err != nil {
			tb.Fatal(err)
		}
		var tok api.CreatedToken
		if _, err := r.call("POST", "/v1/users/"+name+"/tokens", r.admin, api.CreateTokenRequest{Name: "scale"}, &tok); err != nil {
			tb.Fatal(err)
		}
		r.tokens[i] = tok.Secret
	}
	var sess api.Session
	req, _ := json.Marshal(api.SignInRequest{Token: r.tokens[0]})
	resp, err := r.hc.Post(r.proc.URL()+"/v1/session", "application/json", bytes.NewReader(req))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&sess)
	for _, c := range resp.Cookies() {
		if c.Name == api.SessionCookie {
			r.cookie = c
		}
	}
	if r.cookie == nil {
		tb.Fatalf("POST /v1/session: %s, no %s cookie", resp.Status, api.SessionCookie)
	}
}

// fill queues n more VMs from the users, round robin, with cfg.clients
// concurrent clients, and returns the rate and the sorted times.
func (r *scaleRun) fill(n int) (float64, []time.Duration, int) {
	var next, fails atomic.Int64
	times := make([]time.Duration, n)
	var wg sync.WaitGroup
	begin := time.Now()
	base := r.queuedLen()
	for range r.cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= n {
					return
				}
				took, ok := r.createOne(base + k)
				times[k] = took
				if !ok {
					fails.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	rate := float64(n) / time.Since(begin).Seconds()
	slices.Sort(times)
	return rate, times, int(fails.Load())
}

// pacedInFlight bounds the creates a paced fill has under way at once: an
// open loop that gpuvmd cannot keep up with shows as long times, not as
// ever more connections.
const pacedInFlight = 64

// fillPaced asks for n creates at a steady rate (an open loop: the k-th is
// due at k/rate from the start, whether the ones before it have returned
// or not) and times each from when it was due, so that a create that
// waited for a free client counts that wait (no coordinated omission). It
// returns the rate achieved, the sorted times and the failures.
func (r *scaleRun) fillPaced(n int, rate float64) (float64, []time.Duration, int, []pacedCreate) {
	var fails atomic.Int64
	each := make([]pacedCreate, n)
	slots := make(chan struct{}, pacedInFlight)
	var wg sync.WaitGroup
	begin := time.Now()
	base := r.queuedLen()
	for k := range n {
		due := begin.Add(time.Duration(float64(k) / rate * float64(time.Second)))
		time.Sleep(time.Until(due))
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			_, ok := r.createOne(base + k)
			each[k] = pacedCreate{due: due.Sub(begin), node: r.nodeOf(base + k), took: time.Since(due)}
			if !ok {
				fails.Add(1)
			}
		}()
	}
	wg.Wait()
	achieved := float64(n) / time.Since(begin).Seconds()
	times := make([]time.Duration, n)
	for k, p := range each {
		times[k] = p.took
	}
	slices.Sort(times)
	return achieved, times, int(fails.Load()), slowestPaced(each, 5)
}

// pacedCreate is one paced create: when it was due (from the first), the
// node it was sent to (an index of r.procs) and how long it took from due.
type pacedCreate struct {
	due  time.Duration
	node int
	took time.Duration
}

// slowestPaced is the n slowest of each, slowest first: whether the tail
// is one stall (close together, on every node) or spread.
func slowestPaced(each []pacedCreate, n int) []pacedCreate {
	out := slices.Clone(each)
	slices.SortFunc(out, func(a, b pacedCreate) int { return cmp.Compare(b.took, a.took) })
	return out[:min(n, len(out))]
}

// nodeOf is the node (an index of r.procs) the k-th create of the fill is
// sent to: round robin.
func (r *scaleRun) nodeOf(k int) int { return k % len(r.procs) }

// queuedLen is how many VMs the users have queued so far.
func (r *scaleRun) queuedLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}

// createOne asks for the k-th VM of the fill, as user k (round robin) on
// node k (round robin), and records it as queued. It returns how long the
// request took and whether it succeeded (the first failures are logged).
func (r *scaleRun) createOne(k int) (time.Duration, bool) {
	var cr api.CreateVMResponse
	tok := r.tokens[k%len(r.tokens)]
	took, err := r.callOn(r.nodeOf(k), "POST", "/v1/vms", tok, api.CreateVMRequest{Profile: "scale-mig"}, &cr)
	if err != nil {
		if r.failures.Add(1) <= 3 {
			r.tb.Logf("create: %v", err)
		}
		return took, false
	}
	r.mu.Lock()
	r.queue = append(r.queue, queuedVM{cr.VM.ID, tok})
	r.mu.Unlock()
	return took, true
}

// settleLimit bounds settle's wait.
const settleLimit = 3 * time.Minute

// settle waits until gpuvmd has caught up with the fill: the last VM
// queued has its place in the queue (a dispatch round ranked it) and an
// estimate computed since the state's last change (not stale), on every
// node (each computes its own), asked on every node at once, as people
// looking at different nodes would. It returns how long that took from
// its call on the slowest node, 0 if not within settleLimit. Idle CPU is
// read after it, so that it is gpuvmd's cost at rest, not the round and
// the replay that the fill's last creates asked for (a round that ranks
// them changes the state, and the estimates are computed again).
func (r *scaleRun) settle() time.Duration {
	r.mu.Lock()
	last := r.queue[len(r.queue)-1]
	r.mu.Unlock()
	begin := time.Now()
	took := make([]time.Duration, len(r.procs))
	var wg sync.WaitGroup
	for node := range r.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(begin) < settleLimit {
				var vm api.VM
				if _, err := r.callOn(node, "GET", "/v1/vms/"+last.id, last.token, nil, &vm); err == nil && vm.QueuePosition > 0 && vm.EstimateComputedAt != nil && !vm.EstimateStale {
					took[node] = time.Since(begin)
					return
				}
				time.Sleep(250 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if slices.Contains(took, 0) {
		return 0
	}
	return slices.Max(took)
}

// waitRanked waits, at most settleLimit, until a round of the leader has
// seen the last VM queued: ranked, or no longer queued. It reads the VM in
// its owner's list, which asks for no estimate. The paced creates start
// after it: they measure creates at a steady rate, not behind the rounds
// that the closed-loop fill before them left to run. It returns how long
// that took, 0 if not within settleLimit.
func (r *scaleRun) waitRanked() time.Duration {
	r.mu.Lock()
	last := r.queue[len(r.queue)-1]
	r.mu.Unlock()
	begin := time.Now()
	for time.Since(begin) < settleLimit {
		var list api.VMList
		if _, err := r.call("GET", "/v1/vms?limit=1000", last.token, nil, &list); err == nil {
			for _, vm := range list.Items {
				if vm.ID == last.id && (vm.QueuePosition > 0 || vm.State != api.VMQueued) {
					return time.Since(begin)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0
}

// idleCPU reads each node's CPU time (utime+stime, /proc/PID/stat) over
// cfg.idle with no request in flight, in percent of one core, and with
// PostgreSQL the database's load over the same window. With cfg.profile it
// also saves the first node's CPU profile of that window there.
func (r *scaleRun) idleCPU(size int) ([]float64, []work, *testcluster.Load) {
	out := make([]float64, len(r.procs))
	before := make([]int64, len(r.procs))
	works := make([]work, len(r.procs))
	for i := range r.procs {
		works[i] = r.readWork(i)
	}
	for i, p := range r.procs {
		t, err := cpuTicks(p.Pid())
		if err != nil {
			r.tb.Log(err)
			t = -1
		}
		before[i] = t
	}
	db := r.dbStats()
	start := time.Now()
	if r.cfg.profile != "" {
		r.saveProfile(filepath.Join(r.cfg.profile, fmt.Sprintf("idle-%d.pprof", size)), r.cfg.idle)
	}
	time.Sleep(r.cfg.idle - time.Since(start))
	load := r.dbLoadSince(db)
	for i, p := range r.procs {
		t, err := cpuTicks(p.Pid())
		if err != nil || before[i] < 0 {
			r.tb.Log(err)
			out[i] = math.NaN()
			continue
		}
		out[i] = float64(t-before[i]) / clkTck / time.Since(start).Seconds() * 100
	}
	for i := range r.procs {
		works[i] = r.readWork(i).since(works[i])
	}
	return out, works, load
}

// clkTck is the clock ticks a second of /proc/PID/stat's times (USER_HZ on
// Linux).
const clkTck = 100

// cpuTicks is utime+stime of /proc/PID/stat, in clock ticks.
func cpuTicks(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing parenthesis (state is field 3).
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, data)
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0, err
	}
	return ut + st, nil
}

// readRoute is one read route the harness times: its path and who asks.
type readRoute struct {
	name  string
	path  func(i int) string
	token string // "" sends the portal's session cookie
	// tokenOf, when set, is the i-th request's token instead.
	tokenOf func(i int) string
	// whole: the answer holds every queued VM (up to a page of 1,000), so
	// it grows with the queue itself (TestScaleGrowth's maxGrowthWhole).
	whole bool
}

// routes lists the read routes timed at every size: what a user, the
// portal's pages and an admin ask for.
func (r *scaleRun) routes() []readRoute {
	fixed := func(p string) func(int) string { return func(int) string { return p } }
	r.mu.Lock()
	q := slices.Clone(r.queue)
	r.mu.Unlock()
	// Mid-queue: a different VM (and owner) each request, from the middle
	// on, so that no answer is one cached for the request before.
	mid := func(i int) queuedVM { return q[(len(q)/2+i)%len(q)] }
	last := q[len(q)-1]
	routes := []readRoute{
		{name: "GET /v1/profiles/{name}/admission", path: fixed("/v1/profiles/scale-mig/admission"), token: r.tokens[0]},
		{name: "GET /v1/hosts", path: fixed("/v1/hosts"), token: r.tokens[0]},
		{name: "GET /v1/vms (admin, first page)", path: fixed("/v1/vms"), token: r.admin},
		{name: "GET /v1/vms (admin, middle page)", path: fixed("/v1/vms?after=" + r.middleCursor()), token: r.admin},
		{name: "GET /v1/vms?state=queued&limit=1000 (admin queue)", path: fixed("/v1/vms?state=queued&limit=1000"), token: r.admin, whole: true},
		{name: "GET /v1/vms?limit=1000 (a user's VMs)", path: fixed("/v1/vms?limit=1000"), token: r.tokens[0]},
		{name: "GET /v1/users (admin)", path: fixed("/v1/users"), token: r.admin},
		{name: "GET /v1/alerts?limit=100 (admin)", path: fixed("/v1/alerts?limit=100"), token: r.admin},
		{name: "GET /v1/rules", path: fixed("/v1/rules"), token: r.tokens[0]},
		{name: "GET /metrics", path: fixed("/metrics"), token: r.admin},
	}
	for _, page := range []string{"/", "/vms", "/book", "/usage", "/admin", "/admin/fleet"} {
		routes = append(routes, readRoute{name: "portal " + page, path: fixed(page), token: ""})
	}
	// Last, the routes that were slowest (issue #26): a request the
	// harness gave up on may still run in gpuvmd and slow what follows.
	routes = append(routes, []readRoute{
		{name: "GET /v1/vms/{id} (queued, mid-queue)", path: func(i int) string { return "/v1/vms/" + mid(i).id },
			tokenOf: func(i int) string { return mid(i).token }},
		{name: "GET /v1/vms/{id} (queued, last)", path: fixed("/v1/vms/" + last.id), token: last.token},
		{name: "GET /v1/profiles", path: fixed("/v1/profiles"), token: r.tokens[0]},
	}...)
	// The portal's sign-in is user u000's: its admin pages are the shell
	// only (the data routes are timed with the admin token above).
	return routes
}

// middleCursor is the cursor of the admin's VM list halfway down (pages
// of 1000), or "" when the walk fails.
func (r *scaleRun) middleCursor() string {
	r.mu.Lock()
	half := (len(r.queue) + r.cfg.fillers()) / 2
	r.mu.Unlock()
	cursor := ""
	for seen := 0; seen+1000 <= half; seen += 1000 {
		var page api.VMList
		if _, err := r.call("GET", "/v1/vms?limit=1000&after="+cursor, r.admin, nil, &page); err != nil || page.Next == "" {
			r.tb.Logf("middle page: %v", err)
			return cursor
		}
		cursor = page.Next
	}
	return cursor
}

// readRoutes times each route on each node: cfg.samples requests one
// after another, fewer once cfg.budget is spent (at least one). With
// several nodes a route's name starts with its node's, and each node's
// reads begin once every node has run no round and no replay for a while
// (waitQuiet).
func (r *scaleRun) readRoutes() []routeResult {
	var out []routeResult
	routes := r.routes()
	for node, name := range r.names {
		if node > 0 {
			// The nodes share this machine's cores; on a fleet each has
			// its own server. The node read before asked its estimates'
			// probe last (GET /v1/profiles) and replays for it now: its
			// replay would take the cores from this node's reads.
			if took, w, ok := r.waitQuiet(); !ok || w.replays+w.rounds > 0 {
				r.tb.Logf("before %s's reads: quiet after %v (%v), meanwhile %s", name, took.Round(100*time.Millisecond), ok, w)
			}
		}
		for _, rt := range routes {
			res := routeResult{name: rt.name, whole: rt.whole}
			if name != "" {
				res.name = "[" + name + "] " + rt.name
			}
			begin := time.Now()
			for i := 0; i < r.cfg.samples && (i == 0 || time.Since(begin) < r.cfg.budget); i++ {
				tok := rt.token
				if rt.tokenOf != nil {
					tok = rt.tokenOf(i)
				}
				took, err := r.callOn(node, "GET", rt.path(i), tok, nil, nil)
				switch {
				case err == nil:
					res.times = append(res.times, took)
				case timedOut(err):
					res.timeouts++
				default:
					res.failures++
					res.lastErr = err.Error()
				}
			}
			slices.Sort(res.times)
			out = append(out, res)
		}
	}
	return out
}

func printSize(w io.Writer, sr sizeResult) {
	fmt.Fprintf(w, "\n== %d queued ==\n", sr.queued)
	if len(sr.createTimes) > 0 {
		fmt.Fprintf(w, "%-52s %8.1f/s  p50 %8.1f ms  p99 %8.1f ms  (%d creates, %d failed)\n", "POST /v1/vms (filling)",
			sr.createRate, percentileMS(sr.createTimes, 50), percentileMS(sr.createTimes, 99), len(sr.createTimes), sr.createFails)
	}
	if len(sr.pacedTimes) > 0 {
		if sr.ranked > 0 {
			fmt.Fprintf(w, "%-52s %8.1f s\n", "the fill's last VM ranked after", sr.ranked.Seconds())
		} else {
			fmt.Fprintf(w, "%-52s %v\n", "the fill's last VM ranked", "NOT within "+settleLimit.String()+": the paced creates began behind it")
		}
		fmt.Fprintf(w, "%-52s %8.1f/s  p50 %8.1f ms  p99 %8.1f ms  (%d creates, %d failed)\n",
			fmt.Sprintf("POST /v1/vms (paced, %g/s offered, open loop)", sr.pacedOffered),
			sr.pacedRate, percentileMS(sr.pacedTimes, 50), percentileMS(sr.pacedTimes, 99), len(sr.pacedTimes), sr.pacedFails)
		var slow []string
		for _, p := range sr.pacedSlowest {
			one := fmt.Sprintf("%.0f ms due at %.2f s", float64(p.took.Microseconds())/1000, p.due.Seconds())
			if len(sr.nodes) > 1 {
				one += " on " + sr.nodeName(p.node)
			}
			slow = append(slow, one)
		}
		fmt.Fprintf(w, "  slowest: %s (from %s)\n", strings.Join(slow, "; "), sr.pacedBegan.UTC().Format("15:04:05.000"))
		if sr.pacedCPU != "" {
			fmt.Fprintf(w, "  CPU while they ran: %s\n", sr.pacedCPU)
		}
		if sr.pacedWaits != "" {
			fmt.Fprintf(w, "  the database's backends, busy on average (every %v): %s\n", waitSample, sr.pacedWaits)
			if sr.slowestWaits != "" {
				fmt.Fprintf(w, "    while the slowest waited: %s\n", sr.slowestWaits)
			}
		}
	}
	if sr.settle > 0 {
		fmt.Fprintf(w, "%-52s %8.1f s\n", "estimates caught up with the fill after", sr.settle.Seconds())
	} else {
		fmt.Fprintf(w, "%-52s %v\n", "estimates caught up with the fill", "NOT within "+settleLimit.String())
	}
	if sr.settleCPU != "" {
		fmt.Fprintf(w, "  CPU while they caught up: %s\n", sr.settleCPU)
	}
	switch {
	case sr.quietOK:
		fmt.Fprintf(w, "%-52s %8.1f s (meanwhile %s)\n", "then quiet, the idle window opens, after", sr.quiet.Seconds(), sr.tail)
	case sr.quiet > 0:
		fmt.Fprintf(w, "%-52s %v (meanwhile %s)\n", "then quiet", "NOT within "+quietLimit.String(), sr.tail)
	}
	for _, rt := range sr.routes {
		line := fmt.Sprintf("%-52s n=%-3d     p50 %8.1f ms  p99 %8.1f ms", rt.name, len(rt.times), rt.p(50), rt.p(99))
		if rt.timeouts > 0 {
			line += fmt.Sprintf("  %d TIMED OUT", rt.timeouts)
		}
		if rt.failures > 0 {
			line += fmt.Sprintf("  %d failed (%.200s)", rt.failures, rt.lastErr)
		}
		fmt.Fprintln(w, line)
	}
	if len(sr.nodes) > 1 {
		for _, n := range sr.nodes {
			fmt.Fprintf(w, "%-52s %.2f %% of a core, RSS %.1f MB\n", fmt.Sprintf("[%s] gpuvmd idle%s", n.name, n.role()), n.idleCPU, n.rssMB)
			fmt.Fprintf(w, "  in that window: %s\n", n.idleWork)
		}
	} else {
		fmt.Fprintf(w, "%-52s %.2f %% of a core\n", "gpuvmd idle CPU", sr.idleCPU)
		if len(sr.nodes) == 1 {
			fmt.Fprintf(w, "  in that window: %s\n", sr.nodes[0].idleWork)
		}
		fmt.Fprintf(w, "%-52s %.1f MB\n", "gpuvmd RSS (VmRSS)", sr.rssMB)
	}
	if sr.fillLoad != nil {
		fmt.Fprintln(w, "database while filling:")
		sr.fillLoad.Print(w, "  ", 8)
	}
	if sr.idleLoad != nil {
		fmt.Fprintln(w, "database while idle (the idle CPU's window):")
		sr.idleLoad.Print(w, "  ", 0)
	}
}

// growth is the exponent k in t ∝ n^k between two sizes, from the
// medians: 0 is flat, 1 linear, 2 quadratic. NaN when either has no
// successful sample.
func growth(n1, n2 int, t1, t2 float64) float64 {
	if t1 <= 0 || t2 <= 0 || n1 == n2 {
		return math.NaN()
	}
	return math.Log(t2/t1) / math.Log(float64(n2)/float64(n1))
}

func printGrowth(w io.Writer, res []sizeResult) {
	if len(res) < 2 {
		return
	}
	fmt.Fprintf(w, "\n== growth exponent of p50 (t ∝ n^k) ==\n%-52s", "")
	for i := 1; i < len(res); i++ {
		fmt.Fprintf(w, " %6d→%-6d", res[i-1].queued, res[i].queued)
	}
	fmt.Fprintln(w)
	if len(res[1].createTimes) > 0 {
		fmt.Fprintf(w, "%-52s", "POST /v1/vms (filling)")
		for i := 1; i < len(res); i++ {
			fmt.Fprintf(w, " %13.2f", growth(res[i-1].queued, res[i].queued, percentileMS(res[i-1].createTimes, 50), percentileMS(res[i].createTimes, 50)))
		}
		fmt.Fprintln(w)
	}
	for j, rt := range res[0].routes {
		fmt.Fprintf(w, "%-52s", rt.name)
		for i := 1; i < len(res); i++ {
			a, b := res[i-1].routes[j], res[i].routes[j]
			if b.timeouts > 0 && len(b.times) == 0 {
				fmt.Fprintf(w, " %13s", "timed out")
				continue
			}
			fmt.Fprintf(w, " %13.2f", growth(res[i-1].queued, res[i].queued, a.p(50), b.p(50)))
		}
		fmt.Fprintln(w)
	}
}

// saveProfile fetches gpuvmd's CPU profile over d from its debug listener
// into path (at each size: over the first 10 s of the fill, over the idle
// window, and over the first 20 s of the read routes).
func (r *scaleRun) saveProfile(path string, d time.Duration) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	r.saveDebug(path, fmt.Sprintf("profile?seconds=%d", secs), "CPU profile")
}

// saveHeap saves gpuvmd's heap profile (what is live now, and what was
// allocated since it started) to path, with cfg.profile.
func (r *scaleRun) saveHeap(path string) {
	r.saveDebug(path, "heap?gc=1", "heap profile")
	// The same in text, ending with the runtime's memory statistics
	// (HeapSys, HeapReleased, …): what of VmRSS is Go's heap.
	r.saveDebug(strings.TrimSuffix(path, ".pprof")+".txt", "heap?debug=1", "heap statistics")
}

// saveDebug saves what the profiled gpuvmd's /debug/pprof/ serves at
// query to path.
func (r *scaleRun) saveDebug(path, query, what string) { r.saveDebugOf(r.debugAddr, path, query, what) }

// saveDebugOf saves what the gpuvmd listening at addr serves at query.
func (r *scaleRun) saveDebugOf(addr, path, query, what string) {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/%s", addr, query))
	if err != nil {
		r.tb.Logf("%s: %v", what, err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %.200s", resp.Status, data)
	}
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		r.tb.Logf("%s: %v", what, err)
		return
	}
	r.tb.Logf("gpuvmd's %s: %s", what, path)
}

// freeLoopback is a loopback address with a port free a moment ago.
func freeLoopback(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
