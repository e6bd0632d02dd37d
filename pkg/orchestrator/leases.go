package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The timed rules of sharing (ApplyRules), run by Run every RulesEvery:
//
//   - Leases: every running VM has a lease end. WarnBefore it (the
//     profile's lease.warn_before) its owner is warned once (a vm.warning
//     event, remembered in vms.lease_warned_at, which a new lease end
//     clears); at the end the VM is stopped, then deleted lease.grace
//     later (on_end "stop"), deleted at once (on_end "delete"), or stopped
//     and kept (on_end "keep").
//   - Idle stop: a running VM whose GPU has been idle for the profile's
//     lease.idle_stop (Config.Idle) is stopped.
//   - Time windows (windows.go): the at_end of the window a VM started in
//     warns its owner warn_before the window's end, and stops the VM at it.
//   - Preemption (preempt.go): a VM the scheduler chose to make room for a
//     waiting VM of higher priority is stopped when its notice ends.
//
// Each stop or delete is an operation like the API's (runStop, runDelete),
// requested by ByLease, ByIdle, ByWindow or ByPreemption, with
// a vm.warning event that gives the reason; a stopped VM's state reason is
// that reason. Every stop gives the VM's GPU back (actions.go): the idle
// VM's, the one whose lease or window ended, the preempted one; started
// again, a VM waits in the queue for a GPU like a new one. Every notice also goes to the policy's webhook (Notifier).
// All of it is the fleet's work: with several gpuvmds on one database only
// the leader (Config.Leader) does it, for the VMs of every host.

// Leader says whether this gpuvmd does the fleet's periodic work: when
// several share one database one is elected, and the others skip it. A nil
// Leader is always the leader.
type Leader interface{ IsLeader() bool }

// Notifier POSTs notices to a webhook in the background (a
// *webhook.Notifier): each as an alert notification whose rule is the
// notice's kind, subject "vm/<id>", metric "vm_warning", value the minutes
// left.
type Notifier interface {
	Notify(url string, note api.AlertNotification)
}

// The requesters of the operations the rules start.
const (
	ByLease      = "lease"
	ByIdle       = "idle"
	ByWindow     = "window"
	ByPreemption = "preemption"
)

// DefaultRulesEvery is the default of Config.RulesEvery.
const DefaultRulesEvery = 30 * time.Second

// NoticeMetric is the metric of the webhook notifications of notices.
const NoticeMetric = "vm_warning"

// RulesReport is what one ApplyRules did, each entry "<vm id> <kind>".
type RulesReport struct {
	Warned    []string
	Stopped   []string
	Deleted   []string
	Cancelled []string
	// Expired are the snapshots whose deletion the expiry started ("VM
	// snapshot" IDs; snapshots.go).
	Expired []string
	// Skipped is true when this gpuvmd is not the fleet's leader.
	Skipped bool
}

// Empty reports whether the round did nothing.
func (r RulesReport) Empty() bool {
	return len(r.Warned)+len(r.Stopped)+len(r.Deleted)+len(r.Cancelled)+len(r.Expired) == 0
}

func (r RulesReport) log(l *slog.Logger) {
	if !r.Empty() {
		l.Info("rules of sharing applied", "warned", r.Warned, "stopped", r.Stopped, "deleted", r.Deleted, "cancelled", r.Cancelled, "snapshots expired", r.Expired)
	}
}

// rules is what the rounds remember between them: the notices known to
// have been given (so that each is looked up once), by notice key.
type rules struct {
	mu     sync.Mutex
	notice map[string]time.Time // key → the notice's At, for pruning
}

func (r *rules) known(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.notice[key]
	return ok
}

func (r *rules) remember(key string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notice == nil {
		r.notice = map[string]time.Time{}
	}
	r.notice[key] = at
}

// forget drops the notices about times long past: a window ends within a
// week of the VM's start, a preemption within a day of its notice.
func (r *rules) forget(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, t := range r.notice {
		if now.Sub(t) > 8*24*time.Hour {
			delete(r.notice, k)
		}
	}
}

