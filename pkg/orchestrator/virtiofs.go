package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"sync"

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
// reason stays, which the next start of the VM replaces.

// VirtiofsReasonPrefix starts the state reason of a VM whose virtiofs
// daemon died.
const VirtiofsReasonPrefix = "the file server of its home and shares (virtiofsd) stopped"

// domainIDs is a hypervisor that tells a running domain's id
// (*hypervisor.Conn).
type domainIDs interface {
	DomainID(ctx context.Context, uuid string) (int, error)
}

// virtiofsWatch is what the reconciler keeps between reconciles.
type virtiofsWatch struct {
	dirs homes.LibvirtDirs
	mu   sync.Mutex
	told map[string]bool // vm|pid file|pid
}

func (w *virtiofsWatch) was(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.told[key]
}

func (w *virtiofsWatch) tell(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.told == nil {
		w.told = map[string]bool{}
	}
	w.told[key] = true
}

// WithLibvirtDirs has the reconciler look for libvirt's virtiofs daemons
// in dirs instead of the system libvirtd's (tests: a fake process table).
func WithLibvirtDirs(dirs homes.LibvirtDirs) Option {
	return func(o *options) { o.libvirtDirs = &dirs }
}

// checkVirtiofs marks the running VMs of this host whose virtiofs daemon
// died and tells their owners; it returns what it could not judge.
func (rc *reconciler) checkVirtiofs(ctx context.Context) []error {
	ids, ok := rc.hv.(domainIDs)
	if !ok {
		return nil
	}
	running, err := listVMs(ctx, rc.st, store.VMFilter{States: []string{store.VMRunning}, Host: rc.host})
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

// virtiofsDied marks vm and tells its owner that daemon d died, once.
func (rc *reconciler) virtiofsDied(ctx context.Context, vm *store.VM, d homes.Daemon) error {
	key := fmt.Sprintf("%s|%s|%d", vm.ID, d.PIDFile, d.PID)
	if rc.virtiofs.was(key) {
		return nil
	}
	if strings.HasPrefix(vm.StateReason, VirtiofsReasonPrefix) {
		rc.virtiofs.tell(key) // told before this gpuvmd started
		return nil
	}
	reason := fmt.Sprintf("%s (%s: %s): its home and shares hang in the guest, and the files are safe on the host; stop and start the VM to get them back ('gpuvm stop %s', then 'gpuvm start %s')",
		VirtiofsReasonPrefix, d.Alias, d.Why, vm.Name, vm.Name)
	rc.log.Warn("a VM's virtiofs daemon died: its mounts hang in the guest until the VM is stopped and started",
		"vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "device", d.Alias, "pid", d.PID, "pid_file", d.PIDFile, "why", d.Why)
	if _, err := rc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: vm.State, Phase: vm.Phase, StateReason: reason}); err != nil {
		return fmt.Errorf("mark vm %s (virtiofs daemon died): %w", vm.ID, err)
	}
	n := api.VMWarningPayload{Kind: api.WarningVirtiofs, Action: api.NoticeNone, At: rc.st.Now(), Reason: reason}
	rc.virtiofs.tell(key)
	if err := rc.st.AppendEvent(ctx, warningEvent(vm, n)); err != nil {
		return fmt.Errorf("tell the owner of vm %s its virtiofs daemon died: %w", vm.ID, err)
	}
	return nil
}
