package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/test/internal/daemon"
)

// crashProfiles is one VM with a GPU and a disk overlay, so that a create
// makes a device on the simulated host, a volume and a domain in libvirt.
const crashProfiles = `
image "base" {
  path     = %q
  format   = "raw"
  firmware = "bios"
}

profile "seat" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  disk { image = "base" }
  gpu {
    kind    = %q
    %s = %q
  }
}
`

// crashStep is a point where gpuvmd is killed, and what is true there.
type crashStep struct {
	point string
	// action is the operation the point is a step of: a create (""), or a
	// delete, stop, start or reboot of the running VM (a start's of the VM
	// once stopped).
	action string
	// At the pause: the VM's state, whether the backend has made its
	// device, whether libvirt has its domain.
	state          string
	device, domain bool
}

// The actions a crash step may be a step of, besides the create, and the
// state a stop leaves.
const (
	stateStopped = "stopped"

	actionDelete = "delete"
	actionStop   = "stop"
	actionStart  = "start"
	actionReboot = "reboot"
)

var crashSteps = []crashStep{
	{point: orchestrator.HookClaimed, state: "allocating"},
	{point: orchestrator.HookDeviceCreated, state: "allocating", device: true},
	{point: orchestrator.HookDeviceRecorded, state: "allocating", device: true},
	{point: orchestrator.HookDiskPrepared, state: "creating", device: true},
	{point: orchestrator.HookDomainCreated, state: "creating", device: true, domain: true},
	{point: orchestrator.HookRunning, state: "running", device: true, domain: true},
	{point: orchestrator.HookDomainDeleted, action: actionDelete, state: "deleting", device: true},
	{point: orchestrator.HookDevicesRemoved, action: actionDelete, state: "deleting"},
	// A stop gives the GPU back and keeps the domain.
	{point: orchestrator.HookStopping, action: actionStop, state: "stopping", device: true, domain: true},
	{point: orchestrator.HookDomainStopped, action: actionStop, state: "stopping", device: true, domain: true},
	{point: orchestrator.HookGPURemoved, action: actionStop, state: "stopping", domain: true},
	{point: orchestrator.HookGPUReleased, action: actionStop, state: "stopping", domain: true},
	// A start queues the VM, and makes a device once it is placed.
	{point: orchestrator.HookStartQueued, action: actionStart, state: "queued", domain: true},
	{point: orchestrator.HookDevicesReady, action: actionStart, state: "allocating", device: true, domain: true},
	{point: orchestrator.HookDevicesAttached, action: actionStart, state: "allocating", device: true, domain: true},
	{point: orchestrator.HookDomainStarted, action: actionStart, state: "allocating", device: true, domain: true},
	{point: orchestrator.HookRebootRequested, action: actionReboot, state: "running", device: true, domain: true},
}

// Every hook point of the orchestrator is in the table: a new step gets a
// crash test or this fails.
func TestCrashStepsCoverEveryHook(t *testing.T) {
	var got []string
	want := orchestrator.HookPoints()
	for _, s := range crashSteps {
		got = append(got, s.point)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("crash steps %q, hook points %q", got, want)
	}
}

