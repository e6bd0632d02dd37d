package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// plugHV is the test driver with a running domain's data disks kept here:
// libvirt's test driver cannot plug a device into a running domain (the
// real one does in test/e2e's TestHomeFollowsThePerson).
type plugHV struct {
	*hypervisor.Conn
	mu                          sync.Mutex
	live                        map[string][]string // VM id → plugged volumes
	plugErr, unplugErr, liveErr error
	// lostAfter: the next plug or unplug is done, then the connection to
	// libvirt is lost before its answer (as when gpuvmd is killed there).
	lostAfter bool
}

// lost reports, once, that the connection went after the call was done.
func (f *plugHV) lost() error {
	if !f.lostAfter {
		return nil
	}
	f.lostAfter = false
	return fmt.Errorf("plug: %w", hypervisor.ErrDisconnected)
}

func (f *plugHV) LiveDataDisks(ctx context.Context, uuid string) ([]string, bool, error) {
	f.mu.Lock()
	liveErr := f.liveErr
	f.mu.Unlock()
	if liveErr != nil {
		return nil, false, liveErr
	}
	info, err := f.Conn.Lookup(ctx, uuid)
	if err != nil || !info.Active() {
		return nil, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.live[uuid]), true, nil
}

func (f *plugHV) PlugDataDisk(ctx context.Context, uuid string, disk domain.Disk) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.plugErr != nil {
		return f.plugErr
	}
	if !slices.Contains(f.live[uuid], disk.Volume) {
		f.live[uuid] = append(f.live[uuid], disk.Volume)
	}
	return f.lost()
}

func (f *plugHV) UnplugDataDisk(ctx context.Context, uuid, volume string, wait time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unplugErr != nil {
		return f.unplugErr
	}
	f.live[uuid] = slices.DeleteFunc(f.live[uuid], func(v string) bool { return v == volume })
	return f.lost()
}

// plugEnv is an environment with a storage pool and two data disks of ann's.
func plugEnv(t *testing.T) (*env, *Orchestrator, *plugHV, []*store.Volume) {
	e := newEnv(t, "l40sx4")
	cfg := *e.cfg
	cfg.Server.Libvirt.StoragePool = "default-pool" // the test driver's pool
	e.cfg = &cfg
	f := &plugHV{Conn: e.hv, live: map[string][]string{}}
	o := e.orchWith(f)
	var vols []*store.Volume
	for _, name := range []string{"scratch", "data"} {
		v := &store.Volume{Owner: "ann", Name: name, SizeBytes: 1 << 20, CreatedBy: "ann"}
		if err := o.CreateVolume(context.Background(), v, store.DiskQuota{}); err != nil {
			t.Fatal(err)
		}
		vols = append(vols, v)
	}
	return e, o, f, vols
}

// domainDisks are the data disk volumes of a VM's domain's definition.
func (e *env) domainDisks(vmID string) []string {
	e.t.Helper()
	_, d := e.domainXML(vmID)
	return domain.DataDiskVolumes(d)
}

// A disk attached to a stopped VM is in its domain at its next start, and
// one detached from it is gone (both were ignored: the domain kept the
// disks it was made with, so a detached disk could be written by two VMs).
func TestDataDisksFollowTheRowsAtStart(t *testing.T) {
	e, o, _, vols := plugEnv(t)
	ctx := context.Background()
	vm := e.stoppedVM(o, "ann", "nogpu", "ann-1")
	if got := e.domainDisks(vm.ID); len(got) != 0 {
		t.Fatalf("made with %v", got)
	}
	for _, v := range vols {
		if _, err := e.st.AttachVolume(ctx, v.ID, vm.ID); err != nil {
			t.Fatal(err)
		}
	}
	e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMRunning, "")
	if got, want := e.domainDisks(vm.ID), []string{vols[0].Volume, vols[1].Volume}; !slices.Equal(got, want) {
		t.Fatalf("after attaching while stopped and starting: %v, want %v", got, want)
	}
	x, _ := e.domainXML(vm.ID) // nogpu boots a kernel: no system disk on vda
	for _, want := range []string{"<serial>" + vols[0].ID + "</serial>", "dev='vda'", "dev='vdb'"} {
		if !strings.Contains(x, want) {
			t.Errorf("domain lacks %s", want)
		}
	}
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMStopped, "")
	if err := e.st.DetachVolume(ctx, vols[0].ID); err != nil {
		t.Fatal(err)
	}
	e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMRunning, "")
	if got, want := e.domainDisks(vm.ID), []string{vols[1].Volume}; !slices.Equal(got, want) {
		t.Fatalf("after detaching scratch while stopped: %v, want %v", got, want)
	}
}

