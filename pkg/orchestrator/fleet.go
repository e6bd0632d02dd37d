package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// An orchestrator may be one node of a fleet: several gpuvmds sharing one
// PostgreSQL database (pkg/fleet). Then
//
//   - only the leader places queued VMs, in one scheduling cycle over the
//     whole fleet's queue and every healthy node's GPUs: this host's as
//     its backends report them now, the others' as their last heartbeat
//     published them (hosts.inventory, with the scheduler's view of each
//     GPU under "spec"). A node whose heartbeat is older than HostTimeout
//     offers nothing; a draining node keeps what runs and takes nothing
//     new. The claim stays one transaction under the database's slot
//     keys, so two leaders for a moment still never give a slot twice;
//   - each node runs the operations of the VMs placed on it (vm.host);
//     VMs not placed anywhere yet (queued) are the leader's;
//   - the leader is told of new work by a notification (Fleet.Notify), a
//     node of the VMs placed on it, and the leader of capacity a node
//     freed; the tick is the fallback.

// Fleet is what an orchestrator asks of the fleet it is a node of (a
// *fleet.Node).
type Fleet interface {
	// IsLeader reports whether this node places the fleet's queue now.
	IsLeader() bool
	// Notify wakes another node ("" the leader).
	Notify(node string)
}

// owns reports whether this node runs a VM's operations: those of VMs
// placed on it, and, on the leader, those of VMs placed nowhere (queued,
// or never placed: a delete of one has nothing on any host to remove).
func (fl *fleetDuties) owns(vm *store.VM) bool {
	if fl.fleet == nil {
		return true
	}
	if vm.State == store.VMQueued || vm.Host == "" {
		return fl.fleet.IsLeader()
	}
	return vm.Host == fl.host
}

// readsOnly is the host whose VMs' operations a round reads: this node's
// when it is a fleet's node that does not lead, since it makes only the
// VMs placed on it (owns); "" (all) on a single server and on the leader,
// which places the queue and makes what has no host.
func (fl *fleetDuties) readsOnly() string {
	if fl.fleet == nil || fl.fleet.IsLeader() {
		return ""
	}
	return fl.host
}

// beating says whether a fleet's node is not down and its heartbeat came
// within the host timeout at now: a node whose capacity rounds offer
// (placementHosts; a draining one too, which takes no new VM).
func (fl *fleetDuties) beating(h store.Host, now time.Time) bool {
	return h.State != store.HostDown && now.Sub(h.HeartbeatAt) <= fl.hostTimeout()
}

// takingVMs is the fleet's nodes that take new VMs now: beating and not
// draining. None when they cannot be read, which it logs on log.
func (fl *fleetDuties) takingVMs(ctx context.Context, log *slog.Logger) map[string]bool {
	rows, err := fl.st.ListHosts(ctx)
	if err != nil {
		log.Warn("the fleet's nodes not read: VMs without a GPU are made here this round, not on their homes' nodes", "err", err)
		return map[string]bool{}
	}
	now := fl.st.Now()
	up := make(map[string]bool, len(rows))
	for _, h := range rows {
		up[h.Name] = h.State != store.HostDraining && fl.beating(h, now)
	}
	return up
}

// wakeNode wakes another node of the fleet ("" the leader); nothing on a
// single server.
func (fl *fleetDuties) wakeNode(node string) {
	if fl.fleet != nil && node != fl.host {
		fl.fleet.Notify(node)
	}
}

// capacityFreed tells the leader that this node freed slots, so that a
// queued VM may take them at once.
func (fl *fleetDuties) capacityFreed() {
	if fl.fleet != nil && !fl.fleet.IsLeader() {
		fl.fleet.Notify("")
	}
}

// HostSpec is this host's GPUs as the scheduler sees them, from the
// backends' inventory and the configuration's gpu blocks (modes, MIG
// layouts). A fleet's nodes publish it with their heartbeat; the leader
// places on it.
func (o *Orchestrator) HostSpec(hi gpu.HostInventory) scheduler.HostSpec {
	spec, _ := o.hostSpec(o.cfg.Profiles(), hi)
	return spec
}

