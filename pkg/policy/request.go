package policy

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// NeedFromProfile converts a resolved profile's gpu block.
func NeedFromProfile(g *config.GPUNeed) scheduler.Need {
	if g == nil {
		return scheduler.Need{}
	}
	n := scheduler.Need{Kind: g.Kind, Type: g.Type, Profile: g.Profile, Model: g.Model, Count: g.Count, Memory: g.Memory, Series: g.Series,
		Kinds: slices.Clone(g.Kinds)}
	if n.Kind != gpu.KindAny && n.Kind != gpu.KindPassthrough {
		n.Memory = 0 // the type or profile says it
	}
	return n
}

// RequestFor makes the request of a user who asks for a VM of a profile:
// the profile's GPU need and class, its lease (default when lease is 0,
// refused above lease.max), and the priority of the profile plus the
// user's (or their best group's); preemptible as the user's policy says.
func RequestFor(cfg *config.Config, id, user string, groups []string, profileName string, lease time.Duration, submitted time.Time) (scheduler.Request, error) {
	p, ok := cfg.Profiles[profileName]
	if !ok || p == nil {
		return scheduler.Request{}, fmt.Errorf("no profile is named %q", profileName)
	}
	if !p.Allows(user, groups) {
		return scheduler.Request{}, fmt.Errorf("profile %q is not open to %s", profileName, user)
	}
	if p.GPU == nil {
		return scheduler.Request{}, fmt.Errorf("profile %q has no GPU", profileName)
	}
	if lease == 0 {
		lease = p.Lease.Default
	}
	if p.Lease.Max > 0 && lease > p.Lease.Max {
		return scheduler.Request{}, fmt.Errorf("profile %q leases for at most %s, not %s", profileName, config.FormatDuration(p.Lease.Max), config.FormatDuration(lease))
	}
	eff := cfg.Policy.Effective(user, groups)
	r := scheduler.Request{
		ID: id, User: user, Groups: groups, Profile: profileName, Need: NeedFromProfile(p.GPU), Lease: lease,
		Priority: p.Priority + eff.Priority, Preemptible: eff.Preemptible, Class: p.Class, Submitted: submitted,
	}
	if len(groups) > 0 {
		r.Group = groups[0]
	}
	return r, nil
}
