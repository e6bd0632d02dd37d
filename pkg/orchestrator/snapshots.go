package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Disk snapshots (docs/snapshots.md): snapshot, restore and delete are
// operations of the VM like stop and start, their intent written first (the
// snapshot's row and its operation, in one transaction, by the API or the
// rules loop's expiry), each step recorded before it is done, so that a
// gpuvmd killed anywhere resumes the operation in the next dispatch round:
//
//   - snapshot: a tag already on the disk is not taken again, and the
//     snapshot is then recorded crash-consistent (whether the freeze held
//     cannot be proven); a guest left frozen by the kill is thawed first;
//   - restore (the VM stopped): the revert is run again (setting the disk
//     back to the same snapshot twice is the same as once); the VM's state
//     reason says it is being restored, then that it was, or why not;
//   - delete: removing a tag that is gone is no error; the row goes last.
//
// Nothing is removed from a disk unless its tag is the one this
// installation made for that row (store.SnapshotTag).
const (
	StepSnapshotDisk = "snapshot disk"
	StepRestoreDisk  = "restore disk"
	StepDeleteSnap   = "delete disk snapshot"

	HookSnapshotting  = "snapshotting"     // snapshot: row and operation written, the disk not yet touched
	HookSnapshotTaken = "snapshot taken"   // snapshot: on the disk, row not yet ready
	HookRestoring     = "restoring"        // restore: VM's reason says restoring, disk not yet reverted
	HookRestored      = "restored"         // restore: disk reverted, row and VM not yet updated
	HookSnapDeleted   = "snapshot deleted" // delete: gone from the disk, row not yet removed
)

// SnapshotHooks lists the hook points of the snapshot operations in order.
// They are not in HookPoints, whose SIGKILL test (test/e2e) runs on
// libvirt's test driver without disk files; test/e2e's snapshot crash test
// kills gpuvmd at them (PausePoints) with the overlay a qcow2 file
// (hypervisor.WithTestDiskDir), and the unit tests stop at them with
// WithHook.
var SnapshotHooks = []string{HookSnapshotting, HookSnapshotTaken, HookRestoring, HookRestored, HookSnapDeleted}

// DiskSnapshots is what the snapshot operations ask of the hypervisor (a
// *hypervisor.Conn); a Hypervisor without it fails them.
type DiskSnapshots interface {
	SnapshotDisk(ctx context.Context, uuid, tag string) (hypervisor.SnapshotResult, error)
	RevertDisk(ctx context.Context, uuid, tag string) error
	DeleteDiskSnapshot(ctx context.Context, uuid, tag string) error
	ThawFS(ctx context.Context, uuid string) error
}

// snapshotStore is what they ask of the database (a *store.Store).
type snapshotStore interface {
	SnapshotOfOperation(ctx context.Context, opID string) (*store.Snapshot, error)
	SetSnapshotState(ctx context.Context, id, state string, from []string, u store.SnapshotUpdate) error
	RemoveSnapshot(ctx context.Context, id string) error
}

// snapshotName names a snapshot for people: its label and id.
func snapshotName(s *store.Snapshot) string {
	if s.Label != "" {
		return fmt.Sprintf("%q (%s)", s.Label, s.ID)
	}
	return s.ID
}

// runSnapshotOp carries out a snapshot, restore or delete operation.
func (lc *lifecycle) runSnapshotOp(ctx context.Context, vm *store.VM, op *store.Operation) error {
	vm, op, done, err := lc.fresh(ctx, vm, op)
	if err != nil || done {
		return err
	}
	ss, ok1 := lc.st.(snapshotStore)
	ds, ok2 := lc.hv.(DiskSnapshots)
	if !ok1 || !ok2 {
		lc.finishAction(ctx, vm, op, errors.New("this server's hypervisor or database cannot take disk snapshots"))
		return nil
	}
	snap, err := ss.SnapshotOfOperation(ctx, op.ID)
	if errors.Is(err, store.ErrNotFound) {
		lc.finishAction(ctx, vm, op, errors.New("its snapshot is gone"))
		return nil
	} else if err != nil {
		return err
	}
	if want := store.SnapshotTag(lc.installation, snap.ID); lc.installation != "" && snap.Tag != want {
		// Not provably this installation's: touch nothing.
		lc.log.Error("snapshot's tag is not this installation's; left alone", "snapshot", snap.ID, "tag", snap.Tag, "installation", lc.installation)
		lc.finishAction(ctx, vm, op, fmt.Errorf("snapshot %s was not made by this installation (tag %s)", snap.ID, snap.Tag))
		return nil
	}
	switch op.Kind {
	case store.OpSnapshot:
		return lc.runSnapshot(ctx, vm, op, snap, ss, ds)
	case store.OpRestore:
		return lc.runRestore(ctx, vm, op, snap, ss, ds)
	}
	return lc.runSnapshotDelete(ctx, vm, op, snap, ss, ds)
}

