// Package task runs tasks (docs/tasks.md): commands in a GPU VM of their
// own. The server makes a task with its VM; the Supervisor here follows
// the VM, talks to the task's runner in the guest over the domain's
// virtio-serial channel (JSON lines), keeps the task's output, enforces its
// time limit, and deletes the VM the moment the command ends, so that the
// GPU is given back then and not at the end of the time limit.
package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Store is what the supervisor asks of the database (a *store.Store).
type Store interface {
	Now() time.Time
	ListRoundTasks(ctx context.Context) ([]store.Task, error)
	ListWaitingElements(ctx context.Context, arrayID string, after, limit int) ([]store.Task, error)
	SetWaitingReason(ctx context.Context, arrayID string, after int, reason string) (int64, error)
	GetTask(ctx context.Context, id string) (*store.Task, error)
	UpdateTask(ctx context.Context, id string, from []string, u store.TaskUpdate) error
	GetVM(ctx context.Context, id string) (*store.VM, error)
	ListOperations(ctx context.Context, vmID string) ([]store.Operation, error)
	CreateOperation(ctx context.Context, op *store.Operation) error
	ArraySummaries(ctx context.Context, ids []string) (map[string]*store.ArraySummary, error)
	ArrayFirstStart(ctx context.Context, arrayID string) (*time.Time, error)
	RequeueTask(ctx context.Context, a store.TaskAttempt, reason string, logBase int64) error
	RecordTaskAttempt(ctx context.Context, a store.TaskAttempt) error
	ListHosts(ctx context.Context) ([]store.Host, error)
	UpdateVMState(ctx context.Context, id string, version int64, u store.VMUpdate) (*store.VM, error)
	AppendEvent(ctx context.Context, e *store.Event) error
}

// Leader says whether this gpuvmd does a fleet's once-only work (a
// *fleet.Node).
type Leader interface{ IsLeader() bool }

// ErrLaunchRefused is what Launch wraps when a task's VM can never be made
// (its profile is gone): the task ends failed, not waits.
var ErrLaunchRefused = errors.New("the task's VM cannot be made")

// Defaults of Config.
const (
	DefaultMaxLog      = 64 << 20
	DefaultBootTimeout = 10 * time.Minute
	DefaultInterval    = time.Second
	// DefaultIdleInterval: a round every 5 s while no task lives (each
	// round reads the tasks table: an idle gpuvmd's CPU). A task submitted
	// to this gpuvmd wakes it; one submitted to another node of a fleet
	// is seen within this.
	DefaultIdleInterval = 5 * time.Second
	// DefaultHeartbeatTimeout is four of the runner's heartbeats (every
	// 10 s) missed.
	DefaultHeartbeatTimeout = 40 * time.Second
)

// RunnerGone is the reason of a task whose runner stopped talking while
// its VM ran (the portal's and the CLI's word tables translate it).
const RunnerGone = "the task's runner stopped without reporting an exit status"

