package orchestrator

import (
	"context"
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// vmHome is the owner's home as one VM gets it: the virtiofs device and
// what the guest's seed mounts.
type vmHome struct {
	fs    domain.Filesystem
	uid   int
	mount string
}

// home makes ready the home of a VM whose profile has one (nil for any
// other): the owner's stable uid (store.UserUID), their directory
// (homes.Ensure, made the first time) and the virtiofs daemon. No daemon
// refuses the VM: started without its home, the guest would write the
// person's work where the VM's deletion takes it. Nothing here removes a
// home; deleting the VM leaves it.
func (lc *lifecycle) home(ctx context.Context, set lifecycleSettings, p *config.Profile, vm *store.VM) (*vmHome, error) {
	if p == nil || !p.Home {
		return nil, nil
	}
	h := set.Homes
	if !h.Enabled {
		// The profile was resolved with homes on; a reload turned them off.
		return nil, nil
	}
	find := lc.virtiofsd
	if find == nil {
		find = func() (string, error) { return homes.FindVirtiofsd(nil) }
	}
	// Only whether there is one: the domain names no binary, and libvirt
	// finds virtiofsd through the same descriptors each time it starts
	// the VM, so a daemon moved by an upgrade (Debian 13 ships the Rust
	// one elsewhere) does not stop the VMs already defined.
	if _, err := find(); err != nil {
		return nil, fmt.Errorf("profile %s gives its VMs their owner's home: %w", p.Name, err)
	}
	uid, err := lc.st.UserUID(ctx, vm.Owner, int64(h.UIDMin), int64(h.UIDMax))
	if err != nil {
		return nil, fmt.Errorf("home of %s: %w", vm.Owner, err)
	}
	// Where the home lives is recorded with the home held: a removal of
	// it meanwhile (server's DELETE /v1/homes, which forgets the record
	// with the home held too) comes wholly before or after.
	// The person's quota (homequota.go): where the homes' filesystem has
	// no project quotas, a home made for a person with one is a
	// filesystem of its size; where it has them, the project's limit is
	// applied once the home is there.
	var hq HomeQuota
	if lc.quotas != nil && set.Config != nil {
		if hq, err = lc.quotas.ForStart(ctx, set.Config, h.Root, vm.Owner); err != nil {
			return nil, err
		}
	}
	dir, err := homes.Ensure(ctx, h.Root, vm.Owner, int(uid), hq.ImageBytes(), lc.log, func() { lc.recordHomeHost(ctx, vm) })
	if err != nil {
		return nil, err
	}
	if lc.quotas != nil {
		if err := lc.quotas.Apply(hq, dir, uid); err != nil {
			lc.log.Error("home quota not applied now; the next round of home quotas tries again", "user", vm.Owner, "dir", dir, "err", err)
		}
	}
	return &vmHome{fs: domain.Filesystem{Source: dir, Tag: config.HomeTag}, uid: int(uid), mount: h.Mount}, nil
}

// recordHomeHost records this host as the one the owner's home lives on
// when none is yet (store.RecordHomeHost: the first home made stays the
// one): in a fleet the leader places their VMs here when it can
// (homehost.go). A failure is logged: the VM gets its home all the same,
// and the next of the owner's VMs records it.
func (lc *lifecycle) recordHomeHost(ctx context.Context, vm *store.VM) {
	if lc.host == "" {
		return
	}
	home, err := lc.st.RecordHomeHost(ctx, vm.Owner, lc.host)
	switch {
	case err != nil:
		lc.log.Warn("where the home lives not recorded; the next VM of its person records it", "user", vm.Owner, "host", lc.host, "err", err)
	case home != lc.host:
		lc.log.Warn("a VM mounts a home away from its person's first: the files of the home on the other host are not in it",
			"vm", vm.ID, "user", vm.Owner, "host", lc.host, "home_host", home)
	}
}
