package config

import (
	"fmt"
	"time"
)

// Time windows. A week is 7×24×60 minutes from Monday 00:00 in the policy's
// timezone. A window is written either as days and hours, each day of days
// starting one stretch ("mon-fri" with "18:00-09:00" runs from each evening to
// the next morning), or as one stretch from a time of the week to another
// (from = "fri 18:00", to = "mon 09:00"). Windows may not overlap: at any
// minute at most one window decides what may start.

const weekMinutes = 7 * 24 * 60

func (r *resolver) resolveWindow(b *windowBlock) *Window {
	if !r.checkName("window", b.Name, b.LabelRange) {
		return nil
	}
	for _, w := range r.cfg.Policy.Windows {
		if w.Name == b.Name {
			r.errf(b.LabelRange, "Duplicate window", "Window %q is defined twice; the first is at %s.", b.Name, rangeString(w.DeclRange))
			return nil
		}
	}
	w := &Window{Name: b.Name, AtEnd: str(b.AtEnd, AtEndNothing), Classes: append([]string{}, b.Classes...), DeclRange: b.DefRange}
	ok := true
	daysForm := b.Days != nil || b.Hours != nil
	spanForm := b.From != nil || b.To != nil
	switch {
	case daysForm && spanForm:
		r.errf(b.DefRange, "Two ways to say when", "Write days and hours (\"mon-fri\", \"09:00-18:00\"), or from and to (\"fri 18:00\", \"mon 09:00\"), not both.")
		return nil
	case daysForm:
		w.Days, w.Hours = str(b.Days, "daily"), str(b.Hours, "00:00-24:00")
		days, err := ParseDays(w.Days)
		if err != nil {
			r.errf(valueRange(b.Body, "days", b.DefRange), "Invalid days", "%v.", err)
			ok = false
		}
		start, length, err := ParseHours(w.Hours)
		if err != nil {
			r.errf(valueRange(b.Body, "hours", b.DefRange), "Invalid hours", "%v.", err)
			ok = false
		}
		if ok {
			for d := 0; d < 7; d++ {
				if days[d] {
					w.Spans = append(w.Spans, wrapSpan(d*24*60+start, length)...)
				}
			}
			w.Spans = mergeSpans(w.Spans)
		}
	case spanForm:
		if b.From == nil || b.To == nil {
			r.errf(b.DefRange, "Incomplete window", "from and to go together: from = \"fri 18:00\", to = \"mon 09:00\".")
			return nil
		}
		w.From, w.To = *b.From, *b.To
		from, err := parseWeekTime(w.From)
		if err != nil {
			r.errf(valueRange(b.Body, "from", b.DefRange), "Invalid from", "%v.", err)
			ok = false
		}
		to, err := parseWeekTime(w.To)
		if err != nil {
			r.errf(valueRange(b.Body, "to", b.DefRange), "Invalid to", "%v.", err)
			ok = false
		}
		if ok {
			if from == to {
				r.errf(valueRange(b.Body, "to", b.DefRange), "Empty window", "from and to are the same time.")
				return nil
			}
			length := to - from
			if length < 0 {
				length += weekMinutes
			}
			w.Spans = wrapSpan(from, length)
		}
	default:
		r.errf(b.DefRange, "Window has no time", "Write days and hours (days = \"mon-fri\", hours = \"09:00-18:00\"), or from and to (from = \"fri 18:00\", to = \"mon 09:00\").")
		return nil
	}
	for i, c := range b.Classes {
		if !contains(classes, c) {
			r.errf(listItemRange(b.Body, "classes", i, b.DefRange), "Invalid classes", "%q is not one of %s.%s", c, quoteList(classes), suggestion(c, classes))
			ok = false
		}
	}
	r.checkDuplicates(b.Body, "classes", b.Classes, b.DefRange)
	if !r.oneOf(b.Body, "at_end", w.AtEnd, atEnds, b.DefRange) {
		ok = false
	}
	var dok bool
	w.WarnBefore, dok = r.duration(b.Body, "warn_before", b.WarnBefore, DefaultWarnBefore, b.DefRange)
	ok = ok && dok
	if b.WarnBefore != nil && w.AtEnd == AtEndNothing {
		r.errf(attrRange(b.Body, "warn_before", b.DefRange), "warn_before needs at_end", "warn_before says how long before the window's end VMs are warned; set at_end = \"warn\" or \"stop\".")
	}
	if w.AtEnd == AtEndNothing {
		w.WarnBefore = 0
	}
	if ok && w.WarnBefore > 0 && w.WarnBefore >= time.Duration(spansLength(w.Spans))*time.Minute {
		r.errf(valueRange(b.Body, "warn_before", b.DefRange), "warn_before too long", "warn_before (%s) is not shorter than the window.", FormatDuration(w.WarnBefore))
	}
	if !ok {
		return nil
	}
	return w
}

