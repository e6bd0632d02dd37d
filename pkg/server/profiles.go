package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

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

// profileViews are ps as the API shows them, each unservable or
// unavailable one marked (why, in the request's language), each with what
// of it is free and when one is next free for the caller: read from the
// last estimates computed (estimatework.go), which say when they were
// computed and whether the state changed since.
func (s *Server) profileViews(c *gin.Context, ps []*config.Profile) []profileView {
	ctx := c.Request.Context()
	var sn *estimateSnap
	var stale bool
	if len(ps) > 0 {
		sn, stale = s.profileEstimates(ctx, user(c), ps)
	}
	out := make([]profileView, len(ps))
	for i, p := range ps {
		out[i] = profileView{Profile: p, profileStatus: api.Profile{Unavailable: say(c, s.unavailable(ctx, p))}}
		if sn == nil {
			continue
		}
		st := &out[i].profileStatus
		st.Unservable, st.Free = say(c, sn.never[p.Name]), sn.free[p.Name]
		st.NextFreeAt = nextFreeAt(sn, user(c).Name, p)
		at := sn.taken.UTC()
		key := probeKey(user(c).Name, p.Name)
		_, probed := sn.probes[key]
		st.EstimateComputedAt, st.EstimateStale = &at, stale || sn.oldProbes[key] || p.GPU != nil && !probed
	}
	return out
}

// profileEstimates is the last snapshot of the estimates, and whether it
// is stale. The caller's next-free probes of ps are asked for when it does
// not have them; they are not waited for (a probe is a replay of the whole
// queue: a second and more with ten thousand waiting, issue #26): a
// profile whose probe is missing says its estimate is stale, and the next
// question finds it. Only the first snapshot is waited for (nil when none
// is made in time).
func (s *Server) profileEstimates(ctx context.Context, u *store.User, ps []*config.Profile) (*estimateSnap, bool) {
	var names []string
	for _, p := range ps {
		if p.GPU != nil {
			names = append(names, p.Name)
		}
	}
	s.estimates.want(u.Name, u.Groups, names)
	defer s.kickEstimates() // a probe carried over, said stale, is redone now
	return s.awaitEstimates(ctx, estimateWait, false, func(*estimateSnap) bool { return true })
}

// nextFreeAt is when a device of profile p is predicted to free up for the
// user behind the queue: nil when one is free now or none is known.
func nextFreeAt(sn *estimateSnap, user string, p *config.Profile) *time.Time {
	if p.GPU == nil {
		return nil
	}
	est, ok := sn.probes[probeKey(user, p.Name)]
	if !ok || !est.Known() || !est.At.After(sn.state.Now) {
		return nil
	}
	t := est.At.UTC()
	return &t
}

// unavailable says why a VM of p cannot be made on this server now: what it
// is made of is missing (Deps.Availability; "" when nothing is checked).
func (s *Server) unavailable(ctx context.Context, p *config.Profile) string {
	if s.Availability == nil || s.Config == nil {
		return ""
	}
	return s.Availability.Unavailable(ctx, s.Config.Load(), p)
}

// hostModels are the scheduler's models of the hosts that are not down
// and have stored an inventory, each as the scheduler models it (its
// published spec, else its inventory with every GPU on auto): empty and
// undrained (what the GPUs could ever give), empty with the drained GPUs
// left out (what they give holding nothing), and holding what they hold
// (what they give now). All nil when no such host is known (nothing is
// said rather than guessed) or the hosts cannot be read.
type hostModels struct {
	now                time.Time
	never, total, used *scheduler.Inventory
}

// hostModels models the hosts; without counting only never is made (what
// a create's check reads), and the drains are not read.
func (s *Server) hostModels(ctx context.Context, counting bool) hostModels {
	if s.Store == nil {
		return hostModels{}
	}
	hosts, err := s.Store.ListHosts(ctx)
	if err != nil {
		s.log.Warn("read the hosts to tell what the profiles can get", "err", err)
		return hostModels{}
	}
	return s.modelHosts(ctx, hosts, counting)
}

