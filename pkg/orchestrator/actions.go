package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Steps and hook points of the actions on a VM that exists: stop, start,
// reboot. Like a create or a delete, each action runs intent first (the
// operation row, written by the API or a rule of sharing), records its step
// before doing it, and resumes from the VM's state, so one interrupted
// anywhere is finished by the next dispatch round or Reconcile.
//
// A stop gives the GPU back: the domain is shut down, then the VM's devices
// are removed through their backends and its slots released, its usage
// records ended, as a delete does (removeDevices, release); the domain
// stays defined, with its disk. A start queues the VM for a GPU again
// (queued, phase PhaseQueued, with a position and a reason like any VM that
// waits, its start operation pending); the scheduling round places it like
// a new VM (schedule.go), its devices are made as a create makes them
// (makeDevices), the domain is given them in place of those it had
// (Hypervisor.ReplaceHostdevs), and it starts. A VM without a GPU starts at
// once. The lease runs on while a VM is stopped: a start after it ended is
// refused until the lease is extended.
const (
	StepShutdown    = "shut down domain"
	StepQueue       = "wait for a GPU"
	StepAttach      = "attach devices"
	StepStartDomain = "start domain"
	StepReboot      = "request reboot"
	// A stop's other steps are a delete's: StepRemoveDevice, StepRelease.

	HookStopping        = "stopping"         // stop: VM stopping, domain not yet shut down
	HookDomainStopped   = "domain stopped"   // stop: domain off, devices not yet removed
	HookGPURemoved      = "GPU removed"      // stop: devices removed, slots not yet released
	HookGPUReleased     = "GPU released"     // stop: slots released, VM not yet stopped
	HookStartQueued     = "start queued"     // start: VM queued for a GPU, no slot claimed yet
	HookDevicesReady    = "devices ready"    // start: every device made and recorded, not yet given to the domain
	HookDevicesAttached = "devices attached" // start: domain redefined with the devices, not yet started
	HookDomainStarted   = "domain started"   // start: domain running, VM not yet running
	HookRebootRequested = "reboot requested" // reboot: asked of the guest, operation not yet finished
)

// StopHooks, StartHooks and RebootHooks list the hook points of the
// actions in order. A start that claims a GPU also passes the create's
// HookClaimed and HookDeviceCreated, between HookStartQueued and
// HookDevicesReady.
var (
	StopHooks   = []string{HookStopping, HookDomainStopped, HookGPURemoved, HookGPUReleased}
	StartHooks  = []string{HookStartQueued, HookDevicesReady, HookDevicesAttached, HookDomainStarted}
	RebootHooks = []string{HookRebootRequested}
)

// HookPoints lists every hook point once: the create's, the delete's, then
// the actions'.
func HookPoints() []string {
	return slices.Concat(CreateHooks, DeleteHooks, StopHooks, StartHooks, RebootHooks)
}

// PausePoints are the hook points gpuvmd's test seam may pause at
// (test/e2e kills gpuvmd there): the VMs' (HookPoints), the disk
// snapshots' (SnapshotHooks) and a data disk's creation (VolumeHooks,
// whose pause names the volume as its vm).
func PausePoints() []string {
	return slices.Concat(HookPoints(), SnapshotHooks, VolumeHooks)
}

// PhaseStartAt is the phase of a VM queued until its start time.
const PhaseStartAt = api.PhaseStartAt

// StartAtReason is the state reason of a VM queued until t.
func StartAtReason(t time.Time) string { return "starts at " + t.UTC().Format(time.RFC3339) }

// errDeleting ends the actions of a VM that is being deleted.
var errDeleting = errors.New("cancelled: the VM is being deleted")

// needsGPU reports whether a VM's start waits for a GPU: its profile asks
// for one (or is gone, which the scheduling round then says).
func (lc *lifecycle) needsGPU(vm *store.VM) bool {
	p := lc.profile(vm.Profile)
	return p == nil || p.GPU != nil
}

