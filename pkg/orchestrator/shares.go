package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/shares"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// SpecShares is the key of a VM's spec that holds the shares its owner
// asked for (the profile's are added at each start).
const SpecShares = "shares"

// vmShare is one share as one VM gets it: the virtiofs device and what
// the guest's seed mounts.
type vmShare struct {
	fs    domain.Filesystem
	mount cloudinit.Share
}

// VMShareNames are the shares a VM of profile p whose spec is spec
// mounts: the profile's, then those asked for, each once.
func VMShareNames(p *config.Profile, spec string) ([]string, error) {
	var s struct {
		Shares []string `json:"shares"`
	}
	if spec != "" {
		if err := json.Unmarshal([]byte(spec), &s); err != nil {
			return nil, fmt.Errorf("its recorded request: %w", err)
		}
	}
	return p.ShareNames(s.Shares), nil
}

// shares makes ready the shares of a VM, checking the owner's access
// again at each start: a share whose access a reload took away, or that
// is no longer declared, is left out, and a vm.warning event says so. A
// share whose directory is missing, or a read-only one that cannot be
// enforced here (gpuvmd is not root), fails the start with the reason: a
// VM never gets a read-only share writable.
func (lc *lifecycle) shares(ctx context.Context, set lifecycleSettings, p *config.Profile, vm *store.VM) ([]vmShare, error) {
	names, err := VMShareNames(p, vm.Spec)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	find := lc.virtiofsd
	if find == nil {
		find = func() (string, error) { return homes.FindVirtiofsd(nil) }
	}
	if _, err := find(); err != nil {
		return nil, fmt.Errorf("the VM mounts shares %v: %w", names, err)
	}
	groups, err := lc.st.UserGroups(ctx, []string{vm.Owner})
	if err != nil {
		return nil, err
	}
	var out []vmShare
	for _, n := range names {
		s := set.Shares[n]
		var mode string
		if s != nil {
			mode, _ = s.Access(vm.Owner, groups[vm.Owner])
		}
		if mode == "" {
			why := fmt.Sprintf("share %s is left out: %s may no longer mount it", n, vm.Owner)
			if s == nil {
				why = fmt.Sprintf("share %s is left out: the server no longer declares it", n)
			}
			lc.log.Warn("share left out of a VM", "vm", vm.ID, "share", n, "why", why)
			lc.shareWarning(ctx, vm, why)
			continue
		}
		sh, err := readyShare(set.StateDir, s, mode)
		if err != nil {
			return nil, err
		}
		out = append(out, sh)
	}
	return out, nil
}

// readyShare is share s made ready on the host for mode.
func readyShare(stateDir string, s *config.Share, mode string) (vmShare, error) {
	src := s.Path
	if err := shares.Available(src); err != nil {
		return vmShare{}, fmt.Errorf("share %s is unavailable: %w", s.Name, err)
	}
	ro := mode == config.ShareReadOnly
	if ro {
		view, err := shares.ReadOnlyView(stateDir, s.Name, s.Path)
		if errors.Is(err, shares.ErrNotEnforceable) {
			return vmShare{}, fmt.Errorf("share %s is read-only for the owner, which cannot be enforced on this host, so it is not given at all: %w", s.Name, err)
		}
		if err != nil {
			return vmShare{}, err
		}
		src = view
	}
	tag := config.ShareTag(s.Name)
	// Not domain.Filesystem.ReadOnly: libvirt 9 refuses <readonly/> on a
	// virtiofs device; the read-only view is the enforcement.
	return vmShare{
		fs:    domain.Filesystem{Source: src, Tag: tag},
		mount: cloudinit.Share{Name: s.Name, Tag: tag, Mount: s.Mount, ReadOnly: ro},
	}, nil
}

// shareWarning tells the VM's owner, in its events, that a share was left
// out; a failure to record it is logged only.
func (lc *lifecycle) shareWarning(ctx context.Context, vm *store.VM, why string) {
	ev := warningEvent(vm, api.VMWarningPayload{Kind: api.WarningShare, Action: api.NoticeNone, At: time.Now(), Reason: why})
	if err := lc.st.AppendEvent(ctx, ev); err != nil {
		lc.log.Warn("could not record that a share was left out", "vm", vm.ID, "err", err)
	}
}

// ReleaseShareViews removes the read-only views (pkg/shares) of shares
// that are no longer declared and that no VM of this host (not deleted)
// asked for: what a share taken out of the configuration left. A view a
// VM may still use stays; gpuvmd calls this at start.
func (o *Orchestrator) ReleaseShareViews(ctx context.Context) error {
	set := o.life.settings()
	if set.StateDir == "" {
		return nil
	}
	keep := map[string]bool{}
	for n := range set.Shares {
		keep[n] = true
	}
	vms, err := store.AllVMs(ctx, o.life.st, store.VMFilter{Host: o.cfg.Host})
	if err != nil {
		return err
	}
	for _, vm := range vms {
		names, _ := VMShareNames(nil, vm.Spec)
		for _, n := range names {
			keep[n] = true
		}
	}
	return shares.Release(set.StateDir, keep)
}
