package orchestrator

import (
	"context"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
)

const taskInProfiles = `
template "in" {
  content = <<EOT
#cloud-config
users:
  - name: ${user}
EOT
}
profile "in-1g" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  cloud_init { template = "in" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
}
profile "in-whole" {
  vcpus  = 2
  memory = "1GiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  cloud_init { template = "in" }
  gpu {
    kind  = "passthrough"
    model = "H100"
  }
}
`

// taskInHV resizes and readies domains for tasks.
type taskInHV struct{ *resizeHV }

func (h taskInHV) PrepareTask(ctx context.Context, uuid, pool string, seed *cloudinit.Config) error {
	return h.conn.Conn.PrepareTask(ctx, uuid, pool, seed)
}

// hasTaskChannel reports whether a VM's domain is defined with the task
// channel.
func (e *env) hasTaskChannel(vmID string) bool {
	e.t.Helper()
	_, d := e.domainXML(vmID)
	if d.Devices == nil {
		return false
	}
	for _, c := range d.Devices.Channels {
		if c.Target != nil && c.Target.VirtIO != nil && c.Target.VirtIO.Name == domain.TaskChannelName {
			return true
		}
	}
	return false
}

// A task run in its owner's stopped MIG 1g.10gb VM (--in): the VM is
// resized to the task's whole-GPU profile, started with the task channel
// and the whole GPU passed through, stopped, resized back; afterwards it
// is stopped with its own profile and domain size, no task channel, and
// the same disk.
func TestTaskInOwnVMWholeGPUForTheNight(t *testing.T) {
	e := newEnv(t, "h100x8")
	e.withPolicy(taskInProfiles)
	e.cfg.Server.Libvirt.StoragePool = "default-pool" // the test driver's pool: the seed is made, not stored
	ctx := context.Background()
	o := e.orchWith(taskInHV{&resizeHV{Hypervisor: e.hv, conn: &faultyHV{Conn: e.hv}}})
	vm := e.stoppedVM(o, "ann", "in-1g", "desk")
	_, before := e.domainXML(vm.ID)
	if e.hasTaskChannel(vm.ID) {
		t.Fatal("a desktop VM has a task channel before any task")
	}

	tk := &store.Task{ID: "0193b000-0000-7000-8000-000000000001", Owner: "ann", Profile: "in-whole", Command: `["nvidia-smi"]`,
		TimeLimitS: 3600, KillWaitS: 30, InProfile: "in-1g"}
	spec, err := store.SpecWithKeys(vm.Spec, map[string]string{store.SpecTask: tk.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.CreateTaskIn(ctx, tk, e.vm(vm.ID), spec, "runs task "+tk.ID); err != nil {
		t.Fatal(err)
	}
	e.resize(o, e.vm(vm.ID), "in-whole")
	start := e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMRunning, "")
	x, d := e.domainXML(vm.ID)
	if !strings.Contains(x, "managed='yes'") || d.VCPU.Value != 2 {
		t.Errorf("during the task the domain has no whole GPU passed through, or not the task's size:\n%s", x)
	}
	if !e.hasTaskChannel(vm.ID) {
		t.Errorf("during the task the domain has no task channel:\n%s", x)
	}
	if allocs, _ := liveAllocations(ctx, o.life.st, vm.ID); len(allocs) != 1 || allocs[0].Kind != "passthrough" {
		t.Errorf("allocations during the task: %+v", allocs)
	}

	// The task ends: stop, resize back, the spec no longer names it.
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMStopped, "")
	back := e.resize(o, e.vm(vm.ID), "in-1g")
	e.wantOp(back.ID, store.OpDone, "")
	cur := e.vm(vm.ID)
	spec, err = store.SpecWithKeys(cur.Spec, map[string]string{store.SpecTask: ""})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: cur.State, Phase: cur.Phase, StateReason: cur.StateReason, Spec: &spec}); err != nil {
		t.Fatal(err)
	}
	got := e.wantVM(vm.ID, store.VMStopped, "resized from profile in-whole to in-1g")
	if got.Profile != "in-1g" || store.TaskOfSpec(got.Spec) != "" {
		t.Errorf("after the task: profile %s, spec %s", got.Profile, got.Spec)
	}
	_, after := e.domainXML(vm.ID)
	if after.VCPU.Value != before.VCPU.Value || after.Memory.Value != before.Memory.Value || len(after.Devices.Hostdevs) != 0 {
		t.Errorf("after the task the domain is vcpu %+v memory %+v hostdevs %d, want vcpu %+v memory %+v and none",
			after.VCPU, after.Memory, len(after.Devices.Hostdevs), before.VCPU, before.Memory)
	}
	if diskSources(before) != diskSources(after) {
		t.Errorf("the disks changed: %s, then %s", diskSources(before), diskSources(after))
	}
	e.wantGPUGivenBack(vm.ID)

	// The next morning's start is the desktop's: its MIG slice, no task
	// channel.
	start = e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	if e.hasTaskChannel(vm.ID) {
		t.Error("the desktop's start after the task kept the task channel")
	}
	if allocs, _ := liveAllocations(ctx, o.life.st, vm.ID); len(allocs) != 1 || allocs[0].Kind != "mig" || allocs[0].Profile != "1g.10gb" {
		t.Errorf("allocations after the task: %+v", allocs)
	}
}

