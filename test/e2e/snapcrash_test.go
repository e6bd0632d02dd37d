package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// gpuvmd is SIGKILLed at each step of a disk snapshot and of a restore of
// a stopped VM, on libvirt's test driver hosted by libvirtd; no guest
// boots. The VM's overlay is a real qcow2 file (GPUVM_TEST_DISK_DIR), so
// the real qemu-img takes and reverts the snapshot. A fresh gpuvmd on the
// same state finishes the operation: the snapshot ready, on the disk once;
// the restore done, the disk holding what it held at the snapshot again,
// the VM saying it was restored. The VM is then deleted, leaving libvirt
// as it was.
func TestCrashDuringSnapshot(t *testing.T) {
	for _, tool := range []string{"qemu-img", "qemu-io"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	hv := libvirt(t, testDriverURI)
	base := filepath.Join(t.TempDir(), "base.raw")
	if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, point := range orchestrator.SnapshotHooks {
		if point == orchestrator.HookSnapDeleted {
			continue // a delete: the unit tests' (TestSnapshotCrashAtEachStep)
		}
		t.Run(strings.ReplaceAll(point, " ", "_"), func(t *testing.T) {
			t.Parallel()
			disks := t.TempDir()
			w := newWorld(t, worldConfig{preset: "l40sx4", uri: testDriverURI, pool: testDriverPool,
				profiles: fmt.Sprintf(crashProfiles, base, "vgpu", "type", "L40S-12Q")})
			seams := []string{"GPUVM_TEST_DISK_DIR=" + disks, "GPUVM_TEST_PAUSE_AT=" + point}
			w.start(seams...)
			lvBefore := w.libvirtState(hv)
			vm := w.create("seat", "snap")
			w.waitState(vm.ID, "running", time.Minute)
			w.waitOperation(w.act(actionStop, vm.ID), time.Minute)
			w.waitState(vm.ID, stateStopped, time.Minute)
			disk := filepath.Join(disks, w.overlayOf(hv, vm.ID))
			qemu(t, "qemu-img", "create", "-q", "-f", "qcow2", disk, "1M")
			qemu(t, "qemu-io", "-c", "write -P 0xaa 0 64k", disk)

			restore := point == orchestrator.HookRestoring || point == orchestrator.HookRestored
			resp, err := w.cl.CreateSnapshot(w.ctx(30*time.Second), vm.ID, "before")
			if err != nil {
				t.Fatal(err)
			}
			snapID, opID := resp.Snapshot.ID, resp.Operation.ID
			if restore {
				w.waitOperation(opID, time.Minute)
				qemu(t, "qemu-io", "-c", "write -P 0xbb 0 64k", disk) // written after the snapshot
				r, err := w.cl.RestoreSnapshot(w.ctx(30*time.Second), vm.ID, snapID)
				if err != nil {
					t.Fatal(err)
				}
				opID = r.Operation.ID
			}
			w.waitPaused(point, vm.ID)
			want := 1 // taken (or, for a restore, taken before)
			if point == orchestrator.HookSnapshotting {
				want = 0
			}
			if tags := diskTags(t, disk); len(tags) != want {
				t.Errorf("paused at %q: the disk's snapshots %q, want %d", point, tags, want)
			}
			w.kill()

			w.start(seams[0])
			if op := w.waitOperation(opID, time.Minute); op.Error != "" {
				t.Fatalf("the operation after the restart: %+v", op)
			}
			s := w.snapshot(vm.ID, snapID)
			if s.State != store.SnapReady || s.Consistency != store.SnapCrashConsists {
				t.Errorf("the snapshot after the restart: %+v; want it ready, crash-consistent", s)
			}
			if tags := diskTags(t, disk); len(tags) != 1 || !strings.HasSuffix(tags[0], snapID) {
				t.Errorf("the disk's snapshots after the restart: %q; want the snapshot's tag once", tags)
			}
			if restore {
				qemu(t, "qemu-io", "-c", "read -P 0xaa 0 64k", disk) // what the snapshot held
				got, err := w.cl.GetVM(w.ctx(30*time.Second), vm.ID)
				if err != nil || got.State != stateStopped || !strings.HasPrefix(got.Reason, "restored from snapshot") {
					t.Errorf("the VM after the restart: %+v %v; want it stopped, restored from the snapshot", got, err)
				}
			}
			w.deleteVM(vm.ID)
			w.sameLibvirt(lvBefore, w.libvirtState(hv))
			w.noErrors()
		})
	}
}

// overlayOf is the name of a VM's disk overlay, as its domain's metadata
// names it.
func (w *world) overlayOf(hv *hypervisor.Conn, vmID string) string {
	w.t.Helper()
	for _, d := range w.libvirtState(hv).domains {
		if d.Metadata.VMID != vmID {
			continue
		}
		for _, v := range d.Metadata.Volumes {
			if strings.HasSuffix(v.Name, ".qcow2") {
				return v.Name
			}
		}
	}
	w.t.Fatalf("VM %s has no domain with a disk overlay", vmID)
	return ""
}

func (w *world) snapshot(vmID, id string) api.Snapshot {
	w.t.Helper()
	list, err := w.cl.ListSnapshots(w.ctx(30*time.Second), vmID)
	if err != nil {
		w.t.Fatal(err)
	}
	i := slices.IndexFunc(list.Snapshots, func(s api.Snapshot) bool { return s.ID == id })
	if i < 0 {
		w.t.Fatalf("VM %s has no snapshot %s: %+v", vmID, id, list.Snapshots)
	}
	return list.Snapshots[i]
}

// qemu runs qemu-img or qemu-io; qemu-io's failed read -P says so on its
// output with exit status 0, which fails here too.
func qemu(t *testing.T, tool string, args ...string) {
	t.Helper()
	out, err := exec.Command(tool, args...).CombinedOutput()
	if err != nil || strings.Contains(string(out), "Pattern verification failed") || strings.Contains(string(out), "failed") {
		t.Fatalf("%s %q: %v: %s", tool, args, err, out)
	}
}

// diskTags are the internal snapshots of a qcow2 file.
func diskTags(t *testing.T, path string) []string {
	t.Helper()
	out, err := exec.Command("qemu-img", "snapshot", "-U", "-l", path).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img snapshot -l %s: %v: %s", path, err, out)
	}
	var tags []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], "gpuvm-") {
			tags = append(tags, f[1])
		}
	}
	return tags
}
