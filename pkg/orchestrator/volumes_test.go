package orchestrator

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// A data disk is made on the host after its row, goes into the domain of
// the VM it is attached to (virtio, serial = its id), outlives the VM's
// deletion, detached, and is removed with its row.
func TestDataDiskAttachAndDelete(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	cfg := *e.cfg
	cfg.Server.Libvirt.StoragePool = "default-pool" // the test driver's pool
	e.cfg = &cfg
	o := e.orch(nil)
	v := &store.Volume{Owner: "ann", Name: "scratch", SizeBytes: 1 << 20, CreatedBy: "ann"}
	if err := o.CreateVolume(ctx, v, store.DiskQuota{}); err != nil {
		t.Fatal(err)
	}
	if v.State != store.VolReady || v.Host != "test-host" || v.Pool != "default-pool" || !strings.HasPrefix(v.Volume, "gpuvm-disk-") {
		t.Fatalf("volume %+v", v)
	}
	if ok, err := e.hv.VolumeExists(ctx, "default-pool", v.Volume); err != nil || !ok {
		t.Fatalf("volume on the host: %v %v", ok, err)
	}
	vm, _ := e.submit("ann", "nogpu", "ann-1")
	if _, err := e.st.AttachVolume(ctx, v.ID, vm.ID); err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	if got := e.vm(vm.ID); got.State != store.VMRunning {
		t.Fatalf("VM is %s (%s)", got.State, got.StateReason)
	}
	xml, err := e.hv.XML(ctx, vm.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"volume='" + v.Volume + "'", "<serial>" + v.ID + "</serial>", "bus='virtio'"} {
		if !strings.Contains(xml, want) {
			t.Errorf("domain XML lacks %q:\n%s", want, xml)
		}
	}
	if err := o.DeleteVolume(ctx, v.ID); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("deleting an attached disk = %v, want a conflict", err)
	}
	e.deleteOp(e.vm(vm.ID))
	o.Drain(ctx)
	if got := e.vm(vm.ID); got.State != store.VMDeleted {
		t.Fatalf("VM is %s (%s)", got.State, got.StateReason)
	}
	got, err := e.st.GetVolume(ctx, v.ID)
	if err != nil || got.AttachedVM != nil || got.State != store.VolReady {
		t.Fatalf("after the VM's deletion: %+v %v", got, err)
	}
	if ok, err := e.hv.VolumeExists(ctx, "default-pool", v.Volume); err != nil || !ok {
		t.Fatalf("the VM's deletion took the disk: %v %v", ok, err)
	}
	if err := o.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.hv.VolumeExists(ctx, "default-pool", v.Volume); ok {
		t.Error("volume left on the host")
	}
	if _, err := e.st.GetVolume(ctx, v.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("row left: %v", err)
	}
}

// gpuvmd killed after the row and after the volume: the next start
// finishes the disk; never a volume without its row.
func TestDataDiskCreateResumes(t *testing.T) {
	for _, point := range []string{HookVolumeRecorded, HookVolumeMade} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t, "l40sx4")
			ctx := context.Background()
			cfg := *e.cfg
			cfg.Server.Libvirt.StoragePool = "default-pool"
			e.cfg = &cfg
			killed := e.orch(func(_, p string) error {
				if p == point {
					return errors.New("killed")
				}
				return nil
			})
			v := &store.Volume{Owner: "ann", Name: "d-" + strings.ReplaceAll(point, " ", "-"), SizeBytes: 1 << 20}
			if err := killed.CreateVolume(ctx, v, store.DiskQuota{}); err == nil {
				t.Fatal("no error at the hook")
			}
			if got, err := e.st.GetVolume(ctx, v.ID); err != nil || got.State != store.VolCreating {
				t.Fatalf("row after the kill: %+v %v", got, err)
			}
			o := e.orch(nil)
			o.life.resumeVolumes(ctx)
			got, err := e.st.GetVolume(ctx, v.ID)
			if err != nil || got.State != store.VolReady {
				t.Fatalf("row after the restart: %+v %v", got, err)
			}
			if ok, err := e.hv.VolumeExists(ctx, "default-pool", v.Volume); err != nil || !ok {
				t.Fatalf("volume after the restart: %v %v", ok, err)
			}
			if err := o.DeleteVolume(ctx, v.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}
