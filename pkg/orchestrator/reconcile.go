package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// reconciler brings the database and the host together: it marks running
// VMs whose domain vanished, removes the devices, domains and volumes gpuvm
// made for VMs that are not live, reports what looks like gpuvm's but is not
// provably this installation's (orphans.go), and follows libvirt's domain
// events. It leaves alone the VMs a worker is on.
type reconciler struct {
	// host and installation name this server and the gpuvm installation
	// (Config.Host, Config.Installation).
	host, installation string
	st                 reconcileStore
	log                *slog.Logger
	hv                 Hypervisor
	backends           backendSet
	// life gives a vanished VM's GPU back.
	life interface {
		vanish(ctx context.Context, vm store.VM) error
		restore(ctx context.Context, vm *store.VM, allocs []store.Allocation) (bool, error)
	}
	names domainNames
	busy  *busySet // the dispatcher's workers'
	// roundMu makes dispatch rounds and reconciles run one at a time.
	roundMu  *sync.Mutex
	settings func() reconcileSettings
	// orphans are what the last reconcile found that looks like gpuvm's
	// but is not provably this installation's (orphans.go).
	orphans orphanState
	// virtiofs are the dead virtiofs daemons already told (virtiofs.go).
	virtiofs *virtiofsWatch
}

// reconcileStore is what the reconciler asks of the database.
type reconcileStore interface {
	Now() time.Time
	GetVM(ctx context.Context, id string) (*store.VM, error)
	ListVMs(ctx context.Context, f store.VMFilter) (store.VMPage, error)
	ListVMRefs(ctx context.Context) ([]store.VMRef, error)
	ListLiveAllocations(ctx context.Context, host string) ([]store.Allocation, error)
	GetUser(ctx context.Context, name string) (*store.User, error)
	AdoptVM(ctx context.Context, vm *store.VM, devices []store.AdoptedDevice, adoptedBy string) error
	FireAlert(ctx context.Context, a *store.Alert) (fired bool, err error)
	ResolveAlert(ctx context.Context, rule, subject string, value float64, summary string, at time.Time) (*store.Alert, error)
	Tx(ctx context.Context, fn func(tx *store.Store) error) error
}

// reconcileSettings are the reconciler's settings, read at each reconcile.
type reconcileSettings struct {
	DomainPrefix    string
	ShutdownTimeout time.Duration
	// InFleet: this orchestrator is one node of a fleet (Config.Fleet).
	InFleet bool
	// Of the configuration in force:
	Profiles    map[string]*config.Profile
	StoragePool string
	// Virtiofs: homes or shares are configured, which VMs mount over
	// virtiofs.
	Virtiofs bool
}

// Report says what a Reconcile found and fixed.
type Report struct {
	// Resumed are the operations that were unfinished (interrupted by a
	// crash, or waiting) and were taken up again.
	Resumed []string
	// Vanished are the running VMs whose domain was gone: now failed.
	Vanished []string
	// Restarted are the running VMs whose devices the host had lost (a
	// reboot): made again, and their domains started (hostlost.go).
	Restarted []string
	// Requeued are those of them whose devices could not be made again:
	// queued for a GPU, a start pending.
	Requeued []string
	// LeakedDevices ("backend/device") were gpuvm's devices of no live VM:
	// removed.
	LeakedDevices []string
	// LeakedDomains were gpuvm's domains of no live VM: deleted.
	LeakedDomains []string
	// MissingDisks are the ready data disks of this host ("owner/name")
	// whose file the pool does not have (a backup restored without the
	// pool's files): kept, their error saying so (diskorphans.go).
	MissingDisks []string
	// Orphans is how many things look like gpuvm's but are not provably
	// this installation's to remove: left as they are, and reported
	// (Orchestrator.Orphans).
	Orphans int
}

// Empty reports whether nothing needed fixing.
func (r Report) Empty() bool {
	return len(r.Resumed)+len(r.Vanished)+len(r.Restarted)+len(r.Requeued)+len(r.LeakedDevices)+len(r.LeakedDomains)+len(r.MissingDisks) == 0
}