// Config is what a Supervisor needs.
type Config struct {
	Store Store
	Log   *slog.Logger
	// LogDir keeps a file per task, ID.log: its output, at the offsets
	// the runner numbers it with.
	LogDir string
	// MaxLog is the most output kept per task (DefaultMaxLog when 0).
	MaxLog int64
	// Host is this gpuvmd's host: it talks to the runners of VMs on it
	// only ("": every VM's).
	Host string
	// Channel is the host path of the unix socket of a running VM's task
	// channel (the hypervisor's live domain XML in gpuvmd; a test's own
	// socket in tests).
	Channel func(ctx context.Context, vmID string) (string, error)
	// Wake tells the orchestrator of a new operation (a delete); may be nil.
	Wake func()
	// Launch makes the VM of a task that waits for one (an array's
	// element, a retry's new attempt) with store.CreateVMOptions.Launch:
	// store.ErrConflict when another launched it or the array's cap is
	// reached, ErrLaunchRefused when it never can be. Without it such
	// tasks wait.
	Launch func(ctx context.Context, t *store.Task) error
	// Resize queues the resize of a stopped VM to profile for task t, which
	// runs in its owner's own VM (in.go): the orchestrator's QueueResize.
	// Without it such tasks wait.
	Resize func(ctx context.Context, vm *store.VM, profile string, t *store.Task) error
	// Withdraw takes back the start of such a VM that waits in the queue,
	// when its task is cancelled before it started (the orchestrator's
	// WithdrawStart): true when it was withdrawn, the VM stopped again;
	// false when the start is past the queue. Without it a cancel takes
	// effect when the VM has started.
	Withdraw func(ctx context.Context, vmID, reason string) (bool, error)
	// BootTimeout is how long a running VM's runner has to say hello
	// before the task is boot_fail (DefaultBootTimeout when 0).
	BootTimeout time.Duration
	// HeartbeatTimeout is how long a connected runner may say nothing
	// (it sends a heartbeat every 10 s) before its task is failed with
	// RunnerGone (DefaultHeartbeatTimeout when 0).
	HeartbeatTimeout time.Duration
	// Leader, in a fleet, says whether this gpuvmd ends the tasks whose
	// VM's node is down (node_fail); nil: it does (a single server).
	Leader Leader
	// Interval is the time between rounds (DefaultInterval when 0).
	Interval time.Duration
	// IdleInterval is the time between rounds while no task lives
	// (DefaultIdleInterval when 0, never under Interval): a new task
	// wakes the supervisor (Wake), so nothing waits for it.
	IdleInterval time.Duration
}

// Supervisor follows the live tasks: one round each Interval.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	conns map[string]*conn // by task ID
	// kick starts a round now (a command ended).
	kick chan struct{}
	// idle: the last round found no live task (Run waits IdleInterval).
	idle atomic.Bool
}

// Wake starts a round now: a task was submitted or cancelled.
func (s *Supervisor) Wake() { s.kickNow() }

