package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/gpuvm/gpuvm/pkg/api"
)

var update = flag.Bool("update", false, "rewrite testdata/report.golden.html from the current rendering")

func ptr(f float64) *float64 { return &f }

// fixture is a fixed summary: a week of a small lab, busy by day, with
// requests queueing at night while daytime capacity idles, an idle VM, a
// profile without samples, and a name that needs escaping.
func fixture() *api.ReportSummary {
	from := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	s := &api.ReportSummary{
		From: from, To: from.Add(7 * 24 * time.Hour), GeneratedAt: from.Add(7*24*time.Hour + 5*time.Minute),
		Location: "Europe/Berlin", GPUs: 4, CapacityGPUHours: 4 * 168, IdleBelow: 0.1,
		Total: api.UsageRow{Key: "total", GPUHours: 213.5, MeasuredGPUHours: 190, UsedGPUHours: 95.25, IdleGPUHours: 94.75, Utilization: ptr(95.25 / 190), VMs: 23, Running: 3},
		ByUser: []api.UsageRow{
			{Key: "alice", GPUHours: 120, MeasuredGPUHours: 120, UsedGPUHours: 84, IdleGPUHours: 36, Utilization: ptr(0.7), VMs: 10, Running: 1},
			{Key: "bob", GPUHours: 70, MeasuredGPUHours: 70, UsedGPUHours: 11.25, IdleGPUHours: 58.75, Utilization: ptr(11.25 / 70), VMs: 8, Running: 2},
			{Key: "carol", GPUHours: 23.5, VMs: 5},
		},
		ByGroup: []api.UsageRow{
			{Key: "render", GPUHours: 143.5, MeasuredGPUHours: 120, UsedGPUHours: 84, IdleGPUHours: 36, Utilization: ptr(0.7), VMs: 15, Running: 1},
			{Key: "sim", GPUHours: 70, MeasuredGPUHours: 70, UsedGPUHours: 11.25, IdleGPUHours: 58.75, Utilization: ptr(11.25 / 70), VMs: 8, Running: 2},
		},
		ByProfile: []api.UsageRow{
			{Key: "train-a100", GPUHours: 150, MeasuredGPUHours: 150, UsedGPUHours: 90, IdleGPUHours: 60, Utilization: ptr(0.6), VMs: 12, Running: 2},
			{Key: "small-1g", GPUHours: 40, MeasuredGPUHours: 40, UsedGPUHours: 5.25, IdleGPUHours: 34.75, Utilization: ptr(5.25 / 40), VMs: 6, Running: 1},
			{Key: `<b>"desk"&'12q'</b>`, GPUHours: 23.5, VMs: 5},
		},
		IdleVMs: []api.IdleVM{
			{ID: "0190a1b2-0000-7000-8000-000000000001", Name: "notebook", Owner: "bob", Group: "sim", Profile: "train-a100", Running: true,
				GPUHours: 30, MeasuredGPUHours: 30, IdleGPUHours: 28.5, Utilization: 0.05},
			{ID: "0190a1b2-0000-7000-8000-000000000002", Name: "debug", Owner: "alice", Group: "render", Profile: "small-1g",
				GPUHours: 2, MeasuredGPUHours: 2, IdleGPUHours: 1.96, Utilization: 0.02},
		},
		QueueWaits: []api.QueueWaitStats{
			{Profile: "small-1g", Requests: 6, Started: 6, MeanSeconds: 95, P95Seconds: 300, MaxSeconds: 300},
			{Profile: "train-a100", Requests: 16, Started: 12, Waiting: 2, Failed: 1, GaveUp: 1, MeanSeconds: 5400, P95Seconds: 4*3600 + 300, MaxSeconds: 5 * 3600},
			{Profile: "total", Requests: 22, Started: 18, Waiting: 2, Failed: 1, GaveUp: 1, MeanSeconds: 3631.67, P95Seconds: 4*3600 + 300, MaxSeconds: 5 * 3600},
		},
		Notes: []string{
			"VMs held 214 GPU-hours of the 672 the 4 GPUs offered (32%).",
			"Daytime capacity idles while night requests queue: between 08:00 and 20:00 (Europe/Berlin) the GPUs were 28% allocated, yet requests waited 31 VM-hours in the queue at night (2.0 by day).",
		},
	}
	for d := range 7 {
		for h := range 24 {
			day := h >= 8 && h < 20
			switch {
			case d >= 5:
				s.Heatmaps.AllocatedGPUs[d][h] = 0.25
			case day:
				s.Heatmaps.AllocatedGPUs[d][h] = 1 + float64(h%4)*0.25
			default:
				s.Heatmaps.AllocatedGPUs[d][h] = 3.5
				s.Heatmaps.QueuedVMs[d][h] = 1.5 + float64(d)*0.25
			}
			if d < 5 {
				s.Heatmaps.Utilization[d][h] = ptr(0.3 + float64(h)/48)
			}
		}
	}
	return s
}