// modelHosts models hosts (hostModels).
func (s *Server) modelHosts(ctx context.Context, hosts []store.Host, counting bool) hostModels {
	var err error
	drained := map[string]bool{}
	if counting {
		drains, err := s.Store.ListGPUDrains(ctx, "")
		if err != nil {
			s.log.Warn("read the drained GPUs to tell what the profiles can get", "err", err)
			return hostModels{}
		}
		for _, d := range drains {
			drained[d.Host+"/"+d.GPUAddress] = true
		}
	}
	now := s.Store.Now()
	var specs, left, used []scheduler.HostSpec
	var devices []scheduler.Allocation
	for i := range hosts {
		h := &hosts[i]
		state := s.hostState(h, now)
		if h.Inventory == "" || state == store.HostDown {
			continue
		}
		var stored storedInventory
		if err := json.Unmarshal([]byte(h.Inventory), &stored); err != nil {
			s.log.Warn("a host's stored inventory is not valid JSON", "host", h.Name, "err", err)
			continue
		}
		spec, devs := scheduler.FromHost(h.Name, stored.HostInventory, nil)
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
		if !counting {
			continue
		}
		l := spec
		l.GPUs = slices.Clone(spec.GPUs)
		l.Draining = state == store.HostDraining
		for g := range l.GPUs {
			l.GPUs[g].Draining = drained[h.Name+"/"+l.GPUs[g].Address]
		}
		left = append(left, l)
		if _, err := scheduler.NewInventory([]scheduler.HostSpec{l}, devs); err != nil {
			// What it holds does not fit its model: nothing is counted free on it.
			s.log.Warn("a host's stored devices do not fit its model of its GPUs; nothing of it is counted free", "host", h.Name, "err", err)
			full := l
			full.Draining = true
			used = append(used, full)
			continue
		}
		used = append(used, l)
		devices = append(devices, devs...)
	}
	if len(specs) == 0 {
		return hostModels{}
	}
	m := hostModels{now: now}
	if m.never, err = scheduler.NewInventory(specs, nil); err == nil && counting {
		if m.total, err = scheduler.NewInventory(left, nil); err == nil {
			m.used, err = scheduler.NewInventory(used, devices)
		}
	}
	if err != nil {
		s.log.Warn("the hosts' inventories do not make a model of their GPUs", "err", err)
		return hostModels{}
	}
	return m
}

// unservable says, of each profile in ps that no GPU of the hosts can
// ever give, why (the scheduler's CodeNever reason): a drain or a full GPU
// passes, a board or mode that cannot give the need does not.
func (m hostModels) unservable(ps []*config.Profile) map[string]string {
	if m.never == nil {
		return nil
	}
	out := map[string]string{}
	for _, p := range ps {
		if p.GPU == nil {
			continue
		}
		if _, why := m.never.Place(policy.NeedFromProfile(p.GPU), scheduler.PlaceOptions{Now: m.now}); why.Code == scheduler.CodeNever {
			out[p.Name] = why.Detail
		}
	}
	return out
}

// free says how many VMs of each profile of ps with a GPU the placers
// could place now, one after the other, and on the hosts holding nothing.
func (m hostModels) free(ps []*config.Profile) map[string]*api.ProfileFree {
	if m.used == nil {
		return nil
	}
	out := map[string]*api.ProfileFree{}
	o := scheduler.PlaceOptions{Now: m.now}
	for _, p := range ps {
		if p.GPU == nil {
			continue
		}
		need := policy.NeedFromProfile(p.GPU)
		f := m.used.CountFits(need, o, api.FreeLimit)
		pf := &api.ProfileFree{VMs: f.N, Total: m.total.CountFits(need, o, api.FreeLimit).N}
		for k, n := range f.ByKind {
			if pf.ByKind == nil {
				pf.ByKind = map[string]int{}
			}
			pf.ByKind[string(k)] = n
		}
		out[p.Name] = pf
	}
	return out
}

