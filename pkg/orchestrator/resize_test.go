package orchestrator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/licensing"
	"github.com/gpuvm/gpuvm/pkg/store"
)

const resizeProfiles = `
profile "rz-1g" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
}
profile "rz-whole" {
  vcpus  = 2
  memory = "1GiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind  = "passthrough"
    model = "H100"
  }
}
profile "rz-bobs" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  users  = ["bob"]
}
policy {
  timezone = "UTC"
  user "bob" {
    quota { gpus = 0 }
  }
}
`

// resizeHV fails ResizeDomain when told to.
type resizeHV struct {
	Hypervisor
	conn *faultyHV
	mu   sync.Mutex
	err  error
}

func (h *resizeHV) ResizeDomain(ctx context.Context, uuid string, vcpus int, memory uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return h.err
	}
	return h.conn.Conn.ResizeDomain(ctx, uuid, vcpus, memory)
}

// domainXML is a VM's persistent definition.
func (e *env) domainXML(vmID string) (string, *libvirtxml.Domain) {
	e.t.Helper()
	x, err := e.hv.XML(context.Background(), vmID, false)
	if err != nil {
		e.t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		e.t.Fatal(err)
	}
	return x, &d
}

// stoppedVM makes a VM of prof and stops it.
func (e *env) stoppedVM(o *Orchestrator, owner, prof, name string) *store.VM {
	e.t.Helper()
	ctx := context.Background()
	vm, _ := e.submit(owner, prof, name)
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMRunning, "")
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	return e.wantVM(vm.ID, store.VMStopped, "")
}

func (e *env) resize(o *Orchestrator, vm *store.VM, target string) *store.Operation {
	e.t.Helper()
	_, op, _, err := o.QueueResize(context.Background(), e.vm(vm.ID), target, ResizeBy{Name: vm.Owner})
	if err != nil {
		e.t.Fatalf("resize %s to %s: %v", vm.Name, target, err)
	}
	o.Drain(context.Background())
	return op
}

