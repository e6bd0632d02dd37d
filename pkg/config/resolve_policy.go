package config

import (
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Defaults of the policy block.
const (
	DefaultHalfLife     = 7 * 24 * time.Hour
	DefaultWarnBefore   = 15 * time.Minute
	DefaultMaxAhead     = 14 * 24 * time.Hour
	DefaultMaxBooking   = 8 * time.Hour
	DefaultAlertFor     = 5 * time.Minute
	DefaultBookingVMs   = 1
	DefaultBookingCount = 2
)

var (
	queueOrders = []string{OrderFIFO, OrderPriority, OrderSJF, OrderFairshare}
	atEnds      = []string{AtEndWarn, AtEndStop, AtEndNothing}
	// AlertMetrics are the metrics alert rules may watch (pkg/monitor).
	AlertMetrics = []string{
		"gpu_utilization",        // percent, per GPU
		"gpu_memory_utilization", // percent, per GPU
		"gpu_temperature",        // degrees Celsius, per GPU
		"gpu_power",              // watts, per GPU
		"gpu_xid_errors",         // XID errors a GPU reported within the rule's duration
		"queue_length",           // requests waiting
		"queue_wait",             // seconds the oldest request has waited
		"vm_idle",                // seconds a VM's GPU has been idle
		"backend_down",           // 1 while a backend is not running
		"vgpu_unlicensed",        // 1 while a vGPU's guest holds no licence, per vGPU
	}
)

func (r *resolver) resolvePolicy(b *policyBlock) {
	p := &r.cfg.Policy
	p.Queue = Queue{Order: OrderFIFO}
	p.Users = map[string]*Principal{}
	p.Groups = map[string]*Principal{}
	p.Windows = []*Window{}
	p.Alerts = []*Alert{}
	if b == nil {
		return
	}
	p.DeclRange = b.DefRange
	if b.Webhook != nil {
		p.Webhook = *b.Webhook
		if u, err := url.Parse(p.Webhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			r.errf(valueRange(b.Body, "webhook", b.DefRange), "Invalid webhook", "%q is not an http:// or https:// URL.", p.Webhook)
		}
	}
	if b.Timezone != nil {
		p.Timezone = *b.Timezone
		rng := valueRange(b.Body, "timezone", b.DefRange)
		switch {
		case p.Timezone == "" || strings.EqualFold(p.Timezone, "local"):
			r.errf(rng, "Invalid timezone", "Write the timezone by name, e.g. \"Europe/Paris\" or \"UTC\": windows must not move when the server's clock setting does.")
		case strings.Contains(p.Timezone, ".."):
			r.errf(rng, "Invalid timezone", "%q is not a timezone name.", p.Timezone)
		default:
			loc, err := time.LoadLocation(p.Timezone)
			if err != nil {
				r.errf(rng, "Unknown timezone", "%q is not a timezone of the IANA database (e.g. \"Europe/Paris\", \"America/New_York\", \"UTC\").", p.Timezone)
			} else {
				p.Location = loc
			}
		}
	}
	if q := b.Queue; q != nil {
		p.Queue.Order = str(q.Order, OrderFIFO)
		r.oneOf(q.Body, "order", p.Queue.Order, queueOrders, q.DefRange)
		if q.HalfLife != nil && p.Queue.Order != OrderFairshare {
			r.errf(attrRange(q.Body, "half_life", q.DefRange), "half_life needs fairshare", "half_life is how fast past usage is forgotten by order = \"fairshare\"; this queue is %q.", p.Queue.Order)
		}
		if p.Queue.Order == OrderFairshare {
			p.Queue.HalfLife, _ = r.duration(q.Body, "half_life", q.HalfLife, DefaultHalfLife, q.DefRange)
			if p.Queue.HalfLife < time.Hour {
				r.errf(valueRange(q.Body, "half_life", q.DefRange), "Invalid half_life", "A usage half-life under an hour forgets usage before it matters; write e.g. 7d.")
			}
		}
	}
	if d := b.Defaults; d != nil {
		p.Defaults = r.resolvePrincipal("", d.Priority, d.Preemptible, d.Quota, d.Body, d.DefRange)
		p.Defaults.Snapshots = r.resolveSnapshots(d.Snapshots, "policy defaults")
		p.Defaults.Storage = r.resolveStorageLimits(d.Storage, "policy defaults")
	}
	for _, g := range b.Groups {
		r.addPrincipal(p.Groups, "group", g)
	}
	for _, u := range b.Users {
		r.addPrincipal(p.Users, "user", u)
	}
	if len(b.Windows) > MaxWindows {
		r.errf(b.Windows[MaxWindows].DefRange, "Too many windows", "A policy may have at most %d windows.", MaxWindows)
		b.Windows = b.Windows[:MaxWindows]
	}
	if len(b.Alerts) > MaxAlerts {
		r.errf(b.Alerts[MaxAlerts].DefRange, "Too many alerts", "A policy may have at most %d alerts.", MaxAlerts)
		b.Alerts = b.Alerts[:MaxAlerts]
	}
	for _, w := range b.Windows {
		if win := r.resolveWindow(w); win != nil {
			p.Windows = append(p.Windows, win)
		}
	}
	if len(p.Windows) > 0 && b.Timezone == nil {
		r.errf(b.DefRange, "Missing timezone", "Time windows need an explicit timezone: add timezone = \"Europe/Paris\" (or \"UTC\") to the policy block.")
	}
	seen := map[string]hcl.Range{}
	for _, a := range b.Alerts {
		if !r.checkName("alert", a.Name, a.LabelRange) {
			continue
		}
		if first, dup := seen[a.Name]; dup {
			r.errf(a.LabelRange, "Duplicate alert", "Alert %q is defined twice; the first is at %s.", a.Name, rangeString(first))
			continue
		}
		seen[a.Name] = a.DefRange
		if al := r.resolveAlert(a); al != nil {
			p.Alerts = append(p.Alerts, al)
		}
	}
}

func (r *resolver) addPrincipal(into map[string]*Principal, kind string, b *principalBlock) {
	if !r.checkPrincipal(kind, b.Name, b.LabelRange) {
		return
	}
	if first, dup := into[b.Name]; dup {
		r.errf(b.LabelRange, "Duplicate "+kind, "%s %q has two blocks; the first is at %s.", strings.ToUpper(kind[:1])+kind[1:], b.Name, rangeString(first.DeclRange))
		return
	}
	pr := r.resolvePrincipal(b.Name, b.Priority, b.Preemptible, b.Quota, b.Body, b.DefRange)
	if b.Quota == nil {
		// Without a quota block of its own, a user or group has the
		// defaults' (a group a profile names needs a block, even empty:
		// naming it must not lift its members' limits). quota {} is no
		// limits, said on purpose.
		pr.Quota = r.cfg.Policy.Defaults.Quota
	}
	// Snapshot limits likewise: a block of its own, else the defaults'.
	pr.Snapshots = r.cfg.Policy.Defaults.Snapshots
	if b.Snapshots != nil {
		pr.Snapshots = r.resolveSnapshots(b.Snapshots, "policy "+kind+" "+b.Name)
	}
	pr.Storage = r.cfg.Policy.Defaults.Storage
	if b.Storage != nil {
		pr.Storage = r.resolveStorageLimits(b.Storage, "policy "+kind+" "+b.Name)
	}
	into[b.Name] = &pr
}

func (r *resolver) resolvePrincipal(name string, prio *int, preempt *bool, q *quotaBlock, body hcl.Body, def hcl.Range) Principal {
	p := Principal{Name: name, DeclRange: def}
	if prio != nil {
		p.Priority = *prio
		if p.Priority < 0 || p.Priority > MaxPriority {
			r.errf(valueRange(body, "priority", def), "Invalid priority", "priority is from 0 to %d (higher goes first), not %d.", MaxPriority, p.Priority)
		}
	}
	if preempt != nil {
		p.Preemptible = *preempt
	}
	if q == nil {
		return p
	}
	count := func(name string, v *int) *int {
		if v == nil {
			return nil
		}
		if *v < 0 || *v > 100000 {
			r.errf(valueRange(q.Body, name, q.DefRange), "Invalid "+name, "%s is a count from 0 to 100000, not %d.", name, *v)
		}
		x := *v
		return &x
	}
	hours := func(name string, v *float64, max float64) *float64 {
		if v == nil {
			return nil
		}
		if *v < 0 || *v > max {
			r.errf(valueRange(q.Body, name, q.DefRange), "Invalid "+name, "%s is a number of GPU-hours from 0 to %g.", name, max)
		}
		x := *v
		return &x
	}
	p.Quota.VMs = count("vms", q.VMs)
	p.Quota.GPUs = count("gpus", q.GPUs)
	p.Quota.Slices = count("slices", q.Slices)
	if q.GPUMemory != nil {
		if v, ok := r.size(q.Body, "gpu_memory", q.GPUMemory, 0, q.DefRange); ok {
			p.Quota.GPUMemory = &v
		}
	}
	p.Quota.GPUHoursPerDay = hours("gpu_hours_per_day", q.GPUHoursPerDay, 24*64)
	p.Quota.GPUHoursPerWeek = hours("gpu_hours_per_week", q.GPUHoursPerWeek, 7*24*64)
	p.Quota.GPUHoursPerMonth = hours("gpu_hours_per_month", q.GPUHoursPerMonth, 31*24*64)
	hd, hw, hm := p.Quota.GPUHoursPerDay, p.Quota.GPUHoursPerWeek, p.Quota.GPUHoursPerMonth
	switch {
	case hd != nil && hw != nil && *hd > *hw:
		r.warnf(valueRange(q.Body, "gpu_hours_per_day", q.DefRange), "Daily budget above weekly", "gpu_hours_per_day (%g) is more than gpu_hours_per_week (%g): the weekly budget caps it.", *hd, *hw)
	case hw != nil && hm != nil && *hw > *hm:
		r.warnf(valueRange(q.Body, "gpu_hours_per_week", q.DefRange), "Weekly budget above monthly", "gpu_hours_per_week (%g) is more than gpu_hours_per_month (%g): the monthly budget caps it.", *hw, *hm)
	}
	return p
}

// resolveSnapshots checks a snapshots block: keep a count from 0 to
// MaxSnapshots, expire_after a duration above 0.
func (r *resolver) resolveSnapshots(b *snapshotsBlock, rule string) Snapshots {
	out := Snapshots{Rule: rule}
	if b == nil {
		return out
	}
	if b.Keep != nil {
		if *b.Keep < 0 || *b.Keep > MaxSnapshots {
			r.errf(valueRange(b.Body, "keep", b.DefRange), "Invalid keep", "snapshots.keep is a count from 0 (no snapshots) to %d, not %d.", MaxSnapshots, *b.Keep)
		}
		k := *b.Keep
		out.Keep = &k
	}
	if b.ExpireAfter != nil {
		d, ok := r.duration(b.Body, "expire_after", b.ExpireAfter, 0, b.DefRange)
		if ok && d <= 0 {
			r.errf(valueRange(b.Body, "expire_after", b.DefRange), "Invalid expire_after", "snapshots.expire_after is how long a snapshot is kept, above 0: write e.g. 30d.")
		}
		out.ExpireAfter = &d
	}
	return out
}

// resolveStorageLimits checks a storage block: home_quota and disk_quota are
// sizes above 0 ("50GiB").
func (r *resolver) resolveStorageLimits(b *storageLimitsBlock, rule string) StorageLimits {
	out := StorageLimits{Rule: rule}
	if b == nil {
		return out
	}
	for _, f := range []struct {
		name string
		in   *string
		out  **uint64
	}{{"home_quota", b.HomeQuota, &out.HomeQuota}, {"disk_quota", b.DiskQuota, &out.DiskQuota}} {
		if f.in == nil {
			continue
		}
		v, ok := r.size(b.Body, f.name, f.in, 0, b.DefRange)
		if ok && v == 0 {
			r.errf(valueRange(b.Body, f.name, b.DefRange), "Invalid "+f.name, "storage.%s is a size above 0, e.g. \"50GiB\"; leave it out for no limit.", f.name)
		}
		*f.out = &v
	}
	return out
}

func (r *resolver) resolveAlert(b *alertBlock) *Alert {
	a := &Alert{Name: b.Name, Metric: b.Metric, Above: b.Above, Below: b.Below, Webhook: b.Webhook, DeclRange: b.DefRange}
	ok := r.oneOf(b.Body, "metric", a.Metric, AlertMetrics, b.DefRange)
	switch {
	case a.Above == nil && a.Below == nil:
		r.errf(b.DefRange, "Alert has no threshold", "Write above = N or below = N (or both, for a band outside which the alert fires).")
		ok = false
	case a.Above != nil && a.Below != nil && *a.Below >= *a.Above:
		r.errf(valueRange(b.Body, "below", b.DefRange), "Empty band", "With both, the alert fires when the value is above %g or below %g; below must be the smaller.", *a.Above, *a.Below)
		ok = false
	}
	var dok bool
	a.Duration, dok = r.duration(b.Body, "duration", b.Duration, DefaultAlertFor, b.DefRange)
	ok = ok && dok
	u, err := url.Parse(a.Webhook)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.errf(valueRange(b.Body, "webhook", b.DefRange), "Invalid webhook", "%q is not an http:// or https:// URL.", a.Webhook)
		ok = false
	}
	if !ok {
		return nil
	}
	return a
}

