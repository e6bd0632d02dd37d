package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
)

// What TestHomeFollowsThePerson's guests go through besides: a disk
// snapshot taken while the guest runs and restored once it is stopped, and
// the virtiofs daemon of a running guest killed.

// sysDisk is the guest's shell that sets $sys to its system disk: the
// virtio disk of the blank image's size (1 MiB, 2048 sectors), not the
// data disk.
const sysDisk = `sys=""; for d in /sys/block/vd*; do [ "$(cat $d/size)" = 2048 ] && sys=/dev/${d##*/}; done; echo sys=$sys; [ -n "$sys" ]`

// sysDiskWrite is the guest's shell that writes text at the start of the
// system disk and flushes it.
func sysDiskWrite(text string) string {
	return sysDisk + fmt.Sprintf(` && printf '%%s' %s | dd of=$sys bs=512 count=1 conv=sync 2>/dev/null && sync && echo wrote=yes`, text)
}

// sysDiskRead is the guest's shell that prints what the start of the
// system disk holds (read=).
const sysDiskRead = sysDisk + ` && echo read=$(dd if=$sys bs=512 count=1 2>/dev/null | tr -d '\000')`

// snapshotRestored: ann-2, running, writes on its system disk; ann takes a
// snapshot with her CLI (live: QEMU's internal snapshot through the
// monitor; crash-consistent, the tiny guest has no agent), writes over
// it, stops the VM, restores the snapshot and starts the VM again: the
// disk holds what it held at the snapshot. The data disk stays attached
// and the home mounted through it all.
func (w *world) snapshotRestored(sh *guestShell, ann homePerson, vmID string) (took, restored time.Duration) {
	w.t.Helper()
	before, after := "gpuvm-snap-"+randHex(8), "gpuvm-after-"+randHex(8)
	if got := sh.run(ann, "ann-2", sysDiskWrite(before)); got["wrote"] != "yes" {
		w.t.Fatalf("ann-2 wrote on its system disk (%q): %q", got["sys"], got["wrote"])
	}
	begin := time.Now()
	out, errOut, code := ann.cli.run("", "snapshot", "ann-2", "--label", "before", "--wait", "--json")
	took = time.Since(begin)
	if code != 0 {
		w.t.Fatalf("gpuvm snapshot ann-2 --label before --wait: exit %d\n%s%s", code, out, errOut)
	}
	var resp api.SnapshotResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		w.t.Fatalf("gpuvm snapshot --json: %v\n%s", err, out)
	}
	if s := resp.Snapshot; s.State != "ready" || s.Label != "before" || s.Consistency != "crash-consistent" {
		w.t.Errorf("the snapshot of the running ann-2: %+v; want it ready, labelled, crash-consistent (no guest agent)", s)
	}
	if got := sh.run(ann, "ann-2", sysDiskWrite(after)); got["wrote"] != "yes" {
		w.t.Fatalf("ann-2 wrote over the snapshot: %q", got["wrote"])
	}
	// A restore needs the VM stopped: refused while it runs.
	if out, errOut, code := ann.cli.run("", "snapshot", "restore", "ann-2", "before"); code == 0 || !strings.Contains(out+errOut, "stop") {
		w.t.Errorf("restore of the running ann-2: exit %d %s%s; want a refusal that says to stop it", code, out, errOut)
	}
	for _, args := range [][]string{{"stop", "ann-2", "--wait"}, {"snapshot", "restore", "ann-2", "before", "--wait"}, {"start", "ann-2", "--wait"}} {
		begin := time.Now()
		if out, errOut, code := ann.cli.run("", args...); code != 0 {
			w.t.Fatalf("gpuvm %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		if args[0] == "snapshot" {
			restored = time.Since(begin)
		}
	}
	w.waitReady(vmID, 3*time.Minute)
	got := sh.run(ann, "ann-2", sysDiskRead+" && echo mounted=$(awk '$2 == \""+homeMount+"\" { print $3 }' /proc/mounts)")
	if got["read"] != before {
		w.t.Errorf("after the restore ann-2's system disk holds %q, want what it held at the snapshot, %q (not %q)", got["read"], before, after)
	}
	if got["mounted"] != "virtiofs" {
		w.t.Errorf("after the stop, restore and start, %s is mounted as %q, want virtiofs", homeMount, got["mounted"])
	}
	return took, restored
}