func render(t *testing.T, s *api.ReportSummary) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, s, Options{Server: "https://gpu.example:8443"}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRenderGolden(t *testing.T) {
	got := render(t, fixture())
	path := filepath.Join("testdata", "report.golden.html")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/report -run TestRenderGolden -update)", err)
	}
	if !bytes.Equal(got, want) {
		line := 1
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				break
			}
			if got[i] == '\n' {
				line++
			}
		}
		t.Errorf("the report differs from %s from line %d on (go test ./pkg/report -run TestRenderGolden -update rewrites it)", path, line)
	}
	if !bytes.Equal(render(t, fixture()), got) {
		t.Error("two renderings of the same summary differ")
	}
}

// voidElements have no end tag in HTML.
var voidElements = map[string]bool{"area": true, "base": true, "br": true, "col": true, "embed": true, "hr": true, "img": true,
	"input": true, "link": true, "meta": true, "source": true, "track": true, "wbr": true}

// checkHTML parses a report: every element closed in order (void elements
// aside), no scripts, nothing loaded from anywhere, and its SVGs well-formed
// XML. It returns the number of SVGs.
func checkHTML(t *testing.T, doc []byte) int {
	t.Helper()
	z := html.NewTokenizer(bytes.NewReader(doc))
	var stack []string
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			if !errors.Is(z.Err(), io.EOF) {
				t.Fatalf("tokenize: %v", z.Err())
			}
			break
		}
		tok := z.Token()
		switch tt {
		case html.StartTagToken:
			if !voidElements[tok.Data] {
				stack = append(stack, tok.Data)
			}
		case html.EndTagToken:
			if len(stack) == 0 || stack[len(stack)-1] != tok.Data {
				t.Fatalf("</%s> closes %v", tok.Data, stack)
			}
			stack = stack[:len(stack)-1]
		}
		if tt == html.StartTagToken || tt == html.SelfClosingTagToken {
			switch tok.Data {
			case "script", "iframe", "object", "embed", "img", "link", "base":
				t.Errorf("the report has a <%s>", tok.Data)
			}
			for _, a := range tok.Attr {
				switch {
				case a.Key == "src" || a.Key == "href" || a.Key == "xlink:href":
					t.Errorf("<%s %s=%q>: the report must load nothing", tok.Data, a.Key, a.Val)
				case strings.HasPrefix(a.Key, "on"):
					t.Errorf("<%s %s>: no scripts", tok.Data, a.Key)
				case strings.Contains(a.Val, "url("):
					t.Errorf("<%s %s=%q>: the report must load nothing", tok.Data, a.Key, a.Val)
				}
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements: %v", stack)
	}
	root, err := html.Parse(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	var title string
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "title" && n.FirstChild != nil {
			title = n.FirstChild.Data
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)
	if title == "" {
		t.Error("no <title>")
	}
	if bytes.Contains(doc, []byte("url(")) || bytes.Contains(doc, []byte("@import")) {
		t.Error("the CSS loads something")
	}
	// Each SVG, cut out, is well-formed XML in the SVG namespace.
	svgs := regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAll(doc, -1)
	for i, s := range svgs {
		d := xml.NewDecoder(bytes.NewReader(s))
		d.Strict = true
		depth, elements := 0, 0
		for {
			tok, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("SVG %d is not well-formed: %v\n%s", i, err, s)
			}
			switch e := tok.(type) {
			case xml.StartElement:
				if depth == 0 && (e.Name.Local != "svg" || e.Name.Space != "http://www.w3.org/2000/svg") {
					t.Errorf("SVG %d's root is %v", i, e.Name)
				}
				depth++
				elements++
			case xml.EndElement:
				depth--
			}
		}
		if depth != 0 || elements < 5 {
			t.Errorf("SVG %d: depth %d at the end, %d elements", i, depth, elements)
		}
	}
	return len(svgs)
}