func (r Report) log(l *slog.Logger) {
	if r.Empty() {
		l.Debug("reconciled: nothing to fix")
		return
	}
	l.Warn("reconciled", "resumed", r.Resumed, "vanished", r.Vanished, "restarted", r.Restarted, "requeued", r.Requeued, "leaked_devices", r.LeakedDevices, "leaked_domains", r.LeakedDomains, "missing_disks", r.MissingDisks, "orphans", r.Orphans)
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
	ops, err := o.disp.st.ListUnfinishedOperations(ctx)
	if err != nil {
		return rep, err
	}
	for _, op := range ops {
		rep.Resumed = append(rep.Resumed, op.Kind+" "+op.ID+" of vm "+op.VMID)
	}
	o.disp.dispatch(ctx, true)
	host, err := o.rec.reconcileHost(ctx)
	rep.Vanished, rep.LeakedDevices, rep.LeakedDomains, rep.Orphans = host.Vanished, host.LeakedDevices, host.LeakedDomains, host.Orphans
	rep.Restarted, rep.Requeued, rep.MissingDisks = host.Restarted, host.Requeued, host.MissingDisks
	rep.log(o.log)
	return rep, err
}

// liveForHost are the VM states whose devices and domain must exist.
var liveStates = []string{store.VMAllocating, store.VMCreating, store.VMRunning, store.VMStopping, store.VMStopped, store.VMDeleting}

// vanished marks the running VMs of this host whose domain is gone as
// failed, giving their GPU back (lifecycle.vanish), and returns them; errs
// are the VMs it could not judge or mark, err a failure to list them.
func (rc *reconciler) vanished(ctx context.Context) (ids []string, errs []error, err error) {
	running, err := store.AllVMs(ctx, rc.st, store.VMFilter{States: []string{store.VMRunning}, Host: rc.host})
	if err != nil {
		return nil, nil, err
	}
	for _, vm := range running {
		if rc.busy.is(vm.ID) {
			continue
		}
		_, err := rc.hv.Lookup(ctx, vm.ID)
		if err == nil {
			continue
		}
		if !hypervisor.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("look up the domain of vm %s: %w", vm.ID, err))
			continue
		}
		if err := rc.life.vanish(ctx, vm); err != nil {
			errs = append(errs, err)
			continue
		}
		ids = append(ids, vm.ID)
	}
	return ids, errs, nil
}

