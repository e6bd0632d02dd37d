package estimate

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/scheduler/simulate"
)

// maxWait is how long a request of the example traces waits before it is
// withdrawn (the simulator's tests: an hour).
var maxWait = flag.Duration("maxwait", time.Hour, "BenchmarkAccuracy: how long a request waits before it gives up")

// examples are the simulator's example traces (test/traces), replayed as
// its tests do (with -maxwait, an hour by default).
var examples = []struct{ name, cluster, trace string }{
	{"mig", "mig-cluster.hcl", "mig-saturated.csv"},
	{"vgpu", "vgpu-cluster.hcl", "vgpu-mixed.csv"},
}

func loadExample(tb testing.TB, cluster, trace string) (simulate.Setup, *simulate.Trace) {
	tb.Helper()
	dir := filepath.Join("..", "..", "test", "traces")
	src, err := os.ReadFile(filepath.Join(dir, cluster))
	if err != nil {
		tb.Fatal(err)
	}
	c, err := simulate.ParseCluster(cluster, src)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, trace))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	tr, err := simulate.ParseTrace(f, simulate.TraceOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return simulate.Setup{Cluster: c, MaxWait: *maxWait}, tr
}

// accuracy is what measure found for one trace and order.
type accuracy struct {
	name              string
	estimated         int       // queued arrivals of the held-out half, estimated
	errs              []float64 // |estimate − start| in minutes, of those that started with an estimate
	uncertain         int       // of estimated
	unknown           int       // no estimate
	gaveUp            int       // estimated but withdrawn (max wait) in the run
	gaveUpPredicted   int       // of those, predicted to give up (no estimate)
	uncertainErr      []float64 // errs of the uncertain estimates
	certainErr        []float64
	heldErr, freeErr  []float64 // errs of estimates with capacity held at the arrival, and without
	estimateNanos     int64
	estimateCalls     int
	maxQueue, sumQueu int
	early             int // of errs: started before the estimate
}

// measure replays tr under order and, at the arrival of every request of
// the later half of the trace (the held-out part) that does not start at
// once, estimates its start with Queue from what the scheduler sees then;
// it compares with the start the replay produced. With tasks, every
// request is a task, and the estimate expects each to end when the ratios
// of the tasks ended by then say (TaskRatios), as gpuvmd does.
func measure(tb testing.TB, setup simulate.Setup, tr *simulate.Trace, order string, tasks bool) accuracy {
	tb.Helper()
	first, last := tr.Items[0].Request.Submitted, tr.Items[len(tr.Items)-1].Request.Submitted
	heldOut := first.Add(last.Sub(first) / 2)
	overtake := ""
	if order != config.OrderFIFO {
		overtake = "requests asked later may go first (" + order + " order)"
	}
	seen := map[string]bool{}
	predicted := map[string]Estimate{}
	started := map[string]time.Time{}
	acc := accuracy{name: order}
	h := taskHistory{prev: map[string]scheduler.Running{}}
	setup.Observe = func(sn simulate.Snapshot) {
		for _, id := range sn.Started {
			started[id] = sn.Now
		}
		if tasks {
			h.observe(sn)
		}
		var fresh []string
		for _, r := range sn.Queue {
			if seen[r.ID] {
				continue
			}
			seen[r.ID] = true
			if !r.Submitted.Before(heldOut) {
				fresh = append(fresh, r.ID)
			}
		}
		if len(fresh) == 0 {
			return
		}
		t := time.Now()
		es := Queue(State{Now: sn.Now, Inventory: sn.Inventory, Running: sn.Running, Queue: sn.Queue, Policy: sn.Policy, Options: sn.Options,
			Extendable: func(*scheduler.Running) bool { return false }, // the traces' VMs run their lease
			Overtake:   overtake, Tasks: h.tasks(sn), TaskRatio: h.ratios()}, Options{})
		acc.estimateNanos += time.Since(t).Nanoseconds()
		acc.estimateCalls++
		acc.maxQueue = max(acc.maxQueue, len(sn.Queue))
		acc.sumQueu += len(sn.Queue)
		for _, id := range fresh {
			predicted[id] = es[id]
		}
	}
	spec := simulate.PolicySpec(order)
	if _, err := simulate.Run(setup, tr, spec); err != nil {
		tb.Fatal(err)
	}
	ids := make([]string, 0, len(predicted))
	for id := range predicted {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e := predicted[id]
		acc.estimated++
		if e.Uncertain {
			acc.uncertain++
		}
		at, ok := started[id]
		if !ok {
			acc.gaveUp++
			if !e.Known() {
				acc.gaveUpPredicted++
			}
			continue
		}
		if !e.Known() {
			acc.unknown++
			continue
		}
		d := math.Abs(e.At.Sub(at).Minutes())
		acc.errs = append(acc.errs, d)
		if at.Before(e.At) {
			acc.early++
		}
		if e.Held {
			acc.heldErr = append(acc.heldErr, d)
		} else {
			acc.freeErr = append(acc.freeErr, d)
		}
		if e.Uncertain {
			acc.uncertainErr = append(acc.uncertainErr, d)
		} else {
			acc.certainErr = append(acc.certainErr, d)
		}
	}
	return acc
}