// resolveReservations runs after the profiles, which it refers to.
func (r *resolver) resolveReservations(b *policyBlock) {
	if b == nil || b.Reservations == nil {
		return
	}
	rb := b.Reservations
	res := &Reservations{
		Users:     append([]string{}, rb.Users...),
		Groups:    append([]string{}, rb.Groups...),
		Profiles:  append([]string{}, rb.Profiles...),
		MaxVMs:    DefaultBookingVMs,
		MaxActive: DefaultBookingCount,
	}
	res.MaxAhead, _ = r.duration(rb.Body, "max_ahead", rb.MaxAhead, DefaultMaxAhead, rb.DefRange)
	res.MaxLength, _ = r.duration(rb.Body, "max_length", rb.MaxLength, DefaultMaxBooking, rb.DefRange)
	if res.MaxAhead <= 0 {
		r.errf(valueRange(rb.Body, "max_ahead", rb.DefRange), "Invalid max_ahead", "Bookings need some time ahead; write e.g. 14d.")
	}
	if res.MaxLength <= 0 {
		r.errf(valueRange(rb.Body, "max_length", rb.DefRange), "Invalid max_length", "A booking lasts longer than 0; write e.g. 4h.")
	}
	for _, c := range []struct {
		name string
		v    *int
		dst  *int
	}{{"max_vms", rb.MaxVMs, &res.MaxVMs}, {"max_active", rb.MaxActive, &res.MaxActive}} {
		if c.v == nil {
			continue
		}
		*c.dst = *c.v
		if *c.v < 1 || *c.v > 1000 {
			r.errf(valueRange(rb.Body, c.name, rb.DefRange), "Invalid "+c.name, "%s is from 1 to 1000, not %d.", c.name, *c.v)
		}
	}
	for i, u := range rb.Users {
		r.checkPrincipal("user", u, listItemRange(rb.Body, "users", i, rb.DefRange))
	}
	r.checkDuplicates(rb.Body, "users", rb.Users, rb.DefRange)
	r.checkGroupRefs(rb.Body, "groups", rb.Groups, rb.DefRange)
	names := sortedKeys(r.cfg.Profiles)
	for i, name := range rb.Profiles {
		if _, ok := r.cfg.Profiles[name]; !ok {
			r.errf(listItemRange(rb.Body, "profiles", i, rb.DefRange), "Unknown profile", "No profile is named %q.%s", name, suggestion(name, names))
		}
	}
	r.checkDuplicates(rb.Body, "profiles", rb.Profiles, rb.DefRange)
	for _, p := range r.cfg.Profiles {
		if p != nil && p.Lease.Max < res.MaxLength && (len(res.Profiles) == 0 || contains(res.Profiles, p.Name)) && len(res.Profiles) > 0 {
			r.warnf(p.DeclRange, "Booking longer than the lease", "Profile %q may be booked for %s but its lease.max is %s: a booked VM would stop before its booking ends.", p.Name, FormatDuration(res.MaxLength), FormatDuration(p.Lease.Max))
		}
	}
	r.cfg.Policy.Reservations = res
}

