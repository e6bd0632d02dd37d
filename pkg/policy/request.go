package policy

import (
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

// RequestOf is the scheduler's request for a VM (its ID, owner, group, the
// owner's groups, profile, lease in hours and when it was asked for),
// completed by Fill. A lease under an hour counts as one hour.
func RequestOf(cfg *config.Config, id, owner, group string, groups []string, profile string, hours int, submitted time.Time) scheduler.Request {
	r := scheduler.Request{
		ID: id, User: owner, Group: group, Groups: groups, Profile: profile,
		Lease: time.Duration(max(hours, 1)) * time.Hour, Submitted: submitted,
	}
	Fill(cfg, &r)
	return r
}

// Fill completes a request whose ID, user, groups and profile are set with
// what the configuration says of them: the profile's GPU need and class, the
// priority of the profile plus the user's (or their best group's), and
// whether the user's policy makes it preemptible. A profile the configuration
// no longer has leaves the need empty (the scheduler refuses it). Whether the
// user may use the profile, and the lease, are settled when the VM is asked
// for (pkg/server), not here.
func Fill(cfg *config.Config, r *scheduler.Request) {
	if p := cfg.Profiles[r.Profile]; p != nil {
		r.Need = NeedFromProfile(p.GPU)
		r.Class = p.Class
		r.Priority = p.Priority
	}
	eff := cfg.Policy.Effective(r.User, r.Groups)
	r.Priority += eff.Priority
	r.Preemptible = eff.Preemptible
}
