package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/licensing"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// A resize moves a stopped VM to another profile: its GPU (a MIG slice, a
// time-sliced vGPU, a whole GPU, or none), its vCPUs and its memory, its
// disk kept. A stopped VM holds no GPU (a stop gives it back, actions.go),
// so a resize makes no device: it redefines the domain with the new vCPUs
// and memory and no GPU devices (Hypervisor ResizeDomain), then records the
// new profile, and the one the VM had, in one VM update. The VM's next
// start queues it for the new profile's GPU like any start, makes that
// device as a create makes it, and gives the domain its hostdev (mdev, VF,
// whole GPU) built as a create builds it (vmRequest). A VM that still held
// devices from before stops gave them back (queueStart says so) gives them
// back once the domain no longer lists them.
//
// The operation (store.OpResize) names its target in the VM's spec
// ("resize_to"), written with it; the VM update that changes the profile
// removes it and records "previous_profile", so a resize to that profile is
// the way back. A failure before that update (the domain is not redefined)
// leaves the VM as it was: profile, allocations, domain XML; only
// resize_to is removed.
const (
	StepResize = "resize domain"

	HookResized = "domain resized" // resize: domain redefined, VM's profile not yet changed
)

// ResizeHooks lists the resize's hook points. They are not in HookPoints
// yet: the end-to-end crash test (test/e2e) covers HookPoints, and a
// resize's crash is tested in this package (TestResizeInterrupted).
var ResizeHooks = []string{HookResized}

// DomainResizer is what a resize asks of the hypervisor (a
// *hypervisor.Conn): a shut-off domain redefined with a new size and no
// GPU devices.
type DomainResizer interface {
	ResizeDomain(ctx context.Context, uuid string, vcpus int, memory uint64) error
}

// Keys of a VM's spec (the API's vmSpec) that a resize reads and writes.
const (
	specResizeTo        = "resize_to"
	specPreviousProfile = "previous_profile"
)

// ResizeOfSpec reads a VM's spec: the profile a resize is moving it to (""
// when none is under way) and the profile it had before its last resize.
func ResizeOfSpec(spec string) (to, previous string) {
	var s struct {
		To       string `json:"resize_to"`
		Previous string `json:"previous_profile"`
	}
	if spec == "" || json.Unmarshal([]byte(spec), &s) != nil {
		return "", ""
	}
	return s.To, s.Previous
}

// Kinds of a resize's refusal.
const (
	RefuseInvalid  = "invalid"   // 422 (400 for malformed input)
	RefuseNotFound = "not-found" // 404: no such profile
	RefusePolicy   = "policy"    // 403: the sharing policy refuses it
	RefuseConflict = "conflict"  // 409: the VM's state
)

// ResizeRefusal says why a resize is refused, naming the field.
type ResizeRefusal struct {
	Kind, Field, Detail string
}

func (r *ResizeRefusal) Error() string { return r.Detail }

