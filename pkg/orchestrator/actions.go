package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Steps and hook points of the actions on a VM that exists: stop, start,
// reboot. Like a create or a delete, each action runs intent first (the
// operation row, written by the API), records its step before doing it,
// and resumes from the VM's state, so one interrupted anywhere is finished
// by the next dispatch round or Reconcile.
//
// A stopped VM keeps its allocations and devices (start is immediate) and
// its lease runs on. While a start runs the VM stays stopped (phase
// "starting") until its domain runs.
const (
	StepShutdown     = "shut down domain"
	StepCheckDevices = "check devices"
	StepStartDomain  = "start domain"
	StepReboot       = "request reboot"

	HookStopping        = "stopping"         // stop: VM stopping, domain not yet shut down
	HookDomainStopped   = "domain stopped"   // stop: domain off, VM not yet stopped
	HookDevicesReady    = "devices ready"    // start: every device present, domain not yet started
	HookDomainStarted   = "domain started"   // start: domain running, VM not yet running
	HookRebootRequested = "reboot requested" // reboot: asked of the guest, operation not yet finished
)

// StopHooks, StartHooks and RebootHooks list the hook points of the
// actions in order.
var (
	StopHooks   = []string{HookStopping, HookDomainStopped}
	StartHooks  = []string{HookDevicesReady, HookDomainStarted}
	RebootHooks = []string{HookRebootRequested}
)

// PhaseStartAt is the phase of a VM queued until its start time.
const PhaseStartAt = "waiting for its start time"

// StartAtReason is the state reason of a VM queued until t.
func StartAtReason(t time.Time) string { return "starts at " + t.UTC().Format(time.RFC3339) }

// errDeleting ends the actions of a VM that is being deleted.
var errDeleting = errors.New("cancelled: the VM is being deleted")

// waitingToStart keeps a queued VM whose start time has not come out of
// placement, saying so in its reason, and reports whether it did.
func (o *Orchestrator) waitingToStart(ctx context.Context, vm *store.VM) bool {
	if vm.StartAt == nil || !o.st.Now().Before(*vm.StartAt) {
		return false
	}
	reason := StartAtReason(*vm.StartAt)
	if vm.StateReason != reason || vm.Phase != PhaseStartAt {
		_, err := o.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMQueued, Phase: PhaseStartAt, StateReason: reason})
		if err != nil && !errors.Is(err, store.ErrConflict) {
			o.log.Error("record the start time of a queued VM", "vm", vm.ID, "err", err)
		}
	}
	return true
}

// dispatchActions handles the start, stop and reboot operations of a VM:
// a delete cancels them (and goes on), an unfinished create makes them
// wait, else the oldest runs. It reports whether it took the VM this round.
func (o *Orchestrator) dispatchActions(ctx context.Context, inline bool, vm *store.VM, w *work) bool {
	if len(w.others) == 0 {
		return false
	}
	if w.delete != nil {
		for i := range w.others {
			o.finishAction(ctx, vm, &w.others[i], errDeleting)
		}
		return false
	}
	if w.create != nil {
		return false
	}
	op := w.others[0]
	o.start(ctx, inline, vm.ID, func(ctx context.Context) error { return o.runAction(ctx, vm, &op) })
	return true
}

func (o *Orchestrator) runAction(ctx context.Context, vm *store.VM, op *store.Operation) error {
	switch op.Kind {
	case store.OpStop:
		return o.runStop(ctx, vm, op)
	case store.OpStart:
		return o.runStart(ctx, vm, op)
	case store.OpReboot:
		return o.runReboot(ctx, vm, op)
	}
	// Extend is applied by the API at once; nothing else is known.
	o.finishAction(ctx, vm, op, fmt.Errorf("the worker does not carry out %q operations", op.Kind))
	return nil
}