// round is one application of the rules.
type round struct {
	loop *rulesLoop
	ctx  context.Context
	cfg  *config.Config
	now  time.Time
	busy map[string]bool // VMs with an unfinished operation, or acted on
	rep  RulesReport
	errs []error
}

// ApplyRules applies the timed rules once (see the top of this file) and
// says what it did. It does nothing when this gpuvmd is not the leader. A
// rule that fails for one VM does not keep the others from being applied;
// the failures are returned together.
func (rl *rulesLoop) ApplyRules(ctx context.Context) (RulesReport, error) {
	if !rl.leader.IsLeader() {
		return RulesReport{Skipped: true}, nil
	}
	cfg := rl.settings().Config
	r := &round{loop: rl, ctx: ctx, cfg: cfg, now: rl.st.Now(), busy: map[string]bool{}}
	rl.rules.forget(r.now)
	vms, err := store.AllVMs(ctx, rl.st, store.VMFilter{States: []string{store.VMRunning, store.VMStopped}})
	if err != nil {
		return r.rep, fmt.Errorf("rules: list the VMs: %w", err)
	}
	ops, err := rl.st.ListUnfinishedOperations(ctx)
	if err != nil {
		return r.rep, fmt.Errorf("rules: list the operations: %w", err)
	}
	for _, op := range ops {
		r.busy[op.VMID] = true // it is being stopped, deleted, started…
	}
	pre, err := pendingPreemptions(ctx, rl.st, rl.settings().Notice, r.now)
	if err != nil {
		return r.rep, fmt.Errorf("rules: %w", err)
	}
	idle, err := r.idleVMs(vms)
	if err != nil {
		r.errs = append(r.errs, err)
	}
	windows, err := r.windowActions(vms)
	if err != nil {
		r.errs = append(r.errs, err)
	}
	booked, err := r.reservationConflicts() // reservations.go
	if err != nil {
		r.errs = append(r.errs, err)
	}
	drivers := r.driverChanges() // driverchange.go
	for i := range vms {
		if ctx.Err() != nil {
			break
		}
		vm := &vms[i]
		if r.busy[vm.ID] {
			continue
		}
		r.driverChange(vm, drivers)
		if p, ok := pre[vm.ID]; ok && r.preemption(vm, p) {
			continue
		}
		if r.reservation(vm, booked[vm.ID]) {
			continue
		}
		if r.lease(vm) {
			continue
		}
		if v, ok := idle[vm.ID]; ok && r.idle(vm, v) {
			continue
		}
		r.window(vm, windows[vm.ID])
	}
	r.expireSnapshots() // snapshots.go
	if len(r.rep.Stopped)+len(r.rep.Deleted)+len(r.rep.Expired) > 0 {
		rl.wake()
	}
	return r.rep, errors.Join(append(r.errs, ctx.Err())...)
}

// applyRules is ApplyRules for Run: it logs.
func (rl *rulesLoop) applyRules(ctx context.Context) {
	rep, err := rl.ApplyRules(ctx)
	if err != nil && ctx.Err() == nil {
		rl.log.Error("rules of sharing: some were not applied; they are tried again next round", "err", err)
	}
	rep.log(rl.log)
}

// leaseOf is the lease settings of a VM's profile (the defaults when the
// profile is gone).
func (r *round) leaseOf(vm *store.VM) config.Lease {
	if p := r.cfg.Profiles[vm.Profile]; p != nil {
		return p.Lease
	}
	return config.Lease{WarnBefore: config.DefaultLeaseWarning, OnEnd: config.LeaseEndStop, Grace: config.DefaultLeaseGrace}
}

