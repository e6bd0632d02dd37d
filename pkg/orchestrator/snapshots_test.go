package orchestrator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// snapHV is libvirt's test driver with disks of its own: each VM's disk is
// a string, and its internal snapshots copies of it by tag (the test
// driver's volumes are not files qemu-img could snapshot).
type snapHV struct {
	*hypervisor.Conn
	mu      sync.Mutex
	disk    map[string]string
	tags    map[string]map[string]string
	frozen  map[string]bool
	takes   int
	noAgent bool
}

func newSnapHV(c *hypervisor.Conn) *snapHV {
	return &snapHV{Conn: c, disk: map[string]string{}, tags: map[string]map[string]string{}, frozen: map[string]bool{}}
}

func (f *snapHV) SnapshotDisk(ctx context.Context, uuid, tag string) (hypervisor.SnapshotResult, error) {
	info, err := f.Conn.Lookup(ctx, uuid)
	if err != nil {
		return hypervisor.SnapshotResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res := hypervisor.SnapshotResult{Live: info.State == hypervisor.StateRunning}
	if _, ok := f.tags[uuid][tag]; ok {
		return res, nil
	}
	if f.tags[uuid] == nil {
		f.tags[uuid] = map[string]string{}
	}
	f.tags[uuid][tag] = f.disk[uuid]
	f.takes++
	res.Quiesced = res.Live && !f.noAgent
	return res, nil
}

func (f *snapHV) RevertDisk(ctx context.Context, uuid, tag string) error {
	info, err := f.Conn.Lookup(ctx, uuid)
	if err != nil {
		return err
	}
	if info.State != hypervisor.StateShutoff {
		return hypervisor.ErrDomainRunning
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	data, ok := f.tags[uuid][tag]
	if !ok {
		return errors.New("qemu-img snapshot: no snapshot " + tag)
	}
	f.disk[uuid] = data
	return nil
}

func (f *snapHV) DeleteDiskSnapshot(ctx context.Context, uuid, tag string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tags[uuid], tag)
	return nil
}

func (f *snapHV) ThawFS(ctx context.Context, uuid string) error { return nil }

func (f *snapHV) write(uuid, data string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disk[uuid] = data
}

func (f *snapHV) read(uuid string) (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.disk[uuid], len(f.tags[uuid])
}

func (e *env) snapOp(vm *store.VM, label string) (*store.Snapshot, *store.Operation) {
	e.t.Helper()
	s := &store.Snapshot{VMID: vm.ID, Owner: vm.Owner, Label: label}
	op, err := e.st.CreateSnapshot(context.Background(), s, vm.Owner, store.SnapshotLimit{})
	if err != nil {
		e.t.Fatal(err)
	}
	return s, op
}

func (e *env) snapState(id string) *store.Snapshot {
	e.t.Helper()
	s, err := e.st.GetSnapshot(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// A file is written, snapshotted (running: quiesced), deleted; the VM is
// stopped and restored: the file is back, and the VM says it was restored.
// A restore of a running VM is refused and changes nothing; a delete
// removes the snapshot from the disk and its row.
func TestSnapshotRestoreDelete(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	f := newSnapHV(e.hv)
	o := e.orchWith(f)
	vm, _ := e.submit("ann", "l40s-seat", "vm1")
	o.Drain(ctx)
	e.wantVM(vm.ID, store.VMRunning, "")
	f.write(vm.ID, "file")
	snap, op := e.snapOp(e.vm(vm.ID), "before")
	o.Drain(ctx)
	e.wantOp(op.ID, store.OpDone, "")
	if s := e.snapState(snap.ID); s.State != store.SnapReady || s.Consistency != store.SnapQuiesced {
		t.Fatalf("snapshot %+v", s)
	}
	f.write(vm.ID, "") // the file is deleted
	_, rop, err := e.st.BeginSnapshotOperation(ctx, snap.ID, store.OpRestore, "ann")
	if err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(rop.ID, store.OpFailed, "only a stopped VM")
	if s := e.snapState(snap.ID); s.State != store.SnapReady || s.RestoredAt != nil {
		t.Fatalf("after a refused restore: %+v", s)
	}
	if d, _ := f.read(vm.ID); d != "" {
		t.Fatalf("a refused restore changed the disk: %q", d)
	}
	e.action(e.vm(vm.ID), store.OpStop)
	o.Drain(ctx)
	_, rop, err = e.st.BeginSnapshotOperation(ctx, snap.ID, store.OpRestore, "ann")
	if err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(rop.ID, store.OpDone, "")
	e.wantVM(vm.ID, store.VMStopped, `restored from snapshot "before"`)
	if d, _ := f.read(vm.ID); d != "file" {
		t.Fatalf("after the restore the disk holds %q, want the file back", d)
	}
	if s := e.snapState(snap.ID); s.State != store.SnapReady || s.RestoredAt == nil {
		t.Fatalf("after the restore: %+v", s)
	}
	// A stopped VM's snapshot is crash-consistent (nothing to freeze).
	s2, op2 := e.snapOp(e.vm(vm.ID), "")
	o.Drain(ctx)
	e.wantOp(op2.ID, store.OpDone, "")
	if s := e.snapState(s2.ID); s.Consistency != store.SnapCrashConsists {
		t.Fatalf("stopped VM's snapshot: %+v", s)
	}
	_, dop, err := e.st.BeginSnapshotOperation(ctx, snap.ID, store.OpSnapshotDelete, "ann")
	if err != nil {
		t.Fatal(err)
	}
	o.Drain(ctx)
	e.wantOp(dop.ID, store.OpDone, "")
	if _, err := e.st.GetSnapshot(ctx, snap.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted snapshot's row: %v", err)
	}
	if _, n := f.read(vm.ID); n != 1 {
		t.Fatalf("%d snapshots on the disk, want 1", n)
	}
}

// gpuvmd killed at each step of a snapshot, a restore and a delete: the
// next round finishes it, with one snapshot on the disk, never two, and
// the rows and the VM saying what happened.
func TestSnapshotCrashAtEachStep(t *testing.T) {
	for _, point := range SnapshotHooks {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t, "l40sx4")
			ctx := context.Background()
			f := newSnapHV(e.hv)
			vm, _ := e.submit("ann", "l40s-seat", "vm1")
			e.orchWith(f).Drain(ctx)
			f.write(vm.ID, "file")
			crashes := 0
			crashing := func() *Orchestrator {
				o := e.orchWith(f)
				o.life.testHook = func(_, p string) error {
					if p == point {
						crashes++
						return errCrash
					}
					return nil
				}
				return o
			}
			resume := func() {
				t.Helper()
				o := e.orchWith(f)
				if _, err := o.Reconcile(ctx); err != nil {
					t.Fatal(err)
				}
				o.Drain(ctx)
			}
			snap, op := e.snapOp(e.vm(vm.ID), "x")
			crashing().Drain(ctx)
			resume()
			e.wantOp(op.ID, store.OpDone, "")
			if s := e.snapState(snap.ID); s.State != store.SnapReady {
				t.Fatalf("snapshot %+v", s)
			}
			if f.takes != 1 {
				t.Fatalf("the disk was snapshotted %d times", f.takes)
			}
			e.action(e.vm(vm.ID), store.OpStop)
			e.orchWith(f).Drain(ctx)
			f.write(vm.ID, "")
			_, rop, err := e.st.BeginSnapshotOperation(ctx, snap.ID, store.OpRestore, "ann")
			if err != nil {
				t.Fatal(err)
			}
			crashing().Drain(ctx)
			if point == HookRestoring || point == HookRestored {
				if got := e.op(rop.ID); got.Finished() {
					t.Fatalf("killed at %q, the restore is %s", point, got.State)
				}
				e.wantVM(vm.ID, store.VMStopped, "restoring from snapshot")
			}
			resume()
			e.wantOp(rop.ID, store.OpDone, "")
			e.wantVM(vm.ID, store.VMStopped, "restored from snapshot")
			if d, _ := f.read(vm.ID); d != "file" {
				t.Fatalf("disk %q after the restore", d)
			}
			_, dop, err := e.st.BeginSnapshotOperation(ctx, snap.ID, store.OpSnapshotDelete, "ann")
			if err != nil {
				t.Fatal(err)
			}
			crashing().Drain(ctx)
			resume()
			e.wantOp(dop.ID, store.OpDone, "")
			if _, n := f.read(vm.ID); n != 0 {
				t.Fatalf("%d snapshots left on the disk", n)
			}
			if _, err := e.st.GetSnapshot(ctx, snap.ID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("row after the delete: %v", err)
			}
			if crashes != 1 {
				t.Fatalf("killed %d times at %q, want once", crashes, point)
			}
			if strings.Contains(e.logs.String(), "not this installation") {
				t.Fatal("the tag was taken for another installation's")
			}
		})
	}
}