// A MIG 1g.10gb VM moves to a whole GPU and back: each resize redefines
// the stopped domain with the profile's vCPUs and memory and no GPU, the
// next start gives it the new kind's device, and the VM records the
// profile it had.
func TestResizeMIGToWholeGPUAndBack(t *testing.T) {
	e := newEnv(t, "h100x8")
	e.withPolicy(resizeProfiles)
	ctx := context.Background()
	o := e.orchWith(&resizeHV{Hypervisor: e.hv, conn: &faultyHV{Conn: e.hv}})
	vm := e.stoppedVM(o, "ann", "rz-1g", "vm1")

	plan, err := o.PlanResize(ctx, vm, "rz-whole", ResizeBy{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if plan.From.Kind != "mig" || plan.From.GPU != "1g.10gb" || plan.To.Kind != "passthrough" || plan.To.VCPUs != 2 || plan.To.Memory != 1<<30 {
		t.Errorf("plan sides %+v -> %+v", plan.From, plan.To)
	}
	if len(plan.From.Licences) != 1 || plan.From.Licences[0].Products[0] != licensing.ProductAIEnterprise {
		t.Errorf("a MIG slice's licence: %+v", plan.From.Licences)
	}
	if len(plan.To.Licences) != 1 || len(plan.To.Licences[0].Products) != 0 || plan.To.Licences[0].Driver != licensing.DriverDataCenter {
		t.Errorf("a whole GPU's licence: %+v", plan.To.Licences)
	}
	if plan.Driver != api.DriverNotNeeded || !strings.Contains(plan.Snapshot, "gpuvm snapshot vm1 --label before-resize") {
		t.Errorf("plan driver %q %q, snapshot %q", plan.Driver, plan.DriverDetail, plan.Snapshot)
	}
	if got := e.vm(vm.ID); got.Version != vm.Version || got.Profile != "rz-1g" {
		t.Errorf("a plan changed the VM: %+v", got)
	}

	op := e.resize(o, vm, "rz-whole")
	e.wantOp(op.ID, store.OpDone, "")
	got := e.wantVM(vm.ID, store.VMStopped, "resized from profile rz-1g to rz-whole by ann")
	if to, prev := ResizeOfSpec(got.Spec); got.Profile != "rz-whole" || to != "" || prev != "rz-1g" {
		t.Errorf("after the resize: profile %s, spec %s", got.Profile, got.Spec)
	}
	_, d := e.domainXML(vm.ID)
	if d.VCPU.Value != 2 || d.Memory.Value != 1<<20 || (d.Devices != nil && len(d.Devices.Hostdevs) != 0) {
		t.Errorf("resized domain: vcpu %+v memory %+v hostdevs %+v", d.VCPU, d.Memory, d.Devices.Hostdevs)
	}
	e.wantGPUGivenBack(vm.ID)

	start := e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMRunning, "")
	if x, _ := e.domainXML(vm.ID); !strings.Contains(x, "managed='yes'") {
		t.Errorf("the whole GPU is not passed through:\n%s", x)
	}
	e.wantDomainOnDevices(vm.ID)
	if allocs, _ := liveAllocations(ctx, o.life.st, vm.ID); len(allocs) != 1 || allocs[0].Kind != "passthrough" {
		t.Errorf("allocations on the whole GPU: %+v", allocs)
	}

	// And back, to the profile it had.
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	_, prev := ResizeOfSpec(e.vm(vm.ID).Spec)
	back := e.resize(o, vm, prev)
	e.wantOp(back.ID, store.OpDone, "")
	got = e.wantVM(vm.ID, store.VMStopped, "resized from profile rz-whole to rz-1g")
	if _, p := ResizeOfSpec(got.Spec); got.Profile != "rz-1g" || p != "rz-whole" {
		t.Errorf("back: profile %s, spec %s", got.Profile, got.Spec)
	}
	start = e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	e.wantDomainOnDevices(vm.ID)
	if allocs, _ := liveAllocations(ctx, o.life.st, vm.ID); len(allocs) != 1 || allocs[0].Kind != "mig" || allocs[0].Profile != "1g.10gb" {
		t.Errorf("allocations back on MIG: %+v", allocs)
	}
	if _, d := e.domainXML(vm.ID); d.VCPU.Value != 1 || d.Memory.Value != 512<<10 {
		t.Errorf("domain back: vcpu %+v memory %+v", d.VCPU, d.Memory)
	}
	want := "stop done,resize ,resize done,start done,stop done,resize ,resize done,start done"
	if got := strings.Join(e.actionResults(vm.ID), ","); !strings.Contains(got, want) {
		t.Errorf("vm.action events %q, want them to end %q", got, want)
	}
}

// A resize is refused, naming why, and nothing changes: a running VM, an
// unknown profile, one not open to the owner, one past a quota, hostile
// names.
func TestResizeRefused(t *testing.T) {
	e := newEnv(t, "h100x8")
	e.withPolicy(resizeProfiles)
	ctx := context.Background()
	o := e.orch(nil)
	running, _ := e.submit("bob", "rz-1g", "up")
	o.Drain(ctx)
	e.wantVM(running.ID, store.VMRunning, "")
	stopped := e.stoppedVM(o, "ann", "rz-1g", "down")
	bobs := e.stoppedVM(o, "bob", "nogpu", "bobs")
	for _, tc := range []struct {
		vm                   *store.VM
		target               string
		kind, field, message string
	}{
		{running, "rz-whole", RefuseConflict, "", `VM "up" is running: only a stopped VM can be resized`},
		{stopped, "no-such", RefuseNotFound, "profile", `unknown profile "no-such"`},
		{stopped, "rz-1g", RefuseInvalid, "profile", "already has profile"},
		{stopped, "rz-bobs", RefuseNotFound, "profile", `unknown profile "rz-bobs"`}, // as at a create
		{bobs, "rz-whole", RefusePolicy, "profile", "quota: user bob: asks for 1 whole GPUs; the limit is 0 at once"},
		{stopped, "", RefuseInvalid, "profile", "name the profile"},
		{stopped, "h100\x00whole", RefuseInvalid, "profile", "no control characters"},
		{stopped, strings.Repeat("p", 1<<20), RefuseInvalid, "profile", "at most 200 characters"},
		{stopped, "\xff\xfe", RefuseInvalid, "profile", "no control characters"},
	} {
		before := e.vm(tc.vm.ID)
		_, op, _, err := o.QueueResize(ctx, before, tc.target, ResizeBy{Name: tc.vm.Owner})
		var r *ResizeRefusal
		if !errors.As(err, &r) || r.Kind != tc.kind || r.Field != tc.field || !strings.Contains(r.Detail, tc.message) || op != nil {
			t.Errorf("%s to %.20q: %v (%+v), want %s %s %q", tc.vm.Name, tc.target, err, r, tc.kind, tc.field, tc.message)
		}
		if after := e.vm(tc.vm.ID); after.Version != before.Version || after.Profile != before.Profile || after.Spec != before.Spec {
			t.Errorf("%s to %.20q: the refusal changed the VM: %+v", tc.vm.Name, tc.target, after)
		}
		if ops, _ := e.st.ListOperations(ctx, tc.vm.ID); ops[len(ops)-1].Kind == store.OpResize {
			t.Errorf("%s: a refused resize left an operation", tc.vm.Name)
		}
	}
	// An admin may move a VM to a profile not open to its owner.
	if _, err := o.PlanResize(ctx, stopped, "rz-bobs", ResizeBy{Name: "root", Admin: true}); err != nil {
		t.Errorf("an admin's resize: %v", err)
	}
	// A second resize while one is queued is a conflict.
	if _, _, _, err := o.QueueResize(ctx, stopped, "rz-whole", ResizeBy{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := o.QueueResize(ctx, e.vm(stopped.ID), "nogpu", ResizeBy{Name: "ann"}); !strings.Contains(fmtErr(err), "unfinished resize operation") {
		t.Errorf("a second resize: %v", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// A resize whose domain cannot be redefined fails and leaves everything as
// it was: the VM's profile and spec, its allocations, its domain's XML. The
// same resize, tried again, succeeds.
func TestResizeFailureLeavesTheVMAsItWas(t *testing.T) {
	e := newEnv(t, "h100x8")
	e.withPolicy(resizeProfiles)
	ctx := context.Background()
	hv := &resizeHV{Hypervisor: e.hv, conn: &faultyHV{Conn: e.hv}, err: errors.New("libvirt said no")}
	o := e.orchWith(hv)
	vm := e.stoppedVM(o, "ann", "rz-1g", "vm1")
	before := e.vm(vm.ID)
	xmlBefore, _ := e.domainXML(vm.ID)
	allocsBefore, _ := e.st.ListAllocations(ctx, vm.ID)

	op := e.resize(o, vm, "rz-whole")
	e.wantOp(op.ID, store.OpFailed, "redefine the domain: libvirt said no")
	after := e.vm(vm.ID)
	if after.Profile != before.Profile || after.Spec != before.Spec || after.State != before.State || after.StateReason != before.StateReason {
		t.Errorf("after a failed resize: %+v\nwas %+v", after, before)
	}
	if x, _ := e.domainXML(vm.ID); x != xmlBefore {
		t.Errorf("the domain changed:\n%s\nwas\n%s", x, xmlBefore)
	}
	if allocs, _ := e.st.ListAllocations(ctx, vm.ID); len(allocs) != len(allocsBefore) {
		t.Errorf("allocations %+v, were %+v", allocs, allocsBefore)
	}
	if got := e.actionResults(vm.ID); got[len(got)-1] != "resize failed" {
		t.Errorf("vm.action events %q", got)
	}

	hv.mu.Lock()
	hv.err = nil
	hv.mu.Unlock()
	op = e.resize(o, vm, "rz-whole")
	e.wantOp(op.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMStopped, "resized from profile rz-1g to rz-whole")
}

// A resize interrupted after the domain was redefined finishes on the next
// round: the redefinition is not repeated, the profile is recorded once.
func TestResizeInterrupted(t *testing.T) {
	e := newEnv(t, "h100x8")
	e.withPolicy(resizeProfiles)
	ctx := context.Background()
	o := e.orchWith(&resizeHV{Hypervisor: e.hv, conn: &faultyHV{Conn: e.hv}})
	vm := e.stoppedVM(o, "ann", "rz-1g", "vm1")
	crash := New(Config{Store: e.st, Backends: e.l, Hypervisor: &resizeHV{Hypervisor: e.hv, conn: &faultyHV{Conn: e.hv}},
		Profiles: func() *config.Config { return e.cfg }, Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log},
		WithHook(func(_, point string) error {
			if point == HookResized {
				return errCrash
			}
			return nil
		}))
	_, op, _, err := crash.QueueResize(ctx, vm, "rz-whole", ResizeBy{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	crash.Drain(ctx)
	if got := e.op(op.ID); got.Finished() || got.Step != StepResize {
		t.Fatalf("interrupted resize: %+v", got)
	}
	if got := e.vm(vm.ID); got.Profile != "rz-1g" {
		t.Fatalf("profile changed before the resize finished: %s", got.Profile)
	}
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMStopped, "resized from profile rz-1g to rz-whole")
}

// keepsDisk refuses another image or a smaller disk, naming the field.
func TestResizeKeepsTheDisk(t *testing.T) {
	vm := &store.VM{Name: "vm1", Profile: "a"}
	p := func(img string, size uint64) *config.Profile {
		return &config.Profile{Name: "b", Disk: &config.Disk{Image: img, Size: size}}
	}
	for _, tc := range []struct {
		from, to *config.Profile
		want     string
	}{
		{p("cuda", 20<<30), p("cuda", 20<<30), `kept: the VM's disk on image "cuda"`},
		{p("cuda", 20<<30), p("cuda", 40<<30), `kept`},
		{p("cuda", 20<<30), p("cuda", 10<<30), "disk.size 10737418240 bytes, smaller"},
		{p("cuda", 20<<30), p("plain", 20<<30), `disk.image "plain"`},
		{nil, p("plain", 1), "no longer configured"},
	} {
		got, r := keepsDisk(vm, tc.from, tc.to)
		if r != nil {
			if r.Field != "profile" || r.Kind != RefuseInvalid {
				t.Errorf("refusal %+v", r)
			}
			got = r.Detail
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("keepsDisk: %q, want %q", got, tc.want)
		}
	}
}
