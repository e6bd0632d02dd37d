package estimate

import (
	"slices"
	"time"

	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// Tasks usually end before the time they asked for (issue 28): a replay
// that frees a task's devices only at its limit starts what waits for them
// late. The replay expects a task to use, of the time it asked for, the
// part its owner's ended tasks used: the median of their ratios of used to
// asked time, with enough history (MinTaskRuns); else everyone's, with
// enough; else the whole time. A task is never expected past its limit, nor
// (running) before now.

// MinTaskRuns is the ended tasks a ratio needs (a person's, or everyone's).
const MinTaskRuns = 5

// TaskRun is one ended task: its owner, the time it asked for and the time
// it used (from its start to its end).
type TaskRun struct {
	User  string
	Asked time.Duration
	Used  time.Duration
}

// TaskRatios is what State.TaskRatio holds: per user the median of their
// ended tasks' ratios of used to asked time (each in [0, 1]), for the users
// with at least minRuns; and, under the key "" (no user has that name),
// everyone's, when there are at least minRuns in all. Runs that asked for
// no time are left out.
func TaskRatios(runs []TaskRun, minRuns int) map[string]float64 {
	minRuns = max(minRuns, 1)
	by := map[string][]float64{}
	var all []float64
	for _, r := range runs {
		if r.Asked <= 0 {
			continue
		}
		x := min(max(float64(r.Used)/float64(r.Asked), 0), 1)
		by[r.User] = append(by[r.User], x)
		all = append(all, x)
	}
	out := make(map[string]float64, len(by)+1)
	for u, xs := range by {
		if len(xs) >= minRuns && u != "" {
			out[u] = median(xs)
		}
	}
	if len(all) >= minRuns {
		out[""] = median(all)
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// taskRatio is the part of its asked time task r is expected to use (1
// when nothing says less), and that time; false when r is no task.
func (s *State) taskRatio(r *scheduler.Request) (float64, time.Duration, bool) {
	asked, ok := s.Tasks[r.ID]
	if !ok {
		return 0, 0, false
	}
	if asked <= 0 {
		asked = r.Lease
	}
	if asked <= 0 {
		return 0, 0, false
	}
	x, ok := s.TaskRatio[r.User]
	if !ok {
		x, ok = s.TaskRatio[""]
	}
	if !ok || x > 1 || x <= 0 {
		x = 1
	}
	return x, asked, true
}

// expectedEnd is when running task r is expected to end, replayed from now:
// the part of its asked time its ratio gives from its start; when that is
// past, the same part of what is left of it from now. Never after its limit
// (its start and asked time, or its lease's end r.End if sooner), never
// before now: a task already past its limit is expected to end now (its
// ratio is 0: nothing is left of it to use), and so is any running VM past
// its end. r.End itself when r is no task, is told to stop, or has no
// known end.
func (s *State) expectedEnd(r *scheduler.Running, now time.Time) time.Time {
	if r.End.IsZero() {
		return r.End
	}
	if !r.End.After(now) {
		return now
	}
	if len(s.Tasks) == 0 || r.Stopping {
		return r.End
	}
	x, asked, ok := s.taskRatio(&r.Request)
	if !ok {
		return r.End
	}
	limit := r.End
	if l := r.Started.Add(asked); !r.Started.IsZero() && l.Before(limit) {
		limit = l
	}
	if !limit.After(now) {
		return now // past its limit: its ratio is 0, nothing is left to use
	}
	e := r.Started.Add(time.Duration(x * float64(asked)))
	if r.Started.IsZero() || !e.After(now) {
		e = now.Add(time.Duration(x * float64(limit.Sub(now))))
	}
	if e.After(limit) {
		return limit
	}
	return e // not before now: x > 0 and limit is after now
}
