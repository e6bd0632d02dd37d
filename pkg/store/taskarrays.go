package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Task arrays, retries (docs/tasks.md): tasks whose VM is made later, by
// the task supervisor, not with the task.

// CreateTaskArray writes an array's row and its elements' in one
// transaction: none of them has a VM yet (the supervisor launches the
// elements, at most the array's cap at once).
func (s *Store) CreateTaskArray(ctx context.Context, array *Task, elems []Task) error {
	if array.ID == "" || array.Owner == "" || array.ArraySpec == "" || len(elems) == 0 {
		return fmt.Errorf("create task array: %w: an id, an owner, a spec and elements are required", ErrInvalid)
	}
	now := s.clock()
	return s.Tx(ctx, func(tx *Store) error {
		array.CreatedAt, array.UpdatedAt, array.Attempt, array.ArrayCount = now, now, 1, len(elems)
		if array.State == "" {
			array.State = api.TaskPending
		}
		if err := tx.db.Create(array).Error; err != nil {
			return wrap(err, nil, "insert task array %s", array.ID)
		}
		for i := range elems {
			e := &elems[i]
			e.ArrayID, e.CreatedAt, e.UpdatedAt, e.Attempt = array.ID, now, now, 1
			if e.State == "" {
				e.State = api.TaskPending
			}
		}
		return wrap(tx.db.CreateInBatches(elems, 500).Error, nil, "insert the elements of task array %s", array.ID)
	})
}

// ListArrayElementsAfter is a page of an array's elements by index: at
// most limit of those with an index above after (all from the first when
// after is negative), and whether more follow.
func (s *Store) ListArrayElementsAfter(ctx context.Context, arrayID string, after, limit int) ([]Task, bool, error) {
	if limit < 1 {
		return nil, false, fmt.Errorf("elements of task array %s: %w: a page of at least one", arrayID, ErrInvalid)
	}
	var out []Task
	q := s.db.WithContext(ctx).Where("array_id = ?", arrayID)
	if after >= 0 {
		q = q.Where("array_index > ?", after)
	}
	if err := q.Order("array_index").Limit(limit + 1).Find(&out).Error; err != nil {
		return nil, false, wrap(err, nil, "elements of task array %s", arrayID)
	}
	more := len(out) > limit
	out = out[:min(len(out), limit)]
	for i := range out {
		utcTask(&out[i])
	}
	return out, more, nil
}

// ArraySummary is an array's elements in brief, read without reading
// them: how many are in each state, the highest exit code and signal any
// has, and how many have started.
type ArraySummary struct {
	Counts           map[string]int
	ExitCode, Signal *int
	Started          int
}

// ArraySummaries is, for each array of ids that has elements, its
// elements in brief: one grouped query, a row per array and state.
func (s *Store) ArraySummaries(ctx context.Context, ids []string) (map[string]*ArraySummary, error) {
	out := map[string]*ArraySummary{}
	if len(ids) == 0 {
		return out, nil
	}
	var rows []struct {
		ArrayID  string
		State    string
		N        int
		ExitCode *int
		Signal   *int
		Started  int
	}
	err := s.db.WithContext(ctx).Model(&Task{}).
		Select("array_id, state, count(*) AS n, max(exit_code) AS exit_code, max(signal) AS signal, count(started_at) AS started").
		Where("array_id IN ?", ids).Group("array_id, state").Scan(&rows).Error
	if err != nil {
		return nil, wrap(err, nil, "count task arrays' elements")
	}
	higher := func(a, b *int) *int {
		if b != nil && (a == nil || *b > *a) {
			return b
		}
		return a
	}
	for _, r := range rows {
		sum := out[r.ArrayID]
		if sum == nil {
			sum = &ArraySummary{Counts: map[string]int{}}
			out[r.ArrayID] = sum
		}
		sum.Counts[r.State] += r.N
		sum.ExitCode, sum.Signal = higher(sum.ExitCode, r.ExitCode), higher(sum.Signal, r.Signal)
		sum.Started += r.Started
	}
	return out, nil
}

// ArrayCounts is, for each array of ids, how many of its elements are in
// each state.
func (s *Store) ArrayCounts(ctx context.Context, ids []string) (map[string]map[string]int, error) {
	sums, err := s.ArraySummaries(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string]int, len(sums))
	for id, sum := range sums {
		out[id] = sum.Counts
	}
	return out, nil
}

