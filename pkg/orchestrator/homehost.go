package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// In a fleet a person's home is a directory on one node: the one where it
// was first made (store.RecordHomeHost, from lifecycle.home). The leader
// places the person's VMs that mount it on that node when the node can
// serve them (scheduler.Request.PreferHost); when it cannot, the VM is
// placed as any other, gets a second, empty home where it runs, and its
// reason says so (AwayFromHomePrefix) from its placement until it is
// ready.

// AwayFromHomePrefix begins the reason of a VM placed on another host than
// the one its owner's home lives on.
const AwayFromHomePrefix = "placed away from its home"

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

// awayFromHome is the reason of a VM of owner placed on host while their
// home is on home; "" when it is not away (or has no home yet).
func awayFromHome(owner, home, host string) string {
	if home == "" || home == host {
		return ""
	}
	return fmt.Sprintf("%s: it runs on %s, but the home of %s is on %s, which could not serve it now, so the home it mounts is another directory, on %s, without the files of the home on %s",
		AwayFromHomePrefix, host, owner, home, host, home)
}

// awayNote is the note that begins a VM's reason when it runs away from
// its home (awayFromHome: a clause without "; "), which its create and
// boot keep in the reasons they write; "" when there is none.
func awayNote(reason string) string {
	if !strings.HasPrefix(reason, AwayFromHomePrefix) {
		return ""
	}
	note, _, _ := strings.Cut(reason, "; ")
	return note
}

// joinReasons joins two parts of a reason, either of which may be "".
func joinReasons(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
