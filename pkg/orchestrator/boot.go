package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
	"golang.org/x/sync/errgroup"
)

// A VM whose domain has started is running in phase "booting" until its
// guest is up, then "ready". Up means the guest has an IP address: in the
// DHCP leases of its libvirt network or, failing that, from its QEMU guest
// agent (Guests). A guest that shows none within BootTimeout (no network,
// no agent, a static address on a bridge) is ready anyway, and its reason
// says so. The phase is the VM row's: a gpuvmd that restarts finds its
// booting VMs again (watchBoots) and goes on watching them.

// Guests tells whether a started VM's guest is up (a *hypervisor.Conn):
// its IP addresses, none (nil, nil) while it has none.
type Guests interface {
	Addresses(ctx context.Context, uuid string) ([]hypervisor.Address, error)
}

// CloudInitGuests also read what cloud-init reported in a guest, through
// its QEMU guest agent (a *hypervisor.Conn does). A VM whose profile has a
// cloud_init block is watched after it is ready until its cloud-init has
// finished: a failure becomes its reason and is logged; a guest whose
// agent never answers (the tiny guest has none) is given up after
// BootTimeout, quietly. The watch is this gpuvmd's: one that restarts does
// not take it up again.
type CloudInitGuests interface {
	CloudInitStatus(ctx context.Context, uuid string) (hypervisor.CloudInitStatus, error)
}

// cloudInitCheck is how often the ready VMs' cloud-init is looked at: each
// look is a few guest-agent commands.
const cloudInitCheck = 5 * time.Second

// CloudInitFailedReason is the reason of a ready VM whose cloud-init
// reported errors.
func CloudInitFailedReason(errs []string) string {
	const most = 3
	shown := errs
	if len(shown) > most {
		shown = shown[:most]
	}
	r := "cloud-init failed in the guest: " + strings.Join(shown, "; ")
	if len(errs) > most {
		r += fmt.Sprintf(" (and %d more)", len(errs)-most)
	}
	return r
}

// Defaults of Config.BootTimeout and Config.BootCheck.
const (
	DefaultBootTimeout = 5 * time.Minute
	DefaultBootCheck   = 2 * time.Second
)

// bootQueryTimeout bounds one look at a guest's addresses: a guest agent
// that hangs must not hold up the other booting VMs for long.
const bootQueryTimeout = 10 * time.Second

// BootTimeoutReason is the reason of a VM that was made ready because its
// guest reported no address within d.
func BootTimeoutReason(d time.Duration) string {
	return "the guest reported no address within " + shortDuration(d)
}

// shortDuration writes d without its zero tails: 5m, 1h30m, 90s → 1m30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// bootWatch is the set of this orchestrator's booting VMs: ID → when they
// began booting (for a VM found booting after a restart, when its row was
// last written: its timeout may then run a little late, never early).
type bootWatch struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// add watches a VM from since, unless it is watched already.
func (b *bootWatch) add(vmID string, since time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.since == nil {
		b.since = map[string]time.Time{}
	}
	if _, ok := b.since[vmID]; !ok {
		b.since[vmID] = since
	}
}

func (b *bootWatch) remove(vmID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.since, vmID)
}

// list is the watched VMs, by ID.
func (b *bootWatch) list() map[string]time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]time.Time, len(b.since))
	for id, t := range b.since {
		out[id] = t
	}
	return out
}

// startedPhase is the phase of a VM whose domain has just started:
// booting while guests are watched, else ready.
func (lc *lifecycle) startedPhase() string {
	if lc.guests == nil {
		return api.PhaseReady
	}
	return api.PhaseBooting
}

// booting has the watcher follow a VM that the caller has just moved to
// phase booting.
func (lc *lifecycle) booting(vm *store.VM) {
	if vm.State == store.VMRunning && vm.Phase == api.PhaseBooting {
		lc.boots.add(vm.ID, vm.UpdatedAt)
	}
}

