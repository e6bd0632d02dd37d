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
	"github.com/gpuvm/gpuvm/pkg/i18n"
)

// Options tune the rendering.
type Options struct {
	// Title heads the report (default "GPU usage report", in Language).
	Title string
	// Server names the gpuvmd the summary came from, for the footer.
	Server string
	// MaxBars bounds the bars of a chart (default 15); the tables list
	// every row.
	MaxBars int
	// Language is the report's language: i18n.English (the default) or
	// i18n.Chinese. The summary's notes, which gpuvmd writes in English,
	// are said in it too.
	Language string
}

//go:embed report.html.tmpl
var pageTemplate string

//go:embed report.css
var pageCSS string

// page is the report's template; "t" and "code" say its words, and are
// bound to the report's language when it renders (pageIn).
var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"hours": fmtHours,
	"pct":   fmtPct,
	"util":  fmtUtil,
	"wait":  fmtWait,
	"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"dict":  dict,
	"t":     words{}.t,
	"code":  words{}.code,
}).Parse(pageTemplate))

// pageIn is the template saying w's words.
func pageIn(w words) (*template.Template, error) {
	p, err := page.Clone()
	if err != nil {
		return nil, fmt.Errorf("the report's template: %w", err)
	}
	return p.Funcs(template.FuncMap{"t": w.t, "code": w.code, "wait": w.wait}), nil
}

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
	Lang      string
	Title     string
	Server    string
	CSS       template.CSS
	Cards     []card
	Notes     []string
	UserChart template.HTML
	GroupChart,
	ProfileChart template.HTML
	WaitChart template.HTML
	Heatmaps  []heatmapView
	HasUtil   bool
	// Simulated: some GPU time was held on simulated GPU servers.
	Simulated bool
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
	say := wordsOf(o.Language)
	p, err := pageIn(say)
	if err != nil {
		return err
	}
	v := view{S: s, Lang: say.lang, Title: cmp.Or(o.Title, say.t("GPU usage report")), Server: o.Server, CSS: template.CSS(pageCSS),
		Simulated: s.Total.SimulatedGPUHours > 0}
	for _, n := range s.Notes {
		v.Notes = append(v.Notes, say.note(n))
	}
	v.Cards = cards(s, say)
	v.UserChart = template.HTML(usageChart(say, say.t("GPU-hours per user, held and used"), s.ByUser, o.MaxBars))
	v.GroupChart = template.HTML(usageChart(say, say.t("GPU-hours per group, held and used"), s.ByGroup, o.MaxBars))
	v.ProfileChart = template.HTML(usageChart(say, say.t("GPU-hours per profile, held and used"), s.ByProfile, o.MaxBars))
	v.WaitChart = template.HTML(waitChart(say, s.QueueWaits, o.MaxBars))
	v.Heatmaps, v.HasUtil = heatmaps(say, s)
	return p.Execute(w, v)
}

// cards are the figures atop the report.
func cards(s *api.ReportSummary, say words) []card {
	t := s.Total
	capacity := say.t("of the capacity of {n} GPUs", "n", s.GPUs)
	if s.GPUs == 1 {
		capacity = say.t("of the capacity of 1 GPU")
	}
	idle := say.t("idle VMs")
	if len(s.IdleVMs) == 1 {
		idle = say.t("idle VM")
	}
	out := []card{
		{fmtHours(t.GPUHours), say.t("GPU-hours held")},
		{occupancy(s), capacity},
		{fmtUtil(t.Utilization), say.t("utilisation where measured")},
		{fmtHours(t.IdleGPUHours), say.t("GPU-hours held idle")},
	}
	if t.SimulatedGPUHours > 0 {
		out = append(out, card{fmtHours(t.SimulatedGPUHours), say.t("GPU-hours on simulated GPU servers (utilisation not measured)")})
	}
	out = append(out, card{fmt.Sprint(len(s.IdleVMs)), idle})
	if n := len(s.QueueWaits); n > 0 {
		all := s.QueueWaits[n-1]
		out = append(out, card{say.wait(all.P95Seconds, all.Started), say.t("95th percentile queue wait")})
	}
	return out
}