func TestRenderIsSelfContainedHTML(t *testing.T) {
	doc := render(t, fixture())
	if n := checkHTML(t, doc); n != 7 { // users, groups, profiles, waits, three heatmaps
		t.Errorf("%d SVGs, want 7", n)
	}
	s := string(doc)
	for _, want := range []string{
		"Daytime capacity idles while night requests queue",
		"bob/notebook", "still holds its GPU",
		"&lt;b&gt;&#34;desk&#34;&amp;&#39;12q&#39;&lt;/b&gt;", // escaped in tables and charts alike
		"Europe/Berlin", "4h05m", "Mon 02:00–03:00: 3.5",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(s, `<b>"desk"`) {
		t.Error("a profile name went into the page unescaped")
	}
}

func TestRenderEmpty(t *testing.T) {
	from := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	doc := render(t, &api.ReportSummary{From: from, To: from.Add(24 * time.Hour), Location: "UTC", Total: api.UsageRow{Key: "total"},
		QueueWaits: []api.QueueWaitStats{{Profile: "total"}}})
	if n := checkHTML(t, doc); n != 3 { // the heatmaps only
		t.Errorf("%d SVGs, want 3", n)
	}
	for _, want := range []string{"No VM held a GPU in this period.", "No idle VMs.", "No GPU reported its utilisation"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("the empty report lacks %q", want)
		}
	}
	if err := Render(io.Discard, nil, Options{}); err == nil {
		t.Error("a nil summary rendered")
	}
}

func TestFormats(t *testing.T) {
	cases := []struct{ got, want string }{
		{fmtHours(0), "0"}, {fmtHours(0.125), "0.12"}, {fmtHours(3.55), "3.5"}, {fmtHours(1234.4), "1,234"}, {fmtHours(1234567), "1,234,567"},
		{fmtWait(40, 1), "40s"}, {fmtWait(720, 1), "12m"}, {fmtWait(3*3600+300, 1), "3h05m"}, {fmtWait(52*3600, 1), "2d4h"}, {fmtWait(99, 0), "–"},
		{fmtUtil(nil), "–"}, {fmtUtil(ptr(0.456)), "46%"},
		{num(1.005), "1"}, {num(2.5), "2.5"}, {num(-0.001), "0"},
		{fmtAmount(niceMax(37)), "50"}, {fmtAmount(niceMax(0.3)), "0.5"}, {fmtAmount(niceMax(100)), "100"}, {fmtAmount(niceMax(0)), "1"},
		{fmt.Sprint(ticksOf(5)), "5"}, {fmt.Sprint(ticksOf(200)), "4"}, {fmt.Sprint(ticksOf(0.1)), "5"},
		{blues.at(0), "#eff6ff"}, {blues.at(1), "#08306b"}, {blues.at(7), "#08306b"},
		{truncate("abcdef", 4), "abc…"}, {truncate("abc", 4), "abc"},
	}
	for i, c := range cases {
		if c.got != c.want {
			t.Errorf("case %d: %q, want %q", i, c.got, c.want)
		}
	}
}

// A bar chart's axis labels its ticks with the precision their step needs:
// small values (0.01 GPU-hours) once made every tick "0".
func TestBarChartTicks(t *testing.T) {
	tick := regexp.MustCompile(`<text x="[^"]*" y="[^"]*" text-anchor="middle" class="axis">([^<]*)</text>`)
	cases := []struct {
		name string
		max  float64
		want []string
	}{
		{"hundredths", 0.01, []string{"0", "0.002", "0.004", "0.006", "0.008", "0.01"}},
		{"tenths", 0.15, []string{"0", "0.05", "0.1", "0.15", "0.2"}},
		{"a few", 4.2, []string{"0", "1", "2", "3", "4", "5"}},
		{"two", 1.6, []string{"0", "0.5", "1", "1.5", "2"}},
		{"hundreds", 170, []string{"0", "50", "100", "150", "200"}},
		{"thousands", 4321, []string{"0", "1000", "2000", "3000", "4000", "5000"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svg := barChart("chart", "GPU-hours", []bar{{label: "a", total: c.max, used: c.max / 2}, {label: "b", total: c.max / 3, used: math.NaN()}})
			var got []string
			for _, m := range tick.FindAllStringSubmatch(svg, -1) {
				got = append(got, m[1])
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("ticks %q, want %q", got, c.want)
			}
		})
	}
	for _, c := range []struct {
		v, step float64
		want    string
	}{{0, 0.002, "0"}, {0.25, 0.25, "0.25"}, {0.003, 0.001, "0.003"}, {12, 2, "12"}} {
		if got := fmtTick(c.v, c.step); got != c.want {
			t.Errorf("fmtTick(%v, %v) = %q, want %q", c.v, c.step, got, c.want)
		}
	}
}