// watchBoots follows the booting VMs of this host until ctx ends: those a
// previous gpuvmd left booting (looked for at once and every
// ReconcileEvery) and those this one starts, every BootCheck.
func (lc *lifecycle) watchBoots(ctx context.Context) {
	tick := time.NewTicker(lc.settings().BootCheck)
	defer tick.Stop()
	rescan := time.NewTicker(lc.settings().Rescan)
	defer rescan.Stop()
	if err := lc.findBooting(ctx); err != nil && ctx.Err() == nil {
		lc.log.Error("look for booting VMs", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-rescan.C:
			if err := lc.findBooting(ctx); err != nil && ctx.Err() == nil {
				lc.log.Error("look for booting VMs", "err", err)
			}
		}
		lc.checkBoots(ctx)
	}
}

// findBooting adds the booting VMs of this host the watcher does not know
// of: those a gpuvmd that stopped left booting.
func (lc *lifecycle) findBooting(ctx context.Context) error {
	vms, err := store.AllVMs(ctx, lc.st, store.VMFilter{States: []string{store.VMRunning}, Host: lc.host})
	if err != nil {
		return fmt.Errorf("list the running VMs: %w", err)
	}
	for i := range vms {
		lc.booting(&vms[i])
	}
	return nil
}

// bootChecks is how many booting VMs are looked at at once: a look may wait
// for the guest agent (bootQueryTimeout) and for a desktop port that drops
// packets (desktopDialTimeout), and one slow guest must not hold the others'
// ready back.
const bootChecks = 8

// checkBoots looks once at every watched VM, oldest boot first, several at
// once: a VM whose guest has an address, or whose boot timeout has passed,
// is made ready; a VM no longer booting (stopped, deleted, failed) is
// dropped.
func (lc *lifecycle) checkBoots(ctx context.Context) {
	watched := lc.boots.list()
	ids := make([]string, 0, len(watched))
	for id := range watched {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return watched[ids[i]].Before(watched[ids[j]]) })
	var g errgroup.Group
	g.SetLimit(bootChecks)
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			lc.checkWatched(ctx, id, watched[id])
			return nil
		})
	}
	_ = g.Wait()
	if ctx.Err() != nil {
		return
	}
	lc.checkCloudInits(ctx)
}

// checkCloudInits looks once at every ready VM whose cloud-init has not
// reported: one that finished is dropped, with its errors as the VM's
// reason; one whose guest cannot say within BootTimeout of its ready is
// dropped quietly; one that is no longer running is dropped.
func (lc *lifecycle) checkCloudInits(ctx context.Context) {
	ci, ok := lc.guests.(CloudInitGuests)
	if !ok {
		return
	}
	now := time.Now()
	if now.Before(lc.initsNext) {
		return
	}
	lc.initsNext = now.Add(cloudInitCheck)
	for id, since := range lc.inits.list() {
		if ctx.Err() != nil {
			return
		}
		vm, err := lc.st.GetVM(ctx, id)
		if err != nil || vm.State != store.VMRunning || vm.Phase != api.PhaseReady {
			if err == nil || errors.Is(err, store.ErrNotFound) {
				lc.inits.remove(id)
			}
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, bootQueryTimeout)
		st, err := ci.CloudInitStatus(qctx, id)
		cancel()
		switch {
		case err == nil && st.Done:
		case lc.st.Now().Sub(since) >= lc.settings().BootTimeout:
			lc.inits.remove(id)
			lc.log.Debug("cloud-init's result not read: given up", "vm", id, "name", vm.Name, "err", err)
			continue
		default:
			continue // not finished, or the agent not up yet: the next look
		}
		if len(st.Errors) == 0 {
			lc.inits.remove(id)
			lc.log.Info("cloud-init finished in the guest", "vm", id, "name", vm.Name, "after_ready", lc.st.Now().Sub(since).Round(time.Second))
			continue
		}
		reason := CloudInitFailedReason(st.Errors)
		_, err = lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: api.PhaseReady, StateReason: reason})
		if errors.Is(err, store.ErrConflict) {
			continue // changed meanwhile: the next look reads it again
		}
		if err != nil {
			lc.log.Error("record a guest's cloud-init failure", "vm", id, "err", err)
			continue
		}
		lc.inits.remove(id)
		lc.log.Warn("cloud-init failed in the guest", "vm", id, "name", vm.Name, "owner", vm.Owner, "errors", st.Errors)
	}
}