func (lc *lifecycle) runSnapshot(ctx context.Context, vm *store.VM, op *store.Operation, snap *store.Snapshot, ss snapshotStore, ds DiskSnapshots) error {
	fail := func(cause error) error {
		if err := ss.SetSnapshotState(ctx, snap.ID, store.SnapFailed, []string{store.SnapCreating}, store.SnapshotUpdate{Error: reasonOf(cause)}); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		lc.finishAction(ctx, vm, op, cause)
		return nil
	}
	if !holdsDisk(vm) {
		return fail(fmt.Errorf("the VM is %s: only a running or stopped VM's disk can be snapshotted", vm.State))
	}
	resumed := op.Step == StepSnapshotDisk
	if err := lc.st.SetOperationStep(ctx, op.ID, StepSnapshotDisk); err != nil {
		return err
	}
	if resumed && vm.State == store.VMRunning {
		// A gpuvmd killed between a freeze and its thaw left the guest
		// frozen.
		if err := ds.ThawFS(ctx, vm.ID); err != nil {
			lc.log.Warn("thaw after an interrupted snapshot", "vm", vm.ID, "err", err)
		}
	}
	if err := lc.hook(vm.ID, HookSnapshotting); err != nil {
		return err
	}
	res, err := ds.SnapshotDisk(ctx, vm.ID, snap.Tag)
	if err != nil {
		if interrupted(ctx, err) {
			return err
		}
		return fail(err)
	}
	if err := lc.hook(vm.ID, HookSnapshotTaken); err != nil {
		return err
	}
	consistency := store.SnapCrashConsists
	if res.Quiesced {
		consistency = store.SnapQuiesced
	}
	if err := ss.SetSnapshotState(ctx, snap.ID, store.SnapReady, []string{store.SnapCreating}, store.SnapshotUpdate{Consistency: consistency}); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	lc.log.Info("disk snapshot taken", "vm", vm.ID, "snapshot", snap.ID, "consistency", consistency, "live", res.Live, "freeze", res.FreezeNote)
	lc.finishAction(ctx, vm, op, nil)
	return nil
}

// restoreReason is a stopped VM's state reason during and after a restore.
func restoreReason(snap *store.Snapshot, verb string, at time.Time) string {
	return fmt.Sprintf("%s snapshot %s at %s", verb, snapshotName(snap), at.UTC().Format(time.RFC3339))
}

func (lc *lifecycle) runRestore(ctx context.Context, vm *store.VM, op *store.Operation, snap *store.Snapshot, ss snapshotStore, ds DiskSnapshots) error {
	end := func(reason string, cause error) error {
		now := lc.st.Now()
		u := store.SnapshotUpdate{}
		if cause == nil {
			u.RestoredAt = &now
		}
		if err := ss.SetSnapshotState(ctx, snap.ID, store.SnapReady, []string{store.SnapRestoring}, u); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		if vm.State == store.VMStopped {
			if _, err := lc.setState(ctx, vm.ID, store.VMUpdate{State: store.VMStopped, Phase: vm.Phase, StateReason: reason}); err != nil {
				return err
			}
		}
		lc.finishAction(ctx, vm, op, cause)
		return nil
	}
	if vm.State != store.VMStopped {
		return end("", fmt.Errorf("the VM is %s: only a stopped VM's disk can be restored", vm.State))
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepRestoreDisk); err != nil {
		return err
	}
	next, err := lc.setState(ctx, vm.ID, store.VMUpdate{State: store.VMStopped, Phase: vm.Phase, StateReason: restoreReason(snap, "restoring from", lc.st.Now())})
	if err != nil {
		return err
	}
	vm = next
	if err := lc.hook(vm.ID, HookRestoring); err != nil {
		return err
	}
	if err := ds.RevertDisk(ctx, vm.ID, snap.Tag); err != nil {
		if interrupted(ctx, err) {
			return err
		}
		return end(restoreReason(snap, "could not restore from", lc.st.Now())+": "+reasonOf(err), err)
	}
	if err := lc.hook(vm.ID, HookRestored); err != nil {
		return err
	}
	lc.log.Info("disk restored from snapshot", "vm", vm.ID, "snapshot", snap.ID)
	return end(restoreReason(snap, "restored from", lc.st.Now()), nil)
}