// wrapSpan makes [start, start+length) spans that do not cross the week's
// end.
func wrapSpan(start, length int) []Span {
	start %= weekMinutes
	end := start + length
	if end <= weekMinutes {
		return []Span{{start, end}}
	}
	return []Span{{start, weekMinutes}, {0, end - weekMinutes}}
}

// mergeSpans sorts spans and joins those that touch.
func mergeSpans(spans []Span) []Span {
	for i := 1; i < len(spans); i++ {
		for j := i; j > 0 && spans[j].Start < spans[j-1].Start; j-- {
			spans[j], spans[j-1] = spans[j-1], spans[j]
		}
	}
	var out []Span
	for _, s := range spans {
		if n := len(out); n > 0 && s.Start <= out[n-1].End {
			if s.End > out[n-1].End {
				out[n-1].End = s.End
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

func spansLength(spans []Span) int {
	n := 0
	for _, s := range spans {
		n += s.End - s.Start
	}
	return n
}

// checkWindows reports windows that overlap: both places are named.
func (r *resolver) checkWindows() {
	ws := r.cfg.Policy.Windows
	for i := 0; i < len(ws); i++ {
		for j := i + 1; j < len(ws); j++ {
			if at, ok := overlap(ws[i].Spans, ws[j].Spans); ok {
				hint := ""
				for _, w := range []*Window{ws[i], ws[j]} {
					if s, l, err := ParseHours(w.Hours); err == nil && s+l > 24*60 {
						hint = fmt.Sprintf(" Window %q runs past midnight: hours %q started on %s ends the next morning.", w.Name, w.Hours, weekdayNames[at/(24*60)%7])
					}
				}
				r.errf(ws[j].DeclRange, "Overlapping windows", "Window %q overlaps window %q, defined at %s: from %s both would decide what may start. Windows may not overlap.%s",
					ws[j].Name, ws[i].Name, rangeString(ws[i].DeclRange), weekTimeString(at), hint)
			}
		}
	}
}

func overlap(a, b []Span) (int, bool) {
	for _, x := range a {
		for _, y := range b {
			if x.Start < y.End && y.Start < x.End {
				return max(x.Start, y.Start), true
			}
		}
	}
	return 0, false
}

func weekTimeString(m int) string {
	d := m / (24 * 60)
	m %= 24 * 60
	return fmt.Sprintf("%s %02d:%02d", weekdayNames[d%7], m/60, m%60)
}

// minuteOfWeek is the minute since Monday 00:00 of t in loc.
func minuteOfWeek(t time.Time, loc *time.Location) int {
	if loc != nil {
		t = t.In(loc)
	}
	d := (int(t.Weekday()) + 6) % 7
	return d*24*60 + t.Hour()*60 + t.Minute()
}

// Contains reports whether t falls in the window (in the policy's timezone).
func (w *Window) Contains(t time.Time, loc *time.Location) bool {
	m := minuteOfWeek(t, loc)
	for _, s := range w.Spans {
		if m >= s.Start && m < s.End {
			return true
		}
	}
	return false
}

// Allows reports whether the window lets a VM of class start.
func (w *Window) Allows(class string) bool { return contains(w.Classes, class) }

// WindowAt returns the window t falls in, or nil: outside every window any
// class may start.
func (p *Policy) WindowAt(t time.Time) *Window {
	for _, w := range p.Windows {
		if w.Contains(t, p.Location) {
			return w
		}
	}
	return nil
}

// MayStart reports whether a VM of class may start at t, and if not, which
// window forbids it.
func (p *Policy) MayStart(class string, t time.Time) (bool, *Window) {
	w := p.WindowAt(t)
	if w == nil || w.Allows(class) {
		return true, w
	}
	return false, w
}