// A running VM's disks are plugged in and out by an OpDisks operation; a
// disk that cannot be plugged in is detached again, one the guest keeps
// stays attached; a VM stopped before the operation ran settles its
// detaching disk without a domain.
func TestDataDiskHotplug(t *testing.T) {
	e, o, f, vols := plugEnv(t)
	ctx := context.Background()
	vm, _ := e.submit("ann", "nogpu", "ann-1")
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMRunning, "")
	volume := func(id string) *store.Volume {
		t.Helper()
		v, err := e.st.GetVolume(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	live := func() []string {
		got, _, _ := f.LiveDataDisks(ctx, vm.ID)
		return got
	}

	// Attached while it runs: plugged in.
	_, op, err := e.st.AttachVolumeLive(ctx, vols[0].ID, vm.ID, "ann")
	if err != nil || op.Kind != store.OpDisks {
		t.Fatalf("attach: %+v %v", op, err)
	}
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpDone, "")
	if got := live(); !slices.Equal(got, []string{vols[0].Volume}) {
		t.Fatalf("plugged: %v", got)
	}

	// It cannot be plugged in: detached again, the operation says why.
	f.plugErr = errors.New("no free PCIe root port")
	_, op, err = e.st.AttachVolumeLive(ctx, vols[1].ID, vm.ID, "ann")
	if err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpFailed, `data disk "data" not attached: no free PCIe root port`)
	if v := volume(vols[1].ID); v.AttachedVM != nil || v.State != store.VolReady {
		t.Fatalf("after a failed plug: %+v", v)
	}
	if v := volume(vols[0].ID); v.AttachedVM == nil || *v.AttachedVM != vm.ID {
		t.Fatalf("the disk plugged before was touched: %+v", v)
	}
	f.plugErr = nil

	// The guest keeps it: attached and ready again.
	f.unplugErr = errors.New("the guest has not let disk vdb go within 30s")
	v, op, err := e.st.BeginDetachVolume(ctx, vols[0].ID, "ann")
	if err != nil || v.State != store.VolDetaching {
		t.Fatalf("begin detach: %+v %v", v, err)
	}
	if _, err := e.st.AttachVolume(ctx, vols[0].ID, "other-vm"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a detaching disk attached elsewhere: %v", err)
	}
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpFailed, `data disk "scratch" stays attached: the guest has not let disk vdb go`)
	if v := volume(vols[0].ID); v.AttachedVM == nil || v.State != store.VolReady {
		t.Fatalf("after a refused unplug: %+v", v)
	}
	f.unplugErr = nil

	// Detached while it runs: unplugged, then detached.
	_, op, err = e.st.BeginDetachVolume(ctx, vols[0].ID, "ann")
	if err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpDone, "")
	if v := volume(vols[0].ID); v.AttachedVM != nil || v.State != store.VolReady {
		t.Fatalf("after the unplug: %+v", v)
	}
	if got := live(); len(got) != 0 {
		t.Fatalf("still plugged: %v", got)
	}

	// Detaching when the VM stops first: the disk is detached without a
	// domain, and the next start does not have it.
	_, op, _ = e.st.AttachVolumeLive(ctx, vols[1].ID, vm.ID, "ann")
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpDone, "")
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	if _, op, err = e.st.BeginDetachVolume(ctx, vols[1].ID, "ann"); err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpDone, "")
	if v := volume(vols[1].ID); v.AttachedVM != nil || v.State != store.VolReady {
		t.Fatalf("detached from a stopped VM: %+v", v)
	}
	e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMRunning, "")
	if got := e.domainDisks(vm.ID); len(got) != 0 {
		t.Fatalf("started with %v", got)
	}
}

// runningWithDisk is a running VM of ann's with v plugged in.
func (e *env) runningWithDisk(o *Orchestrator, v *store.Volume) *store.VM {
	e.t.Helper()
	ctx := context.Background()
	vm, _ := e.submit("ann", "nogpu", "ann-1")
	o.Drain(ctx)
	_, op, err := e.st.AttachVolumeLive(ctx, v.ID, vm.ID, "ann")
	if err != nil {
		e.t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpDone, "")
	return e.vm(vm.ID)
}

