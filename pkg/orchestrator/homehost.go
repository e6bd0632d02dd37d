package orchestrator

import (
	"context"
	"fmt"

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

// homeHostReader reads where people's homes live.
type homeHostReader interface {
	HomeHosts(ctx context.Context, names []string) (map[string]string, error)
}

// preferHomeHosts sets, in a fleet, the preferred host of each queued VM
// whose profile mounts its owner's home to the host that home lives on. A
// VM queued by a start on the node that keeps its disk (actions.go:
// elsewhere) gets none: it starts there or not at all. An error leaves
// the requests without preference: they are placed as before.
func preferHomeHosts(ctx context.Context, st homeHostReader, cfg *config.Config, queue []queued, reqs []scheduler.Request) error {
	var owners []string
	mounts := make([]bool, len(queue))
	for i, q := range queue {
		p := cfg.Profiles[q.vm.Profile]
		if p == nil || !p.Home || (q.op.Kind == store.OpStart && q.vm.Host != "") {
			continue
		}
		mounts[i] = true
		owners = append(owners, q.vm.Owner)
	}
	if len(owners) == 0 {
		return nil
	}
	hosts, err := st.HomeHosts(ctx, owners)
	if err != nil {
		return fmt.Errorf("read the hosts of the queued VMs' homes: %w", err)
	}
	for i, q := range queue {
		if mounts[i] {
			reqs[i].PreferHost = hosts[q.vm.Owner]
		}
	}
	return nil
}
