package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
)

// Data disks (docs/volumes.md) in the guests TestHomeFollowsThePerson
// boots anyway: ann makes a disk before her first VM, which is created with
// it and writes bytes on it; a second VM of hers asking for it meanwhile is
// refused with 409, bob can neither see nor attach it; her first VM is
// deleted, the disk stays; her second VM, created with it, reads the bytes
// back; while it runs the disk is unplugged and plugged in again
// (diskReplugged); deleted, the disk leaves the pool.

// diskSize is the e2e disk's size: small, the guest writes one block.
const diskSize = "64MiB"

// diskMade makes ann's disk "scratch"; bob does not see it.
func (w *world) diskMade(ann, bob homePerson) api.Volume {
	w.t.Helper()
	v, err := ann.cl.CreateVolume(w.ctx(time.Minute), "scratch", diskSize)
	if err != nil {
		w.t.Fatalf("ann: create volume scratch: %v", err)
	}
	if v.State != api.VolumeReady || v.SizeBytes != 64<<20 {
		w.t.Fatalf("ann's volume: %+v", v)
	}
	if _, err := bob.cl.GetVolume(w.ctx(30*time.Second), v.ID); !isStatus(err, http.StatusNotFound) {
		w.t.Errorf("bob reads ann's volume: %v, want 404", err)
	}
	return *v
}

// diskSerial is what the guest reads in /sys/block/vdX/serial: the volume's
// ID, cut to virtio-blk's 20 characters.
func diskSerial(v api.Volume) string { return v.ID[:min(len(v.ID), 20)] }

// findDisk is the guest's shell that sets $dev to the disk with serial.
// It prints what each virtio disk says (serials=) for the failure's message.
func findDisk(serial string) string {
	return `dev=""; s=""; for d in /sys/block/vd*; do x=$(cat $d/serial 2>/dev/null); s="$s ${d##*/}:$x"; ` +
		`case "$x" in "` + serial + `"*) dev=/dev/${d##*/};; esac; done; echo serials=$s; echo dev=$dev; [ -n "$dev" ]`
}

// diskWritten writes bytes on the disk from ann-1 and checks the
// refusals while it is attached; it returns what it wrote.
func (w *world) diskWritten(sh *guestShell, ann, bob homePerson, disk api.Volume, bobVM string) string {
	w.t.Helper()
	content := "gpuvm-disk-" + randHex(8)
	got := sh.run(ann, "ann-1", findDisk(diskSerial(disk))+diskOpen("-w")+fmt.Sprintf(
		` && printf '%%s' %s | dd of=$dev bs=512 count=1 conv=sync && sync && echo wrote=yes`, content))
	if got["dev"] == "" || got["wrote"] != "yes" {
		w.t.Fatalf("ann-1 found the disk at %q (serial %s; %s, after %s s) and wrote: %q", got["dev"], diskSerial(disk), got["mode"], got["waited"], got["wrote"])
	}
	// In use: a second VM of ann's with it is refused, naming ann-1.
	_, err := ann.cl.CreateVM(w.ctx(30*time.Second), api.CreateVMRequest{Profile: "tiny-home", Name: "ann-x", Volumes: []string{"scratch"}}, "")
	if !isStatus(err, http.StatusConflict) || !strings.Contains(err.Error(), "ann-1") {
		w.t.Errorf("ann's second VM with the attached disk: %v, want 409 naming ann-1", err)
	}
	// bob: ann's disk is not found, to attach or detach.
	if _, err := bob.cl.AttachVolume(w.ctx(30*time.Second), disk.ID, bobVM); !isStatus(err, http.StatusNotFound) {
		w.t.Errorf("bob attaches ann's disk: %v, want 404", err)
	}
	if _, err := bob.cl.DetachVolume(w.ctx(30*time.Second), disk.ID); !isStatus(err, http.StatusNotFound) {
		w.t.Errorf("bob detaches ann's disk: %v, want 404", err)
	}
	if v, err := ann.cl.GetVolume(w.ctx(30*time.Second), "scratch"); err != nil || v.AttachedVMName != "ann-1" {
		w.t.Errorf("after bob's tries, ann's disk: %+v %v, want attached to ann-1", v, err)
	}
	return content
}

// diskRead reads the bytes back from ann-2.
func (w *world) diskRead(sh *guestShell, ann homePerson, disk api.Volume, content string) {
	w.t.Helper()
	got := sh.run(ann, "ann-2", findDisk(diskSerial(disk))+diskOpen("-r")+
		` && echo read=$(dd if=$dev bs=512 count=1 2>/dev/null | tr -d '\000')`+
		` && echo dd=$(dd if=$dev of=/dev/null bs=512 count=1 2>&1 | tr '\n' ' ')`)
	if got["read"] != content {
		w.t.Errorf("ann-2 reads %q from the disk (%s; %s, after %s s; dd said %q), want what ann-1 wrote, %q",
			got["read"], got["dev"], got["mode"], got["waited"], got["dd"], content)
	}
	if got["waited"] != "0" {
		w.t.Logf("ann-2 could read its disk %s s after it answered SSH", got["waited"])
	}
}