// kickNow starts a round without waiting for the next interval.
func (s *Supervisor) kickNow() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// New makes a Supervisor; Run runs it.
func New(cfg Config) (*Supervisor, error) {
	if cfg.Store == nil || cfg.Channel == nil || cfg.LogDir == "" {
		return nil, errors.New("task supervisor: a store, a channel and a log directory are required")
	}
	if cfg.MaxLog <= 0 {
		cfg.MaxLog = DefaultMaxLog
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = DefaultBootTimeout
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.IdleInterval <= 0 {
		cfg.IdleInterval = DefaultIdleInterval
	}
	cfg.IdleInterval = max(cfg.IdleInterval, cfg.Interval)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Supervisor{cfg: cfg, log: cfg.Log.With("component", "tasks"), conns: map[string]*conn{},
		kick: make(chan struct{}, 1)}, nil
}

// LogPath is the file that keeps a task's output under dir.
func LogPath(dir, taskID string) string { return filepath.Join(dir, taskID+".log") }

// Run does a round each Interval (IdleInterval while no task lives, or
// at once when woken) until ctx ends, then closes the runners'
// connections.
func (s *Supervisor) Run(ctx context.Context) {
	t := time.NewTimer(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.Round(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("task round", "err", err)
		}
		wait := s.cfg.Interval
		if s.idle.Load() {
			wait = s.cfg.IdleInterval
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			s.Close()
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// Close closes the connections to the runners and waits until their
// readers have stopped.
func (s *Supervisor) Close() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		c.close()
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		<-c.done
	}
}

// Round brings every live task one step on. Rounds do not overlap: Run
// is their one caller (a test's own in tests).
func (s *Supervisor) Round(ctx context.Context) error {
	// An array's waiting elements are read per array, as far as they
	// can be launched (launchWaiting), not all of them every round.
	tasks, err := s.cfg.Store.ListRoundTasks(ctx)
	if err != nil {
		s.idle.Store(false)
		return err
	}
	s.mu.Lock()
	s.idle.Store(len(tasks) == 0 && len(s.conns) == 0)
	s.mu.Unlock()
	var errs []error
	var arrays, waiting []*store.Task
	active := map[string]int{} // by array: its elements with a VM
	down, err := s.downHosts(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for i := range tasks {
		t := &tasks[i]
		switch {
		case t.IsArray():
			arrays = append(arrays, t)
			continue
		case t.VMID == "":
			waiting = append(waiting, t)
			continue
		case t.ArrayID != "":
			active[t.ArrayID]++
		}
		if err := s.step(ctx, t, down); err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", t.ID, err))
		}
	}
	if err := s.launchWaiting(ctx, waiting, arrays, active); err != nil {
		errs = append(errs, err)
	}
	if err := s.arraySteps(ctx, arrays); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// downHosts is the nodes declared down (the fleet's leader marks a node
// whose heartbeat stopped), when this gpuvmd ends their tasks.
func (s *Supervisor) downHosts(ctx context.Context) (map[string]bool, error) {
	if s.cfg.Leader != nil && !s.cfg.Leader.IsLeader() {
		return nil, nil
	}
	hosts, err := s.cfg.Store.ListHosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("the nodes' states: %w", err)
	}
	down := map[string]bool{}
	for _, h := range hosts {
		if h.State == store.HostDown && h.Name != s.cfg.Host {
			down[h.Name] = true
		}
	}
	return down, nil
}

// step is one task's part of a round; down are the nodes declared down.
func (s *Supervisor) step(ctx context.Context, t *store.Task, down map[string]bool) error {
	vm, err := s.cfg.Store.GetVM(ctx, t.VMID)
	if errors.Is(err, store.ErrNotFound) {
		vm, err = &store.VM{ID: t.VMID, State: store.VMDeleted}, nil
	}
	if err != nil {
		return err
	}
	c := s.conn(t.ID)
	if c != nil && c.vm != t.VMID {
		s.forget(t.ID) // an earlier attempt's runner (its node came back)
		c = nil
	}
	if c != nil {
		n := c.size()
		if n != t.LogBytes {
			if err := s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{LogBytes: &n}); err != nil && !errors.Is(err, store.ErrConflict) {
				return err
			}
		}
	}
	if t.InVM != "" {
		return s.inStep(ctx, t, vm, down) // in.go
	}
	return s.follow(ctx, t, vm, down)
}

// follow is a step of a task whose VM is made or started: its state
// follows the VM's.
func (s *Supervisor) follow(ctx context.Context, t *store.Task, vm *store.VM, down map[string]bool) error {
	switch vm.State {
	case store.VMDeleted, store.VMDeleting:
		return s.vmGone(ctx, t, vm)
	case store.VMFailed:
		return s.end(ctx, t, vm, api.TaskNodeFail, "its VM failed: "+vm.StateReason)
	}
	if vm.Host != "" && down[vm.Host] && vm.State != store.VMAllocating && t.State != api.TaskCompleting {
		// The fleet requeues a VM its node had not begun to make; any
		// other is lost with its node: the task ends (or is retried),
		// and the VM's delete waits for the node's return.
		err := s.end(ctx, t, vm, api.TaskNodeFail, fmt.Sprintf("its VM's node %s is down (its heartbeat stopped)", vm.Host))
		if errors.Is(err, store.ErrConflict) {
			return nil // another gpuvmd ended it
		}
		return err
	}
	if t.CancelAt != nil && t.StartedAt == nil && t.State != api.TaskCompleting {
		// Not started: nothing to stop, the VM goes.
		return s.end(ctx, t, vm, api.TaskCompleting, "cancelled before it started")
	}
	switch vm.State {
	case store.VMQueued:
		return s.move(ctx, t, api.TaskPending, queueReason(vm))
	case store.VMAllocating, store.VMCreating:
		return s.move(ctx, t, api.TaskBooting, "its VM is being made")
	case store.VMStopping, store.VMStopped:
		// A runner powers the guest off after its exit line; without one,
		// the command's end is not known.
		why := "the guest powered off without the runner reporting the command's end"
		if vm.StateReason != "" {
			why = "its VM was stopped (" + vm.StateReason + ") without the runner reporting the command's end"
		}
		return s.end(ctx, t, vm, api.TaskCompleting, why)
	case store.VMRunning:
		return s.running(ctx, t, vm)
	}
	return nil
}

func queueReason(vm *store.VM) string {
	if vm.StateReason != "" {
		return vm.StateReason
	}
	return vm.Phase
}

// move sets a live task's state and reason when they changed.
func (s *Supervisor) move(ctx context.Context, t *store.Task, state, reason string) error {
	if t.State == state && t.Reason == reason || t.State == api.TaskCompleting || t.State == api.TaskRunning {
		return nil
	}
	err := s.cfg.Store.UpdateTask(ctx, t.ID, []string{api.TaskPending, api.TaskBooting}, store.TaskUpdate{State: state, Reason: reason})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

// running is a step of a task whose VM runs: connect to its runner, boot
// timeout, time limit, cancel.
func (s *Supervisor) running(ctx context.Context, t *store.Task, vm *store.VM) error {
	if s.cfg.Host != "" && vm.Host != "" && vm.Host != s.cfg.Host {
		return nil // another gpuvmd's
	}
	if t.State == api.TaskCompleting {
		return s.deleteVM(ctx, t, vm) // asked for already, unless gpuvmd stopped between
	}
	now := s.cfg.Store.Now()
	if t.State == api.TaskPending {
		if err := s.move(ctx, t, api.TaskBooting, "its VM boots"); err != nil {
			return err
		}
		t.State = api.TaskBooting
	}
	c := s.conn(t.ID)
	if c == nil {
		var err error
		if c, err = s.connect(ctx, t); err != nil {
			s.log.Debug("task channel not ready", "task", t.ID, "vm", vm.ID, "err", err)
		}
	}
	if t.BootingAt == nil {
		// Kept, so that a restart of gpuvmd does not give the guest its
		// time again.
		if err := s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{BootingAt: &now}); err != nil {
			return err
		}
		t.BootingAt = &now
	}
	if t.State == api.TaskBooting && (c == nil || !c.helloed()) && now.Sub(*t.BootingAt) > s.cfg.BootTimeout {
		return s.end(ctx, t, vm, api.TaskBootFail, fmt.Sprintf("the guest's runner did not report within %s of its VM running", s.cfg.BootTimeout))
	}
	if c != nil && c.silent(t.State, now) > s.cfg.HeartbeatTimeout {
		s.log.Warn("the task's runner stopped talking", "task", t.ID, "vm", vm.ID, "silent", c.silent(t.State, now))
		return s.end(ctx, t, vm, api.TaskFailed, RunnerGone)
	}
	return s.limits(ctx, t, vm, c, now)
}

// limits enforces the time limit and a cancel of a started task: SIGTERM,
// then after kill_wait SIGKILL and the VM deleted (powered off).
func (s *Supervisor) limits(ctx context.Context, t *store.Task, vm *store.VM, c *conn, now time.Time) error {
	if t.StartedAt == nil || t.State == api.TaskCompleting {
		return nil
	}
	limit := t.StartedAt.Add(time.Duration(t.TimeLimitS) * time.Second)
	if vm.LeaseEnd != nil {
		// The VM's lease (its hours: the limit's ceiling, counted from
		// the VM's start, a boot before the command's) ends it first:
		// the command is stopped in time to end before the lease.
		if byLease := vm.LeaseEnd.Add(-time.Duration(t.KillWaitS) * time.Second); byLease.Before(limit) {
			limit = byLease
		}
	}
	if warn := limit.Add(-time.Duration(t.WarnLeadS) * time.Second); t.WarnSignal != "" && t.WarnedAt == nil && t.TermAt == nil &&
		t.CancelAt == nil && c != nil && !now.Before(warn) && now.Before(limit) {
		s.log.Info("warning the task of its time limit", "task", t.ID, "signal", t.WarnSignal, "limit", limit)
		c.signal(t.WarnSignal)
		return s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{WarnedAt: &now})
	}
	if t.TermAt == nil && (t.CancelAt != nil || !now.Before(limit)) {
		why := "time limit reached"
		if t.CancelAt != nil {
			why = "cancelled"
		}
		s.log.Info("stopping task", "task", t.ID, "why", why)
		if c != nil {
			c.signal(SigTerm)
		}
		return s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{TermAt: &now})
	}
	if t.TermAt != nil && now.Sub(*t.TermAt) >= time.Duration(t.KillWaitS)*time.Second {
		if c != nil {
			c.signal(SigKill)
		}
		why := fmt.Sprintf("time limit reached: SIGTERM, then after %ds the VM powered off", t.KillWaitS)
		if t.CancelAt != nil {
			why = fmt.Sprintf("cancelled: SIGTERM, then after %ds the VM powered off", t.KillWaitS)
		}
		return s.end(ctx, t, vm, api.TaskCompleting, why)
	}
	return nil
}