// diskSources are a domain's disks' sources, in order.
func diskSources(d *libvirtxml.Domain) string {
	var out []string
	if d.Devices == nil {
		return ""
	}
	for _, k := range d.Devices.Disks {
		switch {
		case k.Source == nil:
			out = append(out, k.Device+":none")
		case k.Source.Volume != nil:
			out = append(out, k.Device+":"+k.Source.Volume.Pool+"/"+k.Source.Volume.Volume)
		case k.Source.File != nil:
			out = append(out, k.Device+":"+k.Source.File.File)
		default:
			out = append(out, k.Device+":other")
		}
	}
	return strings.Join(out, " ")
}

// A task in its owner's own VM cancelled while the VM's start waits in the
// queue (every GPU drained): the start is withdrawn, the VM stopped again
// with no GPU, and when the GPUs come back no round starts it; put back,
// its domain is the one it had before the task.
func TestTaskInWithdrawnWhileQueued(t *testing.T) {
	e := newEnv(t, "h100x8")
	e.withPolicy(taskInProfiles)
	e.cfg.Server.Libvirt.StoragePool = "default-pool"
	ctx := context.Background()
	o := e.orchWith(taskInHV{&resizeHV{Hypervisor: e.hv, conn: &faultyHV{Conn: e.hv}}})
	vm := e.stoppedVM(o, "ann", "in-1g", "desk")
	_, before := e.domainXML(vm.ID)

	tk := &store.Task{ID: "0193b000-0000-7000-8000-000000000002", Owner: "ann", Profile: "in-whole", Command: `["train"]`,
		TimeLimitS: 3600, KillWaitS: 30, InProfile: "in-1g"}
	spec, err := store.SpecWithKeys(vm.Spec, map[string]string{store.SpecTask: tk.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.CreateTaskIn(ctx, tk, e.vm(vm.ID), spec, "runs task "+tk.ID); err != nil {
		t.Fatal(err)
	}
	e.resize(o, e.vm(vm.ID), "in-whole")
	gpus := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}
	for _, gpu := range gpus {
		if err := e.st.DrainGPU(ctx, &store.GPUDrain{Host: "test-host", GPUAddress: gpu, Reason: "maintenance", DrainedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	resized, _ := e.domainXML(vm.ID)
	start := e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMQueued, "")

	ok, err := o.WithdrawStart(ctx, vm.ID, "task "+tk.ID+" was cancelled before it started")
	if err != nil || !ok {
		t.Fatalf("withdraw: %v %v", ok, err)
	}
	e.wantOp(start.ID, store.OpFailed, "withdrawn: task "+tk.ID+" was cancelled")
	if rs := e.actionResults(vm.ID); len(rs) == 0 || rs[len(rs)-1] != "start failed" {
		t.Errorf("vm.action events %q, want the last the start failed", rs)
	}
	e.wantVM(vm.ID, store.VMStopped, "was cancelled before it started")
	if ok, err := o.WithdrawStart(ctx, vm.ID, "again"); err != nil || ok {
		t.Errorf("a second withdraw: %v %v", ok, err)
	}
	for _, gpu := range gpus {
		if _, err := e.st.UndrainGPU(ctx, "test-host", gpu); err != nil {
			t.Fatal(err)
		}
	}
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMStopped, "")
	if e.domainState(vm.ID) == hypervisor.StateRunning {
		t.Fatal("the withdrawn start ran")
	}
	e.wantGPUGivenBack(vm.ID)
	if x, _ := e.domainXML(vm.ID); x != resized {
		t.Errorf("the withdrawn start changed the domain:\n%s\nthen\n%s", resized, x)
	}

	back := e.resize(o, e.vm(vm.ID), "in-1g")
	e.wantOp(back.ID, store.OpDone, "")
	if got := e.vm(vm.ID); got.Profile != "in-1g" || got.State != store.VMStopped {
		t.Errorf("after the put-back: %s %s", got.Profile, got.State)
	}
	_, after := e.domainXML(vm.ID)
	if after.VCPU.Value != before.VCPU.Value || after.Memory.Value != before.Memory.Value || diskSources(before) != diskSources(after) || e.hasTaskChannel(vm.ID) {
		t.Errorf("after the put-back the domain is vcpu %+v memory %+v disks %s, want vcpu %+v memory %+v disks %s, no task channel",
			after.VCPU, after.Memory, diskSources(after), before.VCPU, before.Memory, diskSources(before))
	}
}