// lease warns before a VM's lease ends and stops or deletes it at the end;
// it reports whether it started an operation.
func (r *round) lease(vm *store.VM) bool {
	if vm.LeaseEnd == nil {
		return false
	}
	l := r.leaseOf(vm)
	end := *vm.LeaseEnd
	if r.now.Before(end) {
		if l.WarnBefore > 0 && vm.LeaseWarnedAt == nil && !r.now.Before(end.Add(-l.WarnBefore)) {
			r.warnLease(vm, l, end)
		}
		return false
	}
	ended := "the lease ended at " + r.stamp(end)
	switch {
	case l.OnEnd == config.LeaseEndDelete:
		return r.act(vm, store.OpDelete, ByLease, api.VMWarningPayload{Kind: api.WarningLeaseEnd, Action: api.NoticeDelete,
			Reason: ended + "; the VM is deleted"})
	case vm.State == store.VMRunning:
		return r.act(vm, store.OpStop, ByLease, api.VMWarningPayload{Kind: api.WarningLeaseEnd, Action: api.NoticeStop,
			Reason: ended + r.afterStop(l, end)})
	case l.OnEnd == config.LeaseEndStop && !r.now.Before(end.Add(l.Grace)):
		return r.act(vm, store.OpDelete, ByLease, api.VMWarningPayload{Kind: api.WarningLeaseEnd, Action: api.NoticeDelete,
			Reason: fmt.Sprintf("%s and the VM was kept stopped for %s; it is deleted", ended, config.FormatDuration(l.Grace))})
	}
	return false
}

// afterStop says what becomes of a VM stopped at the end of its lease.
func (r *round) afterStop(l config.Lease, end time.Time) string {
	if l.OnEnd == config.LeaseEndKeep {
		return "; the VM is stopped and kept until its owner extends or deletes it"
	}
	return "; the VM is stopped, and deleted at " + r.stamp(end.Add(l.Grace)) + " unless its lease is extended"
}

// warnLease warns a VM's owner that its lease ends soon, once per lease
// end (store.WarnLease).
func (r *round) warnLease(vm *store.VM, l config.Lease, end time.Time) {
	var what string
	switch {
	case l.OnEnd == config.LeaseEndDelete:
		what = "it will be deleted then, with its disk"
	case vm.State == store.VMStopped && l.OnEnd == config.LeaseEndStop:
		what = "it will be deleted at " + r.stamp(end.Add(l.Grace))
	case vm.State == store.VMStopped:
		what = "it is stopped and will be kept"
	case l.OnEnd == config.LeaseEndKeep:
		what = "it will be stopped then"
	default:
		what = "it will be stopped then, and deleted at " + r.stamp(end.Add(l.Grace))
	}
	action := api.NoticeStop
	if l.OnEnd == config.LeaseEndDelete || (vm.State == store.VMStopped && l.OnEnd == config.LeaseEndStop) {
		action = api.NoticeDelete
	} else if vm.State == store.VMStopped {
		action = api.NoticeNone
	}
	n := api.VMWarningPayload{Kind: api.WarningLeaseEnd, Action: action, At: end, MinutesLeft: minutesUntil(r.now, end),
		Reason: fmt.Sprintf("the lease ends at %s (in %d minutes): %s unless it is extended", r.stamp(end), minutesUntil(r.now, end), what)}
	ok, err := r.loop.st.WarnLease(r.ctx, vm.ID, end, warningEvent(vm, n))
	if err != nil {
		r.errs = append(r.errs, err)
		return
	}
	if ok {
		r.rep.Warned = append(r.rep.Warned, vm.ID+" "+n.Kind)
		notify(r.loop.notifier, r.cfg, vm, n, r.now)
	}
}

// idleVMs asks the idle detector about the running VMs, when a profile of
// theirs stops idle VMs.
func (r *round) idleVMs(vms []store.VM) (map[string]monitor.VMIdle, error) {
	needed := false
	for i := range vms {
		needed = needed || (vms[i].State == store.VMRunning && r.leaseOf(&vms[i]).IdleStop > 0)
	}
	if !needed {
		return nil, nil
	}
	list, err := r.loop.idle.IdleVMs(r.ctx)
	if err != nil {
		return nil, fmt.Errorf("rules: idle stop: %w", err)
	}
	out := make(map[string]monitor.VMIdle, len(list))
	for _, v := range list {
		out[v.VMID] = v
	}
	return out, nil
}

// idle stops a running VM whose GPU has been idle for its profile's
// idle_stop.
func (r *round) idle(vm *store.VM, v monitor.VMIdle) bool {
	l := r.leaseOf(vm)
	if vm.State != store.VMRunning || l.IdleStop <= 0 || v.For < l.IdleStop {
		return false
	}
	return r.act(vm, store.OpStop, ByIdle, api.VMWarningPayload{Kind: api.WarningIdle, Action: api.NoticeStop,
		Reason: fmt.Sprintf("idle for %s on its GPU", config.FormatDuration(v.For.Truncate(time.Minute)))})
}