func (lc *lifecycle) runAction(ctx context.Context, vm *store.VM, op *store.Operation) error {
	switch op.Kind {
	case store.OpStop:
		return lc.runStop(ctx, vm, op)
	case store.OpStart:
		return lc.runStart(ctx, vm, op)
	case store.OpReboot:
		return lc.runReboot(ctx, vm, op)
	case store.OpSnapshot, store.OpRestore, store.OpSnapshotDelete:
		return lc.runSnapshotOp(ctx, vm, op) // snapshots.go
	case store.OpResize:
		return lc.runResize(ctx, vm, op) // resize.go
	case store.OpDisks:
		return lc.runDisks(ctx, vm, op) // diskplugs.go
	}
	// Extend is applied by the API at once; nothing else is known.
	lc.finishAction(ctx, vm, op, fmt.Errorf("the worker does not carry out %q operations", op.Kind))
	return nil
}

// finishAction ends an action's operation and records a vm.action event
// with its result, in one transaction (finishActionTx). An operation
// finished meanwhile is left as it is.
func (lc *lifecycle) finishAction(ctx context.Context, vm *store.VM, op *store.Operation, opErr error) {
	err := lc.st.Tx(ctx, func(tx *store.Store) error { return finishActionTx(ctx, tx, vm, op, opErr) })
	if err != nil && !errors.Is(err, store.ErrConflict) {
		lc.log.Error("finish operation", "operation", op.ID, "kind", op.Kind, "vm", vm.ID, "err", err)
	}
}

// finishActionTx ends op, an action on vm, in tx: done, or failed with
// opErr (its paths cut), and a vm.action event that says so. Both
// finishAction and a withdrawn start (WithdrawStart) end an action so.
func finishActionTx(ctx context.Context, tx *store.Store, vm *store.VM, op *store.Operation, opErr error) error {
	p := api.VMActionPayload{Action: op.Kind, OperationID: op.ID, RequestedBy: op.RequestedBy, Result: store.OpDone}
	if opErr != nil {
		p.Result, p.Error = store.OpFailed, reasonOf(opErr)
	}
	payload, _ := json.Marshal(p)
	if err := tx.FinishOperation(ctx, op.ID, withoutPaths(opErr)); err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &store.Event{VMID: vm.ID, Owner: vm.Owner, Type: api.EventVMAction, Payload: payload})
}

// interrupted: ctx ended or a test hook stopped the work; the operation is
// left for the next round or the reconciler.
func interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, errAbandoned)
}

// setState moves a VM to u from whatever version it is at now: for the
// failure paths, which must not be lost to a concurrent extend.
func (lc *lifecycle) setState(ctx context.Context, vmID string, u store.VMUpdate) (*store.VM, error) {
	for range 5 {
		vm, err := lc.st.GetVM(ctx, vmID)
		if err != nil {
			return nil, err
		}
		next, err := lc.st.UpdateVMState(ctx, vmID, vm.Version, u)
		if !errors.Is(err, store.ErrConflict) {
			return next, err
		}
	}
	return nil, fmt.Errorf("update vm %s to %s: changed five times while being written", vmID, u.State)
}

// vanished fails a VM whose domain is gone, as the reconciler does for a
// running one (its devices removed, its slots freed), and the action.
func (lc *lifecycle) vanished(ctx context.Context, vm *store.VM, op *store.Operation) error {
	// As the reconciler does (reconcile.go): failed, the GPU given back,
	// the disk kept until the VM is deleted.
	if err := lc.vanish(ctx, *vm); err != nil {
		return err // not failed yet: the next round tries again
	}
	lc.finishAction(ctx, vm, op, errors.New("domain vanished"))
	return nil
}