// AnyHomeQuota says whether some rule of the policy (defaults, a user's,
// a group's) sets storage.home_quota.
func (p *Policy) AnyHomeQuota() bool {
	if p.Defaults.Storage.HomeQuota != nil {
		return true
	}
	for _, r := range p.Users {
		if r != nil && r.Storage.HomeQuota != nil {
			return true
		}
	}
	for _, r := range p.Groups {
		if r != nil && r.Storage.HomeQuota != nil {
			return true
		}
	}
	return false
}

// Effective returns the policy that applies to a user who belongs to groups:
// their user block, else the most generous of their groups' blocks (highest
// priority, preemptible only if every such group is, each limit the largest,
// no limit beating any), else the defaults.
func (p *Policy) Effective(user string, groups []string) Principal {
	if u, ok := p.Users[user]; ok {
		return *u
	}
	var found []*Principal
	for _, g := range groups {
		if pr, ok := p.Groups[g]; ok {
			found = append(found, pr)
		}
	}
	if len(found) == 0 {
		d := p.Defaults
		d.Name = user
		return d
	}
	out := Principal{Name: user, Preemptible: true}
	out.Quota = found[0].Quota
	for i, g := range found {
		out.Priority = max(out.Priority, g.Priority)
		out.Preemptible = out.Preemptible && g.Preemptible
		if i == 0 {
			continue
		}
		q := &out.Quota
		q.VMs = looserInt(q.VMs, g.Quota.VMs)
		q.GPUs = looserInt(q.GPUs, g.Quota.GPUs)
		q.Slices = looserInt(q.Slices, g.Quota.Slices)
		q.GPUMemory = looser(q.GPUMemory, g.Quota.GPUMemory)
		q.GPUHoursPerDay = looser(q.GPUHoursPerDay, g.Quota.GPUHoursPerDay)
		q.GPUHoursPerWeek = looser(q.GPUHoursPerWeek, g.Quota.GPUHoursPerWeek)
		q.GPUHoursPerMonth = looser(q.GPUHoursPerMonth, g.Quota.GPUHoursPerMonth)
	}
	out.Snapshots = looserSnapshots(found)
	out.Storage = looserStorage(found)
	return out
}

