package simulate

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Report compares the runs of one trace on one cluster.
type Report struct {
	Trace      string     `json:"trace"`
	Cluster    string     `json:"cluster"`
	Hosts      int        `json:"hosts"`
	GPUs       int        `json:"gpus"`
	Requests   int        `json:"requests"`
	Skipped    []RowError `json:"skipped_rows,omitempty"`
	First      time.Time  `json:"first_submit"`
	Last       time.Time  `json:"last_submit"`
	MaxWaitSec int64      `json:"max_wait_seconds"`
	// Largest is the requested type or profile with the largest share of a
	// GPU: the one fragmentation starves first.
	Largest string    `json:"largest"`
	Runs    []*Result `json:"runs"`
}

// Compare runs every spec on the trace.
func Compare(setup Setup, tr *Trace, specs []Spec) (*Report, error) {
	rep := &Report{Hosts: len(setup.Cluster.Hosts), GPUs: setup.Cluster.GPUCount(), Requests: len(tr.Items), Skipped: tr.Bad,
		First: tr.Items[0].Request.Submitted, Last: tr.Items[len(tr.Items)-1].Request.Submitted, MaxWaitSec: int64(setup.MaxWait / time.Second)}
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.Name] {
			return nil, fmt.Errorf("run %q is asked for twice", s.Name)
		}
		seen[s.Name] = true
	}
	// The runs share nothing but the (read-only) inputs: run them side by
	// side, and keep their order.
	rep.Runs = make([]*Result, len(specs))
	errs := make([]error, len(specs))
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := Run(setup, tr, s)
			if err != nil {
				errs[i] = fmt.Errorf("run %s: %w", s.Name, err)
			}
			rep.Runs[i] = r
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(rep.Runs) > 0 && len(rep.Runs[0].Types) > 0 {
		rep.Largest = rep.Runs[0].Types[0].Key // sorted by share, largest first
	}
	return rep, nil
}

// Run finds a run by name.
func (r *Report) Run(name string) *Result {
	for _, x := range r.Runs {
		if x.Name == name {
			return x
		}
	}
	return nil
}

// TypeOf finds a type's result in a run.
func (x *Result) TypeOf(key string) *Type {
	for i := range x.Types {
		if x.Types[i].Key == key {
			return &x.Types[i]
		}
	}
	return nil
}