// finishAction ends an action's operation and records a vm.action event
// with its result, in one transaction. An operation finished meanwhile is
// left as it is.
func (o *Orchestrator) finishAction(ctx context.Context, vm *store.VM, op *store.Operation, opErr error) {
	p := api.VMActionPayload{Action: op.Kind, OperationID: op.ID, RequestedBy: op.RequestedBy, Result: store.OpDone}
	if opErr != nil {
		p.Result, p.Error = store.OpFailed, opErr.Error()
	}
	payload, _ := json.Marshal(p)
	err := o.st.Tx(ctx, func(tx *store.Store) error {
		if err := tx.FinishOperation(ctx, op.ID, opErr); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &store.Event{VMID: vm.ID, Owner: vm.Owner, Type: api.EventVMAction, Payload: payload})
	})
	if err != nil && !errors.Is(err, store.ErrConflict) {
		o.log.Error("finish operation", "operation", op.ID, "kind", op.Kind, "vm", vm.ID, "err", err)
	}
}

// interrupted: ctx ended or a test hook stopped the work; the operation is
// left for the next round or the reconciler.
func interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, errAbandoned)
}

// setState moves a VM to u from whatever version it is at now: for the
// failure paths, which must not be lost to a concurrent extend.
func (o *Orchestrator) setState(ctx context.Context, vmID string, u store.VMUpdate) (*store.VM, error) {
	for range 5 {
		vm, err := o.st.GetVM(ctx, vmID)
		if err != nil {
			return nil, err
		}
		next, err := o.st.UpdateVMState(ctx, vmID, vm.Version, u)
		if !errors.Is(err, store.ErrConflict) {
			return next, err
		}
	}
	return nil, fmt.Errorf("update vm %s to %s: changed five times while being written", vmID, u.State)
}

// vanished fails a VM whose domain is gone, as the reconciler does for a
// running one (its devices removed, its slots freed), and the action.
func (o *Orchestrator) vanished(ctx context.Context, vm *store.VM, op *store.Operation) error {
	o.log.Warn("the domain of a VM vanished; marking it failed", "vm", vm.ID, "name", vm.Name, "operation", op.Kind)
	cause := errors.New("domain vanished")
	if err := o.failVM(ctx, vm.ID, nil, cause); !errors.Is(err, cause) {
		return err // not failed yet: the next round tries again
	}
	o.finishAction(ctx, vm, op, cause)
	return nil
}

// runStop shuts a running VM down: stopping, then the guest is asked to
// power off and forced off after ShutdownTimeout, then stopped. The
// devices and slots stay.
func (o *Orchestrator) runStop(ctx context.Context, vm *store.VM, op *store.Operation) error {
	switch vm.State {
	case store.VMStopped:
		o.finishAction(ctx, vm, op, nil) // an interrupted stop that got this far
		return nil
	case store.VMRunning:
		next, err := o.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMStopping, Phase: "shutting down"})
		if err != nil {
			return err
		}
		vm = next
		if err := o.hook(vm.ID, HookStopping); err != nil {
			return err
		}
	case store.VMStopping:
	default:
		o.finishAction(ctx, vm, op, fmt.Errorf("the VM is %s, not running", vm.State))
		return nil
	}
	if err := o.st.SetOperationStep(ctx, op.ID, StepShutdown); err != nil {
		return err
	}
	if _, err := o.cfg.Hypervisor.Lookup(ctx, vm.ID); hypervisor.IsNotFound(err) {
		return o.vanished(ctx, vm, op)
	} else if err != nil {
		return fmt.Errorf("stop vm %s: look up its domain: %w", vm.ID, err)
	}
	graceful, err := o.cfg.Hypervisor.Shutdown(ctx, vm.ID, o.cfg.ShutdownTimeout)
	if err != nil {
		if interrupted(ctx, err) {
			return err
		}
		info, lerr := o.cfg.Hypervisor.Lookup(ctx, vm.ID)
		if lerr != nil {
			// The domain's state is unknown: the next round tries again.
			return fmt.Errorf("stop vm %s: %w", vm.ID, errors.Join(err, lerr))
		}
		if info.Active() {
			cause := fmt.Errorf("shut down the domain: %w", err)
			if _, uerr := o.setState(ctx, vm.ID, store.VMUpdate{State: store.VMRunning, Phase: "ready", StateReason: "stop failed: " + cause.Error()}); uerr != nil {
				return uerr
			}
			o.finishAction(ctx, vm, op, cause)
			return cause
		}
		graceful = false // off anyway
	}
	if err := o.hook(vm.ID, HookDomainStopped); err != nil {
		return err
	}
	reason := "stopped by " + op.RequestedBy
	if op.RequestedBy == "" {
		reason = "stopped"
	}
	if !graceful {
		reason += fmt.Sprintf("; forced off: the guest did not power off within %s", o.cfg.ShutdownTimeout)
	}
	next, err := o.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMStopped, StateReason: reason})
	if err != nil {
		return err
	}
	o.log.Info("VM stopped", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "graceful", graceful)
	o.finishAction(ctx, next, op, nil)
	return nil
}

