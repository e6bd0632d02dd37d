package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/scheduler/simulate"
)

type simOpts struct {
	cluster, trace, config, start string
	runs                          []string
	maxWait, tick                 time.Duration
	json, skipBad, preempt        bool
	reserve, lookahead            int
	asTasks                       bool
	taskSeed                      uint64
	taskRun                       string
}

func newSimCmd(getenv func(string) string) *cobra.Command {
	var o simOpts
	cmd := &cobra.Command{
		Use:   "sim --cluster FILE.hcl --trace FILE.csv",
		Short: "Replay a trace of VM requests on a cluster under several scheduling policies, side by side",
		Long: `Replays a trace of VM requests against a cluster through the scheduler and
policy code gpuvmd runs, once per policy, and reports what each served next to
NVML's own behaviour ("first-fit": first come first served, whatever fits
starts, at the lowest free MIG slot of the first GPU that fits).

The cluster file (HCL) lists hosts, each a simulator preset (a100x4, a40x2,
l40sx4, h100x8, mixed) or gpu blocks with models and modes, and optionally
bookings. The trace is CSV with a header:

  submit,user,group,gpu_kind,gpu_type,count,hours,priority,preemptible
  912,u07,students,mig,3g.40gb,1,2.5,10,true

submit is seconds from the start or an RFC 3339 time; gpu_kind is mig, vgpu,
passthrough or any (gpu_type then a memory size, "20GiB"). A profile column may
replace gpu_kind and gpu_type (with --config); class, runtime (hours the VM
really runs) and id columns are optional.

With --config, the configuration's policy applies to every run (quotas,
windows, bookings rules, lease limits) and its queue order is marked with *.
A request not started within --max-wait of its submission is withdrawn and
counts as refused.

Runs (--runs): first-fit, fifo, priority, sjf, fairshare, each optionally
followed by modifiers: +greedy (no backfill), +backfill (first-fit placement
with the policy runs' backfill), +easy (hold for the first blocked request
only), +no-preempt, +spread, +mixed-size (every vGPU GPU in mixed-size mode). Without --runs: first-fit and the four orders, plus the
first order with +mixed-size when the trace asks for time-sliced vGPUs that
share GPUs in equal-size mode.

With --as-tasks, each run is replayed twice: as VMs that hold their GPU for
their whole lease, and as tasks (gpuvm task submit) that give it back when their
command ends, each request's real run drawn uniformly from --task-run percent of
its lease (seeded by --task-seed; the trace's runtime column is replaced). The
report gives, per run, VMs → tasks: the GPU-hours given back before the lease's
end, the GPU-hours used, the mean and p90 wait, the requests accepted and the
largest type's acceptance.

Exit status: 0 done, 1 the files are wrong (every problem is printed), 2 usage.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSim(o, getenv, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.cluster, "cluster", "", "cluster file (HCL): hosts, GPUs, bookings")
	f.StringVar(&o.trace, "trace", "", "trace file (CSV)")
	f.StringVar(&o.config, "config", "", "configuration directory whose policy and profiles apply (default: no rules)")
	f.StringSliceVar(&o.runs, "runs", nil, "runs to compare (default: first-fit,fifo,priority,sjf,fairshare)")
	f.DurationVar(&o.maxWait, "max-wait", time.Hour, "a request not started this long after submission is refused (0: wait forever)")
	f.DurationVar(&o.tick, "tick", 5*time.Minute, "how often the scheduler runs besides on arrivals and ends")
	f.StringVar(&o.start, "start", "", "time zero of the trace's seconds, RFC 3339 (default "+simulate.DefaultStart.Format(time.RFC3339)+", a Monday)")
	f.BoolVar(&o.json, "json", false, "print JSON")
	f.BoolVar(&o.skipBad, "skip-bad-rows", false, "skip bad trace rows (listed in the report) instead of refusing the trace")
	f.BoolVar(&o.preempt, "preempt", true, "let the policy runs preempt (a modifier +no-preempt turns it off for one run)")
	f.IntVar(&o.reserve, "reserve", scheduler.DefaultReserve, "policy runs: requests that get capacity held while they wait")
	f.IntVar(&o.lookahead, "lookahead", scheduler.DefaultLookahead, "policy runs: the holds go to the largest of this many first blocked requests")
	f.BoolVar(&o.asTasks, "as-tasks", false, "replay each run as VMs held to their lease and as tasks that end early, side by side")
	f.Uint64Var(&o.taskSeed, "task-seed", simulate.DefaultTaskDraw.Seed, "--as-tasks: the seed of the drawn runs")
	f.StringVar(&o.taskRun, "task-run", "20-100", "--as-tasks: a task's real run, drawn uniformly from this range of percent of its lease")
	return cmd
}

// taskDraw is the draw of --as-tasks: --task-run "MIN-MAX" percent.
func taskDraw(o simOpts) (simulate.TaskDraw, error) {
	lo, hi, ok := strings.Cut(o.taskRun, "-")
	d := simulate.TaskDraw{Seed: o.taskSeed}
	a, errA := strconv.ParseFloat(strings.TrimSpace(lo), 64)
	b, errB := strconv.ParseFloat(strings.TrimSpace(hi), 64)
	if !ok || errA != nil || errB != nil {
		return d, fmt.Errorf("--task-run %q is not MIN-MAX percent of the lease (20-100)", o.taskRun)
	}
	d.Min, d.Max = a/100, b/100
	if err := d.Validate(); err != nil {
		return d, fmt.Errorf("--task-run %q: percent from above 0 to 100, MIN ≤ MAX", o.taskRun)
	}
	return d, nil
}

func runSim(o simOpts, getenv func(string) string, stdout, stderr io.Writer) error {
	if o.cluster == "" || o.trace == "" {
		return usageError{fmt.Errorf("gpuvm sim needs --cluster FILE.hcl and --trace FILE.csv")}
	}
	if o.maxWait < 0 || o.tick < time.Second || o.tick > 24*time.Hour {
		return usageError{fmt.Errorf("--max-wait must be ≥ 0 and --tick between 1s and 24h")}
	}
	if o.reserve < 0 || o.reserve > 1000 || o.lookahead < 0 || o.lookahead > 10000 {
		return usageError{fmt.Errorf("--reserve is from 0 to 1000 and --lookahead from 0 to 10000")}
	}
	var draw simulate.TaskDraw
	if o.asTasks {
		d, err := taskDraw(o)
		if err != nil {
			return usageError{err}
		}
		draw = d
	}
	var start time.Time
	if o.start != "" {
		t, err := time.Parse(time.RFC3339, o.start)
		if err != nil {
			return usageError{fmt.Errorf("--start %q is not an RFC 3339 time (2026-01-05T00:00:00Z)", o.start)}
		}
		start = t
	}
	src, err := readInput(o.cluster)
	if err != nil {
		return err
	}
	cluster, err := simulate.ParseCluster(o.cluster, src)
	if err != nil {
		fmt.Fprintf(stderr, "gpuvm: the cluster file %s is wrong:\n%v\n", o.cluster, err)
		return exitError{exitFailure}
	}
	setup := simulate.Setup{Cluster: cluster, MaxWait: o.maxWait, Tick: o.tick}
	var cfg *config.Config
	if o.config != "" {
		cfg, err = loadForProfiles(profileOpts{config: o.config}, getenv, stderr)
		if err != nil {
			return err
		}
		setup.Policy, setup.Profiles = &cfg.Policy, cfg.Profiles
	}
	f, err := os.Open(o.trace)
	if err != nil {
		return usageError{fmt.Errorf("--trace: %w", errorsUnwrapPath(err))}
	}
	defer f.Close()
	tr, err := simulate.ParseTrace(f, simulate.TraceOptions{Start: start, Config: cfg, SkipBad: o.skipBad})
	if err != nil {
		fmt.Fprintf(stderr, "gpuvm: the trace %s is wrong: %v\n", o.trace, err)
		return exitError{exitFailure}
	}
	configured := ""
	if cfg != nil {
		configured = cfg.Policy.Queue.Order
	}
	specs, err := simSpecs(o, configured, tr, cluster)
	if err != nil {
		return usageError{err}
	}
	if o.asTasks {
		return simTasks(setup, tr, specs, draw, o, stdout, stderr)
	}
	rep, err := simulate.Compare(setup, tr, specs)
	if err != nil {
		fmt.Fprintf(stderr, "gpuvm: %v\n", err)
		return exitError{exitFailure}
	}
	rep.Trace, rep.Cluster = o.trace, o.cluster
	if o.json {
		return writeJSON(stdout, rep)
	}
	return rep.WriteText(stdout)
}

// simTasks is gpuvm sim --as-tasks: each run as VMs and as tasks.
func simTasks(setup simulate.Setup, tr *simulate.Trace, specs []simulate.Spec, d simulate.TaskDraw, o simOpts, stdout, stderr io.Writer) error {
	rep, err := simulate.CompareAsTasks(setup, tr, specs, d)
	if err != nil {
		fmt.Fprintf(stderr, "gpuvm: %v\n", err)
		return exitError{exitFailure}
	}
	rep.Trace, rep.Cluster = o.trace, o.cluster
	if o.json {
		return writeJSON(stdout, rep)
	}
	return rep.WriteText(stdout)
}

// readInput reads a file named on the command line; a missing file is a
// usage error.
func readInput(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, usageError{fmt.Errorf("%s: %w", path, errorsUnwrapPath(err))}
		}
		return nil, err
	}
	return b, nil
}

var simOrders = []string{config.OrderFIFO, config.OrderPriority, config.OrderSJF, config.OrderFairshare}

// simSpecs turns --runs (or the defaults) into run specs.
func simSpecs(o simOpts, configured string, tr *simulate.Trace, c *simulate.Cluster) ([]simulate.Spec, error) {
	names := o.runs
	if len(names) == 0 {
		names = append([]string{simulate.Baseline.Name}, simOrders...)
		if wantsMixed(tr, c) {
			first := config.OrderFIFO
			if configured != "" {
				first = configured
			}
			names = append(names, first+"+mixed-size")
		}
	}
	var out []simulate.Spec
	for _, n := range names {
		parts := strings.Split(strings.TrimSpace(n), "+")
		var s simulate.Spec
		switch base := parts[0]; {
		case base == simulate.Baseline.Name:
			s = simulate.Baseline
		case simContains(simOrders, base):
			s = simulate.PolicySpec(base)
			s.Reserve, s.Lookahead, s.Preempt = o.reserve, o.lookahead, o.preempt
			s.Configured = base == configured
		default:
			return nil, fmt.Errorf("--runs: %q is not first-fit, fifo, priority, sjf or fairshare", base)
		}
		for _, m := range parts[1:] {
			switch m {
			case "greedy":
				s.Reserve, s.Lookahead = 0, 0
			case "backfill":
				s.Reserve, s.Lookahead = o.reserve, o.lookahead
			case "easy":
				s.Reserve, s.Lookahead = max(s.Reserve, 1), 0
			case "no-preempt":
				s.Preempt = false
			case "spread":
				s.Strategy = scheduler.Spread
			case "mixed-size":
				s.MixedSize = true
			default:
				return nil, fmt.Errorf("--runs: %q: modifier %q is not greedy, backfill, easy, no-preempt, spread or mixed-size", n, m)
			}
		}
		s.Name = strings.TrimSpace(n)
		out = append(out, s)
	}
	return out, nil
}

// wantsMixed reports whether the trace asks for time-sliced vGPUs and the
// cluster has vGPU GPUs in equal-size mode: then mixed-size mode may gain.
func wantsMixed(tr *simulate.Trace, c *simulate.Cluster) bool {
	vgpu := false
	for _, it := range tr.Items {
		if it.Request.Need.Kind == gpu.KindVGPU {
			vgpu = true
			break
		}
	}
	if !vgpu {
		return false
	}
	for _, h := range c.Hosts {
		for _, g := range h.GPUs {
			if !g.MixedSize && (g.Allow == gpu.ModeVGPU || g.Allow == gpu.ModeAuto || g.Allow == "") {
				return true
			}
		}
	}
	return false
}

func simContains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
