package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// A VM's home and shares reach its guest through virtiofs daemons that
// libvirt starts with the domain and stops with it; nothing restarts one
// that dies, and the guest's mount then hangs. At each reconcile the
// daemons of every running VM of this host are looked at (homes.Daemons);
// for a dead one the VM is marked — its state reason says what happened
// and how to recover, which gpuvm show and the portal show — and its owner
// gets a vm.warning (kind virtiofs) once per death: not again while the
// reason stays, which the next start of the VM replaces. Between
// reconciles, a watch looks every Config.VirtiofsCheck while homes or
// shares are configured.

// VirtiofsReasonPrefix starts the state reason of a VM whose virtiofs
// daemon died.
const VirtiofsReasonPrefix = "the file server of its home and shares (virtiofsd) stopped"

// domainIDs is a hypervisor that tells a running domain's id
// (*hypervisor.Conn).
type domainIDs interface {
	DomainID(ctx context.Context, uuid string) (int, error)
}

// virtiofsWatch is where the reconciler looks for the daemons: system,
// the system libvirtd's directories, looked at only when the hypervisor is
// this machine's system libvirtd (localSystem).
type virtiofsWatch struct {
	dirs   homes.LibvirtDirs
	system bool
}

// localSystem is a hypervisor that says whether it is this machine's
// system libvirtd (*hypervisor.Conn).
type localSystem interface{ LocalSystem() bool }

// WithLibvirtDirs has the reconciler look for libvirt's virtiofs daemons
// in dirs instead of the system libvirtd's (tests: a fake process table).
func WithLibvirtDirs(dirs homes.LibvirtDirs) Option {
	return func(o *options) { o.libvirtDirs = &dirs }
}

// watchVirtiofs looks at the virtiofs daemons every interval until ctx
// ends, while homes or shares are configured, a round or a reconcile not
// running meanwhile. What it cannot judge is logged at debug level: the
// next reconcile reports it.
func (rc *reconciler) watchVirtiofs(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !rc.settings().Virtiofs {
			continue
		}
		rc.roundMu.Lock()
		errs := rc.checkVirtiofs(ctx)
		rc.roundMu.Unlock()
		if len(errs) > 0 {
			rc.log.Debug("virtiofs daemons not judged", "err", errors.Join(errs...))
		}
	}
}

// checkVirtiofs marks the running VMs of this host whose virtiofs daemon
// died and tells their owners; it returns what it could not judge.
func (rc *reconciler) checkVirtiofs(ctx context.Context) []error {
	ids, ok := rc.hv.(domainIDs)
	if !ok {
		return nil
	}
	if l, ok := rc.hv.(localSystem); rc.virtiofs.system && (!ok || !l.LocalSystem()) {
		return nil // another machine's, or a session's: not this /proc's to judge
	}
	running, err := store.AllVMs(ctx, rc.st, store.VMFilter{States: []string{store.VMRunning}, Host: rc.host})
	if err != nil {
		return []error{err}
	}
	var errs []error
	for i := range running {
		vm := &running[i]
		if rc.busy.is(vm.ID) {
			continue
		}
		id, err := ids.DomainID(ctx, vm.ID)
		if err != nil || id == 0 {
			continue // vanished (judged above) or not running: nothing served
		}
		daemons, err := homes.Daemons(rc.virtiofs.dirs, id, rc.names.of(vm.ID))
		if err != nil {
			errs = append(errs, fmt.Errorf("virtiofs daemons of vm %s: %w", vm.ID, err))
		}
		for _, d := range daemons {
			if d.Alive {
				continue
			}
			if err := rc.virtiofsDied(ctx, vm, d); err != nil {
				errs = append(errs, err)
			}
			break // one notice per VM: the recovery is the same
		}
	}
	return errs
}

// virtiofsDied marks vm and tells its owner that daemon d died, in one
// transaction: once, since the VM's reason says it until its next start.
func (rc *reconciler) virtiofsDied(ctx context.Context, vm *store.VM, d homes.Daemon) error {
	if strings.HasPrefix(vm.StateReason, VirtiofsReasonPrefix) {
		return nil // told already
	}
	reason := fmt.Sprintf("%s (%s: %s): its home and shares hang in the guest, and the files are safe on the host; stop and start the VM to get them back ('gpuvm stop %s', then 'gpuvm start %s')",
		VirtiofsReasonPrefix, d.Alias, d.Why, vm.Name, vm.Name)
	rc.log.Warn("a VM's virtiofs daemon died: its mounts hang in the guest until the VM is stopped and started",
		"vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "device", d.Alias, "pid", d.PID, "pid_file", d.PIDFile, "why", d.Why)
	n := api.VMWarningPayload{Kind: api.WarningVirtiofs, Action: api.NoticeNone, At: rc.st.Now(), Reason: reason}
	err := rc.st.Tx(ctx, func(tx *store.Store) error {
		if _, err := tx.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: vm.State, Phase: vm.Phase, StateReason: reason}); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, warningEvent(vm, n))
	})
	if err != nil {
		return fmt.Errorf("mark vm %s and tell its owner (virtiofs daemon died): %w", vm.ID, err)
	}
	return nil
}