// taskHistory follows a run's tasks: those that ended (gone from the
// running between two cycles, at the later one) and their ratios.
type taskHistory struct {
	prev  map[string]scheduler.Running
	runs  []TaskRun
	ratio map[string]float64
	dirty bool
}

func (h *taskHistory) observe(sn simulate.Snapshot) {
	now := make(map[string]scheduler.Running, len(sn.Running))
	for _, r := range sn.Running {
		now[r.ID] = r
	}
	for id, r := range h.prev {
		if _, ok := now[id]; !ok {
			h.runs = append(h.runs, TaskRun{User: r.User, Asked: r.Lease, Used: sn.Now.Sub(r.Started)})
			h.dirty = true
		}
	}
	h.prev = now
}

func (h *taskHistory) ratios() map[string]float64 {
	if h.dirty || h.ratio == nil {
		h.ratio, h.dirty = TaskRatios(h.runs, MinTaskRuns), false
	}
	return h.ratio
}

// tasks is every request of sn, each asking for its lease; nil when no
// task has ended yet.
func (h *taskHistory) tasks(sn simulate.Snapshot) map[string]time.Duration {
	if len(h.runs) == 0 {
		return nil
	}
	out := make(map[string]time.Duration, len(sn.Running)+len(sn.Queue))
	for _, r := range sn.Running {
		out[r.ID] = 0
	}
	for _, r := range sn.Queue {
		out[r.ID] = 0
	}
	return out
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// BenchmarkAccuracy measures the estimates on the held-out (later) half
// of each example trace, under fifo and fairshare, and reports the median
// and p90 absolute error in minutes, per trace and overall, and the share
// flagged uncertain. Run it once: go test ./pkg/estimate -run '^$'
// -bench Accuracy -benchtime 1x -v
func BenchmarkAccuracy(b *testing.B) {
	for i := 0; i < b.N; i++ {
		var all []float64
		var allEst, allUnc int
		var rows []string
		for _, ex := range examples {
			setup, tr := loadExample(b, ex.cluster, ex.trace)
			for _, order := range []string{config.OrderFIFO, config.OrderFairshare} {
				a := measure(b, setup, tr, order, false)
				all = append(all, a.errs...)
				allEst += a.estimated
				allUnc += a.uncertain
				key := ex.name + "-" + order
				b.ReportMetric(quantile(a.errs, 0.5), key+"-p50-min")
				b.ReportMetric(quantile(a.errs, 0.9), key+"-p90-min")
				b.ReportMetric(float64(a.uncertain)/float64(max(a.estimated, 1)), key+"-uncertain-share")
				rows = append(rows, fmt.Sprintf("%-15s %9d %8d %7.1f %7.1f %9.1f%% %8.1f/%-8.1f %6.1f(%d)/%-6.1f %7d %6d (%d foreseen) %8.2f ms (queue ≤%d, mean %.0f)",
					key, a.estimated, len(a.errs), quantile(a.errs, 0.5), quantile(a.errs, 0.9),
					100*float64(a.uncertain)/float64(max(a.estimated, 1)), quantile(a.certainErr, 0.9), quantile(a.uncertainErr, 0.9),
					quantile(a.heldErr, 0.9), len(a.heldErr), quantile(a.freeErr, 0.9),
					a.unknown, a.gaveUp, a.gaveUpPredicted,
					float64(a.estimateNanos)/1e6/float64(max(a.estimateCalls, 1)), a.maxQueue, float64(a.sumQueu)/float64(max(a.estimateCalls, 1))))
			}
		}
		b.ReportMetric(quantile(all, 0.5), "all-p50-min")
		b.ReportMetric(quantile(all, 0.9), "all-p90-min")
		b.ReportMetric(float64(allUnc)/float64(max(allEst, 1)), "all-uncertain-share")
		if i == 0 {
			b.Logf("\n%-15s %9s %8s %7s %7s %10s %17s %17s %7s %6s %s\n%s\nall: %d errors, p50 %.1f min, p90 %.1f min, %.1f%% uncertain",
				"trace-order", "estimated", "started", "p50min", "p90min", "uncertain", "p90 cert/uncert", "p90 held(n)/not", "unknown", "gaveup", "per estimate",
				strings.Join(rows, "\n"), len(all), quantile(all, 0.5), quantile(all, 0.9), 100*float64(allUnc)/float64(max(allEst, 1)))
		}
	}
}

// BenchmarkTaskAccuracy measures the estimates for tasks against VMs: on
// the held-out (later) half of each example trace, under fifo and
// fairshare, replayed once as VMs that hold their lease and once as tasks
// whose real run is drawn from 20–100 % of it (simulate.DefaultTaskDraw,
// seed 1). As VMs, the estimate is made from the asked times (the running
// VMs' lease ends, the queued requests' leases); as tasks, it expects each
// to use the part of its asked time that the tasks of its owner ended by
// then used (TaskRatios), as gpuvmd does. It reports the median and p90 absolute error in minutes side by side, and
// the share of estimates that came late (the start earlier than
// estimated). Run it once: go test ./pkg/estimate -run '^$' -bench
// TaskAccuracy -benchtime 1x -v
func BenchmarkTaskAccuracy(b *testing.B) {
	for i := 0; i < b.N; i++ {
		all := map[string][]float64{}
		var rows []string
		for _, ex := range examples {
			setup, tr := loadExample(b, ex.cluster, ex.trace)
			tasks, err := simulate.AsTasks(tr, simulate.DefaultTaskDraw)
			if err != nil {
				b.Fatal(err)
			}
			for _, order := range []string{config.OrderFIFO, config.OrderFairshare} {
				row := fmt.Sprintf("%-15s", ex.name+"-"+order)
				for _, side := range []struct {
					name string
					tr   *simulate.Trace
				}{{"vms", simulate.AsVMs(tr)}, {"tasks", tasks}} {
					a := measure(b, setup, side.tr, order, side.name == "tasks")
					all[side.name] = append(all[side.name], a.errs...)
					key := ex.name + "-" + order + "-" + side.name
					b.ReportMetric(quantile(a.errs, 0.5), key+"-p50-min")
					b.ReportMetric(quantile(a.errs, 0.9), key+"-p90-min")
					row += fmt.Sprintf(" | %5d %5d %7.1f %7.1f %6.1f%%", a.estimated, len(a.errs), quantile(a.errs, 0.5), quantile(a.errs, 0.9), 100*float64(a.early)/float64(max(len(a.errs), 1)))
				}
				rows = append(rows, row)
			}
		}
		for _, side := range []string{"vms", "tasks"} {
			b.ReportMetric(quantile(all[side], 0.5), "all-"+side+"-p50-min")
			b.ReportMetric(quantile(all[side], 0.9), "all-"+side+"-p90-min")
		}
		if i == 0 {
			b.Logf("\n%-15s | %-38s | %-38s\n%-15s | %5s %5s %7s %7s %7s | %5s %5s %7s %7s %7s\n%s\nall: VMs %d errors, p50 %.1f p90 %.1f min; tasks %d errors, p50 %.1f p90 %.1f min",
				"", "as VMs (held to their lease)", "as tasks (run 20-100 % of it, seed 1)",
				"trace-order", "est", "start", "p50min", "p90min", "early", "est", "start", "p50min", "p90min", "early",
				strings.Join(rows, "\n"), len(all["vms"]), quantile(all["vms"], 0.5), quantile(all["vms"], 0.9),
				len(all["tasks"]), quantile(all["tasks"], 0.5), quantile(all["tasks"], 0.9))
		}
	}
}

// BenchmarkEstimate is one estimate of a 200-VM queue on an 8-GPU server
// (h100x8-like: four MIG GPUs, three vGPU, one whole) that is full.
func BenchmarkEstimate(b *testing.B) {
	s := bigState(b, 200)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		es := Queue(s, Options{})
		if len(es) != 200 {
			b.Fatalf("%d estimates", len(es))
		}
	}
}