// runStart starts a stopped VM: it makes again any device the host lost,
// then starts the domain. The VM stays stopped (phase "starting") until
// the domain runs; a start that fails leaves it stopped with the reason.
func (o *Orchestrator) runStart(ctx context.Context, vm *store.VM, op *store.Operation) error {
	switch vm.State {
	case store.VMRunning:
		o.finishAction(ctx, vm, op, nil) // an interrupted start that got this far
		return nil
	case store.VMStopped:
	default:
		o.finishAction(ctx, vm, op, fmt.Errorf("the VM is %s, not stopped", vm.State))
		return nil
	}
	if vm.Phase != "starting" {
		next, err := o.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMStopped, Phase: "starting"})
		if err != nil {
			return err
		}
		vm = next
	}
	if err := o.st.SetOperationStep(ctx, op.ID, StepCheckDevices); err != nil {
		return err
	}
	if err := o.ensureDevices(ctx, vm.ID); err != nil {
		if interrupted(ctx, err) {
			return err
		}
		return o.startFailed(ctx, vm, op, err)
	}
	if err := o.hook(vm.ID, HookDevicesReady); err != nil {
		return err
	}
	if err := o.st.SetOperationStep(ctx, op.ID, StepStartDomain); err != nil {
		return err
	}
	if err := o.cfg.Hypervisor.Start(ctx, vm.ID); err != nil {
		switch {
		case hypervisor.IsNotFound(err):
			return o.vanished(ctx, vm, op)
		case interrupted(ctx, err):
			return err
		}
		return o.startFailed(ctx, vm, op, fmt.Errorf("start the domain: %w", err))
	}
	if err := o.hook(vm.ID, HookDomainStarted); err != nil {
		return err
	}
	next, err := o.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: "ready"})
	if err != nil {
		return err
	}
	o.log.Info("VM started", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner)
	o.finishAction(ctx, next, op, nil)
	return nil
}

// startFailed leaves the VM stopped with the cause and fails the action.
func (o *Orchestrator) startFailed(ctx context.Context, vm *store.VM, op *store.Operation, cause error) error {
	if _, err := o.setState(ctx, vm.ID, store.VMUpdate{State: store.VMStopped, StateReason: "start failed: " + cause.Error()}); err != nil {
		return errors.Join(cause, err)
	}
	o.finishAction(ctx, vm, op, cause)
	return cause
}

// ensureDevices makes sure every recorded device of a VM exists on the host.
// One the host lost (a host reboot removes mdevs, vGPUs on VFs and MIG
// instances) is made again through its backend from its allocation, as the
// create made it: same GPU, same MIG placement, same device UUID. The domain
// refers to the recorded device, so a device that comes back different (the
// backend chose another VF) is removed again and the start fails, saying
// so, rather than booting the VM on a device it was not defined with.
func (o *Orchestrator) ensureDevices(ctx context.Context, vmID string) error {
	allocs, err := o.liveAllocations(ctx, vmID)
	if err != nil || len(allocs) == 0 {
		return err
	}
	seen := map[string]bool{}
	var names []string
	for _, a := range allocs {
		if !seen[a.Backend] {
			seen[a.Backend] = true
			names = append(names, a.Backend)
		}
	}
	invs, errs := o.inventoriesOf(ctx, names)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, a := range allocs {
		if a.State == store.AllocCreated && hasDevice(invs[a.Backend], vmID, a) {
			continue
		}
		o.log.Warn("a stopped VM's GPU device is gone from the host; making it again", "vm", vmID, "device", a.DeviceID,
			"gpu", a.GPUAddress, "kind", a.Kind)
		d, err := o.createDevice(ctx, vmID, a, allocs, true)
		if err != nil {
			return fmt.Errorf("make the %s device on GPU %s again: %w", a.Kind, a.GPUAddress, err)
		}
		if a.State == store.AllocReserved {
			hd, _ := json.Marshal(d.Hostdev)
			if err := o.st.MarkAllocationCreated(ctx, a.ID, d.ID, string(hd)); err != nil {
				return err
			}
			continue
		}
		if why := o.differs(a, d); why != "" {
			b, _ := o.cfg.Backends.Backend(a.Backend)
			rerr := b.Remove(ctx, backend.RemoveRequest{ID: d.ID, GPU: d.GPU})
			if rerr != nil && !errors.Is(rerr, backend.ErrNotFound) {
				return fmt.Errorf("the %s device on GPU %s came back different (%s), and removing it failed: %w", a.Kind, a.GPUAddress, why, rerr)
			}
			return fmt.Errorf("the %s device on GPU %s could not be made as it was: %s; start the VM again later, or delete it and create a new one", a.Kind, a.GPUAddress, why)
		}
		o.log.Info("GPU device made again", "vm", vmID, "device", d.ID, "gpu", d.GPU)
	}
	return nil
}