// virtiofsdKilled kills the virtiofs daemon of bob's running VM (SIGKILL,
// as a crash would): within the watch's interval the VM says so in
// `gpuvm show`, still running, and bob's event stream has the warning;
// ann's VM beside it is untouched.
func (w *world) virtiofsdKilled(hv *hypervisor.Conn, bob homePerson, bobVM, annVM string) time.Duration {
	w.t.Helper()
	ctx := w.ctx(2 * time.Minute)
	dom := w.domainOf(hv, bobVM)
	id, err := hv.DomainID(ctx, dom.UUID)
	if err != nil || id <= 0 {
		w.t.Fatalf("domain id of %s: %d, %v", dom.Name, id, err)
	}
	daemons, err := homes.Daemons(homes.SystemDirs, id, dom.Name)
	if err != nil || len(daemons) == 0 || !daemons[0].Alive {
		w.t.Fatalf("the virtiofs daemons of %s: %+v, %v", dom.Name, daemons, err)
	}
	// QEMU's C virtiofsd forks into its sandbox: the process of the pid
	// file waits for a child that serves the guest (and dies with its
	// parent). The child is killed, as the kernel's OOM killer would pick
	// the process that holds the memory; the parent then ends too.
	d := daemons[0]
	victim := d.PID
	children, _ := exec.Command("ps", "-o", "pid=", "--ppid", fmt.Sprint(d.PID)).Output()
	if f := strings.Fields(string(children)); len(f) > 0 {
		fmt.Sscan(f[0], &victim)
	}
	w.t.Logf("%s's virtiofs daemon %s: pid %d (pid file), its children %q; killing %d", dom.Name, d.Alias, d.PID, strings.Fields(string(children)), victim)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		w.t.Fatal(err)
	}
	killed := time.Now()
	var vm *api.VM
	for {
		vm, err = bob.cl.GetVM(ctx, bobVM)
		if err == nil && strings.HasPrefix(vm.Reason, orchestrator.VirtiofsReasonPrefix) {
			break
		}
		if ctx.Err() != nil || time.Since(killed) > time.Minute {
			w.t.Fatalf("a minute after its virtiofs daemon was killed, bob-1 is %+v (%v)", vm, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	seen := time.Since(killed)
	if vm.State != client.StateRunning || !strings.Contains(vm.Reason, "gpuvm stop bob-1") {
		w.t.Errorf("bob-1 after its virtiofs daemon died: %s, %q", vm.State, vm.Reason)
	}
	if out, errOut, code := bob.cli.run("", "show", "bob-1"); code != 0 || !strings.Contains(out, "virtiofsd") {
		w.t.Errorf("gpuvm show bob-1: exit %d %s%s; want the reason naming virtiofsd", code, out, errOut)
	}
	stream, err := bob.cl.Events(ctx, client.EventsOptions{VM: bobVM, FromStart: true})
	if err != nil {
		w.t.Fatal(err)
	}
	defer stream.Close()
	for warned := false; !warned; {
		ev, err := stream.Next(ctx)
		if err != nil {
			w.t.Fatalf("bob's events: no vm.warning of kind virtiofs: %v", err)
		}
		var p api.VMWarningPayload
		warned = ev.Type == api.EventVMWarning && json.Unmarshal(ev.Payload, &p) == nil && p.Kind == api.WarningVirtiofs
	}
	// The parent ends once it has seen its child's end, which may come
	// after the watch has (here as soon as 0.3 s after the kill); ended,
	// it may stay a zombie until whoever it was left to reaps it.
	for deadline := time.Now().Add(10 * time.Second); processLives(d.PID); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			w.t.Errorf("the daemon's first process %d outlived the one serving the guest by 10s", d.PID)
			break
		}
	}
	if a, err := w.cl.GetVM(ctx, annVM); err != nil || strings.HasPrefix(a.Reason, orchestrator.VirtiofsReasonPrefix) {
		w.t.Errorf("ann-1 beside it: %+v %v", a, err)
	}
	return seen
}

// virtiofsRecovering begins what the VM's reason advises after its
// virtiofs daemon died: bob stops his VM with the CLI (the guest's
// shutdown waits on its hung mount until gpuvmd forces it off, the
// shutdown timeout later: the test goes on meanwhile). The function it
// returns finishes: bob starts the VM again; the home is mounted and
// writable again and the reason is gone. It returns how long the stop and
// the start (until the guest answered over SSH) took.
func (w *world) virtiofsRecovering(sh *guestShell, bob homePerson, vmID string) func() (stopped, started time.Duration) {
	w.t.Helper()
	begin := time.Now()
	if out, errOut, code := bob.cli.run("", "stop", "bob-1"); code != 0 {
		w.t.Fatalf("gpuvm stop bob-1: exit %d\n%s%s", code, out, errOut)
	}
	return func() (stopped, started time.Duration) {
		w.t.Helper()
		w.waitState(vmID, stateStopped, 2*time.Minute)
		stopped = time.Since(begin)
		if out, errOut, code := bob.cli.run("", "start", "bob-1", "--wait"); code != 0 {
			w.t.Fatalf("gpuvm start bob-1 --wait: exit %d\n%s%s", code, out, errOut)
		}
		w.waitReady(vmID, 3*time.Minute)
		got := sh.run(bob, "bob-1", "echo mounted=$(awk '$2 == \""+homeMount+"\" { print $3 }' /proc/mounts) && echo x > "+homeMount+
			"/back.txt && rm "+homeMount+"/back.txt && echo wrote=yes")
		started = time.Since(begin) - stopped
		if got["mounted"] != "virtiofs" || got["wrote"] != "yes" {
			w.t.Errorf("bob-1 after its stop and start: %s mounted as %q, written %q; want its home back", homeMount, got["mounted"], got["wrote"])
		}
		if vm, err := bob.cl.GetVM(w.ctx(30*time.Second), vmID); err != nil || strings.HasPrefix(vm.Reason, orchestrator.VirtiofsReasonPrefix) {
			w.t.Errorf("bob-1 after its stop and start: %+v %v; want the virtiofs reason gone", vm, err)
		}
		return stopped, started
	}
}

// processLives: pid is a process that has not ended (not gone, not a
// zombie).
func processLives(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