// refuseUnservable is the problem of a VM asked of a profile this server
// cannot make now (its image, kernel or template missing) or no reporting
// host can ever serve (nil when one can, or nothing is known).
func (s *Server) refuseUnservable(ctx context.Context, p *config.Profile) *Problem {
	if why := s.unavailable(ctx, p); why != "" {
		return withField(errValidation, "profile", fmt.Sprintf("profile %s cannot be made on this server now: %s", p.Name, why))
	}
	why := s.unservableNow(ctx, p)
	if why == "" {
		return nil
	}
	return withField(errValidation, "profile", fmt.Sprintf("profile %s can never be served here: %s", p.Name, why))
}

// unservableCache keeps what refuseUnservable found of each profile while
// the hosts' names, states and stored inventories stay those it was found
// from: a create asks it, and modelling the hosts anew parses every stored
// inventory (a millisecond a create with one host, issue #26).
type unservableCache struct {
	mu  sync.Mutex
	key string
	why map[*config.Profile]string // by the configuration's profile: a reload makes new ones
	// hosts is what was read of them, at the store's hosts generation gen,
	// at read (this machine's clock): read again when the generation has
	// moved or hostsMaxAge has passed (another node's writes).
	hosts []store.Host
	inv   string // the hash of their names and stored inventories
	gen   uint64
	read  time.Time
}

// hostsMaxAge bounds how long a create's check of the hosts keeps what it
// read of them while this gpuvmd changed none: another node's heartbeat or
// drain is seen within it. A create reads no host otherwise (issue #26).
const hostsMaxAge = time.Second

// maxUnservable bounds the profiles the cache keeps (reloads add new ones).
const maxUnservable = 1024

// unservableNow is why no reporting host can ever serve p's GPU ("" when
// one can, or nothing is known): hostModels' unservable, kept in
// s.unservable.
func (s *Server) unservableNow(ctx context.Context, p *config.Profile) string {
	if s.Store == nil || p.GPU == nil {
		return ""
	}
	hosts, inv, err := s.unservable.readHosts(ctx, s.Store)
	if err != nil {
		s.log.Warn("read the hosts to tell what the profiles can get", "err", err)
		return ""
	}
	// The hosts' states move with the time alone (a heartbeat grows old).
	now := s.Store.Now()
	var key strings.Builder
	key.WriteString(inv)
	for i := range hosts {
		key.WriteString(s.hostState(&hosts[i], now))
		key.WriteByte(0)
	}
	c := &s.unservable
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key != key.String() || len(c.why) >= maxUnservable {
		c.key, c.why = key.String(), map[*config.Profile]string{}
	}
	if why, ok := c.why[p]; ok {
		return why
	}
	why := s.modelHosts(ctx, hosts, false).unservable([]*config.Profile{p})[p.Name]
	c.why[p] = why
	return why
}

// readHosts is the hosts as last read, or read again (unservableCache), and
// the hash of their names and stored inventories. The slice is shared:
// callers only read it.
func (c *unservableCache) readHosts(ctx context.Context, st HostStore) ([]store.Host, string, error) {
	gen := st.HostsGeneration()
	c.mu.Lock()
	if c.hosts != nil && c.gen == gen && time.Since(c.read) < hostsMaxAge {
		hosts, inv := c.hosts, c.inv
		c.mu.Unlock()
		return hosts, inv, nil
	}
	c.mu.Unlock()
	read := time.Now()
	hosts, err := st.ListHosts(ctx)
	if err != nil {
		return nil, "", err
	}
	if hosts == nil {
		hosts = []store.Host{}
	}
	h := fnv.New128a()
	for i := range hosts {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00", hosts[i].Name, len(hosts[i].Inventory), hosts[i].Inventory)
	}
	inv := string(h.Sum(nil))
	c.mu.Lock()
	if read.After(c.read) {
		c.hosts, c.inv, c.gen, c.read = hosts, inv, gen, read
	}
	c.mu.Unlock()
	return hosts, inv, nil
}

