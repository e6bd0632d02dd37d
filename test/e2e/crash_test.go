package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
	point  string
	delete bool // a step of the delete (else of the create)
	// At the pause: the VM's state, whether the backend has made its
	// device, whether libvirt has its domain.
	state          string
	device, domain bool
}

var crashSteps = []crashStep{
	{point: orchestrator.HookClaimed, state: "allocating"},
	{point: orchestrator.HookDeviceCreated, state: "allocating", device: true},
	{point: orchestrator.HookDeviceRecorded, state: "allocating", device: true},
	{point: orchestrator.HookDiskPrepared, state: "creating", device: true},
	{point: orchestrator.HookDomainCreated, state: "creating", device: true, domain: true},
	{point: orchestrator.HookRunning, state: "running", device: true, domain: true},
	{point: orchestrator.HookDomainDeleted, delete: true, state: "deleting", device: true},
	{point: orchestrator.HookDevicesRemoved, delete: true, state: "deleting"},
}

// Every hook point of the orchestrator is in the table: a new step gets a
// crash test or this fails.
func TestCrashStepsCoverEveryHook(t *testing.T) {
	var want, got []string
	want = append(append(want, orchestrator.CreateHooks...), orchestrator.DeleteHooks...)
	for _, s := range crashSteps {
		got = append(got, s.point)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("crash steps %q, hook points %q", got, want)
	}
}

// gpuvmd is SIGKILLed (with its backend plugins) at each step of a create
// and of a delete, on a simulated h100x8 host with libvirt's test driver
// hosted by libvirtd, whose domains and volumes outlive gpuvmd. A fresh
// gpuvmd on the same state directory and database must take the VM to the
// end the user asked for (create: running; delete: deleted) with nothing
// leaked and no slot given twice; a created VM is then deleted normally,
// which must leave the simulated host and libvirt exactly as before. The
// kind of GPU alternates between a MIG instance and a vGPU. Steps run in
// parallel, each with its own gpuvmd, state directory and domain prefix.
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
		name := "create"
		if step.delete {
			name = "delete"
		}
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
			var deleteOp *api.Operation
			if step.delete {
				w.waitState(vm.ID, client.StateRunning, time.Minute)
				if deleteOp, err = w.cl.DeleteVM(w.ctx(30*time.Second), vm.ID); err != nil {
					t.Fatal(err)
				}
			}
			w.waitPaused(step.point, vm.ID)
			w.checkPaused(hv, step, vm.ID)
			killed := time.Now()
			w.kill()

			w.start()
			ready := time.Since(killed)
			if step.delete {
				w.waitOperation(deleteOp.ID, time.Minute)
				w.waitState(vm.ID, client.StateDeleted, time.Minute)
			} else {
				running := w.waitState(vm.ID, client.StateRunning, time.Minute)
				w.waitOperation(resp.Operation.ID, time.Minute)
				w.checkHost(hv, map[string]api.VM{vm.ID: running}, true)
				if live := w.checkSlots(); len(live) != 1 {
					t.Errorf("%d live allocations after the restart, want 1: %+v", len(live), live)
				}
			}
			recovered := time.Since(killed)
			if !step.delete {
				w.deleteVM(vm.ID)
			}
			w.sameHost(hostBefore, w.simHost())
			w.sameLibvirt(lvBefore, w.libvirtState(hv))
			if live := w.checkSlots(); len(live) != 0 {
				t.Errorf("%d live allocations once the VM is deleted: %+v", len(live), live)
			}
			w.noErrors()
			t.Logf("killed at %q (%s): gpuvmd ready again %v after the kill, VM %s %v after it",
				step.point, gpu.kind, ready.Round(time.Millisecond), map[bool]string{false: "running", true: "deleted"}[step.delete],
				recovered.Round(time.Millisecond))
		})
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
