// Package report renders the periodic review report of gpuvm (gpuvm report)
// from the server's summary (api.ReportSummary): one self-contained HTML
// file, with its CSS inline and its charts as inline SVG drawn here. It has
// no scripts and loads nothing, so it opens offline, from a mail attachment
// or a file share. It is pure Go, for the CLI.
package report

import (
	"cmp"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Options tune the rendering.
type Options struct {
	// Title heads the report (default "GPU usage report").
	Title string
	// Server names the gpuvmd the summary came from, for the footer.
	Server string
	// MaxBars bounds the bars of a chart (default 15); the tables list
	// every row.
	MaxBars int
}

//go:embed report.html.tmpl
var pageTemplate string

//go:embed report.css
var pageCSS string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"hours": fmtHours,
	"pct":   fmtPct,
	"util":  fmtUtil,
	"wait":  fmtWait,
	"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"dict":  dict,
}).Parse(pageTemplate))

// dict makes a map of key, value pairs, for calling a template with
// several values.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict wants key, value pairs, got %d arguments", len(kv))
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// view is what the template shows.
type view struct {
	S         *api.ReportSummary
	Title     string
	Server    string
	CSS       template.CSS
	Cards     []card
	UserChart template.HTML
	GroupChart,
	ProfileChart template.HTML
	WaitChart template.HTML
	Heatmaps  []heatmapView
	HasUtil   bool
}

type card struct{ Value, Label string }

type heatmapView struct {
	Title, Caption string
	SVG            template.HTML
}

// Render writes the report of s.
func Render(w io.Writer, s *api.ReportSummary, o Options) error {
	if s == nil {
		return fmt.Errorf("render report: no summary")
	}
	if o.MaxBars <= 0 {
		o.MaxBars = 15
	}
	v := view{S: s, Title: cmp.Or(o.Title, "GPU usage report"), Server: o.Server, CSS: template.CSS(pageCSS)}
	t := s.Total
	v.Cards = []card{
		{fmtHours(t.GPUHours), "GPU-hours held"},
		{occupancy(s), "of the capacity of " + plural(s.GPUs, "GPU")},
		{fmtUtil(t.Utilization), "utilisation where measured"},
		{fmtHours(t.IdleGPUHours), "GPU-hours held idle"},
		{fmt.Sprint(len(s.IdleVMs)), pluralWord(len(s.IdleVMs), "idle VM")},
	}
	if n := len(s.QueueWaits); n > 0 {
		all := s.QueueWaits[n-1]
		v.Cards = append(v.Cards, card{fmtWait(all.P95Seconds, all.Started), "95th percentile queue wait"})
	}
	v.UserChart = template.HTML(usageChart("GPU-hours per user, held and used", s.ByUser, o.MaxBars))
	v.GroupChart = template.HTML(usageChart("GPU-hours per group, held and used", s.ByGroup, o.MaxBars))
	v.ProfileChart = template.HTML(usageChart("GPU-hours per profile, held and used", s.ByProfile, o.MaxBars))
	v.WaitChart = template.HTML(waitChart(s.QueueWaits, o.MaxBars))
	v.Heatmaps, v.HasUtil = heatmaps(s)
	return page.Execute(w, v)
}

// occupancy is the share of the capacity held: "34%".
func occupancy(s *api.ReportSummary) string {
	if s.CapacityGPUHours <= 0 {
		return "–"
	}
	return fmtPct(s.Total.GPUHours / s.CapacityGPUHours)
}

func usageChart(label string, rows []api.UsageRow, n int) string {
	if len(rows) == 0 {
		return ""
	}
	var bars []bar
	for _, r := range rows[:min(n, len(rows))] {
		b := bar{label: r.Key, total: r.GPUHours, used: math.NaN(),
			title: fmt.Sprintf("%s: %s GPU-hours held", r.Key, fmtHours(r.GPUHours))}
		b.valueLabel = fmtHours(r.GPUHours) + " h"
		if r.Utilization != nil {
			b.used = r.UsedGPUHours
			b.valueLabel += " · " + fmtPct(*r.Utilization) + " used"
			b.title += fmt.Sprintf(", %s used (%s of the %s measured)", fmtHours(r.UsedGPUHours), fmtPct(*r.Utilization), fmtHours(r.MeasuredGPUHours))
		} else {
			b.valueLabel += " · use unknown"
		}
		bars = append(bars, b)
	}
	return barChart(label, "GPU-hours", bars)
}