// runStop shuts a running VM down and gives its GPU back: stopping, then
// the guest is asked to power off and forced off after ShutdownTimeout,
// then its devices are removed and its slots released (its usage records
// ended), then it is stopped, its reason saying so. The domain and its
// disk stay.
func (lc *lifecycle) runStop(ctx context.Context, vm *store.VM, op *store.Operation) error {
	vm, op, done, err := lc.fresh(ctx, vm, op)
	if err != nil || done {
		return err
	}
	switch vm.State {
	case store.VMStopped:
		lc.finishAction(ctx, vm, op, nil) // an interrupted stop that got this far
		return nil
	case store.VMRunning:
		next, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMStopping, Phase: api.PhaseShuttingDown})
		if err != nil {
			return err
		}
		vm = next
		if err := lc.hook(vm.ID, HookStopping); err != nil {
			return err
		}
	case store.VMStopping:
	default:
		lc.finishAction(ctx, vm, op, fmt.Errorf("the VM is %s, not running", vm.State))
		return nil
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepShutdown); err != nil {
		return err
	}
	if _, err := lc.hv.Lookup(ctx, vm.ID); hypervisor.IsNotFound(err) {
		return lc.vanished(ctx, vm, op)
	} else if err != nil {
		return fmt.Errorf("stop vm %s: look up its domain: %w", vm.ID, err)
	}
	graceful, err := lc.hv.Shutdown(ctx, vm.ID, lc.settings().ShutdownTimeout)
	if err != nil {
		if interrupted(ctx, err) {
			return err
		}
		info, lerr := lc.hv.Lookup(ctx, vm.ID)
		if lerr != nil {
			// The domain's state is unknown: the next round tries again.
			return fmt.Errorf("stop vm %s: %w", vm.ID, errors.Join(err, lerr))
		}
		if info.Active() {
			cause := fmt.Errorf("shut down the domain: %w", err)
			if _, uerr := lc.setState(ctx, vm.ID, store.VMUpdate{State: store.VMRunning, Phase: api.PhaseReady, StateReason: "stop failed: " + reasonOf(cause)}); uerr != nil {
				return uerr
			}
			lc.finishAction(ctx, vm, op, cause)
			return cause
		}
		graceful = false // off anyway
	}
	if err := lc.hook(vm.ID, HookDomainStopped); err != nil {
		return err
	}
	hadGPU, err := lc.hasGPU(ctx, vm)
	if err != nil {
		return err
	}
	// The GPU goes back as a delete gives it: devices, then slots; a
	// failure leaves the VM stopping, and the next round tries again.
	fail := func(step string, err error) error {
		if interrupted(ctx, err) {
			return err
		}
		return fmt.Errorf("stop vm %s: %s: %w", vm.ID, step, err)
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepRemoveDevice); err != nil {
		return err
	}
	if err := lc.removeDevices(ctx, vm.ID); err != nil {
		return fail(StepRemoveDevice, err)
	}
	if err := lc.hook(vm.ID, HookGPURemoved); err != nil {
		return err
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepRelease); err != nil {
		return err
	}
	if err := lc.release(ctx, vm.ID); err != nil {
		return fail(StepRelease, err)
	}
	if err := lc.hook(vm.ID, HookGPUReleased); err != nil {
		return err
	}
	reason := lc.stopReason(ctx, vm, op) // leases.go: a rule's reason, or who asked
	if hadGPU {
		reason += "; its GPU was given back"
	}
	if !graceful {
		reason += fmt.Sprintf("; forced off: the guest did not power off within %s", lc.settings().ShutdownTimeout)
	}
	next, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMStopped, StateReason: reason})
	if err != nil {
		return err
	}
	lc.log.Info("VM stopped", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "graceful", graceful, "gpu_given_back", hadGPU)
	lc.finishAction(ctx, next, op, nil)
	return nil
}

// hasGPU reports whether a VM holds a GPU, or asks for one: whether a stop
// gives one back.
func (lc *lifecycle) hasGPU(ctx context.Context, vm *store.VM) (bool, error) {
	if p := lc.profile(vm.Profile); p != nil && p.GPU != nil {
		return true, nil
	}
	allocs, err := liveAllocations(ctx, lc.st, vm.ID)
	return len(allocs) > 0, err
}

// giveBack removes a VM's devices and releases its slots, ending its usage
// records, as a delete does; both are idempotent.
func (lc *lifecycle) giveBack(ctx context.Context, vmID string) error {
	if err := lc.removeDevices(ctx, vmID); err != nil {
		return fmt.Errorf("remove its GPU devices: %w", err)
	}
	if err := lc.release(ctx, vmID); err != nil {
		return fmt.Errorf("release its GPU: %w", err)
	}
	return nil
}

// leaseOver says why a stopped VM may not start: its lease has ended (nil
// when it has not).
func (lc *lifecycle) leaseOver(vm *store.VM) error {
	if vm.LeaseEnd == nil || lc.st.Now().Before(*vm.LeaseEnd) {
		return nil
	}
	return fmt.Errorf("the lease ended at %s: extend it to start the VM", stampIn(*vm.LeaseEnd, lc.settings().Location))
}

