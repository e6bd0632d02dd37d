package policy

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
)

// Windows answers questions about a policy's weekly time windows in
// absolute time, in the policy's timezone (so that "09:00" stays 09:00
// across daylight-saving changes).
type Windows struct {
	list []*config.Window
	loc  *time.Location
	// longest is LongestAllowed of the classes the windows name and of
	// interactive and batch, worked out once (a week of minutes each).
	longest map[string]int
	// at keeps At's answers (a VM's start is asked about every cycle).
	at *atCache
}

// atCache keeps At's answers by time, up to atCacheSize of them.
type atCache struct {
	sync.Mutex
	m map[int64]atAnswer
}

type atAnswer struct {
	s  Stretch
	ok bool
}

const atCacheSize = 4096

// NewWindows wraps a policy's windows; p may be nil (no windows).
func NewWindows(p *config.Policy) Windows {
	if p == nil {
		return Windows{loc: time.UTC}
	}
	loc := p.Location
	if loc == nil {
		loc = time.UTC
	}
	w := Windows{list: p.Windows, loc: loc}
	if len(w.list) > 0 {
		w.at = &atCache{m: map[int64]atAnswer{}}
		w.longest = map[string]int{}
		classes := []string{config.ClassInteractive, config.ClassBatch}
		for _, win := range w.list {
			classes = append(classes, win.Classes...)
		}
		for _, c := range classes {
			if _, ok := w.longest[c]; !ok {
				w.longest[c] = w.longestAllowed(c)
			}
		}
	}
	return w
}

// Stretch is one occurrence of a window.
type Stretch struct {
	Window     *config.Window
	Start, End time.Time
}

const weekMinutes = 7 * 24 * 60

// weekStart is Monday 00:00 of t's week in loc.
func weekStart(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	d := (int(l.Weekday()) + 6) % 7
	return time.Date(l.Year(), l.Month(), l.Day()-d, 0, 0, 0, 0, loc)
}

// at is the absolute time of minute m of the week that starts at ws.
func at(ws time.Time, m int) time.Time {
	return time.Date(ws.Year(), ws.Month(), ws.Day()+m/(24*60), (m%(24*60))/60, m%60, 0, 0, ws.Location())
}

// Stretches lists the window occurrences that overlap [from, to), by start.
func (w Windows) Stretches(from, to time.Time) []Stretch {
	var out []Stretch
	if len(w.list) == 0 || !to.After(from) {
		return nil
	}
	for ws := weekStart(from, w.loc).AddDate(0, 0, -7); ws.Before(to); ws = ws.AddDate(0, 0, 7) {
		for _, win := range w.list {
			for _, s := range win.Spans {
				a, b := at(ws, s.Start), at(ws, s.End)
				if a.Before(to) && b.After(from) {
					out = append(out, Stretch{win, a, b})
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	// Spans that touch across the week's end are one stretch.
	merged := out[:0]
	for _, s := range out {
		if n := len(merged); n > 0 && merged[n-1].Window == s.Window && !s.Start.After(merged[n-1].End) {
			if s.End.After(merged[n-1].End) {
				merged[n-1].End = s.End
			}
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// At returns the window stretch t falls in.
func (w Windows) At(t time.Time) (Stretch, bool) {
	if w.at == nil {
		return w.stretchAt(t)
	}
	k := t.UnixNano()
	w.at.Lock()
	a, ok := w.at.m[k]
	w.at.Unlock()
	if ok {
		return a.s, a.ok
	}
	a.s, a.ok = w.stretchAt(t)
	w.at.Lock()
	if len(w.at.m) >= atCacheSize {
		clear(w.at.m)
	}
	w.at.m[k] = a
	w.at.Unlock()
	return a.s, a.ok
}

func (w Windows) stretchAt(t time.Time) (Stretch, bool) {
	for _, s := range w.Stretches(t, t.Add(time.Minute)) {
		if !t.Before(s.Start) && t.Before(s.End) {
			return s, true
		}
	}
	return Stretch{}, false
}

// Forbidding returns the first window stretch overlapping [from, to) that
// does not let class start.
func (w Windows) Forbidding(class string, from, to time.Time) (Stretch, bool) {
	for _, s := range w.Stretches(from, to) {
		if !s.Window.Allows(class) {
			return s, true
		}
	}
	return Stretch{}, false
}

// LongestAllowed is the longest stretch of a week in which class is never
// inside a window that forbids it, in minutes; -1 when the whole week is
// allowed.
func (w Windows) LongestAllowed(class string) int {
	if l, ok := w.longest[class]; ok {
		return l
	}
	return w.longestAllowed(class)
}

func (w Windows) longestAllowed(class string) int {
	var forbidden [weekMinutes]bool
	any := false
	for _, win := range w.list {
		if win.Allows(class) {
			continue
		}
		for _, s := range win.Spans {
			for m := s.Start; m < s.End && m < weekMinutes; m++ {
				forbidden[m] = true
				any = true
			}
		}
	}
	if !any {
		return -1
	}
	best, run := 0, 0
	for k := 0; k < 2*weekMinutes; k++ { // twice round: runs cross the week's end
		if forbidden[k%weekMinutes] {
			run = 0
			continue
		}
		run++
		best = max(best, run)
	}
	return min(best, weekMinutes)
}

// AllowedSomewhere reports whether class may start at some minute of the
// week.
func (w Windows) AllowedSomewhere(class string) bool {
	return w.LongestAllowed(class) != 0
}

// ConfigStamp fingerprints the configuration in force and the stretch of
// time window that t falls in: it changes when the configuration is
// reloaded or a window begins or ends.
func ConfigStamp(cfg *config.Config, t time.Time) string {
	if cfg == nil {
		return "none"
	}
	if w, ok := NewWindows(&cfg.Policy).At(t); ok {
		return fmt.Sprintf("%p\x00%s\x00%s", cfg, w.Window.Name, w.Start)
	}
	return fmt.Sprintf("%p", cfg)
}
