package task

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Arrays and retries (docs/tasks.md): a task whose vm_id is empty waits
// for a VM, made here through Config.Launch; an array's own row follows
// its elements.

// launchWaiting makes the VMs of the tasks that wait for one, an array's
// elements by index and never more than its cap with a VM at once.
func (s *Supervisor) launchWaiting(ctx context.Context, waiting, arrays []*store.Task, active map[string]int) error {
	caps := map[string]int{}
	for _, a := range arrays {
		caps[a.ID] = a.ArrayCap
	}
	slices.SortStableFunc(waiting, func(a, b *store.Task) int {
		if c := cmp.Compare(a.ArrayID, b.ArrayID); c != 0 || a.ArrayIndex == nil || b.ArrayIndex == nil {
			return c
		}
		return cmp.Compare(*a.ArrayIndex, *b.ArrayIndex)
	})
	var errs []error
	for _, t := range waiting {
		if t.CancelAt != nil {
			err := s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{State: api.TaskCancelled, Reason: "cancelled before it started"})
			if err != nil && !errors.Is(err, store.ErrConflict) {
				errs = append(errs, err)
			}
			continue
		}
		if t.ArrayID != "" {
			if c := caps[t.ArrayID]; c > 0 && active[t.ArrayID] >= c {
				s.wait(ctx, t, fmt.Sprintf("waiting for its turn: at most %d of its array's elements run at once", c))
				continue
			}
		}
		if s.cfg.Launch == nil {
			continue
		}
		err := s.cfg.Launch(ctx, t)
		switch {
		case err == nil:
			active[t.ArrayID]++
			s.log.Info("task launched", "task", t.ID, "attempt", t.Attempt)
		case errors.Is(err, store.ErrConflict):
			// Another gpuvmd launched it, or the cap was reached.
		case errors.Is(err, ErrLaunchRefused):
			err := s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{State: api.TaskFailed, Reason: "its VM could not be made: " + err.Error()})
			if err != nil && !errors.Is(err, store.ErrConflict) {
				errs = append(errs, err)
			}
		default:
			errs = append(errs, fmt.Errorf("launch task %s: %w", t.ID, err))
		}
	}
	return errors.Join(errs...)
}

// wait sets a waiting task's reason when it changed.
func (s *Supervisor) wait(ctx context.Context, t *store.Task, reason string) {
	if t.Reason == reason {
		return
	}
	if err := s.cfg.Store.UpdateTask(ctx, t.ID, []string{api.TaskPending}, store.TaskUpdate{State: api.TaskPending, Reason: reason}); err != nil &&
		!errors.Is(err, store.ErrConflict) {
		s.log.Warn("task reason", "task", t.ID, "err", err)
	}
}

// attemptEnded is called when a task's attempt ends in state: when its
// retries allow, the attempt is recorded and the task waits for a new VM
// (requeued true); else the attempt is recorded when the task may retry
// at all, and the caller ends the task.
func (s *Supervisor) attemptEnded(ctx context.Context, t *store.Task, state, reason string) (bool, error) {
	if t.Retries == 0 {
		return false, nil
	}
	a := store.TaskAttempt{TaskID: t.ID, Attempt: t.Attempt, VMID: t.VMID, State: state, Reason: reason, ExitCode: t.ExitCode,
		Signal: t.Signal, StartedAt: t.StartedAt}
	if t.CancelAt != nil || t.Attempt > t.Retries || !retries(t.RetryOn, state, t.ExitCode, t.Signal) {
		if err := s.cfg.Store.RecordTaskAttempt(ctx, a); err != nil && !errors.Is(err, store.ErrConflict) {
			return false, err
		}
		return false, nil
	}
	var base int64
	if fi, err := os.Stat(LogPath(s.cfg.LogDir, t.ID)); err == nil {
		base = fi.Size()
	}
	why := fmt.Sprintf("attempt %d ended %s (%s): waiting for the VM of attempt %d of %d", t.Attempt, state, reason, t.Attempt+1, t.Retries+1)
	if err := s.cfg.Store.RequeueTask(ctx, a, why, base); err != nil {
		return false, err
	}
	s.log.Info("task queued again", "task", t.ID, "attempt", t.Attempt+1, "after", state, "reason", reason)
	s.forget(t.ID)
	return true, nil
}