// ArrayFirstStart is when the first of an array's elements started; nil
// when none has.
func (s *Store) ArrayFirstStart(ctx context.Context, arrayID string) (*time.Time, error) {
	var first []Task
	err := s.db.WithContext(ctx).Select("started_at").Where("array_id = ? AND started_at IS NOT NULL", arrayID).
		Order("started_at").Limit(1).Find(&first).Error
	if err != nil {
		return nil, wrap(err, nil, "first start of task array %s", arrayID)
	}
	if len(first) == 0 {
		return nil, nil
	}
	return utcPtr(first[0].StartedAt), nil
}

// TaskLaunch is the task a new VM serves when the task was made before it
// (an array's element, a retry): CreateVM sets the task's vm_id in its
// transaction only if the task still waits at Attempt with no VM, and, for
// an element, fewer than its array's cap of elements have a live VM;
// otherwise nothing is written and the answer is ErrConflict.
type TaskLaunch struct {
	TaskID  string
	Attempt int
}

func (s *Store) launchTask(l *TaskLaunch, vmID, reason string) error {
	var t Task
	if err := s.db.Where("id = ?", l.TaskID).Take(&t).Error; err != nil {
		return wrap(err, nil, "launch task %s", l.TaskID)
	}
	now := s.clock()
	if t.ArrayID != "" {
		// The array's row is written first: with PostgreSQL its lock keeps
		// two launches of one array's elements apart, so the cap holds.
		var a Task
		if err := s.db.Where("id = ?", t.ArrayID).Take(&a).Error; err != nil {
			return wrap(err, nil, "launch task %s: its array", l.TaskID)
		}
		if err := s.db.Model(&Task{}).Where("id = ?", a.ID).Update("updated_at", now).Error; err != nil {
			return wrap(err, nil, "launch task %s: its array", l.TaskID)
		}
		var n int64
		if err := s.db.Model(&Task{}).Where("array_id = ? AND vm_id <> '' AND ended_at IS NULL", a.ID).Count(&n).Error; err != nil {
			return wrap(err, nil, "launch task %s: count its array's live elements", l.TaskID)
		}
		if a.ArrayCap > 0 && n >= int64(a.ArrayCap) {
			return fmt.Errorf("launch task %s: %d of its array's elements run, its cap: %w", l.TaskID, n, ErrConflict)
		}
	}
	res := s.db.Model(&Task{}).Where("id = ? AND attempt = ? AND vm_id = '' AND ended_at IS NULL AND cancel_at IS NULL", l.TaskID, l.Attempt).
		Updates(map[string]any{"vm_id": vmID, "state": api.TaskPending, "reason": reason, "updated_at": now})
	if res.Error != nil {
		return wrap(res.Error, nil, "launch task %s", l.TaskID)
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("launch task %s: it has a VM, ended or moved on: %w", l.TaskID, ErrConflict)
	}
	return nil
}

// RequeueTask ends the attempt a of a task (recorded in task_attempts) and
// makes the task wait for its next attempt's VM: pending, no VM, its
// command's end forgotten. A task that moved on from attempt a.Attempt,
// or ended, is ErrConflict.
func (s *Store) RequeueTask(ctx context.Context, a TaskAttempt, reason string, logBase int64) error {
	return s.Tx(ctx, func(tx *Store) error {
		a.EndedAt = tx.clock()
		a.StartedAt = utcPtr(a.StartedAt)
		if err := tx.db.Create(&a).Error; err != nil {
			return wrap(err, nil, "record attempt %d of task %s", a.Attempt, a.TaskID)
		}
		res := tx.db.Model(&Task{}).Where("id = ? AND attempt = ? AND ended_at IS NULL", a.TaskID, a.Attempt).Updates(map[string]any{
			"state": api.TaskPending, "reason": reason, "vm_id": "", "attempt": a.Attempt + 1, "exit_code": nil, "signal": nil,
			"started_at": nil, "term_at": nil, "warned_at": nil, "booting_at": nil, "log_base": logBase, "log_bytes": logBase, "updated_at": a.EndedAt})
		if res.Error != nil {
			return wrap(res.Error, nil, "requeue task %s", a.TaskID)
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("requeue task %s: not at attempt %d: %w", a.TaskID, a.Attempt, ErrConflict)
		}
		return nil
	})
}

// RecordTaskAttempt keeps how a task's last attempt ended.
func (s *Store) RecordTaskAttempt(ctx context.Context, a TaskAttempt) error {
	a.EndedAt = s.clock()
	a.StartedAt = utcPtr(a.StartedAt)
	return wrap(s.db.WithContext(ctx).Create(&a).Error, nil, "record attempt %d of task %s", a.Attempt, a.TaskID)
}