// queueStart queues a stopped VM that needs a GPU for one: it waits like a
// new VM, its start operation pending, until a scheduling round places it.
// A GPU it still holds (stopped before stops gave it back) is given back
// first. A start after the lease ended fails, the VM staying stopped. It
// returns the queued VM, or false when there is nothing to place: the
// start failed, or was interrupted, which the next round takes up.
func (lc *lifecycle) queueStart(ctx context.Context, vm *store.VM, op *store.Operation) (*store.VM, bool) {
	if err := lc.leaseOver(vm); err != nil {
		lc.finishAction(ctx, vm, op, err)
		return nil, false
	}
	err := lc.st.SetOperationStep(ctx, op.ID, StepQueue)
	if err == nil {
		var allocs []store.Allocation
		if allocs, err = liveAllocations(ctx, lc.st, vm.ID); err == nil && len(allocs) > 0 {
			err = lc.giveBack(ctx, vm.ID)
		}
	}
	var next *store.VM
	if err == nil {
		next, err = lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMQueued, Phase: PhaseQueued})
	}
	if err == nil {
		err = lc.hook(vm.ID, HookStartQueued)
	}
	if errors.Is(err, store.ErrConflict) {
		lc.log.Info("VM changed while its start queued it; the next round tries again", "vm", vm.ID, "err", err)
		return nil, false
	}
	if err != nil {
		report(lc.log, vm.ID, fmt.Errorf("start vm %s: queue it for a GPU: %w", vm.ID, err))
		return nil, false
	}
	lc.log.Info("VM queued for a GPU to start on", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner)
	return next, true
}

// runStart starts a VM (see the top of this file), resuming from the state
// it is in: stopped (one without a GPU starts at once, in phase
// "starting"; one that needs a GPU is queued for one), allocating (placed:
// its devices are made), or creating (placed by a round that found its
// profile asks for a GPU no more). The domain is then given the VM's
// devices and started, and the VM runs, in phase booting until its guest
// is up (boot.go). A start that fails leaves the VM stopped with the
// reason, its GPU given back.
func (lc *lifecycle) runStart(ctx context.Context, vm *store.VM, op *store.Operation) error {
	vm, op, done, err := lc.fresh(ctx, vm, op)
	if err != nil || done {
		return err
	}
	switch vm.State {
	case store.VMRunning:
		lc.finishAction(ctx, vm, op, nil) // an interrupted start that got this far
		return nil
	case store.VMQueued:
		return nil // waits for a GPU: the scheduling round places it
	case store.VMStopped:
		if lc.needsGPU(vm) {
			if _, ok := lc.queueStart(ctx, vm, op); ok {
				lc.wake()
			}
			return nil
		}
		if err := lc.leaseOver(vm); err != nil {
			lc.finishAction(ctx, vm, op, err)
			return nil
		}
		if vm.Phase != api.PhaseStarting {
			// It counts against its owner's quotas again (a stopped VM does
			// not): one its other VMs fill refuses the start.
			if err := lc.quota.startQuota(ctx, vm); err != nil {
				lc.finishAction(ctx, vm, op, err)
				return nil
			}
			next, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMStopped, Phase: api.PhaseStarting})
			if err != nil {
				return err
			}
			vm = next
		}
	case store.VMAllocating:
		deviceErr, err := lc.makeDevices(ctx, vm.ID, op)
		if err != nil {
			return err
		}
		if deviceErr != nil {
			return lc.startDeviceFailed(ctx, vm, op, deviceErr)
		}
		if err := lc.hook(vm.ID, HookDevicesReady); err != nil {
			return err
		}
	case store.VMCreating:
	default:
		lc.finishAction(ctx, vm, op, fmt.Errorf("the VM is %s, not stopped", vm.State))
		return nil
	}
	return lc.startDomain(ctx, vm, op)
}