// hostSpec is HostSpec with the devices the inventory reports.
func (o *Orchestrator) hostSpec(cfg *config.Config, hi gpu.HostInventory) (scheduler.HostSpec, []scheduler.Allocation) {
	if cfg == nil {
		cfg = &config.Config{}
	}
	spec, devices := scheduler.FromHost(o.cfg.Host, hi, configuredMode(cfg))
	for i := range spec.GPUs {
		g := &spec.GPUs[i]
		if s := cfg.Server.Host.Settings(g.Address, modelOf(g.Model)); len(s.MIGLayout) > 0 {
			g.MIGLayout = s.MIGLayout
		}
	}
	return spec, devices
}

// HeartbeatInventory is what a node's heartbeat stores in hosts.inventory:
// its inventory (gpu.HostInventory, which GET /v1/hosts reads; older nodes
// stored api.HostInventory, of the same JSON) and, for the fleet's leader,
// the scheduler's view of its GPUs.
type HeartbeatInventory struct {
	gpu.HostInventory
	Spec *scheduler.HostSpec `json:"spec,omitempty"`
}

// placeHost is one host of a round: its GPUs and the devices it reports.
type placeHost struct {
	spec    scheduler.HostSpec
	devices []scheduler.Allocation
}

// placementHosts are the hosts a round places on: this one, from its
// backends (of kinds) as they keep their inventories current
// (currentInventoriesOf), and in a fleet every other node that is up or
// draining and whose heartbeat is younger than HostTimeout, from that
// heartbeat. A node's devices of VMs the database knows are left out: the
// live ones are counted by their allocations, and the others were removed
// before their slots were released (what a heartbeat older than the
// removal still lists). What it leaves out it warns of on log.
func (fl *fleetDuties) placementHosts(ctx context.Context, cfg *config.Config, kinds []string, log *slog.Logger) ([]placeHost, error) {
	invs, errs := fl.backends.currentInventoriesOf(ctx, kinds)
	for _, err := range errs {
		log.Warn("a backend did not answer; its GPUs are not offered this round", "err", err)
	}
	self, devices := fl.spec(cfg, mergedInventory(invs))
	if fl.fleet == nil {
		return []placeHost{{self, devices}}, nil
	}
	rows, err := fl.st.ListHosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the fleet's nodes: %w", err)
	}
	now := fl.st.Now()
	out := []placeHost{{self, devices}}
	var foreign []string // VM IDs of the other nodes' devices
	for _, h := range rows {
		if h.Name == fl.host {
			out[0].spec.Draining = h.State == store.HostDraining
			continue
		}
		if !fl.beating(h, now) {
			continue // down: its capacity is not offered
		}
		ph, err := fl.remote.get(cfg, h)
		if err != nil {
			log.Warn("a node's published inventory is unusable; nothing is placed on it this round", "host", h.Name, "err", err)
			continue
		}
		for _, d := range ph.devices {
			foreign = append(foreign, d.ID)
		}
		out = append(out, ph)
	}
	if len(foreign) == 0 {
		return out, nil
	}
	slices.Sort(foreign)
	known, err := fl.st.GetVMs(ctx, slices.Compact(foreign))
	if err != nil {
		return nil, err
	}
	for i := range out[1:] {
		h := &out[i+1]
		h.devices = slices.DeleteFunc(slices.Clone(h.devices), func(d scheduler.Allocation) bool { return known[d.ID] != nil }) // the cache's stay whole
	}
	return out, nil
}

// remoteHosts keeps the nodes' heartbeats as last read: a heartbeat that
// did not change (the usual case: inventories change when devices do) is
// not decoded and checked again every round.
type remoteHosts struct {
	mu    sync.Mutex
	cfg   *config.Config // the configuration they were read under
	hosts map[string]remoteEntry
}

type remoteEntry struct {
	inventory, state string
	ph               placeHost
	err              error
}

func (r *remoteHosts) get(cfg *config.Config, h store.Host) (placeHost, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfg != cfg { // a reload: modes may read otherwise
		r.cfg, r.hosts = cfg, map[string]remoteEntry{}
	}
	if e, ok := r.hosts[h.Name]; ok && e.inventory == h.Inventory && e.state == h.State {
		return e.ph, e.err
	}
	ph, err := remoteHost(cfg, h)
	r.hosts[h.Name] = remoteEntry{inventory: h.Inventory, state: h.State, ph: ph, err: err}
	return ph, err
}