func refuse(kind, field, format string, args ...any) *ResizeRefusal {
	return &ResizeRefusal{Kind: kind, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// ResizeBy is who asks for a resize: the owner's groups (for the profile's
// rule and the policy), and whether the caller is an admin (who may move a
// VM to a profile not open to its owner).
type ResizeBy struct {
	Name   string
	Groups []string
	Admin  bool
}

// maxProfileName bounds a profile name in a request.
const maxProfileName = 200

// checkProfileName refuses a profile name no configuration could hold.
func checkProfileName(name string) *ResizeRefusal {
	switch {
	case name == "":
		return refuse(RefuseInvalid, "profile", "name the profile to move the VM to")
	case len(name) > maxProfileName:
		return refuse(RefuseInvalid, "profile", "a profile name has at most %d characters (this one has %d)", maxProfileName, len(name))
	case !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return refuse(RefuseInvalid, "profile", "a profile name has no control characters")
	}
	return nil
}

// PlanResize checks a resize of vm to the profile named target and says
// what it would do (api.ResizePlan), changing nothing. A refusal is a
// *ResizeRefusal; any other error is the server's.
func (o *Orchestrator) PlanResize(ctx context.Context, vm *store.VM, target string, by ResizeBy) (api.ResizePlan, error) {
	if r := checkProfileName(target); r != nil {
		return api.ResizePlan{}, r
	}
	set := o.life.settings()
	to := set.Profiles[target]
	switch {
	case vm.State != store.VMStopped:
		return api.ResizePlan{}, refuse(RefuseConflict, "", "VM %q is %s: only a stopped VM can be resized (stop it first)", vm.Name, vm.State)
	case to == nil:
		return api.ResizePlan{}, refuse(RefuseNotFound, "profile", "unknown profile %q", target)
	case target == vm.Profile:
		return api.ResizePlan{}, refuse(RefuseInvalid, "profile", "VM %q already has profile %q", vm.Name, target)
	case !by.Admin && !to.Allows(vm.Owner, by.Groups):
		// As at a create: a profile the owner may not use is as absent as
		// an unknown one, so that a refusal tells nobody it exists.
		return api.ResizePlan{}, refuse(RefuseNotFound, "profile", "unknown profile %q", target)
	}
	from := set.Profiles[vm.Profile]
	disk, r := keepsDisk(vm, from, to)
	if r != nil {
		return api.ResizePlan{}, r
	}
	adm, err := o.disp.Admit(ctx, vm.Owner, by.Groups, target, max(vm.Hours, 1))
	if err != nil {
		return api.ResizePlan{}, err
	}
	if adm.Refuse {
		return api.ResizePlan{}, refuse(RefusePolicy, "profile", "the sharing policy refuses VM %q on profile %q: %s", vm.Name, target, adm.Reason.Text())
	}
	plan := api.ResizePlan{VM: vm.ID, From: sideOf(vm.Profile, from), To: sideOf(target, to), Disk: disk, Wait: adm.Reason.Text(),
		Snapshot: fmt.Sprintf("take a snapshot of the disk first (gpuvm snapshot %s --label before-resize) if the new GPU's driver or settings may need undoing; "+
			"a resize back to %q returns the GPU and size", vm.Name, vm.Profile)}
	plan.Driver, plan.DriverDetail = o.life.driverAdvice(ctx, &set, from, to)
	return plan, nil
}

// keepsDisk says what becomes of the VM's disk, or refuses a profile that
// would not keep it: another image, or a smaller disk.
func keepsDisk(vm *store.VM, from, to *config.Profile) (string, *ResizeRefusal) {
	if from == nil {
		return fmt.Sprintf("kept as it is (profile %q is no longer configured: its image and size are not compared)", vm.Profile), nil
	}
	var fromImg, toImg string
	var fromSize, toSize uint64
	if from.Disk != nil {
		fromImg, fromSize = from.Disk.Image, from.Disk.Size
	}
	if to.Disk != nil {
		toImg, toSize = to.Disk.Image, to.Disk.Size
	}
	switch {
	case fromImg != toImg:
		return "", refuse(RefuseInvalid, "profile", "profile %q has disk.image %q, VM %q's disk is on %q: a resize keeps the disk, so the profile must name the same image",
			to.Name, toImg, vm.Name, fromImg)
	case toSize < fromSize:
		return "", refuse(RefuseInvalid, "profile", "profile %q has disk.size %d bytes, smaller than VM %q's disk (%d bytes): a resize never shrinks a disk",
			to.Name, toSize, vm.Name, fromSize)
	case fromImg == "":
		return "kept: the VM has no disk image", nil
	}
	return fmt.Sprintf("kept: the VM's disk on image %q stays as it is, with its data", fromImg), nil
}

// sideOf is what a profile gives, for a plan.
func sideOf(name string, p *config.Profile) api.ResizeSide {
	s := api.ResizeSide{Profile: name}
	if p == nil {
		return s
	}
	s.VCPUs, s.Memory = p.VCPUs, p.Memory
	if p.GPU == nil {
		return s
	}
	s.Kind = string(p.GPU.Kind)
	switch p.GPU.Kind {
	case gpu.KindVGPU:
		s.GPU = p.GPU.Type
	case gpu.KindMIG:
		s.GPU = p.GPU.Profile
	default:
		s.GPU = p.GPU.Model
	}
	for _, n := range licensing.NeedsOf(p.GPU.Kind, p.GPU.Type, p.GPU.Kinds) {
		s.Licences = append(s.Licences, api.LicenceNeed{Kind: string(n.Kind), Products: n.Products, Driver: n.Driver, Why: n.Why, Source: n.Source})
	}
	return s
}

// driverAdvice says whether the VM's image (its profile's, from) carries an
// NVIDIA guest driver the vGPU manager of the target kind's hosts accepts,
// as warnGuestDriver checks after a create (gpu.CheckGuestDriver).
func (lc *lifecycle) driverAdvice(ctx context.Context, set *lifecycleSettings, from, to *config.Profile) (string, string) {
	if to.GPU == nil {
		return api.DriverNotNeeded, "the new profile has no GPU"
	}
	kinds := []gpu.Kind{to.GPU.Kind}
	if to.GPU.Kind == gpu.KindAny {
		kinds = to.GPU.Kinds
	}
	var names []string
	for _, k := range kinds {
		if k == gpu.KindVGPU || k == gpu.KindMIG {
			names = append(names, string(k)) // a backend is named after its kind
		}
	}
	if len(names) == 0 {
		return api.DriverNotNeeded, "a whole GPU passed through runs the data-center driver of any branch: no vGPU manager to match"
	}
	var img *config.Image
	if from != nil && from.Disk != nil {
		img = set.Images[from.Disk.Image]
	}
	if img == nil || img.GuestDriver == "" {
		return api.DriverUnknown, "the VM's image declares no NVIDIA guest driver (image.guest_driver): whether it suits the host's vGPU manager is not known"
	}
	invs, _ := lc.backends.currentInventoriesOf(ctx, names)
	if len(invs) == 0 {
		return api.DriverUnknown, fmt.Sprintf("no %s backend answered: the guest driver %s is not checked", strings.Join(names, " or "), img.GuestDriver)
	}
	host := mergedInventory(invs).Driver
	m := gpu.CheckGuestDriver(img.GuestDriver, host)
	switch {
	case !m.Checked:
		return api.DriverUnknown, fmt.Sprintf("the host reports no vGPU manager range: the guest driver %s of image %s is not checked", img.GuestDriver, img.Name)
	case !m.Supported:
		return api.DriverMismatch, m.Reason + guestDriverAdvice
	}
	return api.DriverOK, fmt.Sprintf("image %s's guest driver %s is of a vGPU release the host's vGPU manager %s accepts", img.Name, img.GuestDriver, host.Version)
}

// QueueResize checks a resize as PlanResize does and, when it is allowed,
// queues its operation: the VM's spec names the target (resize_to) and a
// vm.action event says who asked, in one transaction with the operation. A
// VM with an unfinished operation, or changed meanwhile, is a conflict.
func (o *Orchestrator) QueueResize(ctx context.Context, vm *store.VM, target string, by ResizeBy) (api.ResizePlan, *store.Operation, *store.VM, error) {
	plan, err := o.PlanResize(ctx, vm, target, by)
	if err != nil {
		return plan, nil, nil, err
	}
	spec, err := store.SpecWithKeys(vm.Spec, map[string]string{specResizeTo: target})
	if err != nil {
		return plan, nil, nil, err
	}
	op := &store.Operation{VMID: vm.ID, Kind: store.OpResize, RequestedBy: by.Name}
	var next *store.VM
	err = o.life.st.Tx(ctx, func(tx *store.Store) error {
		ops, err := tx.ListOperations(ctx, vm.ID)
		if err != nil {
			return err
		}
		for i := range ops {
			if !ops[i].Finished() {
				return refuse(RefuseConflict, "", "VM %q has an unfinished %s operation (%s): wait for it", vm.Name, ops[i].Kind, ops[i].ID)
			}
		}
		if next, err = tx.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: vm.State, Phase: vm.Phase, StateReason: vm.StateReason, Spec: &spec}); err != nil {
			return err
		}
		if err := tx.CreateOperation(ctx, op); err != nil {
			return err
		}
		p, _ := json.Marshal(api.VMActionPayload{Action: api.ActionResize, OperationID: op.ID, RequestedBy: by.Name})
		return tx.AppendEvent(ctx, &store.Event{VMID: vm.ID, Owner: vm.Owner, Type: api.EventVMAction, Payload: p})
	})
	if errors.Is(err, store.ErrConflict) && !isRefusal(err) {
		return plan, nil, nil, refuse(RefuseConflict, "", "VM %q changed while its resize was being queued: try again", vm.Name)
	}
	if err != nil {
		return plan, nil, nil, err
	}
	o.disp.wake()
	return plan, op, next, nil
}