func waitChart(waits []api.QueueWaitStats, n int) string {
	var bars []bar
	for _, w := range waits {
		if w.Profile == "total" || w.Started == 0 {
			continue
		}
		bars = append(bars, bar{label: w.Profile, total: w.P95Seconds / 3600, used: w.MeanSeconds / 3600,
			valueLabel: fmt.Sprintf("mean %s · p95 %s", fmtWait(w.MeanSeconds, 1), fmtWait(w.P95Seconds, 1)),
			title:      fmt.Sprintf("%s: %d started, mean wait %s, 95%% within %s", w.Profile, w.Started, fmtWait(w.MeanSeconds, 1), fmtWait(w.P95Seconds, 1))})
		if len(bars) == n {
			break
		}
	}
	if len(bars) == 0 {
		return ""
	}
	return barChart("Queue wait per profile: mean (dark) and 95th percentile (light), hours", "hours", bars)
}

func heatmaps(s *api.ReportSummary) ([]heatmapView, bool) {
	h := s.Heatmaps
	maxOf := func(m *[7][24]float64) float64 {
		hi := 0.0
		for d := range m {
			for _, v := range m[d] {
				hi = max(hi, v)
			}
		}
		return hi
	}
	gpus := float64(s.GPUs)
	allocHi := max(gpus, maxOf(&h.AllocatedGPUs))
	queueHi := niceMax(maxOf(&h.QueuedVMs))
	hasUtil := false
	for d := range h.Utilization {
		for _, u := range h.Utilization[d] {
			hasUtil = hasUtil || u != nil
		}
	}
	two := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	out := []heatmapView{
		{Title: "GPUs held", Caption: fmt.Sprintf("Mean number of GPUs held by VMs, of %d (slices count as their share).", s.GPUs),
			SVG: template.HTML(heatmap("Mean GPUs held by weekday and hour", blues, allocHi,
				func(d, hr int) (float64, bool) { return h.AllocatedGPUs[d][hr], true }, two))},
		{Title: "Requests waiting", Caption: "Mean number of VMs waiting in the queue for a GPU.",
			SVG: template.HTML(heatmap("Mean VMs waiting by weekday and hour", oranges, queueHi,
				func(d, hr int) (float64, bool) { return h.QueuedVMs[d][hr], true }, two))},
		{Title: "Utilisation", Caption: "Mean utilisation of the GPUs held, where they reported it.",
			SVG: template.HTML(heatmap("Mean GPU utilisation by weekday and hour", greens, 1,
				func(d, hr int) (float64, bool) {
					if u := h.Utilization[d][hr]; u != nil {
						return *u, true
					}
					return 0, false
				}, fmtPct))},
	}
	return out, hasUtil
}

// fmtHours writes GPU-hours as every review output does.
func fmtHours(h float64) string { return api.FormatGPUHours(h) }

// fmtPct is "45%" (0..1 in).
func fmtPct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// fmtUtil is a utilisation, "–" when unknown.
func fmtUtil(u *float64) string {
	if u == nil {
		return "–"
	}
	return fmtPct(*u)
}

// fmtWait is a wait: "40s", "12m", "3h05m", "2d4h"; "–" when nothing
// started.
func fmtWait(secs float64, started int) string {
	if started == 0 {
		return "–"
	}
	d := time.Duration(math.Round(secs)) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// pluralWord is what, or whats when n is not 1.
func pluralWord(n int, what string) string {
	if n == 1 {
		return what
	}
	return what + "s"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