// profileAdmission answers what the sharing policy would say now to the
// caller's asking for a VM of a profile for ?hours= (default: the
// profile's): the check POST /v1/vms makes, nothing made.
func (s *Server) profileAdmission(c *gin.Context) {
	var p *config.Profile
	for _, q := range s.visibleProfiles(c) {
		if q.Name == c.Param("name") {
			p = q
		}
	}
	if p == nil {
		s.writeProblem(c, with(errNotFound, "no profile "+c.Param("name")))
		return
	}
	hours := p.Lease.DefaultHours()
	if h := c.Query("hours"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 || n > p.Lease.MaxHours() {
			s.writeProblem(c, withField(errValidation, "hours", fmt.Sprintf("hours is a whole number from 1 to %d (profile %s), not %q", p.Lease.MaxHours(), p.Name, h)))
			return
		}
		hours = n
	}
	ctx := c.Request.Context()
	u := user(c)
	cfg := s.Config.Load()
	now := s.Store.Now()
	eff := cfg.Policy.Effective(u.Name, u.Groups)
	out := api.Admission{Profile: p.Name, Hours: hours, Answer: api.AdmissionStarts, Budgets: []api.Budget{},
		Quota: api.Quota{VMs: eff.Quota.VMs, GPUs: eff.Quota.GPUs, Slices: eff.Quota.Slices, GPUMemory: eff.Quota.GPUMemory,
			GPUHoursPerDay: eff.Quota.GPUHoursPerDay, GPUHoursPerWeek: eff.Quota.GPUHoursPerWeek, GPUHoursPerMonth: eff.Quota.GPUHoursPerMonth}}
	for _, b := range policy.BudgetPeriods(eff.Quota, now, cfg.Policy.Location) {
		out.Budgets = append(out.Budgets, api.Budget{Unit: b.Unit, GPUHours: b.Limit, Start: b.Start, End: b.End})
	}
	if w, ok := policy.NewWindows(&cfg.Policy).At(now); ok {
		out.Window = &api.AdmissionWindow{Name: w.Window.Name, Classes: w.Window.Classes, Start: w.Start, End: w.End, Allows: w.Window.Allows(p.Class)}
		if out.Window.Classes == nil {
			out.Window.Classes = []string{}
		}
	}
	switch prob := s.refuseUnservable(ctx, p); {
	case prob != nil:
		out.Answer, out.Reason = api.AdmissionRefused, prob.Detail
	case s.Admission == nil:
		out.Answer = api.AdmissionUnknown
	default:
		adm, err := s.Admission.Admit(ctx, u.Name, u.Groups, p.Name, hours)
		switch {
		case err != nil:
			s.writeProblem(c, err)
			return
		case adm.Refuse:
			out.Answer, out.Reason = api.AdmissionRefused, adm.Reason.Text()
		case adm.Reason.Text() != "":
			out.Answer, out.Reason = api.AdmissionWaits, adm.Reason.Text()
		}
	}
	out.Reason = say(c, out.Reason)
	c.JSON(http.StatusOK, out)
}

// getSSHKeys answers the SSH public keys a user keeps for new VMs.
func (s *Server) getSSHKeys(c *gin.Context) {
	u, ok := s.namedUser(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, api.SSHKeys{Keys: store.SSHKeysOf(u)})
}

// putSSHKeys replaces them (an empty list forgets them).
func (s *Server) putSSHKeys(c *gin.Context) {
	var req api.SSHKeys
	if !s.decodeJSON(c, &req) {
		return
	}
	if req.Keys == nil {
		req.Keys = []string{}
	}
	if err := store.CheckSSHKeys(req.Keys); err != nil {
		s.writeProblem(c, withField(errValidation, "keys", err.Error()))
		return
	}
	name := c.Param("name")
	if err := s.Store.SetUserSSHKeys(c.Request.Context(), name, req.Keys); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = with(errNotFound, "no user "+strconv.Quote(name))
		}
		s.writeProblem(c, err)
		return
	}
	c.JSON(http.StatusOK, req)
}