// ListTaskAttempts is how a task's ended attempts ended, first first.
func (s *Store) ListTaskAttempts(ctx context.Context, taskID string) ([]TaskAttempt, error) {
	var out []TaskAttempt
	if err := s.db.WithContext(ctx).Where("task_id = ?", taskID).Order("attempt").Find(&out).Error; err != nil {
		return nil, wrap(err, nil, "attempts of task %s", taskID)
	}
	for i := range out {
		out[i].StartedAt, out[i].EndedAt = utcPtr(out[i].StartedAt), out[i].EndedAt.UTC()
	}
	return out, nil
}

// CancelTask records a cancel of a task, or of an array and every element
// of it that has not ended; what has no VM yet ends cancelled at once (the
// supervisor stops the others). It reports how many tasks it cancelled; an
// ended task is ErrConflict.
func (s *Store) CancelTask(ctx context.Context, id string) (int64, error) {
	var n int64
	err := s.Tx(ctx, func(tx *Store) error {
		now := tx.clock()
		res := tx.db.Model(&Task{}).Where("(id = ? OR array_id = ?) AND ended_at IS NULL AND cancel_at IS NULL", id, id).
			Updates(map[string]any{"cancel_at": now, "updated_at": now})
		if res.Error != nil {
			return wrap(res.Error, nil, "cancel task %s", id)
		}
		n = res.RowsAffected
		// Waiting for a VM: nothing to stop. An array's own row has no VM
		// and ends with its elements (the supervisor).
		if err := tx.db.Model(&Task{}).Where("(id = ? OR array_id = ?) AND array_spec = '' AND vm_id = '' AND ended_at IS NULL", id, id).
			Updates(map[string]any{"state": api.TaskCancelled, "reason": "cancelled before it started", "ended_at": now, "updated_at": now}).Error; err != nil {
			return wrap(err, nil, "cancel task %s", id)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if n == 0 {
		t, err := s.GetTask(ctx, id)
		if err != nil {
			return 0, err
		}
		if t.EndedAt != nil {
			return 0, fmt.Errorf("task %s is %s: %w", id, t.State, ErrConflict)
		}
	}
	return n, nil
}

// waitingElements is the elements that wait for a VM and have not been
// cancelled (a cancelled one ends at its next round). One without an
// index (gpuvm makes none) is read with the round's tasks: the pages go
// by index.
const waitingElements = "array_id <> '' AND array_index IS NOT NULL AND vm_id = '' AND ended_at IS NULL AND cancel_at IS NULL"

// ListRoundTasks is the task supervisor's round: every task that has not
// ended, oldest first, but an array's elements that wait for a VM (not
// cancelled), which the round reads per array as far as it can launch
// them (ListWaitingElements). An array of 10,000 waits with all of them.
func (s *Store) ListRoundTasks(ctx context.Context) ([]Task, error) {
	var out []Task
	err := s.db.WithContext(ctx).Where("ended_at IS NULL AND NOT (" + waitingElements + ")").Order("created_at, id").Find(&out).Error
	if err != nil {
		return nil, wrap(err, nil, "list the round's tasks")
	}
	for i := range out {
		utcTask(&out[i])
	}
	return out, nil
}

// ListWaitingElements is, by index, at most limit of an array's elements
// that wait for a VM and have not been cancelled, those with an index
// above after (from the first when after is negative).
func (s *Store) ListWaitingElements(ctx context.Context, arrayID string, after, limit int) ([]Task, error) {
	if limit < 1 {
		return nil, fmt.Errorf("waiting elements of task array %s: %w: a page of at least one", arrayID, ErrInvalid)
	}
	q := s.db.WithContext(ctx).Where("array_id = ? AND "+waitingElements, arrayID)
	if after >= 0 {
		q = q.Where("array_index > ?", after)
	}
	var out []Task
	if err := q.Order("array_index").Limit(limit).Find(&out).Error; err != nil {
		return nil, wrap(err, nil, "waiting elements of task array %s", arrayID)
	}
	for i := range out {
		utcTask(&out[i])
	}
	return out, nil
}

// SetWaitingReason gives an array's pending elements that wait for a VM
// (not cancelled) with an index above after (all when after is negative)
// reason, without reading them; it reports how many changed.
func (s *Store) SetWaitingReason(ctx context.Context, arrayID string, after int, reason string) (int64, error) {
	q := s.db.WithContext(ctx).Model(&Task{}).Where("array_id = ? AND "+waitingElements+" AND state = ? AND reason <> ?",
		arrayID, api.TaskPending, reason)
	if after >= 0 {
		q = q.Where("array_index > ?", after)
	}
	res := q.Updates(map[string]any{"reason": reason, "updated_at": s.clock()})
	if res.Error != nil {
		return 0, wrap(res.Error, nil, "waiting reason of task array %s", arrayID)
	}
	return res.RowsAffected, nil
}