// Expiry removes the snapshots older than the owner's expire_after, the
// oldest first, and nothing younger; the rows of a deleted VM's snapshots
// go too.
func TestSnapshotExpiry(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2030, 5, 1, 9, 0, 0, 0, time.UTC)
	e.useClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	half := 30 * time.Minute
	e.cfg.Policy.Defaults.Snapshots = config.Snapshots{ExpireAfter: &half, Rule: "policy defaults"}
	f := newSnapHV(e.hv)
	o := e.orchWith(f)
	vm, _ := e.submit("ann", "l40s-seat", "vm1")
	o.Drain(ctx)
	old, _ := e.snapOp(e.vm(vm.ID), "old")
	o.Drain(ctx)
	advance(20 * time.Minute)
	young, _ := e.snapOp(e.vm(vm.ID), "young")
	o.Drain(ctx)
	advance(20 * time.Minute) // old is 40 minutes old, young 20 (the lease runs 2h)
	rep, err := o.ApplyRules(ctx)
	if err != nil || len(rep.Expired) != 1 || !strings.Contains(rep.Expired[0], old.ID) {
		t.Fatalf("expired %v, %v; want %s only", rep.Expired, err, old.ID)
	}
	o.Drain(ctx)
	if _, err := e.st.GetSnapshot(ctx, old.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the expired snapshot: %v", err)
	}
	if s := e.snapState(young.ID); s.State != store.SnapReady {
		t.Fatalf("the young one: %+v", s)
	}
	if _, n := f.read(vm.ID); n != 1 {
		t.Fatalf("%d snapshots on the disk, want 1", n)
	}
	if rep, _ := o.ApplyRules(ctx); len(rep.Expired) != 0 {
		t.Fatalf("nothing more is due, expired %v", rep.Expired)
	}
	// Due, but the VM is in a state where a deletion cannot be done: no
	// operation is started (one a round, each failing, before).
	advance(20 * time.Minute) // young is 40 minutes old
	cur := e.vm(vm.ID)
	if _, err := e.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: store.VMFailed, StateReason: "test"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if rep, err := o.ApplyRules(ctx); err != nil || len(rep.Expired) != 0 {
			t.Fatalf("VM failed: expired %v, %v; want none started", rep.Expired, err)
		}
	}
	if ops, _ := e.st.ListUnfinishedOperations(ctx); len(ops) != 0 {
		t.Fatalf("VM failed: %d operations started, want none", len(ops))
	}
	// Deleted with its VM: the row goes (its disk went with the VM).
	e.deleteOp(e.vm(vm.ID))
	o.Drain(ctx)
	if _, err := o.ApplyRules(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.GetSnapshot(ctx, young.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted VM's snapshot row: %v", err)
	}
}
