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

// launchWaiting makes the VMs of the tasks that wait for one: waiting,
// those the round read (tasks not of an array, cancelled elements, which
// end), then each array's elements by index, read only as far as they
// can be launched, never more than its cap with a VM at once (active:
// by array, its elements with a VM). The arrays go oldest first, as the
// store lists the round's tasks (ListRoundTasks: by created_at, then ID;
// an ID is a UUIDv7, in the order it was made).
func (s *Supervisor) launchWaiting(ctx context.Context, waiting, arrays []*store.Task, active map[string]int) error {
	slices.SortStableFunc(waiting, func(a, b *store.Task) int { return cmp.Compare(a.ArrayID, b.ArrayID) })
	var errs []error
	for _, t := range waiting {
		if _, err := s.launchOne(ctx, t); err != nil {
			errs = append(errs, err)
		}
	}
	for _, a := range arrays {
		if err := s.launchElements(ctx, a, active[a.ID]); err != nil {
			errs = append(errs, fmt.Errorf("task array %s: %w", a.ID, err))
		}
	}
	return errors.Join(errs...)
}

// elementsPage is how many of an array without a cap's waiting elements
// a round reads at once.
const elementsPage = 500

// launchElements launches the waiting elements of array a, n of whose
// elements have a VM: by index, while fewer than its cap have one; those
// left wait for their turn, told so without being read. A launch the
// store refuses (another gpuvmd launched the element, or the cap was
// reached there) counts toward the cap as a launch does: the round stops
// there, not reading the array's next waiting elements page after page
// to have each refused in turn; the next round reads the true count.
func (s *Supervisor) launchElements(ctx context.Context, a *store.Task, n int) error {
	c := a.ArrayCap
	var errs []error
	for after := -1; ; {
		if c > 0 && n >= c {
			reason := fmt.Sprintf("waiting for its turn: at most %d of its array's elements run at once", c)
			if _, err := s.cfg.Store.SetWaitingReason(ctx, a.ID, after, reason); err != nil {
				s.log.Warn("task reason", "array", a.ID, "err", err)
			}
			break
		}
		if s.cfg.Launch == nil {
			break
		}
		limit := elementsPage
		if c > 0 {
			limit = c - n
		}
		elems, err := s.cfg.Store.ListWaitingElements(ctx, a.ID, after, limit)
		if err != nil {
			errs = append(errs, err)
			break
		}
		for i := range elems {
			taken, err := s.launchOne(ctx, &elems[i])
			if err != nil {
				errs = append(errs, err)
			}
			if taken {
				n++
			}
			after = *elems[i].ArrayIndex
		}
		if len(elems) < limit {
			break
		}
	}
	return errors.Join(errs...)
}

// launchOne launches t, a task that waits for a VM (ends it when it was
// cancelled, or when its VM can never be made); taken says whether its
// VM was made, or the store refused it with ErrConflict (another gpuvmd
// launched it, or its array's cap was reached): either way it counts
// toward its array's cap this round.
func (s *Supervisor) launchOne(ctx context.Context, t *store.Task) (bool, error) {
	if t.CancelAt != nil {
		err := s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{State: api.TaskCancelled, Reason: "cancelled before it started"})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return false, err
		}
		return false, nil
	}
	if s.cfg.Launch == nil {
		return false, nil
	}
	err := s.cfg.Launch(ctx, t)
	switch {
	case err == nil:
		s.log.Info("task launched", "task", t.ID, "attempt", t.Attempt)
		return true, nil
	case errors.Is(err, store.ErrConflict):
		// Another gpuvmd launched it, or the cap was reached.
		return true, nil
	case errors.Is(err, ErrLaunchRefused):
		err := s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{State: api.TaskFailed, Reason: "its VM could not be made: " + err.Error()})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return false, err
		}
	default:
		return false, fmt.Errorf("launch task %s: %w", t.ID, err)
	}
	return false, nil
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
