package orchestrator

import (
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Time windows at their end: a window's at_end ("warn" or "stop") applies
// to the VMs that started in it and would run past its end. warn_before
// ahead their owners are warned, once; at the end, with at_end = "stop",
// the VMs are stopped, giving their GPUs back, once: a VM its owner starts
// again after that is left alone. pkg/policy decides (Session.Actions);
// this file acts.
//
// Whether a VM may start at all under the windows (a batch VM whose lease
// would run into a window that forbids batch waits, unless it is
// preemptible) is the scheduler's admission, in every scheduling cycle.

// windowAction is a window's notice or stop due to a VM, and whether the
// window stops it at its end.
type windowAction struct {
	scheduler.Action
	stops bool
}

// windowActions are the window notices and stops due now to the running VMs
// that hold GPU devices, by VM.
func (r *round) windowActions(vms []store.VM) (map[string][]windowAction, error) {
	pol := &r.cfg.Policy
	acting := false
	for _, w := range pol.Windows {
		acting = acting || w.AtEnd == config.AtEndWarn || w.AtEnd == config.AtEndStop
	}
	if !acting {
		return nil, nil
	}
	live, err := r.loop.st.ListLiveAllocations(r.ctx, "")
	if err != nil {
		return nil, fmt.Errorf("rules: windows: %w", err)
	}
	// A VM started when it was given its first device.
	started := map[string]time.Time{}
	for _, a := range live {
		if t, ok := started[a.VMID]; !ok || a.CreatedAt.Before(t) {
			started[a.VMID] = a.CreatedAt
		}
	}
	var running []scheduler.Running
	for i := range vms {
		vm := &vms[i]
		t, ok := started[vm.ID]
		if vm.State != store.VMRunning || !ok {
			continue
		}
		running = append(running, scheduler.Running{Request: requestOf(r.cfg, vm, nil), Started: t, End: leaseEnd(vm, r.now)})
	}
	if len(running) == 0 {
		return nil, nil
	}
	engine, err := policy.New(policy.Config{Policy: pol, Profiles: r.cfg.Profiles})
	if err != nil {
		return nil, fmt.Errorf("rules: windows: %w", err)
	}
	out := map[string][]windowAction{}
	for _, a := range engine.Begin(r.now, running).Actions(running) {
		st, _ := engine.Windows().At(started[a.ID])
		stops := st.Window != nil && st.Window.AtEnd == config.AtEndStop
		out[a.ID] = append(out[a.ID], windowAction{a, stops})
	}
	return out, nil
}

// window warns a VM's owner of the end of the window it started in, or
// stops the VM at that end.
func (r *round) window(vm *store.VM, acts []windowAction) {
	for _, a := range acts {
		switch a.Kind {
		case scheduler.ActionStop:
			if r.given(vm, api.WarningWindowEnd, noticeAct, a.At) {
				continue // stopped at this end once; started again since
			}
			r.act(vm, store.OpStop, ByWindow, api.VMWarningPayload{Kind: api.WarningWindowEnd, Action: api.NoticeStop, At: a.At, Reason: a.Reason})
			return
		case scheduler.ActionWarn:
			action := api.NoticeNone
			if a.stops {
				action = api.NoticeStop
			}
			r.warn(vm, api.VMWarningPayload{Kind: api.WarningWindowEnd, Action: action, At: a.At, MinutesLeft: minutesUntil(r.now, a.At), Reason: a.Reason})
		}
	}
}
