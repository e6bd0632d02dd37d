package report

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// SVG charts, drawn as text. Every text and attribute value goes through
// esc, so a user or profile name cannot break out of the markup; numbers
// are formatted with fixed precision, so the same summary always renders
// the same bytes.

func esc(s string) string { return html.EscapeString(s) }

// num formats a coordinate: at most two decimals, no trailing zeros.
func num(f float64) string {
	s := fmt.Sprintf("%.2f", f)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

// svg is an SVG document being written.
type svg struct {
	b             strings.Builder
	width, height float64
}

func newSVG(width, height float64, label string) *svg {
	s := &svg{width: width, height: height}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %s %s" width="%s" height="%s" role="img" aria-label="%s">`,
		num(width), num(height), num(width), num(height), esc(label))
	return s
}

func (s *svg) raw(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

// rect draws a rectangle with an optional tooltip.
func (s *svg) rect(x, y, w, h float64, class, fill, title string) {
	attrs := ""
	if class != "" {
		attrs += ` class="` + esc(class) + `"`
	}
	if fill != "" {
		attrs += ` fill="` + esc(fill) + `"`
	}
	if title == "" {
		s.raw(`<rect x="%s" y="%s" width="%s" height="%s"%s/>`, num(x), num(y), num(max(w, 0)), num(max(h, 0)), attrs)
		return
	}
	s.raw(`<rect x="%s" y="%s" width="%s" height="%s"%s><title>%s</title></rect>`, num(x), num(y), num(max(w, 0)), num(max(h, 0)), attrs, esc(title))
}

// text writes a label; anchor is start, middle or end.
func (s *svg) text(x, y float64, anchor, class, text string) {
	attrs := ""
	if anchor != "" && anchor != "start" {
		attrs += ` text-anchor="` + anchor + `"`
	}
	if class != "" {
		attrs += ` class="` + esc(class) + `"`
	}
	s.raw(`<text x="%s" y="%s"%s>%s</text>`, num(x), num(y), attrs, esc(text))
}

func (s *svg) line(x1, y1, x2, y2 float64, class string) {
	s.raw(`<line x1="%s" y1="%s" x2="%s" y2="%s" class="%s"/>`, num(x1), num(y1), num(x2), num(y2), esc(class))
}

func (s *svg) String() string { return s.b.String() + "</svg>" }

// truncate shortens a label to n runes with an ellipsis.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// niceMax rounds a chart's largest value up to 1, 2 or 5 times a power of
// ten, so that the axis has round numbers.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p*1.0000001 {
			return m * p
		}
	}
	return 10 * p
}

// ticksOf is how many steps divide a niceMax value into round numbers: 1
// and 5 in fives (0, 1, 2, …), 2 in fours (0, 0.5, 1, …).
func ticksOf(hi float64) int {
	m := hi / math.Pow(10, math.Floor(math.Log10(hi)))
	if math.Abs(m-2) < 1e-6 {
		return 4
	}
	return 5
}

// bar is one row of a bar chart: a total and the part of it used (NaN:
// unknown).
type bar struct {
	label      string
	total      float64
	used       float64
	valueLabel string
	title      string
}

// barChart draws horizontal bars, each a total (light) with the used part
// over it (dark), and an axis of unit.
func barChart(label, unit string, bars []bar) string {
	const (
		labelW, valueW = 150.0, 150.0
		chartW         = 420.0
		rowH, barH     = 24.0, 16.0
		top, bottom    = 8.0, 26.0
	)
	width := labelW + chartW + valueW
	height := top + rowH*float64(len(bars)) + bottom
	s := newSVG(width, height, label)
	hi := 0.0
	for _, b := range bars {
		hi = max(hi, b.total)
	}
	hi = niceMax(hi)
	x := func(v float64) float64 { return labelW + chartW*v/hi }
	axisY := top + rowH*float64(len(bars))
	ticks := ticksOf(hi)
	for i := 0; i <= ticks; i++ {
		v := hi * float64(i) / float64(ticks)
		s.line(x(v), top, x(v), axisY, "grid")
		s.text(x(v), axisY+16, "middle", "axis", fmtTick(v, hi/float64(ticks)))
	}
	s.text(width, axisY+16, "end", "axis", unit)
	for i, b := range bars {
		y := top + rowH*float64(i)
		s.text(labelW-8, y+barH-3, "end", "label", truncate(b.label, 22))
		s.rect(labelW, y+2, chartW*b.total/hi, barH, "held", "", b.title)
		if !math.IsNaN(b.used) {
			s.rect(labelW, y+2, chartW*b.used/hi, barH, "used", "", b.title)
		}
		s.text(x(b.total)+6, y+barH-3, "start", "value", b.valueLabel)
	}
	return s.String()
}