// gpuvmd is SIGKILLed (with its backend plugins) at each step of a create,
// a delete, a stop, a start and a reboot, on a simulated h100x8 host with
// libvirt's test driver hosted by libvirtd, whose domains and volumes
// outlive gpuvmd. A fresh gpuvmd on the same state directory and database
// must take the VM to the end the user asked for (create, start, reboot:
// running, its domain on its devices; delete: deleted; stop: stopped, its
// GPU given back and its domain and disk kept) with nothing leaked and no
// slot given twice; a VM left is then deleted normally, which must leave
// the simulated host and libvirt exactly as before. The kind of GPU
// alternates between a MIG instance and a vGPU. Steps run in parallel,
// each with its own gpuvmd, state directory and domain prefix.
func TestCrashAtEachHook(t *testing.T) {
	hv := libvirt(t, testDriverURI)
	base := filepath.Join(t.TempDir(), "base.raw")
	if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	gpus := []struct{ kind, key, value string }{
		{"mig", "profile", "3g.40gb"},
		{"vgpu", "type", "H100-4C"},
	}
	for i, step := range crashSteps {
		gpu := gpus[i%len(gpus)]
		name := cmp.Or(step.action, "create")
		t.Run(name+"/"+strings.ReplaceAll(step.point, " ", "_"), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, worldConfig{preset: "h100x8", uri: testDriverURI, pool: testDriverPool,
				profiles: fmt.Sprintf(crashProfiles, base, gpu.kind, gpu.key, gpu.value)})
			w.start("GPUVM_TEST_PAUSE_AT=" + step.point)
			hostBefore, lvBefore := w.simHost(), w.libvirtState(hv)

			resp, err := w.cl.CreateVM(w.ctx(30*time.Second), api.CreateVMRequest{Profile: "seat", Name: "crash"}, "")
			if err != nil {
				t.Fatal(err)
			}
			vm := resp.VM
			opID := resp.Operation.ID
			if step.action != "" {
				w.waitState(vm.ID, client.StateRunning, time.Minute)
				w.waitOperation(opID, time.Minute)
				opID = w.act(step.action, vm.ID)
			}
			w.waitPaused(step.point, vm.ID)
			w.checkPaused(hv, step, vm.ID)
			killed := time.Now()
			w.kill()

			w.start()
			ready := time.Since(killed)
			w.waitOperation(opID, time.Minute)
			switch step.action {
			case actionDelete:
				w.waitState(vm.ID, client.StateDeleted, time.Minute)
			case actionStop:
				w.waitState(vm.ID, stateStopped, time.Minute)
				w.checkStopped(hv, vm.ID)
			default:
				running := w.waitState(vm.ID, client.StateRunning, time.Minute)
				w.checkHost(hv, map[string]api.VM{vm.ID: running}, true)
				if live := w.checkSlots(); len(live) != 1 {
					t.Errorf("%d live allocations after the restart, want 1: %+v", len(live), live)
				}
			}
			recovered := time.Since(killed)
			if step.action != actionDelete {
				w.deleteVM(vm.ID)
			}
			w.sameHost(hostBefore, w.simHost())
			w.sameLibvirt(lvBefore, w.libvirtState(hv))
			if live := w.checkSlots(); len(live) != 0 {
				t.Errorf("%d live allocations once the VM is deleted: %+v", len(live), live)
			}
			w.noErrors()
			t.Logf("killed at %q (%s): gpuvmd ready again %v after the kill, VM %s %v after it",
				step.point, gpu.kind, ready.Round(time.Millisecond), cmp.Or(map[string]string{actionDelete: "deleted", actionStop: "stopped"}[step.action], "running"),
				recovered.Round(time.Millisecond))
		})
	}
}

// act asks for an action on a running VM and returns its operation: a
// start stops the VM first.
func (w *world) act(action, vmID string) string {
	w.t.Helper()
	ctx := w.ctx(30 * time.Second)
	var resp *api.VMActionResponse
	var err error
	switch action {
	case actionDelete:
		op, err := w.cl.DeleteVM(ctx, vmID)
		if err != nil {
			w.t.Fatal(err)
		}
		return op.ID
	case actionStop:
		resp, err = w.cl.StopVM(ctx, vmID)
	case actionStart:
		w.waitOperation(w.act(actionStop, vmID), time.Minute)
		w.waitState(vmID, stateStopped, time.Minute)
		resp, err = w.cl.StartVM(ctx, vmID)
	case actionReboot:
		resp, err = w.cl.RebootVM(ctx, vmID)
	default:
		w.t.Fatalf("unknown action %q", action)
	}
	if err != nil {
		w.t.Fatalf("%s VM %s: %v", action, vmID, err)
	}
	return resp.Operation.ID
}