// checkWatched looks at one watched VM: dropped when it is gone or no
// longer booting, else checkBoot.
func (lc *lifecycle) checkWatched(ctx context.Context, id string, since time.Time) {
	vm, err := lc.st.GetVM(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		lc.boots.remove(id)
		return
	case err != nil:
		lc.log.Error("read a booting VM", "vm", id, "err", err)
		return
	}
	if vm.State != store.VMRunning || vm.Phase != api.PhaseBooting {
		lc.boots.remove(id)
		return
	}
	if err := lc.checkBoot(ctx, vm, since); err != nil && ctx.Err() == nil {
		lc.log.Error("mark a booted VM ready", "vm", id, "err", err)
	}
}

// checkBoot makes a booting VM ready when its guest has an address or its
// boot began BootTimeout ago or more.
func (lc *lifecycle) checkBoot(ctx context.Context, vm *store.VM, since time.Time) error {
	var addrs []hypervisor.Address
	var qerr error
	if lc.guests != nil {
		qctx, cancel := context.WithTimeout(ctx, bootQueryTimeout)
		addrs, qerr = lc.guests.Addresses(qctx, vm.ID)
		cancel()
	}
	reason := ""
	switch {
	case len(addrs) > 0:
		wait, why := lc.desktopReady(ctx, lc.settings().Profiles[vm.Profile], addrs, since)
		if wait {
			return lc.stillBooting(ctx, vm, why)
		}
		reason = why
	case lc.guests == nil:
		// Guests are not watched (any more): nothing to wait for.
	case lc.st.Now().Sub(since) >= lc.settings().BootTimeout:
		reason = BootTimeoutReason(lc.settings().BootTimeout)
	default:
		switch {
		case qerr == nil || ctx.Err() != nil:
		case hypervisor.IsNotFound(qerr):
			// The domain is gone: the reconciler marks the VM failed.
			lc.log.Debug("a booting VM has no domain", "vm", vm.ID, "name", vm.Name)
		default:
			// Not fatal: the next look may answer; the timeout bounds it.
			lc.log.Warn("could not read a booting guest's addresses", "vm", vm.ID, "name", vm.Name, "err", qerr)
		}
		return nil
	}
	if strings.HasPrefix(vm.StateReason, hypervisor.SeedNotAttached) {
		// The create's note that the VM runs without its seed stays.
		reason = strings.TrimSuffix(vm.StateReason+"; "+reason, "; ")
	}
	_, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: api.PhaseReady, StateReason: reason})
	if errors.Is(err, store.ErrConflict) {
		return nil // changed meanwhile (an extend, a stop): the next look reads it again
	}
	if err != nil {
		return err
	}
	lc.boots.remove(vm.ID)
	if p := lc.settings().Profiles[vm.Profile]; p != nil && p.CloudInit != nil && (reason == "" || len(addrs) > 0) {
		lc.inits.add(vm.ID, lc.st.Now())
	}
	if reason != "" && len(addrs) > 0 {
		lc.log.Warn("VM ready without its desktop", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "reason", reason)
		return nil
	}
	if reason != "" {
		lc.log.Warn("VM ready without a guest address", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "reason", reason, "query_err", qerr)
		return nil
	}
	shown := make([]string, len(addrs))
	for i, a := range addrs {
		shown[i] = a.String() + " (" + string(a.Source) + ")"
	}
	lc.log.Info("VM ready: its guest is up", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner, "addresses", shown,
		"booted_in", lc.st.Now().Sub(since).Round(time.Second))
	return nil
}

// stillBooting keeps a booting VM booting, with why as its reason (written
// once, when it changes).
func (lc *lifecycle) stillBooting(ctx context.Context, vm *store.VM, why string) error {
	if vm.StateReason == why {
		return nil
	}
	_, err := lc.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Phase: api.PhaseBooting, StateReason: why})
	if errors.Is(err, store.ErrConflict) {
		return nil // changed meanwhile: the next look reads it again
	}
	if err == nil {
		lc.log.Info("guest up; waiting for its desktop", "vm", vm.ID, "name", vm.Name, "reason", why)
	}
	return err
}