// fmtAmount is a chart's number: "0", "2.5", "40", "1200".
func fmtAmount(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return num(math.Round(v*10) / 10)
	}
	return fmt.Sprintf("%.0f", v)
}

// fmtTick is the label of an axis tick at v, the ticks step apart: with
// as many decimals as the step needs, so that small axes (0.002, 0.004, …
// GPU-hours) are not all "0".
func fmtTick(v, step float64) string {
	if v == 0 {
		return "0"
	}
	decimals := 0
	if step > 0 && step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
		if r := step * math.Pow(10, float64(decimals)); math.Abs(r-math.Round(r)) > 1e-6 {
			decimals++ // 0.25, 0.025: one more
		}
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// palette is a sequential colour scale from light to dark.
type palette struct{ lo, hi [3]float64 }

var (
	blues   = palette{[3]float64{239, 246, 255}, [3]float64{8, 48, 107}}
	oranges = palette{[3]float64{255, 245, 235}, [3]float64{166, 54, 3}}
	greens  = palette{[3]float64{247, 252, 245}, [3]float64{0, 90, 50}}
)

// at is the colour of t in [0, 1].
func (p palette) at(t float64) string {
	t = min(max(t, 0), 1)
	var c [3]int
	for i := range c {
		c[i] = int(math.Round(p.lo[i] + (p.hi[i]-p.lo[i])*t))
	}
	return fmt.Sprintf("#%02x%02x%02x", c[0], c[1], c[2])
}

// heatmap draws a weekday × hour grid: value(d, h) and whether it is
// known; hi is the value of the darkest colour; format labels a value.
func heatmap(say words, label string, p palette, hi float64, value func(d, h int) (float64, bool), format func(float64) string) string {
	const (
		left, top   = 40.0, 22.0
		cellW, rowH = 26.0, 22.0
		legendH     = 44.0
	)
	width := left + 24*cellW + 4
	height := top + 7*rowH + legendH
	s := newSVG(width, height, label)
	if hi <= 0 {
		hi = 1
	}
	for h := 0; h < 24; h += 3 {
		s.text(left+cellW*float64(h)+cellW/2, top-8, "middle", "axis", fmt.Sprintf("%02d", h))
	}
	for d := range 7 {
		y := top + rowH*float64(d)
		s.text(left-6, y+rowH/2+4, "end", "axis", say.weekday(d))
		for h := range 24 {
			x := left + cellW*float64(h)
			v, ok := value(d, h)
			title := fmt.Sprintf("%s %02d:00–%02d:00: ", say.weekday(d), h, (h+1)%24)
			if !ok {
				s.rect(x+1, y+1, cellW-2, rowH-2, "unknown", "", title+say.t("no data"))
				continue
			}
			s.rect(x+1, y+1, cellW-2, rowH-2, "", p.at(v/hi), title+format(v))
		}
	}
	// The legend: five steps of the scale.
	ly := top + 7*rowH + 14
	for i := range 5 {
		t := float64(i) / 4
		x := left + float64(i)*60
		s.rect(x, ly, 22, 14, "", p.at(t), "")
		s.text(x+26, ly+11, "start", "axis", format(t*hi))
	}
	s.rect(left+5*60, ly, 22, 14, "unknown", "", "")
	s.text(left+5*60+26, ly+11, "start", "axis", say.t("no data"))
	return s.String()
}