// reconcileHost compares the host with the database (not the operations).
// It removes only what is provably this installation's and made for a VM
// that is not live (orphans.go says what that means); everything else that
// looks like gpuvm's is reported as an orphan and left as it is.
func (rc *reconciler) reconcileHost(ctx context.Context) (Report, error) {
	rc.roundMu.Lock()
	defer rc.roundMu.Unlock()
	var rep Report

	// Running VMs whose domain vanished.
	vanished, errs, err := rc.vanished(ctx)
	if err != nil {
		return rep, err
	}
	rep.Vanished = vanished

	// Running VMs whose virtiofs daemon died (virtiofs.go).
	errs = append(errs, rc.checkVirtiofs(ctx)...)

	// Running VMs whose devices the host lost (a reboot): made again and
	// started, or queued (hostlost.go). Before the devices are judged
	// below, so that a VM queued here has given its devices back.
	var lostErrs []error
	rep.Restarted, rep.Requeued, lostErrs = rc.restoreLost(ctx)
	errs = append(errs, lostErrs...)

	// Devices, domains and volumes. Read the host first, then the
	// database: a VM made meanwhile is then in the list.
	invs, invErrs := rc.backends.inventoriesOf(ctx, rc.backends.Names())
	errs = append(errs, invErrs...)
	doms, err := rc.hv.List(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	listedAt := rc.st.Now()
	pool, vols, listed, err := rc.poolVolumes(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	// Every VM that is not deleted (their disks are kept), of which the
	// live ones must have their devices and domain. In a fleet a VM is
	// live here only if it is placed here: this host's devices and domains
	// of VMs placed elsewhere (or queued again after this node went down)
	// are leaked. A queued VM that has run (its lease end is set then) is
	// one a start queued for a GPU again: it keeps its domain and disk
	// while it waits.
	vms, err := rc.st.ListVMRefs(ctx)
	if err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	live, keepDomain := map[string]bool{}, map[string]bool{}
	wantVolumes := map[string]bool{}
	for _, vm := range vms {
		name := rc.names.of(vm.ID)
		wantVolumes[hypervisor.OverlayName(name)], wantVolumes[hypervisor.SeedName(name)] = true, true
		switch {
		case vm.State == store.VMQueued:
			if vm.LeaseEnd != nil {
				keepDomain[vm.ID] = true
			}
		case slices.Contains(liveStates, vm.State) && (!rc.settings().InFleet || vm.Host == rc.host):
			live[vm.ID] = true
		}
	}
	for id := range rc.busy.all() {
		live[id] = true
	}
	// The devices the live allocations here recorded, and the VMs with an
	// allocation still waiting for its device.
	held, err := rc.st.ListLiveAllocations(ctx, rc.host)
	if err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	recorded, pending := map[string]bool{}, map[string]bool{}
	for _, a := range held {
		if a.DeviceID == "" {
			pending[a.VMID] = true
		} else {
			recorded[a.Backend+"/"+a.DeviceID] = true
		}
	}
	recs := &records{st: rc.st, seen: map[string]bool{}}
	var orphans []orphan
	for name, inv := range invs {
		b, _ := rc.backends.Backend(name)
		for _, d := range inv.Devices {
			if !d.Managed {
				continue
			}
			// A live VM's device that none of its allocations recorded,
			// while none waits for one, was made by an attempt whose
			// slots went elsewhere: leaked like any other.
			if live[d.VMUUID] && (rc.busy.is(d.VMUUID) || pending[d.VMUUID] || recorded[name+"/"+d.ID]) {
				continue
			}
			why, err := rc.whyOrphan(ctx, recs, d.Installation, d.VMUUID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if why != "" {
				orphans = append(orphans, rc.deviceOrphan(name, d, why))
				continue
			}
			rc.log.Warn("removing a leaked device", "backend", name, "device", d.ID, "gpu", d.GPU, "vm", d.VMUUID)
			if err := b.Remove(ctx, backend.RemoveRequest{ID: d.ID, GPU: d.GPU}); err != nil && !errors.Is(err, backend.ErrNotFound) {
				errs = append(errs, fmt.Errorf("remove leaked device %s: %w", d.ID, err))
				continue
			}
			rep.LeakedDevices = append(rep.LeakedDevices, name+"/"+d.ID)
		}
	}
	for _, d := range doms {
		for _, v := range d.Metadata.Volumes {
			if v.Pool == pool {
				wantVolumes[v.Name] = true
			}
		}
		// Only domains named as this gpuvmd names them are judged (a
		// test instance's prefix is its own).
		if !strings.HasPrefix(d.Name, rc.settings().DomainPrefix) || live[d.Metadata.VMID] || keepDomain[d.Metadata.VMID] {
			continue
		}
		why, err := rc.whyOrphan(ctx, recs, d.Metadata.Installation, d.Metadata.VMID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if why != "" {
			orphans = append(orphans, rc.domainOrphan(d, why))
			continue
		}
		rc.log.Warn("deleting a leaked domain", "domain", d.Name, "vm", d.Metadata.VMID)
		if err := rc.hv.DeleteVM(ctx, d.UUID, rc.settings().ShutdownTimeout); err != nil && !hypervisor.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete leaked domain %s: %w", d.Name, err))
			continue
		}
		rep.LeakedDomains = append(rep.LeakedDomains, d.Name)
	}
	volOrphans, volErrs := rc.volumeOrphans(ctx, pool, vols, wantVolumes)
	orphans, errs = append(orphans, volOrphans...), append(errs, volErrs...)
	if listed {
		var missErrs []error
		rep.MissingDisks, missErrs = rc.missingDisks(ctx, pool, vols, listedAt)
		errs = append(errs, missErrs...)
	}
	if err := rc.publishOrphans(ctx, orphans); err != nil {
		errs = append(errs, err)
	}
	rep.Orphans = len(orphans)
	return rep, errors.Join(errs...)
}

// volumeOrphans are the pool's volumes gpuvm's names claim that no VM
// wants (its disks and seeds, or those its domains name), and the data
// disks whose rows do not say they are this installation's
// (diskorphans.go). Nothing here removes a volume.
func (rc *reconciler) volumeOrphans(ctx context.Context, pool string, vols []string, want map[string]bool) ([]orphan, []error) {
	var orphans []orphan
	var errs []error
	for _, v := range vols {
		if rc.orphans.volumes.MatchString(v) && !want[v] {
			orphans = append(orphans, rc.volumeOrphan(pool, v))
			continue
		}
		o, ok, err := rc.diskOrphan(ctx, pool, v)
		if err != nil {
			errs = append(errs, err)
		} else if ok {
			orphans = append(orphans, o)
		}
	}
	return orphans, errs
}

func (rc *reconciler) deviceOrphan(backendName string, d backend.Device, why string) orphan {
	name := backendName + "/" + d.ID
	return orphan{Orphan: api.Orphan{ID: orphanID(api.OrphanDevice, rc.host, name), Kind: api.OrphanDevice, Name: name, Host: rc.host,
		GPU: d.GPU, VMID: d.VMUUID, Profile: cmp.Or(d.Profile, d.Type), Installation: d.Installation, Reason: why},
		backend: backendName, deviceID: d.ID, device: d}
}

func (rc *reconciler) domainOrphan(d hypervisor.Info, why string) orphan {
	m := d.Metadata
	mine := m.Installation == "" || m.Installation == rc.installation
	return orphan{Orphan: api.Orphan{ID: orphanID(api.OrphanDomain, rc.host, d.UUID), Kind: api.OrphanDomain, Name: d.Name, Host: rc.host,
		UUID: d.UUID, VMID: m.VMID, Owner: m.Owner, Profile: m.Profile, Installation: m.Installation, Reason: why,
		Adoptable: mine && m.VMID != "" && strings.EqualFold(m.VMID, d.UUID)}}
}

func (rc *reconciler) volumeOrphan(pool, name string) orphan {
	full := pool + "/" + name
	return orphan{Orphan: api.Orphan{ID: orphanID(api.OrphanVolume, rc.host, full), Kind: api.OrphanVolume, Name: full, Host: rc.host,
		Reason: "no VM of this installation and no domain refers to it"}, pool: pool, volume: name}
}

// domainEvents is the lifecycle event stream of a hypervisor
// (*hypervisor.Conn has it).
type domainEvents interface {
	Events(ctx context.Context) (<-chan hypervisor.Event, error)
}

// watchDomains follows libvirt's lifecycle events, so that a running VM
// whose domain is undefined behind gpuvm's back is noticed at once, not at
// the next periodic reconcile; after a lost connection it reconciles, since
// events in between are lost.
func (rc *reconciler) watchDomains(ctx context.Context) {
	rc.followDomains(ctx, rc.subscribeDomains(ctx))
}

// subscribeDomains starts the lifecycle event stream; nil when the
// hypervisor has none.
func (rc *reconciler) subscribeDomains(ctx context.Context) <-chan hypervisor.Event {
	src, ok := rc.hv.(domainEvents)
	if !ok {
		return nil
	}
	events, err := src.Events(ctx)
	if err != nil {
		rc.log.Warn("cannot follow libvirt's lifecycle events: a vanished domain is noticed at the next reconcile", "err", err)
		return nil
	}
	return events
}

func (rc *reconciler) followDomains(ctx context.Context, events <-chan hypervisor.Event) {
	for ev := range events {
		switch ev.Type {
		case hypervisor.EventUndefined:
			if err := rc.domainUndefined(ctx, ev); err != nil {
				rc.log.Error("handling an undefined domain", "domain", ev.Name, "vm", ev.VMID, "err", err)
			}
		case hypervisor.EventReconnected:
			if rep, err := rc.reconcileHost(ctx); err != nil {
				rc.log.Error("reconcile after libvirt reconnected", "err", err)
			} else {
				rep.log(rc.log)
			}
		}
	}
}

// domainUndefined marks the running VM of an undefined domain vanished,
// unless gpuvm is working on it (a delete undefines its domain).
func (rc *reconciler) domainUndefined(ctx context.Context, ev hypervisor.Event) error {
	id := cmp.Or(ev.VMID, ev.UUID)
	if id == "" || rc.busy.is(id) {
		return nil
	}
	rc.roundMu.Lock()
	defer rc.roundMu.Unlock()
	vm, err := rc.st.GetVM(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // not this installation's VM
	}
	if err != nil {
		return err
	}
	if vm.State != store.VMRunning || vm.Host != rc.host || rc.busy.is(id) {
		return nil
	}
	// The event may be stale (the domain defined again since): look.
	if _, err := rc.hv.Lookup(ctx, vm.ID); !hypervisor.IsNotFound(err) {
		return err
	}
	return rc.life.vanish(ctx, *vm)
}