// startDomain gives a VM's domain the VM's devices in place of those it
// had (none for a VM without a GPU, or when the domains carry no GPU) and
// starts it; the VM runs then.
func (lc *lifecycle) startDomain(ctx context.Context, vm *store.VM, op *store.Operation) error {
	if err := lc.st.SetOperationStep(ctx, op.ID, StepAttach); err != nil {
		return err
	}
	allocs, err := liveAllocations(ctx, lc.st, vm.ID)
	if err != nil {
		return err
	}
	var hostdevs []domain.Hostdev
	if len(allocs) > 0 {
		if lc.profile(vm.Profile) == nil {
			return lc.startFailed(ctx, vm, op, fmt.Errorf("profile %q no longer exists", vm.Profile))
		}
		req, err := lc.vmRequest(ctx, vm) // the devices as a create gives them
		if err != nil {
			return lc.startFailed(ctx, vm, op, err)
		}
		hostdevs = req.Spec.Hostdevs
	} else if p := lc.profile(vm.Profile); p != nil && p.Home {
		// The home is made again (empty) if its person deleted it since,
		// as vmRequest does for a VM with devices: the domain's virtiofs
		// points at it.
		if _, err := lc.home(ctx, lc.settings(), p, vm); err != nil {
			return lc.startFailed(ctx, vm, op, err)
		}
	}
	if err := lc.prepareTask(ctx, vm); err != nil { // tasks.go
		switch {
		case hypervisor.IsNotFound(err):
			return lc.vanished(ctx, vm, op)
		case interrupted(ctx, err), hypervisor.IsDisconnected(err):
			return err // the next round tries again
		}
		return lc.startFailed(ctx, vm, op, fmt.Errorf("ready the domain for its task: %w", err))
	}
	if err := lc.hv.ReplaceHostdevs(ctx, vm.ID, hostdevs); err != nil {
		switch {
		case hypervisor.IsNotFound(err):
			return lc.vanished(ctx, vm, op)
		case interrupted(ctx, err), hypervisor.IsDisconnected(err):
			return err // the next round tries again
		}
		return lc.startFailed(ctx, vm, op, fmt.Errorf("give the domain its GPU devices: %w", err))
	}
	if err := lc.startDisks(ctx, vm); err != nil { // diskplugs.go
		switch {
		case hypervisor.IsNotFound(err):
			return lc.vanished(ctx, vm, op)
		case interrupted(ctx, err), hypervisor.IsDisconnected(err):
			return err // the next round tries again
		}
		return lc.startFailed(ctx, vm, op, fmt.Errorf("give the domain its data disks: %w", err))
	}
	if err := lc.hook(vm.ID, HookDevicesAttached); err != nil {
		return err
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepStartDomain); err != nil {
		return err
	}
	if err := lc.hv.Start(ctx, vm.ID); err != nil {
		switch {
		case hypervisor.IsNotFound(err):
			return lc.vanished(ctx, vm, op)
		case interrupted(ctx, err), hypervisor.IsDisconnected(err):
			return err // the next round tries again
		}
		return lc.startFailed(ctx, vm, op, fmt.Errorf("start the domain: %w", err))
	}
	if err := lc.hook(vm.ID, HookDomainStarted); err != nil {
		return err
	}
	next, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: lc.startedPhase()})
	if err != nil {
		return err
	}
	lc.booting(next)
	lc.log.Info("VM started", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "devices", len(allocs))
	lc.finishAction(ctx, next, op, nil)
	return nil
}

// startDeviceFailed handles a device the backend could not make for a
// start: the GPU turned out to be full or unusable, and the VM waits in
// the queue again, its start pending; any other failure fails the start.
func (lc *lifecycle) startDeviceFailed(ctx context.Context, vm *store.VM, op *store.Operation, cause error) error {
	if interrupted(ctx, cause) {
		return cause
	}
	if !errors.Is(cause, backend.ErrExhausted) && !errors.Is(cause, backend.ErrUnavailable) {
		return lc.startFailed(ctx, vm, op, cause)
	}
	if err := lc.giveBack(ctx, vm.ID); err != nil {
		return errors.Join(cause, err)
	}
	if _, err := lc.setState(ctx, vm.ID, store.VMUpdate{State: store.VMQueued, Phase: PhaseQueued, StateReason: reasonOf(cause)}); err != nil {
		return err
	}
	lc.log.Warn("VM queued again to start", "vm", vm.ID, "reason", cause)
	return nil
}

// startFailed gives back whatever GPU the start got, leaves the VM stopped
// with the cause and fails the action. An interrupted start is left to the
// next round.
func (lc *lifecycle) startFailed(ctx context.Context, vm *store.VM, op *store.Operation, cause error) error {
	if interrupted(ctx, cause) {
		return cause
	}
	if err := lc.giveBack(ctx, vm.ID); err != nil {
		return errors.Join(cause, err)
	}
	if _, err := lc.setState(ctx, vm.ID, store.VMUpdate{State: store.VMStopped, StateReason: "start failed: " + reasonOf(cause)}); err != nil {
		return errors.Join(cause, err)
	}
	lc.finishAction(ctx, vm, op, cause)
	return cause
}

