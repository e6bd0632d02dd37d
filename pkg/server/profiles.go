package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// profileView is a profile as the API shows it: its resolved fields and
// what the server says of it (api.Profile), in one JSON object.
type profileView struct {
	*config.Profile
	profileStatus
}

// profileStatus is api.Profile under a name that does not clash with
// config.Profile's in profileView.
type profileStatus = api.Profile

// profileViews are ps as the API shows them, each unservable one marked.
func (s *Server) profileViews(ctx context.Context, ps []*config.Profile) []profileView {
	never := s.unservable(ctx, ps)
	out := make([]profileView, len(ps))
	for i, p := range ps {
		out[i] = profileView{Profile: p, profileStatus: api.Profile{Unservable: never[p.Name]}}
	}
	return out
}

// unservable says, of each profile in ps that no GPU of the reporting
// hosts can ever give, why (the scheduler's CodeNever reason). The hosts
// are those that are not down and have stored an inventory, each modelled
// as the scheduler models it (its published spec, else its inventory with
// every GPU on auto) but empty and undrained: a drain or a full GPU passes,
// a board or mode that cannot give the need does not. It is nil when no
// such host is known (nothing is said rather than guessed) or the hosts
// cannot be read.
func (s *Server) unservable(ctx context.Context, ps []*config.Profile) map[string]string {
	if s.Store == nil {
		return nil
	}
	hosts, err := s.Store.ListHosts(ctx)
	if err != nil {
		s.log.Warn("read the hosts to tell which profiles they can serve", "err", err)
		return nil
	}
	now := s.Store.Now()
	var specs []scheduler.HostSpec
	for i := range hosts {
		h := &hosts[i]
		if h.Inventory == "" || s.hostState(h, now) == store.HostDown {
			continue
		}
		var stored storedInventory
		if err := json.Unmarshal([]byte(h.Inventory), &stored); err != nil {
			s.log.Warn("a host's stored inventory is not valid JSON", "host", h.Name, "err", err)
			continue
		}
		spec, _ := scheduler.FromHost(h.Name, stored.HostInventory, nil)
		if stored.Spec != nil {
			spec = *stored.Spec
			spec.Name = h.Name
		}
		// One host the model cannot read is left out, not all of them.
		if _, err := scheduler.NewInventory([]scheduler.HostSpec{spec}, nil); err != nil {
			s.log.Warn("a host's stored inventory does not make a model of its GPUs; it is left out of what the profiles can get", "host", h.Name, "err", err)
			continue
		}
		specs = append(specs, spec)
	}
	if len(specs) == 0 {
		return nil
	}
	inv, err := scheduler.NewInventory(specs, nil)
	if err != nil {
		s.log.Warn("the hosts' inventories do not make a model of their GPUs", "err", err)
		return nil
	}
	out := map[string]string{}
	for _, p := range ps {
		if p.GPU == nil {
			continue
		}
		if _, why := inv.Place(policy.NeedFromProfile(p.GPU), scheduler.PlaceOptions{Now: now}); why.Code == scheduler.CodeNever {
			out[p.Name] = why.Detail
		}
	}
	return out
}

// refuseUnservable is the problem of a VM asked of a profile no reporting
// host can ever serve (nil when one can, or nothing is known).
func (s *Server) refuseUnservable(ctx context.Context, p *config.Profile) *Problem {
	why := s.unservable(ctx, []*config.Profile{p})[p.Name]
	if why == "" {
		return nil
	}
	return withField(errValidation, "profile", fmt.Sprintf("profile %s can never be served here: %s", p.Name, why))
}