// occupancy is the share of the capacity held: "34%".
func occupancy(s *api.ReportSummary) string {
	if s.CapacityGPUHours <= 0 {
		return "–"
	}
	return fmtPct(s.Total.GPUHours / s.CapacityGPUHours)
}

func usageChart(say words, label string, rows []api.UsageRow, n int) string {
	if len(rows) == 0 {
		return ""
	}
	var bars []bar
	for _, r := range rows[:min(n, len(rows))] {
		b := bar{label: r.Key, total: r.GPUHours, used: math.NaN(),
			title: say.t("{key}: {h} GPU-hours held", "key", r.Key, "h", fmtHours(r.GPUHours))}
		b.valueLabel = say.t("{h} h", "h", fmtHours(r.GPUHours))
		switch {
		case r.Utilization != nil:
			b.used = r.UsedGPUHours
			b.valueLabel += say.t(" · {pct} used", "pct", fmtPct(*r.Utilization))
			b.title += say.t(", {used} used ({pct} of the {m} measured)", "used", fmtHours(r.UsedGPUHours), "pct", fmtPct(*r.Utilization),
				"m", fmtHours(r.MeasuredGPUHours))
		case r.SimulatedGPUHours > 0:
			b.valueLabel += say.t(" · simulated")
		default:
			b.valueLabel += say.t(" · use unknown")
		}
		if r.SimulatedGPUHours > 0 {
			b.title += say.t(", {sim} on a simulated GPU server", "sim", fmtHours(r.SimulatedGPUHours))
		}
		bars = append(bars, b)
	}
	return barChart(label, say.t("GPU-hours"), bars)
}

func waitChart(say words, waits []api.QueueWaitStats, n int) string {
	var bars []bar
	for _, w := range waits {
		if w.Profile == "total" || w.Started == 0 {
			continue
		}
		mean, p95 := say.wait(w.MeanSeconds, 1), say.wait(w.P95Seconds, 1)
		bars = append(bars, bar{label: w.Profile, total: w.P95Seconds / 3600, used: w.MeanSeconds / 3600,
			valueLabel: say.t("mean {mean} · p95 {p95}", "mean", mean, "p95", p95),
			title:      say.t("{profile}: {n} started, mean wait {mean}, 95% within {p95}", "profile", w.Profile, "n", w.Started, "mean", mean, "p95", p95)})
		if len(bars) == n {
			break
		}
	}
	if len(bars) == 0 {
		return ""
	}
	return barChart(say.t("Queue wait per profile: mean (dark) and 95th percentile (light), hours"), say.t("hours"), bars)
}

func heatmaps(say words, s *api.ReportSummary) ([]heatmapView, bool) {
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
		{Title: say.t("GPUs held"), Caption: say.t("Mean number of GPUs held by VMs, of {n} (slices count as their share).", "n", s.GPUs),
			SVG: template.HTML(heatmap(say, say.t("Mean GPUs held by weekday and hour"), blues, allocHi,
				func(d, hr int) (float64, bool) { return h.AllocatedGPUs[d][hr], true }, two))},
		{Title: say.t("Requests waiting"), Caption: say.t("Mean number of VMs waiting in the queue for a GPU."),
			SVG: template.HTML(heatmap(say, say.t("Mean VMs waiting by weekday and hour"), oranges, queueHi,
				func(d, hr int) (float64, bool) { return h.QueuedVMs[d][hr], true }, two))},
		{Title: say.t("Utilisation"), Caption: say.t("Mean utilisation of the GPUs held, where they reported it."),
			SVG: template.HTML(heatmap(say, say.t("Mean GPU utilisation by weekday and hour"), greens, 1,
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

// fmtWait is a wait in English: "40s", "12m", "3h05m", "2d4h"; "–" when
// nothing started.
func fmtWait(secs float64, started int) string { return wordsOf(i18n.English).wait(secs, started) }