// remoteHost reads a node's heartbeat: the scheduler's view of its GPUs as
// it published it (its own configuration's modes and layouts), else, from
// a node that publishes none, its inventory under this configuration.
func remoteHost(cfg *config.Config, h store.Host) (placeHost, error) {
	if h.Inventory == "" {
		return placeHost{}, errors.New("it has sent no inventory yet")
	}
	var hb HeartbeatInventory
	if err := json.Unmarshal([]byte(h.Inventory), &hb); err != nil {
		return placeHost{}, fmt.Errorf("its inventory is not valid JSON: %w", err)
	}
	spec, devices := scheduler.FromHost(h.Name, hb.HostInventory, configuredMode(cfg))
	if hb.Spec != nil {
		spec = *hb.Spec
		spec.Name = h.Name
	}
	spec.Draining = h.State == store.HostDraining
	if _, err := scheduler.NewInventory([]scheduler.HostSpec{spec}, nil); err != nil {
		return placeHost{}, err
	}
	return placeHost{spec, devices}, nil
}

func (fl *fleetDuties) hostTimeout() time.Duration {
	if fl.settings().HostTimeout > 0 {
		return fl.settings().HostTimeout
	}
	return config.DefaultHeartbeatTimeout
}

// RequeueFromDownHosts puts back in the queue the VMs placed on the given
// nodes (down: their heartbeat stopped) that those nodes had not begun to
// make: allocating, every allocation still reserved with no device, the
// create not past its allocation step. Their slots are released and their
// usage records ended, with the VM queued again and placed nowhere, in one
// transaction each, so the leader places them elsewhere. VMs whose node
// made anything stay where they are (host-down) until it returns. It
// returns the VMs it queued again.
func (fl *fleetDuties) RequeueFromDownHosts(ctx context.Context, hosts []string) ([]string, error) {
	var requeued []string
	var errs []error
	for _, host := range hosts {
		vms, err := store.AllVMs(ctx, fl.st, store.VMFilter{States: []string{store.VMAllocating}, Host: host})
		if err != nil {
			return requeued, err
		}
		for i := range vms {
			ok, err := fl.requeueUnstarted(ctx, &vms[i])
			if err != nil {
				errs = append(errs, fmt.Errorf("vm %s on %s: %w", vms[i].ID, host, err))
				continue
			}
			if ok {
				requeued = append(requeued, vms[i].ID)
				fl.log.Warn("VM queued again: its node went down before making it", "vm", vms[i].ID, "name", vms[i].Name, "host", host)
			}
		}
	}
	if len(requeued) > 0 {
		fl.wake()
	}
	return requeued, errors.Join(errs...)
}

// requeueUnstarted queues a VM again if its node never began to make it.
// Everything is decided inside one transaction that first locks the VM's
// allocations, as the node does before it makes a device
// (beginDeviceStep): a node that began meanwhile is seen, and one that
// begins after finds its slots released.
func (fl *fleetDuties) requeueUnstarted(ctx context.Context, vm *store.VM) (bool, error) {
	nowhere := ""
	requeued := false
	err := fl.st.Tx(ctx, func(tx *store.Store) error {
		allocs, err := tx.LockLiveAllocations(ctx, vm.ID)
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if a.State != store.AllocReserved || a.DeviceID != "" {
				return nil
			}
		}
		ops, err := tx.ListOperations(ctx, vm.ID)
		if err != nil {
			return err
		}
		for _, op := range ops {
			if op.Kind == store.OpCreate && !op.Finished() && op.Step != "" && op.Step != StepAllocate {
				return nil // the node may have begun to make a device
			}
			if op.Kind == store.OpStart && !op.Finished() {
				return nil // a stopped VM starting again: its domain and disk are on that node
			}
		}
		// Slots first, the VM (and its event) last, as a claim does.
		// A delete asked meanwhile is then the leader's, as for any
		// queued VM.
		if _, err := tx.ReleaseAllocations(ctx, vm.ID); err != nil {
			return err
		}
		if _, err := tx.EndUsageRecords(ctx, vm.ID, tx.Now()); err != nil {
			return err
		}
		if _, err := tx.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMQueued, Phase: PhaseQueued, Host: &nowhere,
			StateReason: fmt.Sprintf("node %s went down before making the VM; queued again", vm.Host)}); err != nil {
			return err
		}
		requeued = true
		return nil
	})
	if errors.Is(err, store.ErrConflict) {
		return false, nil // changed meanwhile: the node is back, or it was deleted
	}
	return requeued && err == nil, err
}