// end moves a task to state (completing, or an ended one) with reason and
// deletes its VM through the orchestrator's delete.
func (s *Supervisor) end(ctx context.Context, t *store.Task, vm *store.VM, state, reason string) error {
	if t.InVM != "" && !(t.State == api.TaskCompleting && state == api.TaskCompleting) {
		return s.inEnd(ctx, t, vm, state, reason) // in.go: the VM is stopped and put back
	}
	if t.State == api.TaskCompleting && state == api.TaskCompleting {
		return s.deleteVM(ctx, t, vm)
	}
	if api.TaskEnded(state) {
		requeued, err := s.attemptEnded(ctx, t, state, reason)
		if err != nil {
			return err
		}
		if requeued {
			return s.deleteVM(ctx, t, vm)
		}
	}
	if err := s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{State: state, Reason: reason}); err != nil {
		return err
	}
	s.log.Info("task ending", "task", t.ID, "state", state, "reason", reason)
	if api.TaskEnded(state) {
		s.forget(t.ID)
	}
	return s.deleteVM(ctx, t, vm)
}

// deleteVM asks for the delete of the task's VM, unless one is under way
// or it is gone.
func (s *Supervisor) deleteVM(ctx context.Context, t *store.Task, vm *store.VM) error {
	if t.InVM != "" {
		return s.inRelease(ctx, t, vm) // in.go: never deleted
	}
	if vm.State == store.VMDeleted || vm.State == store.VMDeleting {
		return nil
	}
	ops, err := s.cfg.Store.ListOperations(ctx, vm.ID)
	if err != nil {
		return err
	}
	for i := range ops {
		if ops[i].Kind == store.OpDelete && !ops[i].Finished() {
			return nil
		}
	}
	op := &store.Operation{VMID: vm.ID, Kind: store.OpDelete, RequestedBy: t.Owner}
	if err := s.cfg.Store.CreateOperation(ctx, op); err != nil {
		return err
	}
	s.log.Info("task's VM deleted: its GPU is given back", "task", t.ID, "vm", vm.ID)
	if s.cfg.Wake != nil {
		s.cfg.Wake()
	}
	return nil
}