// checkStopped checks a stopped VM: it has given its GPU back (no device,
// no live allocation) and kept its domain, shut off, with its volumes.
func (w *world) checkStopped(hv *hypervisor.Conn, vmID string) {
	w.t.Helper()
	if devs := devicesOf(w.inventory())[vmID]; len(devs) != 0 {
		w.t.Errorf("the stopped VM's devices are left: %+v", devs)
	}
	if live := w.checkSlots(); len(live) != 0 {
		w.t.Errorf("%d live allocations once the VM is stopped, want none: %+v", len(live), live)
	}
	ls := w.libvirtState(hv)
	var doms []hypervisor.Info
	for _, d := range ls.domains {
		if d.Metadata.VMID == vmID {
			doms = append(doms, d)
		}
	}
	if len(doms) != 1 || doms[0].State != hypervisor.StateShutoff || len(doms[0].Metadata.Volumes) == 0 {
		w.t.Errorf("the stopped VM's domains: %+v, want one, shut off, with its volumes", doms)
	}
	for _, d := range doms {
		for _, v := range d.Metadata.Volumes {
			if v.Pool == w.pool && !slices.Contains(ls.volumes, v.Name) {
				w.t.Errorf("the stopped VM's volume %s is gone", v.Name)
			}
		}
	}
}

// waitPaused waits for gpuvmd's line that says it paused at point for vm.
func (w *world) waitPaused(point, vmID string) {
	w.t.Helper()
	re := regexp.MustCompile(`GPUVM_TEST_PAUSE_AT: paused.* point="?` + regexp.QuoteMeta(point) + `"? vm=` + regexp.QuoteMeta(vmID))
	if _, err := w.proc.WaitLog(w.ctx(time.Minute), re); err != nil {
		w.t.Fatalf("gpuvmd did not pause at %q: %v", point, err)
	}
}

// checkPaused checks that the work stopped where the step says: the VM's
// state, whether its device and its domain exist.
func (w *world) checkPaused(hv *hypervisor.Conn, step crashStep, vmID string) {
	w.t.Helper()
	vm, err := w.cl.GetVM(w.ctx(30*time.Second), vmID)
	if err != nil {
		w.t.Fatal(err)
	}
	if vm.State != step.state {
		w.t.Errorf("paused at %q: the VM is %s, want %s", step.point, vm.State, step.state)
	}
	if devs := devicesOf(w.inventory())[vmID]; (len(devs) > 0) != step.device {
		w.t.Errorf("paused at %q: the backends report devices %+v for the VM; want a device: %v", step.point, devs, step.device)
	}
	domain := false
	for _, d := range w.libvirtState(hv).domains {
		domain = domain || d.Metadata.VMID == vmID
	}
	if domain != step.domain {
		w.t.Errorf("paused at %q: libvirt has a domain for the VM: %v, want %v", step.point, domain, step.domain)
	}
}

// The test seams refuse what they cannot honour: gpuvmd does not start on
// an unknown hook point or a domain prefix libvirt would refuse.
func TestSeamsRefuseBadValues(t *testing.T) {
	for _, c := range []struct{ env, want string }{
		{"GPUVM_TEST_PAUSE_AT=device made", `"device made" is not a hook point`},
		{"GPUVM_TEST_DOMAIN_PREFIX=Bad/Prefix", `"Bad/Prefix": a domain prefix is a lower-case letter`},
		{"GPUVM_TEST_DISK_DIR=relative/dir", `"relative/dir": want an absolute directory`},
	} {
		t.Run(strings.SplitN(c.env, "=", 2)[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, err := daemon.Start(ctx, daemon.Config{
				Args: []string{"--state-dir", t.TempDir(), "--libvirt-uri", "test:///default", "--simulate", "l40sx4"},
				Env:  []string{c.env},
			})
			if err == nil {
				p.Stop(30 * time.Second)
				t.Fatalf("gpuvmd started with %s", c.env)
			}
			if !errors.Is(err, daemon.ErrExited) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("gpuvmd with %s: %v; want it to exit saying %q", c.env, err, c.want)
			}
		})
	}
}