// act starts a stop or delete of a VM for a rule, in one transaction: the
// operation; for a stop the vm.action event the API writes for one; and
// the vm.warning notice with the reason and the operation. Then the
// webhook. It reports whether it did.
func (r *round) act(vm *store.VM, kind, by string, n api.VMWarningPayload) bool {
	op := &store.Operation{VMID: vm.ID, Kind: kind, RequestedBy: by}
	if n.At.IsZero() {
		n.At = r.now
	}
	err := r.loop.st.Tx(r.ctx, func(tx *store.Store) error {
		if err := tx.CreateOperation(r.ctx, op); err != nil {
			return err
		}
		n.OperationID = op.ID
		if kind == store.OpStop {
			b, _ := json.Marshal(api.VMActionPayload{Action: api.ActionStop, OperationID: op.ID, RequestedBy: by})
			if err := tx.AppendEvent(r.ctx, &store.Event{VMID: vm.ID, Owner: vm.Owner, Type: api.EventVMAction, Payload: b}); err != nil {
				return err
			}
		}
		return tx.AppendEvent(r.ctx, warningEvent(vm, n))
	})
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s vm %s (%s): %w", kind, vm.ID, n.Kind, err))
		return false
	}
	r.busy[vm.ID] = true
	r.loop.rules.remember(noticeKey(vm.ID, n.Kind, noticeAct, n.At), n.At)
	entry := vm.ID + " " + n.Kind
	if kind == store.OpDelete {
		r.rep.Deleted = append(r.rep.Deleted, entry)
	} else {
		r.rep.Stopped = append(r.rep.Stopped, entry)
	}
	r.loop.log.Info("rule of sharing: VM "+map[string]string{store.OpStop: "stopped", store.OpDelete: "deleted"}[kind], "vm", vm.ID, "name", vm.Name,
		"owner", vm.Owner, "rule", n.Kind, "reason", n.Reason, "operation", op.ID)
	notify(r.loop.notifier, r.cfg, vm, n, r.now)
	return true
}

// given reports whether the notice of a kind, at a time, was given to a
// VM: a warning (what noticeWarn), or the stop or delete it announced
// (noticeAct), or its cancellation (noticeCancel). An error counts as
// given: nothing is done twice for want of knowing.
func (r *round) given(vm *store.VM, kind, what string, at time.Time) bool {
	given, err := r.loop.noticeGiven(r.ctx, vm.ID, noticeKey(vm.ID, kind, what, at))
	if err != nil {
		r.errs = append(r.errs, err)
		return true
	}
	return given
}

// warn gives a notice that needs no operation, once (looked up in the VM's
// past notices when this gpuvmd does not know it).
func (r *round) warn(vm *store.VM, n api.VMWarningPayload) {
	key := noticeKey(vm.ID, n.Kind, noticeWhat(n), n.At)
	given, err := r.loop.noticeGiven(r.ctx, vm.ID, key)
	if err != nil {
		r.errs = append(r.errs, err)
		return
	}
	if given {
		return
	}
	if err := r.loop.st.AppendEvent(r.ctx, warningEvent(vm, n)); err != nil {
		r.errs = append(r.errs, err)
		return
	}
	r.loop.rules.remember(key, n.At)
	if n.Action == api.NoticeCancelled {
		r.rep.Cancelled = append(r.rep.Cancelled, vm.ID+" "+n.Kind)
	} else {
		r.rep.Warned = append(r.rep.Warned, vm.ID+" "+n.Kind)
	}
	notify(r.loop.notifier, r.cfg, vm, n, r.now)
}

// What a notice was, for deduplication.
const (
	noticeWarn   = "warn"   // a warning ahead
	noticeAct    = "act"    // a stop or delete started (it has an operation)
	noticeCancel = "cancel" // a preemption called off
)

func noticeWhat(n api.VMWarningPayload) string {
	switch {
	case n.Action == api.NoticeCancelled:
		return noticeCancel
	case n.OperationID != "":
		return noticeAct
	}
	return noticeWarn
}