// vmGone ends a task whose VM is deleted (or being deleted): in the state
// its row says, or cancelled when somebody deleted the VM of a task that
// had not ended.
func (s *Supervisor) vmGone(ctx context.Context, t *store.Task, vm *store.VM) error {
	if vm.State == store.VMDeleting && t.State == api.TaskCompleting {
		return nil // the delete is under way
	}
	state, reason := finalState(t)
	if t.State != api.TaskCompleting {
		state, reason = api.TaskCancelled, "its VM was deleted before the command ended"
	}
	s.forget(t.ID)
	if requeued, err := s.attemptEnded(ctx, t, state, reason); err != nil || requeued {
		return err
	}
	return s.cfg.Store.UpdateTask(ctx, t.ID, nil, store.TaskUpdate{State: state, Reason: reason})
}

// finalState is the state a completing task ends in, from its row: a
// cancel, the time limit, else the command's exit.
func finalState(t *store.Task) (string, string) {
	switch {
	case t.CancelAt != nil:
		return api.TaskCancelled, t.Reason
	case t.TermAt != nil:
		return api.TaskTimeout, t.Reason
	case t.ExitCode != nil && *t.ExitCode == 0 && (t.Signal == nil || *t.Signal == 0):
		return api.TaskCompleted, t.Reason
	}
	return api.TaskFailed, t.Reason
}

func (s *Supervisor) conn(id string) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[id]
}

// forget closes a task's connection and drops what is kept of it.
func (s *Supervisor) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[id]; c != nil {
		c.close()
	}
	delete(s.conns, id)
}