func (lc *lifecycle) runSnapshotDelete(ctx context.Context, vm *store.VM, op *store.Operation, snap *store.Snapshot, ss snapshotStore, ds DiskSnapshots) error {
	if vm.State == store.VMDeleted {
		// Its disk, and the snapshot in it, went with the VM.
		if err := ss.RemoveSnapshot(ctx, snap.ID); err != nil {
			return err
		}
		lc.finishAction(ctx, vm, op, nil)
		return nil
	}
	// A delete that cannot be done puts the row back as it was: ready, or
	// failed (a failed snapshot was never taken, so has no consistency).
	back := store.SnapReady
	if snap.Consistency == "" {
		back = store.SnapFailed
	}
	if !holdsDisk(vm) {
		if err := ss.SetSnapshotState(ctx, snap.ID, back, []string{store.SnapDeleting}, store.SnapshotUpdate{}); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
		lc.finishAction(ctx, vm, op, fmt.Errorf("the VM is %s: a snapshot is deleted while it is running or stopped", vm.State))
		return nil
	}
	if err := lc.st.SetOperationStep(ctx, op.ID, StepDeleteSnap); err != nil {
		return err
	}
	if err := ds.DeleteDiskSnapshot(ctx, vm.ID, snap.Tag); err != nil {
		if interrupted(ctx, err) {
			return err
		}
		if serr := ss.SetSnapshotState(ctx, snap.ID, back, []string{store.SnapDeleting}, store.SnapshotUpdate{Error: reasonOf(err)}); serr != nil && !errors.Is(serr, store.ErrConflict) {
			return serr
		}
		lc.finishAction(ctx, vm, op, err)
		return nil
	}
	if err := lc.hook(vm.ID, HookSnapDeleted); err != nil {
		return err
	}
	if err := ss.RemoveSnapshot(ctx, snap.ID); err != nil {
		return err
	}
	lc.finishAction(ctx, vm, op, nil)
	return nil
}

// ByExpiry is who asks for the deletion of an expired snapshot.
const ByExpiry = "rule:snapshot-expiry"

// snapshotRulesStore is what the expiry asks of the database (a
// *store.Store).
type snapshotRulesStore interface {
	ListAllSnapshots(ctx context.Context) ([]store.Snapshot, error)
	BeginSnapshotOperation(ctx context.Context, snapID, kind, requestedBy string) (*store.Snapshot, *store.Operation, error)
	RemoveSnapshot(ctx context.Context, id string) error
}

// holdsDisk: the VM is running or stopped, the states in which its disk's
// snapshots are taken and deleted.
func holdsDisk(vm *store.VM) bool { return vm.State == store.VMRunning || vm.State == store.VMStopped }

// expiryRetry is how long after a failed deletion an expired snapshot's
// is tried again.
const expiryRetry = time.Hour

// expireSnapshots starts the deletion of every ready snapshot older than
// its owner's snapshots.expire_after, the oldest first, one per VM and
// round (a VM carries out one operation at a time); the deletion itself
// removes only a snapshot whose tag is this installation's. The rows of a
// deleted VM's snapshots, whose disk went with it, are removed.
func (r *round) expireSnapshots() {
	ss, ok := r.loop.st.(snapshotRulesStore)
	if !ok || r.cfg == nil {
		return
	}
	all, err := ss.ListAllSnapshots(r.ctx)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("snapshot expiry: %w", err))
		return
	}
	limits := map[string]*time.Duration{}
	limitOf := func(owner string) (*time.Duration, error) {
		if d, ok := limits[owner]; ok {
			return d, nil
		}
		u, err := r.loop.st.GetUser(r.ctx, owner)
		if err != nil {
			return nil, err
		}
		d := r.cfg.Policy.Effective(u.Name, u.Groups).Snapshots.ExpireAfter
		limits[owner] = d
		return d, nil
	}
	for i := range all {
		s := &all[i]
		vm, err := r.loop.st.GetVM(r.ctx, s.VMID)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("snapshot expiry: %w", err))
			continue
		}
		if vm.State == store.VMDeleted {
			if err := ss.RemoveSnapshot(r.ctx, s.ID); err != nil {
				r.errs = append(r.errs, err)
			}
			continue
		}
		if s.State != store.SnapReady || r.busy[vm.ID] {
			continue
		}
		// A snapshot is deleted while its VM is running or stopped; in
		// any other state (queued for a GPU again, failed, on a host that
		// is down) the deletion would fail at once, every round: it waits.
		// One whose deletion failed on the disk is tried again an hour
		// later, not every round.
		if !holdsDisk(vm) ||
			(s.Error != "" && r.now.Sub(s.UpdatedAt) < expiryRetry) {
			continue
		}
		d, err := limitOf(s.Owner)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("snapshot expiry of %s: %w", s.ID, err))
			continue
		}
		if d == nil || s.CreatedAt.Add(*d).After(r.now) {
			continue
		}
		if _, _, err := ss.BeginSnapshotOperation(r.ctx, s.ID, store.OpSnapshotDelete, ByExpiry); err != nil {
			r.errs = append(r.errs, fmt.Errorf("snapshot expiry of %s: %w", s.ID, err))
			continue
		}
		r.busy[vm.ID] = true
		r.rep.Expired = append(r.rep.Expired, vm.ID+" "+s.ID)
		r.loop.log.Info("rule of sharing: snapshot expired; deleting it", "vm", vm.ID, "name", vm.Name, "snapshot", s.ID,
			"label", s.Label, "taken", s.CreatedAt, "expire_after", d.String())
	}
}
