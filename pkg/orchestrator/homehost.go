package orchestrator

import (
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// In a fleet a person's home is a directory on one node: the one where it
// was first made (store.RecordHomeHost, from lifecycle.home). The leader
// places the person's VMs that mount it on that node when the node can
// serve them (scheduler.Request.PreferHost); when it cannot, the VM is
// placed as any other and gets a second, empty home where it runs. What a
// VM is told of it is worked out when it is read (pkg/server: api.VM's
// home_host and away_from_home), not written in its reason.

// preferHomeHosts sets, in a fleet, the preferred host of each queued VM
// whose profile mounts its owner's home to the host that home lives on
// (homes: user → host, read with the round's users: readGroups). A VM
// queued by a start on the node that keeps its disk (actions.go:
// elsewhere) gets none: it starts there or not at all.
func preferHomeHosts(cfg *config.Config, queue []queued, reqs []scheduler.Request, homes map[string]string) {
	for i, q := range queue {
		p := cfg.Profiles[q.vm.Profile]
		if p == nil || !p.Home || (q.op.Kind == store.OpStart && q.vm.Host != "") {
			continue
		}
		reqs[i].PreferHost = homes[q.vm.Owner]
	}
}

// withoutGPUHost is the host a queued VM that needs no GPU is made on:
// this one (a single server; the fleet's leader, which places it), or, in
// a fleet, the node its owner's home lives on when its profile mounts the
// home and that node takes VMs now (homes: user → host, from the round's
// read of the users; taking: fleetDuties.takingVMs, nil outside a fleet
// with homes). A node that cannot take it now leaves it here, with a
// second, empty home, as a GPU VM placed away from its home is (what it
// is told of that is worked out when it is read).
func (dp *dispatcher) withoutGPUHost(p *config.Profile, vm *store.VM, homes map[string]string, taking map[string]bool) string {
	if home := homes[vm.Owner]; p.Home && taking[home] {
		return home
	}
	return dp.host
}