func isRefusal(err error) bool {
	var r *ResizeRefusal
	return errors.As(err, &r)
}

// runResize carries a resize out (see the top of this file), resuming
// from where it is: a VM whose spec no longer names a target was resized
// (or the resize given up) by an earlier run.
func (lc *lifecycle) runResize(ctx context.Context, vm *store.VM, op *store.Operation) error {
	vm, op, done, err := lc.fresh(ctx, vm, op)
	if err != nil || done {
		return err
	}
	target, _ := ResizeOfSpec(vm.Spec)
	if target == "" {
		lc.finishAction(ctx, vm, op, nil) // an interrupted resize that got this far
		return nil
	}
	to := lc.profile(target)
	rz, ok := lc.hv.(DomainResizer)
	switch {
	case vm.State != store.VMStopped:
		return lc.resizeFailed(ctx, vm, op, fmt.Errorf("the VM is %s, not stopped", vm.State))
	case to == nil:
		return lc.resizeFailed(ctx, vm, op, fmt.Errorf("profile %q no longer exists", target))
	case !ok:
		return lc.resizeFailed(ctx, vm, op, errors.New("this server's hypervisor cannot resize a domain"))
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepResize); err != nil {
		return err
	}
	if err := rz.ResizeDomain(ctx, vm.ID, to.VCPUs, to.Memory); err != nil {
		switch {
		case interrupted(ctx, err), hypervisor.IsDisconnected(err):
			return err // the next round tries again
		case hypervisor.IsNotFound(err):
			return lc.resizeFailed(ctx, vm, op, fmt.Errorf("its domain is gone: %w", err))
		}
		return lc.resizeFailed(ctx, vm, op, fmt.Errorf("redefine the domain: %w", err))
	}
	if err := lc.hook(vm.ID, HookResized); err != nil {
		return err
	}
	// Devices kept from before stops gave them back: the domain lists
	// them no more, so they go now (the old devices go once the domain is
	// made for the new ones).
	if allocs, err := liveAllocations(ctx, lc.st, vm.ID); err != nil {
		return err
	} else if len(allocs) > 0 {
		if err := lc.giveBack(ctx, vm.ID); err != nil {
			return fmt.Errorf("resize vm %s: %w", vm.ID, err)
		}
	}
	spec, err := store.SpecWithKeys(vm.Spec, map[string]string{specResizeTo: "", specPreviousProfile: vm.Profile})
	if err != nil {
		return lc.resizeFailed(ctx, vm, op, err)
	}
	reason := fmt.Sprintf("resized from profile %s to %s by %s", vm.Profile, target, op.RequestedBy)
	next, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMStopped, Phase: vm.Phase, StateReason: reason, Spec: &spec, Profile: &target})
	if err != nil {
		return err
	}
	lc.log.Info("VM resized", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "from", vm.Profile, "to", target, "vcpus", to.VCPUs, "memory", to.Memory)
	lc.finishAction(ctx, next, op, nil)
	return nil
}

// resizeFailed fails a resize that changed nothing: the VM's spec no
// longer names the target, and everything else is as it was.
func (lc *lifecycle) resizeFailed(ctx context.Context, vm *store.VM, op *store.Operation, cause error) error {
	for range 5 {
		cur, err := lc.st.GetVM(ctx, vm.ID)
		if err != nil {
			return err
		}
		spec, err := store.SpecWithKeys(cur.Spec, map[string]string{specResizeTo: ""})
		if err != nil {
			spec = cur.Spec
		}
		_, err = lc.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: cur.State, Phase: cur.Phase, StateReason: cur.StateReason, Spec: &spec})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		lc.log.Warn("VM resize failed; the VM is as it was", "vm", vm.ID, "name", vm.Name, "err", cause)
		lc.finishAction(ctx, vm, op, cause)
		return nil
	}
	return fmt.Errorf("resize vm %s failed (%w), and the VM changed five times while that was recorded", vm.ID, cause)
}
