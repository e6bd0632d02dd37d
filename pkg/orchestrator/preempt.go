package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Preemption. When a scheduling cycle finds a waiting VM that may preempt
// (not preemptible itself) and room that preemptible VMs of lower priority
// hold, it chooses them (scheduler.Cycle: never one that will not have run
// its minimum runtime when its notice ends). Their owners are told at once
// (a vm.warning of kind preemption, saying when and for whom); when the
// notice ends the VMs are stopped (ApplyRules), which gives their GPUs back
// and keeps their disks, and the next round places the waiting VM. Their
// owners may start them again later: they then wait in the queue like any
// VM. If the waiting VM no longer waits by then (deleted, or placed
// elsewhere), or a preempted VM has given its GPU back by itself (stopped
// before its notice ended, or started again since), the preemption is
// called off and the owners are told.
//
// The notices are the record: every cycle reads the preemptions under way
// from them (pendingPreemptions), so that it neither chooses more VMs for a
// VM already made room for nor counts on the chosen ones past their stop;
// and whichever gpuvmd of a fleet is the leader acts on them.

// preemptionLookback is how long, beyond the notice, an announced
// preemption is looked for: a leader that was down longer forgets it, and
// the scheduler decides again.
const preemptionLookback = 24 * time.Hour

// pendingPreemption is a preemption announced to a VM: it makes room for
// the VM For, and is stopped at StopAt (started, once done is true).
type pendingPreemption struct {
	For    string
	StopAt time.Time
	done   bool
}

// pendingPreemptions reads the preemptions under way, by preempted VM, from
// the recent notices: each VM's last announcement, unless called off.
func pendingPreemptions(ctx context.Context, st eventLister, notice time.Duration, now time.Time) (map[string]pendingPreemption, error) {
	from := now.Add(-(notice + preemptionLookback))
	out := map[string]pendingPreemption{}
	for after := int64(0); ; {
		evs, err := st.ListEventsSince(ctx, after, store.EventFilter{Type: api.EventVMWarning, From: from, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("read the preemptions under way: %w", err)
		}
		for _, ev := range evs {
			after = ev.ID
			var n api.VMWarningPayload
			if json.Unmarshal(ev.Payload, &n) != nil || n.Kind != api.WarningPreemption {
				continue
			}
			if n.Action == api.NoticeCancelled {
				delete(out, ev.VMID)
				continue
			}
			out[ev.VMID] = pendingPreemption{For: n.For, StopAt: n.At, done: n.OperationID != ""}
		}
		if len(evs) < 1000 {
			return out, nil
		}
	}
}

// markPreempted tells the cycle which running VMs are being preempted: they
// are stopping, for the VM they make room for, and end at their stop. A VM
// that runs again since (started after its stop) is not.
func (dp *dispatcher) markPreempted(ctx context.Context, st *state) error {
	if !dp.settings().Scheduler.Preempt {
		return nil
	}
	pre, err := pendingPreemptions(ctx, dp.st, dp.settings().Scheduler.Notice, st.now)
	if err != nil {
		return err
	}
	for i := range st.running {
		r := &st.running[i]
		if p, ok := pre[r.ID]; ok && r.Started.Before(p.StopAt) {
			r.Stopping, r.PreemptedFor = true, p.For
			if p.StopAt.Before(r.End) {
				r.End = p.StopAt
			}
		}
	}
	return nil
}

// announcePreemptions tells the owners of the VMs a cycle chose to preempt:
// a vm.warning each, and the webhook.
func (dp *dispatcher) announcePreemptions(ctx context.Context, cfg *config.Config, now time.Time, ps []scheduler.Preemption, waiting map[string]queued) {
	if len(ps) == 0 {
		return
	}
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	vms, err := dp.st.GetVMs(ctx, ids)
	if err != nil {
		dp.log.Error("read the VMs to preempt; they are chosen again next round", "err", err)
		return
	}
	for _, p := range ps {
		vm, w := vms[p.ID], waiting[p.For].vm
		if vm == nil || w == nil {
			continue
		}
		n := api.VMWarningPayload{Kind: api.WarningPreemption, Action: api.NoticeStop, At: p.StopAt, MinutesLeft: minutesUntil(now, p.StopAt), For: p.For,
			Reason: fmt.Sprintf("the VM is preemptible and will be stopped at %s (in %d minutes), giving its GPU back, to make room for VM %q of %s, which has a higher priority; it keeps its disk and can be started again later",
				stampIn(p.StopAt, cfg.Policy.Location), minutesUntil(now, p.StopAt), w.Name, w.Owner)}
		if err := dp.st.AppendEvent(ctx, warningEvent(vm, n)); err != nil {
			dp.log.Error("announce a preemption; it is chosen again next round", "vm", vm.ID, "for", p.For, "err", err)
			continue
		}
		dp.log.Info("VM preempted", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "for", p.For, "stop_at", p.StopAt)
		notify(dp.notifier, cfg, vm, n, now)
	}
}

// preemption stops a preempted VM when its notice ends, or calls the
// preemption off when the VM it makes room for no longer waits or the
// preempted VM gave its GPU back by itself; it reports whether it started
// an operation.
func (r *round) preemption(vm *store.VM, p pendingPreemption) bool {
	if p.done {
		return false
	}
	w, err := r.loop.st.GetVM(r.ctx, p.For)
	gone := errors.Is(err, store.ErrNotFound)
	if err != nil && !gone {
		r.errs = append(r.errs, fmt.Errorf("preemption of vm %s: %w", vm.ID, err))
		return false
	}
	if gone || w.State != store.VMQueued {
		why := "it was deleted"
		if !gone {
			why = "it is " + w.State
		}
		r.warn(vm, api.VMWarningPayload{Kind: api.WarningPreemption, Action: api.NoticeCancelled, At: p.StopAt, For: p.For,
			Reason: fmt.Sprintf("the preemption is called off: the VM it made room for no longer waits (%s)", why)})
		return false
	}
	if why, err := r.gaveBack(vm, p); err != nil || why != "" {
		if why != "" {
			r.warn(vm, api.VMWarningPayload{Kind: api.WarningPreemption, Action: api.NoticeCancelled, At: p.StopAt, For: p.For,
				Reason: "the preemption is called off: " + why})
		}
		return false
	}
	if r.now.Before(p.StopAt) {
		return false
	}
	return r.act(vm, store.OpStop, ByPreemption, api.VMWarningPayload{Kind: api.WarningPreemption, Action: api.NoticeStop, At: p.StopAt, For: p.For,
		Reason: fmt.Sprintf("preempted: stopped to make room for VM %q of %s, which has a higher priority", w.Name, w.Owner)})
}

// gaveBack says how a preempted VM gave its GPU back by itself (its owner
// stopped it, or it has run again since its stop), "" when it did not.
func (r *round) gaveBack(vm *store.VM, p pendingPreemption) (string, error) {
	if vm.State != store.VMRunning {
		return "the VM was " + vm.State + " before its notice ended, and its GPU given back", nil
	}
	allocs, err := liveAllocations(r.ctx, r.loop.st, vm.ID)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("preemption of vm %s: %w", vm.ID, err))
		return "", err
	}
	for _, a := range allocs {
		if a.CreatedAt.Before(p.StopAt) {
			return "", nil
		}
	}
	if len(allocs) == 0 {
		return "", nil // holds no GPU: a VM without one is never preempted
	}
	return "the VM was started again after its notice ended", nil
}
