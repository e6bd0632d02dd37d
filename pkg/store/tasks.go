package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// insertTask writes t, the task vm serves, inside CreateVM's transaction.
func (s *Store) insertTask(t *Task, vmID string) error {
	if t.ID == "" || t.Owner == "" || t.Profile == "" || t.TimeLimitS <= 0 {
		return fmt.Errorf("insert task: %w: id, owner, profile and a time limit are required", ErrInvalid)
	}
	now := s.clock()
	t.VMID, t.CreatedAt, t.UpdatedAt = vmID, now, now
	if t.State == "" {
		t.State = api.TaskPending
	}
	if t.Attempt == 0 {
		t.Attempt = 1
	}
	return wrap(s.db.Create(t).Error, nil, "insert task %s", t.ID)
}

// GetTask is one task; a missing one is ErrNotFound.
func (s *Store) GetTask(ctx context.Context, id string) (*Task, error) {
	var t Task
	if err := s.db.WithContext(ctx).Where("id = ?", id).Take(&t).Error; err != nil {
		return nil, wrap(err, nil, "task %s", id)
	}
	utcTask(&t)
	return &t, nil
}

// TaskOfVM is the task a VM serves; ErrNotFound when none.
func (s *Store) TaskOfVM(ctx context.Context, vmID string) (*Task, error) {
	var t Task
	if err := s.db.WithContext(ctx).Where("vm_id = ?", vmID).Take(&t).Error; err != nil {
		return nil, wrap(err, nil, "task of vm %s", vmID)
	}
	utcTask(&t)
	return &t, nil
}

// ListTasks is the tasks of owner (everybody's when ""), newest first, at
// most limit (all when 0).
func (s *Store) ListTasks(ctx context.Context, owner string, limit int) ([]Task, error) {
	// An array's elements are not: a GET of the array pages through them
	// (ListArrayElementsAfter).
	q := s.db.WithContext(ctx).Where("array_id = ''").Order("created_at DESC, id DESC")
	if owner != "" {
		q = q.Where("owner = ?", owner)
	}
	if limit > 0 {
		q = q.Limit(limit)
	}
	var out []Task
	if err := q.Find(&out).Error; err != nil {
		return nil, wrap(err, nil, "list tasks")
	}
	for i := range out {
		utcTask(&out[i])
	}
	return out, nil
}

// ListLiveTaskVMs is the tasks that have not ended and have a VM of their
// own (not an array's row, not an element or retry that waits for its VM,
// not a task in its owner's own VM): their ID, VM and time limit, what the
// estimates expect of the VMs that serve tasks. An array's 10,000 waiting
// elements are not read.
func (s *Store) ListLiveTaskVMs(ctx context.Context) ([]Task, error) {
	var out []Task
	err := s.db.WithContext(ctx).Select("id", "vm_id", "time_limit_s").
		Where("ended_at IS NULL AND vm_id <> '' AND in_vm = ''").Order("created_at, id").Find(&out).Error
	if err != nil {
		return nil, wrap(err, nil, "list the live tasks' VMs")
	}
	return out, nil
}

// ListEndedTaskRuns is the tasks that ran in a VM of their own and ended
// since (their command started; an array's row, and a task in its owner's
// own VM, are not), newest end first, at most limit: what they used of
// the time they asked for is what the estimates expect of the tasks that
// run (pkg/estimate TaskRatios).
func (s *Store) ListEndedTaskRuns(ctx context.Context, since time.Time, limit int) ([]Task, error) {
	var out []Task
	if err := endedTaskRunsQuery(s.db.WithContext(ctx), since, limit).Find(&out).Error; err != nil {
		return nil, wrap(err, nil, "list ended tasks")
	}
	for i := range out {
		utcTask(&out[i])
	}
	return out, nil
}

// endedTaskRunsQuery is ListEndedTaskRuns' read: through tasks_ended,
// not every task ever recorded.
func endedTaskRunsQuery(db *gorm.DB, since time.Time, limit int) *gorm.DB {
	return db.Model(&Task{}).Select("id", "owner", "profile", "time_limit_s", "started_at", "ended_at").
		Where("ended_at >= ? AND started_at IS NOT NULL AND vm_id <> '' AND in_vm = ''", since.UTC()).
		Order("ended_at DESC, id").Limit(limit)
}