// WriteText writes the report for people: the runs side by side.
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "Trace %s: %d requests, submitted %s to %s", r.Trace, r.Requests, r.First.UTC().Format("2006-01-02 15:04"), r.Last.UTC().Format("2006-01-02 15:04 MST"))
	if r.MaxWaitSec > 0 {
		fmt.Fprintf(w, "; a request not started within %s is refused", time.Duration(r.MaxWaitSec)*time.Second)
	}
	fmt.Fprintln(w)
	if len(r.Skipped) > 0 {
		fmt.Fprintf(w, "Skipped %d bad rows (first: %s)\n", len(r.Skipped), r.Skipped[0])
	}
	fmt.Fprintf(w, "Cluster %s: %d hosts, %d GPUs\n\n", r.Cluster, r.Hosts, r.GPUs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label string, f func(x *Result) string) {
		cells := []string{label}
		for _, x := range r.Runs {
			cells = append(cells, f(x))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	row("", func(x *Result) string {
		if x.Configured {
			return x.Name + "*"
		}
		return x.Name
	})
	row("placement / queue", func(x *Result) string {
		q := "greedy"
		if x.Reserve > 0 {
			q = "backfill"
		}
		return fmt.Sprintf("%s/%s", x.Strategy, q)
	})
	row("accepted", func(x *Result) string { return fmt.Sprintf("%d (%.1f%%)", x.Accepted, 100*x.Acceptance) })
	if r.Largest != "" {
		row("  of which "+r.Largest, func(x *Result) string {
			t := x.TypeOf(r.Largest)
			if t == nil {
				return "-"
			}
			return fmt.Sprintf("%d/%d (%.1f%%)", t.Accepted, t.Requested, 100*t.Acceptance)
		})
	}
	row("GPU-hours served", func(x *Result) string {
		return fmt.Sprintf("%.1f (%.0f%%)", x.GPUHoursServed, 100*safeDiv(x.GPUHoursServed, x.GPUHoursRequested))
	})
	row("utilisation", func(x *Result) string { return fmt.Sprintf("%.1f%%", 100*x.Utilization) })
	row("  by day (%)", func(x *Result) string { return byDay(x.Series) })
	row("wait mean / p95 (min)", func(x *Result) string { return fmt.Sprintf("%.1f / %.1f", x.MeanWaitMin, x.P95WaitMin) })
	if anyRun(r.Runs, func(x *Result) bool { return x.HasMIG }) {
		row("stranded MIG slices", func(x *Result) string { return fmt.Sprintf("%.2f (%.1f%% of free)", x.Stranded, 100*x.StrandedShare) })
	}
	if anyRun(r.Runs, func(x *Result) bool { return x.HasVGPU }) {
		row("free vGPU memory on used GPUs", func(x *Result) string { return fmt.Sprintf("%.0f GiB", x.VGPUFreeGiB) })
	}
	row("fairness (Jain)", func(x *Result) string { return fmt.Sprintf("%.3f", x.Fairness) })
	row("preemptions", func(x *Result) string { return fmt.Sprint(x.Preemptions) })
	row("window stops", func(x *Result) string { return fmt.Sprint(x.WindowStops) })
	row("refused at once", func(x *Result) string { return counts(x.RefusedAtOnce) })
	row("withdrawn, waiting for", func(x *Result) string { return counts(x.Expired) })
	tw.Flush()

	fmt.Fprintln(w, "\nBy type, largest first: accepted/requested (share), mean/p95 wait in minutes, GPU-hours")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"type (share)"}
	for _, x := range r.Runs {
		head = append(head, x.Name, "wait", "GPU-h")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	if len(r.Runs) > 0 {
		for _, t := range r.Runs[0].Types {
			cells := []string{fmt.Sprintf("%s (%.3g)", t.Key, t.Share)}
			for _, x := range r.Runs {
				u := x.TypeOf(t.Key)
				cells = append(cells, fmt.Sprintf("%d/%d", u.Accepted, u.Requested), fmt.Sprintf("%.0f/%.0f", u.MeanWaitMin, u.P95WaitMin), fmt.Sprintf("%.0f", u.GPUHours))
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
	}
	tw.Flush()
	for _, x := range r.Runs {
		for _, b := range x.Bookings {
			if b.Error != "" {
				fmt.Fprintf(w, "\n%s: booking %s refused: %s", x.Name, b.ID, b.Error)
			}
		}
	}
	if base := r.Run(Baseline.Name); base != nil && r.Largest != "" {
		bt := base.TypeOf(r.Largest)
		fmt.Fprintln(w)
		for _, x := range r.Runs {
			if x == base {
				continue
			}
			xt := x.TypeOf(r.Largest)
			fmt.Fprintf(w, "%s vs first-fit: %s accepted %s, GPU-hours %+.1f%%, fairness %+.3f\n", x.Name, r.Largest,
				ratio(float64(xt.Accepted), float64(bt.Accepted)), 100*(safeDiv(x.GPUHoursServed, base.GPUHoursServed)-1), x.Fairness-base.Fairness)
		}
	}
	return nil
}

// byDay averages the utilisation series over calendar days (UTC):
// "84 86 90 85 79 60 55".
func byDay(ps []Point) string {
	var days []string
	var sum, n float64
	var cur time.Time
	flush := func() {
		if n > 0 {
			days = append(days, fmt.Sprintf("%.0f", 100*sum/n))
		}
		sum, n = 0, 0
	}
	for _, p := range ps {
		d := p.Start.UTC().Truncate(24 * time.Hour)
		if !d.Equal(cur) {
			flush()
			cur = d
		}
		sum += p.Utilization
		n++
	}
	flush()
	if len(days) > 14 {
		return fmt.Sprintf("%s … %s (%d days)", strings.Join(days[:7], " "), strings.Join(days[len(days)-3:], " "), len(days))
	}
	return strings.Join(days, " ")
}

func anyRun(rs []*Result, f func(*Result) bool) bool {
	for _, x := range rs {
		if f(x) {
			return true
		}
	}
	return false
}

func ratio(a, b float64) string {
	if b == 0 {
		if a == 0 {
			return "the same (none)"
		}
		return fmt.Sprintf("%.0f vs none", a)
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