// hasDevice reports whether inv lists the recorded device of allocation a
// as the VM's.
func hasDevice(inv backend.Inventory, vmID string, a store.Allocation) bool {
	for _, d := range inv.Devices {
		if d.ID == a.DeviceID && d.VMUUID == vmID && d.GPU == a.GPUAddress {
			return true
		}
	}
	return false
}

// differs says how a device made again differs from the recorded one in
// what matters: its ID (what delete removes) and, unless the domains carry
// no GPU, how the domain attaches it. "" when it does not.
func (o *Orchestrator) differs(a store.Allocation, d backend.Device) string {
	if d.ID != a.DeviceID {
		return fmt.Sprintf("the backend made %s instead of %s", d.ID, a.DeviceID)
	}
	if o.cfg.DetachSimulatedGPUs {
		return ""
	}
	var was, now backend.Hostdev
	_ = json.Unmarshal([]byte(a.Hostdev), &was)
	b, _ := json.Marshal(d.Hostdev)
	_ = json.Unmarshal(b, &now)
	if !reflect.DeepEqual(was, now) {
		return fmt.Sprintf("it is %s now, not %s", describeHostdev(now), describeHostdev(was))
	}
	return ""
}

// describeHostdev names a device as the domain attaches it: "mdev <uuid>",
// "PCI 0000:41:00.5".
func describeHostdev(h backend.Hostdev) string {
	if h.Type == backend.HostdevMdev {
		return "mdev " + h.UUID
	}
	return "PCI " + strings.Join(h.Addresses, ", ")
}

// runReboot asks a running VM's guest to restart (ACPI); the VM stays
// running. A reboot interrupted after it was asked is asked again (a
// guest may get it twice; it never misses it).
func (o *Orchestrator) runReboot(ctx context.Context, vm *store.VM, op *store.Operation) error {
	if vm.State != store.VMRunning {
		o.finishAction(ctx, vm, op, fmt.Errorf("the VM is %s, not running", vm.State))
		return nil
	}
	if err := o.st.SetOperationStep(ctx, op.ID, StepReboot); err != nil {
		return err
	}
	err := o.cfg.Hypervisor.Reboot(ctx, vm.ID)
	switch {
	case hypervisor.IsNotFound(err):
		return o.vanished(ctx, vm, op)
	case errors.Is(err, hypervisor.ErrNotRunning):
		cause := fmt.Errorf("reboot: %w", err)
		o.finishAction(ctx, vm, op, cause)
		return cause
	case err != nil && (interrupted(ctx, err) || hypervisor.IsDisconnected(err)):
		return err // the next round asks again
	case err != nil:
		cause := fmt.Errorf("reboot: %w", err)
		o.finishAction(ctx, vm, op, cause)
		return cause
	}
	if err := o.hook(vm.ID, HookRebootRequested); err != nil {
		return err
	}
	o.log.Info("VM reboot requested", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner)
	o.finishAction(ctx, vm, op, nil)
	return nil
}