// TaskUpdate is what UpdateTask changes besides the state (and the reason,
// always): the fields that are set. An ended state sets ended_at.
type TaskUpdate struct {
	State     string
	Reason    string
	ExitCode  *int
	Signal    *int
	StartedAt *time.Time
	TermAt    *time.Time
	CancelAt  *time.Time
	WarnedAt  *time.Time
	BootingAt *time.Time
	LogBytes  *int64
	// InStep, when set, is the task's new step in its owner's own VM;
	// InNote, when set, is added as a line to its steps (InSteps); InEnd,
	// when set, the state it ends in once the VM is put back.
	InStep *string
	InNote string
	InEnd  *string
}

// UpdateTask changes a task that is in one of from (any live state when
// empty: an ended task never changes). A task in none of them is
// ErrConflict; a missing one ErrNotFound.
func (s *Store) UpdateTask(ctx context.Context, id string, from []string, u TaskUpdate) error {
	q := s.db.WithContext(ctx).Model(&Task{}).Where("id = ? AND ended_at IS NULL", id)
	if len(from) > 0 {
		q = q.Where("state IN ?", from)
	}
	now := s.clock()
	set := map[string]any{"updated_at": now}
	if u.State != "" {
		set["state"], set["reason"] = u.State, u.Reason
		if api.TaskEnded(u.State) {
			set["ended_at"] = now
		}
	}
	for col, v := range map[string]*int{"exit_code": u.ExitCode, "signal": u.Signal} {
		if v != nil {
			set[col] = *v
		}
	}
	for col, v := range map[string]*time.Time{"started_at": u.StartedAt, "term_at": u.TermAt, "cancel_at": u.CancelAt, "warned_at": u.WarnedAt,
		"booting_at": u.BootingAt} {
		if v != nil {
			set[col] = v.UTC()
		}
	}
	if u.LogBytes != nil {
		set["log_bytes"] = *u.LogBytes
	}
	if u.InStep != nil {
		set["in_step"] = *u.InStep
	}
	if u.InEnd != nil {
		set["in_end"] = *u.InEnd
	}
	if u.InNote != "" {
		set["in_steps"] = gorm.Expr("in_steps || ?", u.InNote+"\n")
	}
	res := q.Updates(set)
	if res.Error != nil {
		return wrap(res.Error, nil, "update task %s", id)
	}
	if res.RowsAffected == 1 {
		return nil
	}
	t, err := s.GetTask(ctx, id)
	if err != nil {
		return err
	}
	return fmt.Errorf("task %s is %s: %w", id, t.State, ErrConflict)
}

func utcTask(t *Task) {
	t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	t.StartedAt, t.EndedAt, t.TermAt, t.CancelAt = utcPtr(t.StartedAt), utcPtr(t.EndedAt), utcPtr(t.TermAt), utcPtr(t.CancelAt)
	t.WarnedAt, t.StartAt, t.BootingAt = utcPtr(t.WarnedAt), utcPtr(t.StartAt), utcPtr(t.BootingAt)
}

// CreateTaskIn writes t, a task that runs in its owner's own VM vm (--in),
// and gives vm the spec that names the task (SpecTask),
// in one transaction: a VM changed since it was read, or that another
// task that has not ended runs in, is ErrConflict.
func (s *Store) CreateTaskIn(ctx context.Context, t *Task, vm *VM, spec, reason string) error {
	return s.Tx(ctx, func(tx *Store) error {
		var n int64
		if err := tx.db.WithContext(ctx).Model(&Task{}).Where("in_vm = ? AND ended_at IS NULL", vm.ID).Count(&n).Error; err != nil {
			return wrap(err, nil, "tasks in vm %s", vm.ID)
		}
		if n > 0 {
			return fmt.Errorf("vm %s runs a task already: %w", vm.ID, ErrConflict)
		}
		if _, err := tx.UpdateVMState(ctx, vm.ID, vm.Version, VMUpdate{State: vm.State, Phase: vm.Phase, StateReason: reason, Spec: &spec}); err != nil {
			return err
		}
		t.InVM = vm.ID
		return tx.insertTask(t, vm.ID)
	})
}

// InStepList is a task's steps in its owner's own VM, as a list.
func (t *Task) InStepList() []string {
	if t.InSteps == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(t.InSteps, "\n"), "\n")
}