// arraySteps brings the arrays' own rows in step with their elements,
// read in brief (store.ArraySummaries: a row per array and state, not a
// row per element).
func (s *Supervisor) arraySteps(ctx context.Context, arrays []*store.Task) error {
	if len(arrays) == 0 {
		return nil
	}
	ids := make([]string, len(arrays))
	for i, a := range arrays {
		ids[i] = a.ID
	}
	sums, err := s.cfg.Store.ArraySummaries(ctx, ids)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range arrays {
		if err := s.arrayStep(ctx, a, sums[a.ID]); err != nil {
			errs = append(errs, fmt.Errorf("task array %s: %w", a.ID, err))
		}
	}
	return errors.Join(errs...)
}

// arrayStep brings an array's own row in step with its elements.
func (s *Supervisor) arrayStep(ctx context.Context, a *store.Task, sum *store.ArraySummary) error {
	if sum == nil {
		sum = &store.ArraySummary{}
	}
	st := ArrayState(sum, a.CancelAt != nil)
	if st.State == a.State && st.Reason == a.Reason {
		return nil
	}
	u := store.TaskUpdate{State: st.State, Reason: st.Reason, ExitCode: st.ExitCode, Signal: st.Signal}
	if a.StartedAt == nil && sum.Started > 0 {
		first, err := s.cfg.Store.ArrayFirstStart(ctx, a.ID)
		if err != nil {
			return err
		}
		u.StartedAt = first
	}
	err := s.cfg.Store.UpdateTask(ctx, a.ID, nil, u)
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

// ArrayOutcome is an array's state derived from its elements'.
type ArrayOutcome struct {
	State, Reason    string
	ExitCode, Signal *int
	Counts           map[string]int
}

// arrayEndOrder is which ended state an array that did not all complete
// ends in: the first any element is in.
var arrayEndOrder = []string{api.TaskFailed, api.TaskNodeFail, api.TaskBootFail, api.TaskTimeout, api.TaskCancelled}

// ArrayState derives an array's state from its elements' in brief, as
// Slurm shows an array: running while any element runs (or is
// completing), booting while any boots, pending while the others wait;
// when all have ended, completed if all completed, else cancelled when
// the array was cancelled, else the first of failed, node_fail,
// boot_fail, timeout, cancelled an element ended in. Its exit code and
// signal are the highest of its elements'. The reason counts the
// elements by state.
func ArrayState(sum *store.ArraySummary, cancelled bool) ArrayOutcome {
	out := ArrayOutcome{Counts: map[string]int{}, ExitCode: sum.ExitCode, Signal: sum.Signal}
	total := 0
	for st, k := range sum.Counts {
		out.Counts[st] = k
		total += k
	}
	n := out.Counts
	live := 0
	for st, k := range n {
		if !api.TaskEnded(st) {
			live += k
		}
	}
	switch {
	case n[api.TaskRunning]+n[api.TaskCompleting] > 0:
		out.State = api.TaskRunning
	case n[api.TaskBooting] > 0:
		out.State = api.TaskBooting
	case live > 0:
		out.State = api.TaskPending
	case n[api.TaskCompleted] == total:
		out.State = api.TaskCompleted
	case cancelled && n[api.TaskCancelled] > 0:
		out.State = api.TaskCancelled
	default:
		for _, st := range arrayEndOrder {
			if n[st] > 0 {
				out.State = st
				break
			}
		}
	}
	out.Reason = api.TaskCounts(n)
	return out
}