// bigState is an 8-GPU server filled with running VMs and n queued.
func bigState(tb testing.TB, n int) State {
	tb.Helper()
	h := scheduler.HostSpec{Name: "h"}
	for i := 0; i < 8; i++ {
		g := scheduler.GPUSpec{Address: fmt.Sprintf("0000:%02x:00.0", 0x10+i), Model: "H100 PCIe 80GB", IOMMUGroup: fmt.Sprint(i)}
		switch {
		case i < 4:
			g.Allow, g.Mode = gpu.ModeMIG, gpu.ModeMIG
		case i < 7:
			g.Allow, g.Mode = gpu.ModeVGPU, gpu.ModeVGPU
		default:
			g.Allow = gpu.ModePassthrough
		}
		h.GPUs = append(h.GPUs, g)
	}
	inv, err := scheduler.NewInventory([]scheduler.HostSpec{h}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	eng, err := policy.New(policy.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	needs := []scheduler.Need{
		{Kind: gpu.KindMIG, Profile: "1g.10gb", Count: 1},
		{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1},
		{Kind: gpu.KindVGPU, Type: "H100-20C", Count: 1},
		{Kind: gpu.KindMIG, Profile: "2g.20gb", Count: 1},
		{Kind: gpu.KindPassthrough, Count: 1},
		{Kind: gpu.KindMIG, Profile: "7g.80gb", Count: 1},
	}
	s := State{Now: t0, Inventory: inv, Policy: eng, Options: scheduler.DefaultOptions(policy.DefaultNotice, policy.DefaultMinRuntime)}
	// Fill it: every need, round robin, until nothing more fits.
	for k := 0; ; k++ {
		placed := false
		for j, nd := range needs {
			p, why := inv.Place(nd, scheduler.PlaceOptions{Strategy: scheduler.Pack})
			if !why.OK() {
				continue
			}
			id := fmt.Sprintf("r%d-%d", k, j)
			end := t0.Add(time.Duration(30+(k*37+j*53)%600) * time.Minute)
			if err := inv.Allocate(id, p, end); err != nil {
				tb.Fatal(err)
			}
			s.Running = append(s.Running, scheduler.Running{Request: scheduler.Request{ID: id, User: fmt.Sprintf("u%d", k%7), Need: nd, Lease: 10 * time.Hour}, Placement: p, Started: t0.Add(-time.Hour), End: end})
			placed = true
		}
		if !placed {
			break
		}
	}
	for i := 0; i < n; i++ {
		s.Queue = append(s.Queue, scheduler.Request{ID: fmt.Sprintf("q%03d", i), User: fmt.Sprintf("u%d", i%11), Need: needs[i%len(needs)],
			Lease: time.Duration(1+i%6) * time.Hour, Submitted: t0.Add(-time.Duration(n-i) * time.Minute)})
	}
	return s
}

func TestBigStateIsFull(t *testing.T) {
	s := bigState(t, 10)
	if len(s.Running) == 0 {
		t.Fatal("nothing runs")
	}
	es := Queue(s, Options{})
	for id, e := range es {
		if !e.Known() || !e.At.After(t0) {
			t.Errorf("%s: %+v, want a start after now on a full server", id, e)
		}
	}
}