// refuse ends the wait of a queued VM that will not get a GPU: a create
// fails the VM (failVM); a start leaves it stopped, with its disk, saying
// why (startFailed).
func (lc *lifecycle) refuse(ctx context.Context, q queued, cause error) error {
	if q.op.Kind == store.OpStart {
		return lc.startFailed(ctx, q.vm, q.op, cause)
	}
	return lc.failVM(ctx, q.vm.ID, q.op, cause)
}

// restartRequest fits the scheduler's request of a VM queued by a start:
// it was asked for when the start was, and runs for what is left of its
// lease.
func restartRequest(r *scheduler.Request, q queued, now time.Time) {
	if q.op.Kind != store.OpStart {
		return
	}
	r.Submitted = q.op.CreatedAt
	if q.vm.LeaseEnd != nil && q.vm.LeaseEnd.After(now) {
		r.Lease = q.vm.LeaseEnd.Sub(now)
	}
}

// elsewhere says why a VM queued by a start may not take a placement on
// host: in a fleet its domain and disk are on the node it ran on. "" when
// it may.
func (lc *lifecycle) elsewhere(q queued, host string) string {
	if !lc.settings().InFleet || q.op.Kind != store.OpStart || q.vm.Host == "" || q.vm.Host == host {
		return ""
	}
	return fmt.Sprintf("its disk is on %s: it starts only on a GPU there (the scheduler chose %s)", q.vm.Host, host)
}

// runReboot asks a running VM's guest to restart (ACPI); the VM stays
// running. A reboot interrupted after it was asked is asked again (a
// guest may get it twice; it never misses it).
func (lc *lifecycle) runReboot(ctx context.Context, vm *store.VM, op *store.Operation) error {
	vm, op, done, err := lc.fresh(ctx, vm, op)
	if err != nil || done {
		return err
	}
	if vm.State != store.VMRunning {
		lc.finishAction(ctx, vm, op, fmt.Errorf("the VM is %s, not running", vm.State))
		return nil
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepReboot); err != nil {
		return err
	}
	err = lc.hv.Reboot(ctx, vm.ID)
	switch {
	case hypervisor.IsNotFound(err):
		return lc.vanished(ctx, vm, op)
	case errors.Is(err, hypervisor.ErrNotRunning):
		cause := fmt.Errorf("reboot: %w", err)
		lc.finishAction(ctx, vm, op, cause)
		return cause
	case err != nil && (interrupted(ctx, err) || hypervisor.IsDisconnected(err)):
		return err // the next round asks again
	case err != nil:
		cause := fmt.Errorf("reboot: %w", err)
		lc.finishAction(ctx, vm, op, cause)
		return cause
	}
	if err := lc.hook(vm.ID, HookRebootRequested); err != nil {
		return err
	}
	lc.log.Info("VM reboot requested", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner)
	lc.finishAction(ctx, vm, op, nil)
	return nil
}

// vanish marks a running VM whose domain is gone from libvirt failed and
// gives its GPU back. Its disk is kept — the domain may have been removed
// by hand, and the disk is the person's work — until the VM is deleted.
func (lc *lifecycle) vanish(ctx context.Context, vm store.VM) error {
	lc.log.Warn("the domain of a running VM vanished; marking it failed, giving its GPU back and keeping its disk", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner)
	if err := lc.removeDevices(ctx, vm.ID); err != nil {
		return fmt.Errorf("vm %s vanished: remove its devices: %w", vm.ID, err)
	}
	if err := lc.release(ctx, vm.ID); err != nil {
		return fmt.Errorf("vm %s vanished: release its GPU: %w", vm.ID, err)
	}
	lc.boots.remove(vm.ID)
	if _, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMFailed,
		StateReason: "its domain vanished from libvirt: the GPU was given back, the disk is kept until the VM is deleted"}); err != nil {
		return fmt.Errorf("vm %s vanished: mark it failed: %w", vm.ID, err)
	}
	return nil
}