// noticeKey names a notice for deduplication: its VM, kind, what it was
// and its time (a window's end, a preemption's stop).
func noticeKey(vmID, kind, what string, at time.Time) string {
	return vmID + "|" + kind + "|" + what + "|" + at.UTC().Format(time.RFC3339Nano)
}

// noticeGiven reports whether the notice named key was given to a VM: known
// to this gpuvmd, or among the VM's vm.warning events.
func (rl *rulesLoop) noticeGiven(ctx context.Context, vmID, key string) (bool, error) {
	if rl.rules.known(key) {
		return true, nil
	}
	ns, err := notices(ctx, rl.st, vmID)
	if err != nil {
		return false, err
	}
	found := false
	for _, n := range ns {
		k := noticeKey(vmID, n.Kind, noticeWhat(n), n.At)
		rl.rules.remember(k, n.At)
		found = found || k == key
	}
	return found, nil
}

// eventLister reads the event log.
type eventLister interface {
	ListEventsSince(ctx context.Context, afterID int64, f store.EventFilter) ([]store.Event, error)
}

// notices are the vm.warning notices given to a VM, oldest first.
func notices(ctx context.Context, st eventLister, vmID string) ([]api.VMWarningPayload, error) {
	var out []api.VMWarningPayload
	for after := int64(0); ; {
		evs, err := st.ListEventsSince(ctx, after, store.EventFilter{VMID: vmID, Type: api.EventVMWarning, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("read the notices of vm %s: %w", vmID, err)
		}
		for _, ev := range evs {
			var n api.VMWarningPayload
			if json.Unmarshal(ev.Payload, &n) == nil {
				out = append(out, n)
			}
			after = ev.ID
		}
		if len(evs) < 1000 {
			return out, nil
		}
	}
}

// stopReason is the state reason of a VM stopped by op: the reason of the
// rule that asked for it, else who did.
func (lc *lifecycle) stopReason(ctx context.Context, vm *store.VM, op *store.Operation) string {
	switch op.RequestedBy {
	case "":
		return "stopped"
	case ByLease, ByIdle, ByWindow, ByPreemption:
		ns, err := notices(ctx, lc.st, vm.ID)
		if err != nil {
			lc.log.Warn("the reason of a stop could not be read", "vm", vm.ID, "operation", op.ID, "err", err)
		}
		for i := len(ns) - 1; i >= 0; i-- {
			if ns[i].OperationID == op.ID && ns[i].Reason != "" {
				return ns[i].Reason
			}
		}
	}
	return "stopped by " + op.RequestedBy
}

// warningEvent is the vm.warning event of a notice.
func warningEvent(vm *store.VM, n api.VMWarningPayload) *store.Event {
	n.At = n.At.UTC()
	b, _ := json.Marshal(n)
	return &store.Event{VMID: vm.ID, Owner: vm.Owner, Type: api.EventVMWarning, Payload: b}
}

// notify POSTs a notice to the policy's webhook, if it has one.
func notify(nt Notifier, cfg *config.Config, vm *store.VM, n api.VMWarningPayload, now time.Time) {
	if cfg.Policy.Webhook == "" {
		return
	}
	nt.Notify(cfg.Policy.Webhook, api.AlertNotification{
		Rule: n.Kind, Metric: NoticeMetric, Subject: "vm/" + vm.ID, Host: vm.Host, State: api.AlertFiring,
		Value: float64(n.MinutesLeft), Summary: fmt.Sprintf("VM %q of %s: %s", vm.Name, vm.Owner, n.Reason),
		StartedAt: now, SentAt: now,
	})
}

// minutesUntil is the whole minutes from now to t, rounded up.
func minutesUntil(now, t time.Time) int {
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return int((d + time.Minute - 1) / time.Minute)
}

// stamp writes a time for people, in the policy's timezone.
func (r *round) stamp(t time.Time) string {
	return stampIn(t, r.cfg.Policy.Location)
}

func stampIn(t time.Time, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	return t.In(loc).Format("Mon 2 Jan 2006 15:04 MST")
}
