package estimate

import (
	"maps"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

func TestTaskRatios(t *testing.T) {
	runs := func(user string, asked time.Duration, used ...time.Duration) []TaskRun {
		var out []TaskRun
		for _, u := range used {
			out = append(out, TaskRun{User: user, Asked: asked, Used: u})
		}
		return out
	}
	h := time.Hour
	cases := []struct {
		name string
		runs []TaskRun
		min  int
		want map[string]float64
	}{
		{"too little history", runs("ann", 4*h, h, 2*h), 3, map[string]float64{}},
		{"odd: the middle one", runs("ann", 4*h, h, 2*h, 4*h), 3, map[string]float64{"ann": 0.5, "": 0.5}},
		{"even: between the middle two", runs("ann", 4*h, h, 2*h, 3*h, 4*h), 3, map[string]float64{"ann": 0.625, "": 0.625}},
		{"robust to one outlier", runs("ann", 10*h, h, h, h, 10*h), 3, map[string]float64{"ann": 0.1, "": 0.1}},
		{"used past the asked counts as all of it", runs("ann", h, 2*h, 2*h, 2*h), 3, map[string]float64{"ann": 1, "": 1}},
		{"asked nothing: left out", runs("ann", 0, h, h, h), 1, map[string]float64{}},
		{
			"everyone's when a person has too little", append(runs("ann", 4*h, h, h, h), runs("bob", 4*h, 4*h)...), 3,
			map[string]float64{"ann": 0.25, "": 0.25},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := TaskRatios(c.runs, c.min); !maps.Equal(got, c.want) {
				t.Errorf("TaskRatios = %v, want %v", got, c.want)
			}
		})
	}
}

// TestTaskEndsEarly: a task is expected to end at its ratio of the time it
// asked for; never before now, never after its limit.
func TestTaskEndsEarly(t *testing.T) {
	h := time.Hour
	cases := []struct {
		name    string
		tasks   map[string]time.Duration
		ratio   map[string]float64
		running time.Duration // r asked 4 h, started an hour ago: this left
		queue   []scheduler.Request
		want    map[string]time.Duration // from t0
	}{
		{"no task: its lease's end", nil, map[string]float64{"u-r": 0.5}, 3 * h, nil, map[string]time.Duration{"q": 3 * h}},
		{"no ratio: its lease's end", map[string]time.Duration{"r": 0}, nil, 3 * h, nil, map[string]time.Duration{"q": 3 * h}},
		{"no ratio: its limit, before its lease's end", map[string]time.Duration{"r": 2 * h}, nil, 3 * h, nil, map[string]time.Duration{"q": h}},
		{"its ratio of its limit", map[string]time.Duration{"r": 2 * h}, map[string]float64{"u-r": 0.9}, 3 * h, nil, map[string]time.Duration{"q": 48 * time.Minute}},
		{"its owner's ratio", map[string]time.Duration{"r": 0}, map[string]float64{"u-r": 0.5, "": 0.9}, 3 * h, nil, map[string]time.Duration{"q": h}},
		{"everyone's", map[string]time.Duration{"r": 0}, map[string]float64{"": 0.9}, 3 * h, nil, map[string]time.Duration{"q": 2*h + 36*time.Minute}},
		{"past its expected end: the ratio of what is left", map[string]time.Duration{"r": 0}, map[string]float64{"u-r": 0.2}, 3 * h, nil, map[string]time.Duration{"q": 36 * time.Minute}},
		{"never after its limit (extended lease ends sooner)", map[string]time.Duration{"r": 0}, map[string]float64{"u-r": 0.9}, 30 * time.Minute, nil, map[string]time.Duration{"q": 30 * time.Minute}},
		{
			"a queued task started by the replay", map[string]time.Duration{"q": 0}, map[string]float64{"u-q": 0.5}, 3 * h,
			[]scheduler.Request{whole("q2", 2, t0.Add(time.Minute))}, map[string]time.Duration{"q": 3 * h, "q2": 4 * h},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := append([]scheduler.Request{whole("q", 2, t0)}, c.queue...)
			s := state(t, passthroughHost(1), []scheduler.Request{whole("r", 4, t0.Add(-h))}, []time.Duration{c.running}, q, config.OrderFIFO)
			s.Tasks, s.TaskRatio = c.tasks, c.ratio
			es := Queue(s, Options{})
			for id, at := range c.want {
				if e := es[id]; !e.Known() || !e.At.Equal(t0.Add(at)) {
					t.Errorf("%s: %+v, want a start at +%s", id, e, at)
				}
			}
		})
	}
}

// TestExpectedEnd: when a running VM is expected to end, seen at t0: a
// task by its ratio of its limit, within its lease; one already past its
// limit, or any VM past its lease's end, at t0 itself, never before.
func TestExpectedEnd(t *testing.T) {
	h := time.Hour
	cases := []struct {
		name     string
		task     bool          // r is a task
		asked    time.Duration // its time limit (0: its lease)
		ratio    float64       // its owner's ratio (0: none)
		started  time.Duration // from t0
		end      time.Duration // its lease's end, from t0
		stopping bool
		want     time.Duration // from t0
	}{
		{"no task: its lease's end", false, 0, 0, -h, 2 * h, false, 2 * h},
		{"no task past its lease's end: now", false, 0, 0, -3 * h, -h, false, 0},
		{"told to stop, past its end: now", false, 0, 0, -3 * h, -h, true, 0},
		{"a task by its ratio", true, 4 * h, 0.5, -h, 5 * h, false, h},
		{"a task past its expected end: the ratio of what is left of its limit", true, 4 * h, 0.25, -2 * h, 5 * h, false, 30 * time.Minute},
		{"a task past its limit: now, not its ratio of the lease left", true, 2 * h, 0.5, -3 * h, 5 * h, false, 0},
		{"a task past its limit without a ratio: now, not its lease's end", true, 2 * h, 0, -3 * h, 5 * h, false, 0},
		{"a task at its limit: now", true, 2 * h, 0.5, -2 * h, 5 * h, false, 0},
		{"a task past its lease's end: now", true, 4 * h, 0.5, -2 * h, -time.Minute, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := scheduler.Running{Request: whole("r", 4, t0.Add(c.started)), Started: t0.Add(c.started), End: t0.Add(c.end), Stopping: c.stopping}
			s := State{Now: t0, Tasks: map[string]time.Duration{"other": h}}
			if c.task {
				s.Tasks["r"] = c.asked
			}
			if c.ratio > 0 {
				s.TaskRatio = map[string]float64{r.User: c.ratio}
			}
			if got := s.expectedEnd(&r, t0); !got.Equal(t0.Add(c.want)) {
				t.Errorf("expected end %s, want %s", got.Sub(t0), c.want)
			}
		})
	}
}
