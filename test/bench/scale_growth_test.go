package bench_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// maxGrowth is the largest growth exponent k (t ∝ n^k, from the medians
// of two queue sizes) TestScaleGrowth lets a route have. Every route it
// times should cost a request O(1) or O(log n) in the queue's length (one
// VM, a page of at most 1000) or at worst O(n) (what counts the queue):
// k ≤ 1, and the fixed cost of a request pulls the measured k below the
// true one. k > 1.5 is a request that does work per queued VM for each
// queued VM — O(n²), the kind of route that took 16–20 s at 3,000 queued
// (issue #26) — and between 250 and 1,000 it means the median grew
// more than eightfold.
const maxGrowth = 1.5

// maxGrowthWhole is maxGrowth for a route whose answer holds every queued
// VM (the admin's queue, a page of up to 1,000): its answer alone is O(n),
// k ≈ 1 on a quiet machine (8 → 33 ms between 250 and 1,000), and a
// suite running beside it on two cores has pushed one median to k = 1.65.
// k > 2 is work per queued VM for each VM it returns.
const maxGrowthWhole = 2.0

// growthFloor is how much a median must grow, in absolute terms, before
// its exponent is judged: below it, the growth is the noise of a shared
// machine (a 0.5 ms median that reads 4 ms once the test suite runs
// beside it), not the route. It only ever spares a route, never fails one.
const growthFloor = 10 * time.Millisecond

// TestScaleGrowth is the scale harness (BenchmarkScale) run small: the
// queue of a full server filled to 250 and then 1,000 VMs
// ($GPUVM_SCALE_TEST_SIZES), every read route and the creates timed at
// each. It fails only when a route's median grows far faster than the
// queue (maxGrowth), never on a time. -short skips it.
func TestScaleGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the scale harness starts gpuvmd and queues 1,000 VMs")
	}
	cfg := scaleEnv(t, []int{250, 1000})
	if v := envInts(t, "GPUVM_SCALE_TEST_SIZES"); v != nil {
		cfg.sizes = v
	}
	if len(cfg.sizes) < 2 {
		t.Fatalf("$GPUVM_SCALE_TEST_SIZES: two sizes or more, not %v", cfg.sizes)
	}
	cfg.samples, cfg.budget, cfg.idle = 15, 10*time.Second, 2*time.Second
	// A route judged too steep is measured again, with a gpuvmd of its
	// own, and fails only when it is steep both times: the two sizes are
	// timed seconds apart, and the suite running beside them on two cores
	// can load the second far more than the first (a CI run once read GET
	// /v1/hosts at 1.8 then 29.7 ms, and the admin routes after it alike,
	// while the routes timed later were as fast as at 250). Work per
	// queued VM for each queued VM is steep in both runs.
	var first map[string]string
	for run := 1; run <= 2; run++ {
		var out strings.Builder
		res := runScale(t, cfg, &out)
		printGrowth(&out, res)
		t.Logf("run %d:\n%s", run, out.String())
		bad := tooSteep(res)
		if run == 1 {
			if len(bad) == 0 {
				return
			}
			t.Logf("run 1: too steep, measured again: %v", bad)
			first = bad
			continue
		}
		for _, msg := range steepInBoth(first, bad) {
			t.Error(msg)
		}
	}
}

// steepInBoth is what two runs both found too steep, by route, with the
// second run's words.
func steepInBoth(first, second map[string]string) []string {
	var out []string
	for what, msg := range second {
		if _, ok := first[what]; ok {
			out = append(out, msg)
		}
	}
	slices.Sort(out)
	return out
}

// tooSteep names the routes (and the creates) whose median grows faster
// than maxGrowth between two consecutive sizes, or that timed out at the
// larger size only: what it says of each, by route.
func tooSteep(res []sizeResult) map[string]string {
	out := map[string]string{}
	judge := func(what string, n1, n2 int, t1, t2, most float64) {
		k := growth(n1, n2, t1, t2)
		if !math.IsNaN(k) && k > most && t2-t1 >= ms(growthFloor) {
			out[what] = fmt.Sprintf("%s: median %.1f ms at %d queued, %.1f ms at %d: grows as n^%.2f (more than n^%.1f)",
				what, t1, n1, t2, n2, k, most)
		}
	}
	for i := 1; i < len(res); i++ {
		a, b := res[i-1], res[i]
		if i > 1 || len(a.createTimes) > 0 {
			judge("POST /v1/vms", a.queued, b.queued, percentileMS(a.createTimes, 50), percentileMS(b.createTimes, 50), maxGrowth)
		}
		for j := range b.routes {
			ra, rb := a.routes[j], b.routes[j]
			if rb.timeouts > 0 && ra.timeouts == 0 && len(rb.times) == 0 {
				out[rb.name] = fmt.Sprintf("%s: timed out at %d queued, not at %d", rb.name, b.queued, a.queued)
				continue
			}
			most := maxGrowth
			if rb.whole {
				most = maxGrowthWhole
			}
			judge(rb.name, a.queued, b.queued, ra.p(50), rb.p(50), most)
		}
	}
	return out
}

// The judge of TestScaleGrowth: a route is judged on its median's growth
// from 250 to 1,000 queued, a route whose answer holds the whole queue
// more leniently, and growth under the floor never.
func TestTooSteep(t *testing.T) {
	at := func(d time.Duration) []time.Duration { return []time.Duration{d, d, d} }
	for _, tc := range []struct {
		name   string
		whole  bool
		t1, t2 time.Duration
		steep  bool
	}{
		{"flat", false, 10 * time.Millisecond, 11 * time.Millisecond, false},
		{"linear", false, 10 * time.Millisecond, 40 * time.Millisecond, false},
		{"n^1.65", false, 10 * time.Millisecond, 98 * time.Millisecond, true},
		{"n^1.65, the whole queue", true, 10 * time.Millisecond, 98 * time.Millisecond, false},
		{"n^2.2, the whole queue", true, 10 * time.Millisecond, 210 * time.Millisecond, true},
		{"steep but under the floor", false, 100 * time.Microsecond, 5 * time.Millisecond, false},
	} {
		res := []sizeResult{
			{queued: 250, routes: []routeResult{{name: "r", whole: tc.whole, times: at(tc.t1)}}},
			{queued: 1000, routes: []routeResult{{name: "r", whole: tc.whole, times: at(tc.t2)}}},
		}
		if got := len(tooSteep(res)) > 0; got != tc.steep {
			t.Errorf("%s: judged too steep %v, want %v (%q)", tc.name, got, tc.steep, tooSteep(res))
		}
	}
}

// A route fails TestScaleGrowth only when both runs found it steep.
func TestSteepInBoth(t *testing.T) {
	first := map[string]string{"GET /v1/hosts": "1", "GET /v1/users": "1"}
	second := map[string]string{"GET /v1/hosts": "hosts again", "POST /v1/vms": "creates"}
	if got := steepInBoth(first, second); !slices.Equal(got, []string{"hosts again"}) {
		t.Errorf("steep in both: %q, want only the hosts' (the second run's words)", got)
	}
}
