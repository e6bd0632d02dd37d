package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Report says what a Reconcile found and fixed.
type Report struct {
	// Resumed are the operations that were unfinished (interrupted by a
	// crash, or waiting) and were taken up again.
	Resumed []string
	// Vanished are the running VMs whose domain was gone: now failed.
	Vanished []string
	// LeakedDevices ("backend/device") were gpuvm's devices of no live VM:
	// removed.
	LeakedDevices []string
	// LeakedDomains were gpuvm's domains of no live VM: deleted.
	LeakedDomains []string
}

// Empty reports whether nothing needed fixing.
func (r Report) Empty() bool {
	return len(r.Resumed)+len(r.Vanished)+len(r.LeakedDevices)+len(r.LeakedDomains) == 0
}

func (r Report) log(l *slog.Logger) {
	if r.Empty() {
		l.Debug("reconciled: nothing to fix")
		return
	}
	l.Warn("reconciled", "resumed", r.Resumed, "vanished", r.Vanished, "leaked_devices", r.LeakedDevices, "leaked_domains", r.LeakedDomains)
}

// Reconcile brings the database and the host together, at start-up and
// periodically: it resumes every unfinished operation (a create, stop,
// start or reboot from the state its VM is in, a delete from the start;
// see actions.go), marks running VMs whose domain vanished as failed
// (freeing their GPU), and removes devices and domains gpuvm made for VMs
// that are not live. It runs in the caller's goroutine and logs and
// returns what it did.
func (o *Orchestrator) Reconcile(ctx context.Context) (Report, error) {
	var rep Report
	ops, err := o.st.ListUnfinishedOperations(ctx)
	if err != nil {
		return rep, err
	}
	for _, op := range ops {
		rep.Resumed = append(rep.Resumed, op.Kind+" "+op.ID+" of vm "+op.VMID)
	}
	o.dispatch(ctx, true)
	host, err := o.reconcileHost(ctx)
	rep.Vanished, rep.LeakedDevices, rep.LeakedDomains = host.Vanished, host.LeakedDevices, host.LeakedDomains
	rep.log(o.log)
	return rep, err
}

// liveForHost are the VM states whose devices and domain must exist.
var liveStates = []string{store.VMAllocating, store.VMCreating, store.VMRunning, store.VMStopping, store.VMStopped, store.VMDeleting}

func (o *Orchestrator) listVMs(ctx context.Context, f store.VMFilter) ([]store.VM, error) {
	var out []store.VM
	f.Limit = 1000
	for {
		page, err := o.st.ListVMs(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, page.VMs...)
		if page.Next == "" {
			return out, nil
		}
		f.After = page.Next
	}
}

// reconcileHost compares the host with the database (not the operations).
func (o *Orchestrator) reconcileHost(ctx context.Context) (Report, error) {
	o.roundMu.Lock()
	defer o.roundMu.Unlock()
	var rep Report
	var errs []error

	// Running VMs whose domain vanished.
	running, err := o.listVMs(ctx, store.VMFilter{States: []string{store.VMRunning}, Host: o.cfg.Host})
	if err != nil {
		return rep, err
	}
	for _, vm := range running {
		if o.isBusy(vm.ID) {
			continue
		}
		_, err := o.cfg.Hypervisor.Lookup(ctx, vm.ID)
		if err == nil {
			continue
		}
		if !hypervisor.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("look up the domain of vm %s: %w", vm.ID, err))
			continue
		}
		o.log.Warn("the domain of a running VM vanished; marking it failed", "vm", vm.ID, "name", vm.Name, "owner", vm.Owner)
		if err := o.rollback(ctx, vm.ID); err != nil {
			errs = append(errs, err)
		}
		if _, err := o.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMFailed, StateReason: "domain vanished"}); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Vanished = append(rep.Vanished, vm.ID)
	}

	// Devices and domains of VMs that are not live. Read the host first,
	// then the database: a VM made meanwhile is then live in the list.
	invs, invErrs := o.inventoriesOf(ctx, o.cfg.Backends.Names())
	errs = append(errs, invErrs...)
	doms, err := o.cfg.Hypervisor.List(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	// In a fleet a VM is live here only if it is placed here: this host's
	// devices and domains of VMs placed elsewhere (or queued again after
	// this node went down) are leaked.
	// A queued VM that has run (its lease end is set then) is one a start
	// queued for a GPU again: it keeps its domain and disk while it waits.
	liveFilter := store.VMFilter{States: append(slices.Clone(liveStates), store.VMQueued)}
	if o.cfg.Fleet != nil {
		liveFilter.Host = o.cfg.Host
	}
	liveVMs, err := o.listVMs(ctx, liveFilter)
	if err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	live, keepDomain := map[string]bool{}, map[string]bool{}
	for _, vm := range liveVMs {
		if vm.State == store.VMQueued {
			if vm.LeaseEnd != nil {
				keepDomain[vm.ID] = true
			}
			continue
		}
		live[vm.ID] = true
	}
	o.mu.Lock()
	for id := range o.busy {
		live[id] = true
	}
	o.mu.Unlock()
	for name, inv := range invs {
		b, _ := o.cfg.Backends.Backend(name)
		for _, d := range inv.Devices {
			if !d.Managed || live[d.VMUUID] {
				continue
			}
			o.log.Warn("removing a leaked device", "backend", name, "device", d.ID, "gpu", d.GPU, "vm", d.VMUUID)
			if err := b.Remove(ctx, backend.RemoveRequest{ID: d.ID, GPU: d.GPU}); err != nil && !errors.Is(err, backend.ErrNotFound) {
				errs = append(errs, fmt.Errorf("remove leaked device %s: %w", d.ID, err))
				continue
			}
			rep.LeakedDevices = append(rep.LeakedDevices, name+"/"+d.ID)
		}
	}
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, o.cfg.DomainPrefix) || live[d.Metadata.VMID] || keepDomain[d.Metadata.VMID] {
			continue
		}
		o.log.Warn("deleting a leaked domain", "domain", d.Name, "vm", d.Metadata.VMID)
		if err := o.cfg.Hypervisor.DeleteVM(ctx, d.UUID, o.cfg.ShutdownTimeout); err != nil && !hypervisor.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete leaked domain %s: %w", d.Name, err))
			continue
		}
		rep.LeakedDomains = append(rep.LeakedDomains, d.Name)
	}
	return rep, errors.Join(errs...)
}