// looserStorage is the most generous of groups' storage limits, its rule
// naming the groups.
func looserStorage(found []*Principal) StorageLimits {
	out := found[0].Storage
	var names []string
	for i, g := range found {
		names = append(names, g.Name)
		if i > 0 {
			out.HomeQuota = looser(out.HomeQuota, g.Storage.HomeQuota)
			out.DiskQuota = looser(out.DiskQuota, g.Storage.DiskQuota)
		}
	}
	if len(found) > 1 {
		out.Rule = "policy groups " + strings.Join(names, ", ") + " (the most generous)"
	}
	return out
}

func looserInt(a, b *int) *int { return looser(a, b) }

// looserSnapshots is the most generous of groups' snapshot limits, its rule
// naming the groups.
func looserSnapshots(found []*Principal) Snapshots {
	out := found[0].Snapshots
	var names []string
	for i, g := range found {
		names = append(names, g.Name)
		if i > 0 {
			out.Keep = looserInt(out.Keep, g.Snapshots.Keep)
			out.ExpireAfter = looser(out.ExpireAfter, g.Snapshots.ExpireAfter)
		}
	}
	if len(found) > 1 {
		out.Rule = "policy groups " + strings.Join(names, ", ") + " (the most generous)"
	}
	return out
}

// looser is the more generous of two limits; nil is no limit.
func looser[T int | uint64 | float64 | time.Duration](a, b *T) *T {
	if a == nil || b == nil {
		return nil
	}
	if *b > *a {
		return b
	}
	return a
}