// Deleting a VM detaches a disk being detached from it, ready.
func TestDeleteVMSettlesDetaching(t *testing.T) {
	e, o, f, vols := plugEnv(t)
	ctx := context.Background()
	vm := e.runningWithDisk(o, vols[0])
	f.unplugErr = errors.New("never")
	if _, _, err := e.st.BeginDetachVolume(ctx, vols[0].ID, "ann"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.DetachVolumesOfVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.st.GetVolume(ctx, vols[0].ID); v.AttachedVM != nil || v.State != store.VolReady {
		t.Fatalf("after the VM's disks were detached: %+v", v)
	}
}

// A VM recorded as running whose domain does not run cannot have a disk
// plugged in: the attach is undone and the operation says why.
func TestDataDiskPlugWithoutDomain(t *testing.T) {
	e, o, _, vols := plugEnv(t)
	ctx := context.Background()
	vm, _ := e.submit("ann", "nogpu", "ann-1")
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMRunning, "")
	if err := e.hv.Destroy(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	_, op, err := e.st.AttachVolumeLive(ctx, vols[0].ID, vm.ID, "ann")
	if err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpFailed, `data disk "scratch" not attached: VM ann-1 is recorded as running but its domain does not run`)
	if v, _ := e.st.GetVolume(ctx, vols[0].ID); v.AttachedVM != nil || v.State != store.VolReady {
		t.Fatalf("after the failed plug: %+v", v)
	}
}

// The domain's disks cannot be read: the operation fails and undoes its
// change (the disk it attached detached; the one being detached attached
// and ready again), so nothing stays detaching while the VM runs.
func TestDataDiskPlugUndone(t *testing.T) {
	e, o, f, vols := plugEnv(t)
	ctx := context.Background()
	vm := e.runningWithDisk(o, vols[0])
	f.liveErr = errors.New("libvirt said no")
	_, detach, err := e.st.BeginDetachVolume(ctx, vols[0].ID, "ann")
	if err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(detach.ID, store.OpFailed, "read the domain's disks: libvirt said no")
	if v, _ := e.st.GetVolume(ctx, vols[0].ID); v.AttachedVM == nil || v.State != store.VolReady {
		t.Fatalf("the disk being detached after the failure: %+v", v)
	}
	_, attach, err := e.st.AttachVolumeLive(ctx, vols[1].ID, vm.ID, "ann")
	if err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(attach.ID, store.OpFailed, "libvirt said no")
	if v, _ := e.st.GetVolume(ctx, vols[1].ID); v.AttachedVM != nil {
		t.Fatalf("the disk attached by the failed operation: %+v", v)
	}
	if v, _ := e.st.GetVolume(ctx, vols[0].ID); v.AttachedVM == nil || *v.AttachedVM != vm.ID {
		t.Fatalf("the disk attached before it: %+v", v)
	}
}

// The connection to libvirt lost right after a plug and after an unplug
// (gpuvmd killed there would be the same): the operation is left for the
// next round, which finds the domain as the call left it and finishes it
// — the disk plugged once, then detached — without doing it twice.
func TestDataDiskPlugResumes(t *testing.T) {
	e, o, f, vols := plugEnv(t)
	ctx := context.Background()
	vm, _ := e.submit("ann", "nogpu", "ann-1")
	o.Drain(ctx)
	for _, step := range []struct {
		name string
		do   func() (*store.Operation, error)
		want func(v *store.Volume) bool
		live int
	}{
		{"plug", func() (*store.Operation, error) {
			_, op, err := e.st.AttachVolumeLive(ctx, vols[0].ID, vm.ID, "ann")
			return op, err
		}, func(v *store.Volume) bool { return v.AttachedVM != nil && v.State == store.VolReady }, 1},
		{"unplug", func() (*store.Operation, error) {
			_, op, err := e.st.BeginDetachVolume(ctx, vols[0].ID, "ann")
			return op, err
		}, func(v *store.Volume) bool { return v.AttachedVM == nil && v.State == store.VolReady }, 0},
	} {
		f.mu.Lock()
		f.lostAfter = true
		f.mu.Unlock()
		op, err := step.do()
		if err != nil {
			t.Fatal(err)
		}
		o.Drain(ctx)
		if got := e.op(op.ID); got.Finished() {
			t.Fatalf("%s: the operation ended though libvirt's answer was lost: %+v", step.name, got)
		}
		o.Drain(ctx) // the next round
		e.wantOp(op.ID, store.OpDone, "")
		if v, _ := e.st.GetVolume(ctx, vols[0].ID); !step.want(v) {
			t.Errorf("%s: the volume after the resumed operation: %+v", step.name, v)
		}
		if got, _, _ := f.LiveDataDisks(ctx, vm.ID); len(got) != step.live {
			t.Errorf("%s: the domain's disks %v, want %d", step.name, got, step.live)
		}
	}
}