// diskOpen is the guest's shell that waits, up to 30 s, until the guest's
// user may open $dev as flag says (-r, -w): the test guest makes its
// data disks its users' within a second of their device node (it has no
// udev), so a disk a guest just found may still be root's. It prints how
// long it waited (waited=) and the node's mode (mode=).
func diskOpen(flag string) string {
	return ` && { waited=0; while [ ! ` + flag + ` "$dev" ] && [ $waited -lt 30 ]; do sleep 1; waited=$((waited+1)); done;` +
		` echo waited=$waited; echo mode=$(ls -l "$dev" | cut -d' ' -f1); }`
}

// diskPlugged is the guest's shell that prints how many virtio disks carry
// serial (plugged=), and every virtio disk with its serial (serials=).
func diskPlugged(serial string) string {
	return `n=0; s=""; for d in /sys/block/vd*; do x=$(cat $d/serial 2>/dev/null); s="$s ${d##*/}:$x"; ` +
		`case "$x" in "` + serial + `"*) n=$((n+1));; esac; done; echo serials=$s; echo plugged=$n`
}

// diskReplugged: ann-2 runs with the disk. ann detaches it with her CLI
// while it runs (--wait): the guest lets it go (ACPI hot-unplug), it is
// gone from the guest's disks and detached; she attaches it again, still
// running: plugged into a free root port, the guest finds it by its serial
// and reads what ann-1 wrote. It returns how long each took, end to end.
func (w *world) diskReplugged(sh *guestShell, ann homePerson, disk api.Volume, content string) (unplugged, plugged time.Duration) {
	w.t.Helper()
	serial := diskSerial(disk)
	run := func(args ...string) (api.Volume, time.Duration) {
		w.t.Helper()
		begin := time.Now()
		out, errOut, code := ann.cli.run("", args...)
		took := time.Since(begin)
		var v api.Volume
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			w.t.Fatalf("gpuvm %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return v, took
	}
	v, unplugged := run("volume", "detach", "scratch", "--wait", "--json")
	if v.AttachedVM != "" || v.State != api.VolumeReady {
		w.t.Errorf("after detach --wait from the running ann-2: %+v, want it detached, ready", v)
	}
	if got := sh.run(ann, "ann-2", diskPlugged(serial)); got["plugged"] != "0" {
		w.t.Errorf("ann-2 still has the disk after its unplug: %s", got["serials"])
	}
	v, plugged = run("volume", "attach", "scratch", "ann-2", "--wait", "--json")
	if v.AttachedVMName != "ann-2" || v.State != api.VolumeReady {
		w.t.Errorf("after attach --wait to the running ann-2: %+v", v)
	}
	// The guest's kernel binds the new device within moments of the plug.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := sh.run(ann, "ann-2", diskPlugged(serial))
		if got["plugged"] == "1" {
			break
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("30 s after the plug ann-2's disks are %q, without serial %s", got["serials"], serial)
		}
		time.Sleep(time.Second)
	}
	w.diskRead(sh, ann, disk, content)
	return unplugged, plugged
}

// diskGone grows the disk once ann-2 is deleted (which detached it), then
// deletes it: its volume leaves the pool.
func (w *world) diskGone(hv *hypervisor.Conn, ann homePerson, disk api.Volume) {
	w.t.Helper()
	if v, err := ann.cl.GetVolume(w.ctx(30*time.Second), disk.ID); err != nil || v.AttachedVM != "" {
		w.t.Errorf("after ann-2's deletion: %+v %v, want the disk kept, detached", v, err)
	}
	// Detached, it grows (libvirt resizes the qcow2).
	if v, err := ann.cl.ResizeVolume(w.ctx(time.Minute), disk.ID, "128MiB"); err != nil || v.SizeBytes != 128<<20 {
		w.t.Errorf("grow the detached disk: %+v %v", v, err)
	}
	if err := ann.cl.DeleteVolume(w.ctx(time.Minute), disk.ID); err != nil {
		w.t.Fatalf("delete the disk: %v", err)
	}
	vols, err := hv.Volumes(w.ctx(30*time.Second), w.pool)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, v := range vols {
		if strings.Contains(v, disk.ID) {
			w.t.Errorf("volume %s left in pool %s", v, w.pool)
		}
	}
}

// isStatus says whether err is the API's refusal with status.
func isStatus(err error, status int) bool {
	p, ok := client.AsProblem(err)
	return ok && p.Status == status
}