// latinWord is a word in Latin letters (with the digits, dots and dashes
// of names like small-1g), as the portal's Chinese test finds them.
var latinWord = regexp.MustCompile(`[A-Za-z0-9_./:\-]*[A-Za-z][A-Za-z0-9_./:\-]*`)

// zhAllowed are the Latin words a Chinese report may show: hardware and
// units people use untranslated (GPU, MIG, UTC), and the fixture's names.
var zhAllowed = []string{"GPU", "GPUs", "MIG", "1g", "UTC",
	"alice", "bob", "carol", "render", "sim", "train-a100", "small-1g", "notebook", "debug", "b", "desk", "12q"}

// englishIn lists the Latin words of a report's text that a person reads
// (text, <title>s and aria-labels; not its styles, nor the <code> typed as
// it is) that are on no allow-list, each with its text.
func englishIn(t *testing.T, doc []byte) []string {
	t.Helper()
	root, err := html.Parse(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && (n.Data == "style" || n.Data == "code") {
			return
		}
		if n.Type == html.TextNode {
			texts = append(texts, n.Data)
		}
		for _, a := range n.Attr {
			if a.Key == "aria-label" || a.Key == "title" {
				texts = append(texts, a.Val)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)
	var bad []string
	for _, text := range texts {
		for _, w := range latinWord.FindAllString(text, -1) {
			w = strings.Trim(w, ".:-")
			if w == "" || strings.Contains(w, "/") || slices.Contains(zhAllowed, w) {
				continue
			}
			bad = append(bad, strings.TrimSpace(text)+"  ["+w+"]")
			break
		}
	}
	return bad
}

// The report in Chinese: its headings, labels, captions, charts and the
// notes gpuvmd wrote in English, with nothing left in English; and the
// same summary in English says nothing in Chinese.
func TestRenderChinese(t *testing.T) {
	s := fixture()
	s.Notes = []string{
		"VMs held 214 GPU-hours of the 672 the 4 GPUs offered (32%).",
		"Requests: 22; started: 18, after waiting 1h on average (95% within 4h05m); still waiting: 2; failed: 1; deleted before they started: 1.",
		"4.0 GPU-hours were held on simulated GPU servers: their utilisation is the simulator's, not a GPU's, so it is counted neither as used nor as held idle.",
	}
	s.Total.GPUHours += 4
	s.Total.SimulatedGPUHours = 4
	s.ByUser = append(s.ByUser, api.UsageRow{Key: "sim", GPUHours: 4, SimulatedGPUHours: 4, VMs: 1})
	var b bytes.Buffer
	if err := Render(&b, s, Options{Server: "https://gpu.example:8443", Language: "zh-CN"}); err != nil {
		t.Fatal(err)
	}
	doc := b.Bytes()
	checkHTML(t, doc)
	text := string(doc)
	for _, want := range []string{`<html lang="zh-CN">`, "<h1>GPU 使用报告</h1>", "<h2>值得注意的情况</h2>", "<h2>闲置的虚拟机</h2>",
		"<h2>排队等待</h2>", "虚拟机占用了 214 GPU 小时", "模拟 GPU 服务器", "<td>模拟</td>", "周一", "4 小时 05 分"} {
		if !strings.Contains(text, want) {
			t.Errorf("the Chinese report lacks %q", want)
		}
	}
	if bad := englishIn(t, doc); len(bad) > 0 {
		t.Errorf("English in the Chinese report (%d):\n%s", len(bad), strings.Join(bad, "\n"))
	}
	// A control: the same in English is found.
	if bad := englishIn(t, render(t, s)); len(bad) < 20 {
		t.Errorf("the English report has %d English texts: the check finds nothing", len(bad))
	}
	if en := string(render(t, s)); !strings.Contains(en, `<html lang="en">`) || !strings.Contains(en, "<td>simulated</td>") ||
		strings.Contains(en, "GPU 小时") {
		t.Error("the English report is not in English, or shows no simulated use")
	}
}
