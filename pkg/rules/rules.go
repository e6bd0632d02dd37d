// Package rules writes the policy in force down in plain language: who may
// run how much, the queue's order, the time windows, booking, leases, idle
// stops and who may use which profile, as sections of sentences made from
// the configuration's real values (api.Rules), in English or Simplified
// Chinese. GET /v1/rules serves it, `gpuvm rules` prints it and the
// portal's /rules page shows it, so that a newcomer understands the rules
// at a glance without reading HCL.
//
// An admin sees every rule. Anyone else sees the rules that apply to
// everyone (the defaults, the queue, the windows, booking, leases and idle
// stops of the profiles they may use) and those of their own user and
// groups: other people's and groups' blocks, the profiles they may not use,
// alert rules and webhooks are left out, as GET /v1/profiles leaves out the
// profiles a caller may not use.
//
// Like pkg/policy it is pure: callers pass the configuration and now.
package rules

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/policy"
)

// Languages of the rules.
const (
	English = "en"
	Chinese = "zh-CN"
)

// Languages lists the languages Build writes, the default first.
var Languages = []string{English, Chinese}

// Viewer is who reads the rules.
type Viewer struct {
	User   string
	Groups []string
	Admin  bool
}

// Section IDs, in reading order.
const (
	SectionYou          = "you"
	SectionQuotas       = "quotas"
	SectionQueue        = "queue"
	SectionWindows      = "windows"
	SectionReservations = "reservations"
	SectionLeases       = "leases"
	SectionTasks        = "tasks"
	SectionIdle         = "idle"
	SectionProfiles     = "profiles"
	SectionAlerts       = "alerts"
)

// Build writes the rules of cfg for v in lang (English or Chinese) at now
// (the current week's window occurrences).
func Build(cfg *config.Config, v Viewer, lang string, now time.Time) (api.Rules, error) {
	w, ok := phrasebooks[lang]
	if !ok {
		return api.Rules{}, fmt.Errorf("language %q: the rules are written in %q or %q", lang, English, Chinese)
	}
	if cfg == nil {
		return api.Rules{}, fmt.Errorf("no configuration")
	}
	b := &builder{cfg: cfg, pol: &cfg.Policy, v: v, w: w, now: now, loc: time.UTC, zone: "UTC"}
	if b.pol.Location != nil {
		b.loc, b.zone = b.pol.Location, b.pol.Location.String()
	}
	b.v.Groups = slices.Clone(v.Groups)
	sort.Strings(b.v.Groups)
	for _, p := range cfg.SortedProfiles() {
		if v.Admin || p.Allows(v.User, v.Groups) {
			b.profiles = append(b.profiles, p)
		}
	}
	doc := api.Rules{Lang: lang, Scope: api.RulesScopeUser, Timezone: b.zone, GeneratedAt: now.UTC(), You: b.you()}
	if v.Admin {
		doc.Scope = api.RulesScopeAll
	}
	for _, s := range []struct {
		id    string
		build func() []api.RulesSentence
	}{
		{SectionYou, b.youSection},
		{SectionQuotas, b.quotas},
		{SectionQueue, b.queue},
		{SectionWindows, b.windows},
		{SectionReservations, b.reservations},
		{SectionLeases, b.leases},
		{SectionTasks, b.tasks},
		{SectionIdle, b.idle},
		{SectionProfiles, b.profileAccess},
		{SectionAlerts, b.alerts},
	} {
		if ss := s.build(); len(ss) > 0 {
			doc.Sections = append(doc.Sections, api.RulesSection{ID: s.id, Title: w.title(s.id), Sentences: ss})
		}
	}
	return doc, nil
}

type builder struct {
	cfg      *config.Config
	pol      *config.Policy
	v        Viewer
	w        phrasebook
	now      time.Time
	loc      *time.Location
	zone     string
	profiles []*config.Profile // those the viewer may use (admins: all)
}

// who is whom a sentence is about.
type who struct {
	kind string // "defaults", "group", "user", "you"
	name string
}

// principals are the blocks the viewer sees: the defaults, then groups and
// users by name (a user: their own groups' and their own user block).
func (b *builder) principals() []struct {
	who who
	p   *config.Principal
	key string // the field path of its blocks
} {
	type entry = struct {
		who who
		p   *config.Principal
		key string
	}
	out := []entry{{who{"defaults", ""}, &b.pol.Defaults, "defaults"}}
	for _, name := range sortedKeys(b.pol.Groups) {
		if b.v.Admin || slices.Contains(b.v.Groups, name) {
			out = append(out, entry{who{"group", name}, b.pol.Groups[name], "groups"})
		}
	}
	for _, name := range sortedKeys(b.pol.Users) {
		if b.v.Admin || name == b.v.User {
			out = append(out, entry{who{"user", name}, b.pol.Users[name], "users"})
		}
	}
	return out
}

func subjectOf(x who) string {
	switch x.kind {
	case "group":
		return "group:" + x.name
	case "user":
		return "user:" + x.name
	}
	return x.kind
}

func num(v float64) *float64 { return &v }

func numFact(field string, v float64, unit string) api.RulesFact {
	return api.RulesFact{Field: field, Number: num(v), Unit: unit}
}

func secsFact(field string, d time.Duration) api.RulesFact {
	return numFact(field, d.Seconds(), api.UnitSeconds)
}

// quotaFacts are the limits of q that are set, under prefix ("groups.quota").
func quotaFacts(prefix string, q config.Quota) []api.RulesFact {
	var out []api.RulesFact
	add := func(name string, v float64, unit string) {
		out = append(out, numFact(prefix+"."+name, v, unit))
	}
	if q.VMs != nil {
		add("vms", float64(*q.VMs), api.UnitCount)
	}
	if q.GPUs != nil {
		add("gpus", float64(*q.GPUs), api.UnitCount)
	}
	if q.Slices != nil {
		add("slices", float64(*q.Slices), api.UnitCount)
	}
	if q.GPUMemory != nil {
		add("gpu_memory", float64(*q.GPUMemory), api.UnitBytes)
	}
	if q.GPUHoursPerDay != nil {
		add("gpu_hours_per_day", *q.GPUHoursPerDay, api.UnitGPUHours)
	}
	if q.GPUHoursPerWeek != nil {
		add("gpu_hours_per_week", *q.GPUHoursPerWeek, api.UnitGPUHours)
	}
	if q.GPUHoursPerMonth != nil {
		add("gpu_hours_per_month", *q.GPUHoursPerMonth, api.UnitGPUHours)
	}
	return out
}

// snapshotFacts are the snapshot limits of s that are set, under prefix
// ("groups.snapshots").
func snapshotFacts(prefix string, s config.Snapshots) []api.RulesFact {
	var out []api.RulesFact
	if s.Keep != nil {
		out = append(out, numFact(prefix+".keep", float64(*s.Keep), api.UnitCount))
	}
	if s.ExpireAfter != nil {
		out = append(out, secsFact(prefix+".expire_after", *s.ExpireAfter))
	}
	return out
}

// storageFacts are the storage limits of s that are set, under prefix
// ("groups.storage").
func storageFacts(prefix string, s config.StorageLimits) []api.RulesFact {
	var out []api.RulesFact
	if s.HomeQuota != nil {
		out = append(out, numFact(prefix+".home_quota", float64(*s.HomeQuota), api.UnitBytes))
	}
	if s.DiskQuota != nil {
		out = append(out, numFact(prefix+".disk_quota", float64(*s.DiskQuota), api.UnitBytes))
	}
	return out
}

func hasLimit(q config.Quota) bool { return len(quotaFacts("", q)) > 0 }

// effective is the viewer's principal and where it comes from.
func (b *builder) effective() (config.Principal, string, []string) {
	eff := b.pol.Effective(b.v.User, b.v.Groups)
	if _, ok := b.pol.Users[b.v.User]; ok {
		return eff, api.LimitsFromUser, nil
	}
	var gs []string
	for _, g := range b.v.Groups {
		if _, ok := b.pol.Groups[g]; ok {
			gs = append(gs, g)
		}
	}
	if len(gs) > 0 {
		return eff, api.LimitsFromGroups, gs
	}
	return eff, api.LimitsFromDefaults, nil
}

// mayBook says whether the viewer may book, and for which profiles (nil:
// any): the policy's bookable profiles that they may use.
func (b *builder) mayBook() (bool, []string) {
	r := b.pol.Reservations
	if r == nil {
		return false, nil
	}
	may := len(r.Users) == 0 && len(r.Groups) == 0 || slices.Contains(r.Users, b.v.User)
	for _, g := range r.Groups {
		may = may || slices.Contains(b.v.Groups, g)
	}
	if !may || len(r.Profiles) == 0 {
		return may, nil
	}
	var ps []string
	for _, name := range r.Profiles {
		if p, ok := b.cfg.Profiles[name]; ok && p.Allows(b.v.User, b.v.Groups) {
			ps = append(ps, name)
		}
	}
	return len(ps) > 0, ps
}

func (b *builder) you() api.RulesViewer {
	eff, from, gs := b.effective()
	y := api.RulesViewer{User: b.v.User, Admin: b.v.Admin, Groups: b.v.Groups, LimitsFrom: from, LimitGroups: gs,
		Priority: eff.Priority, Preemptible: eff.Preemptible, Quota: quotaFacts("quota", eff.Quota)}
	y.MayBook, _ = b.mayBook()
	y.MayBook = y.MayBook || b.v.Admin // an admin books whatever the rules say
	if y.Groups == nil {
		y.Groups = []string{}
	}
	if y.Quota == nil {
		y.Quota = []api.RulesFact{}
	}
	y.Profiles = []string{}
	for _, p := range b.cfg.SortedProfiles() {
		if p.Allows(b.v.User, b.v.Groups) {
			y.Profiles = append(y.Profiles, p.Name)
		}
	}
	return y
}

func (b *builder) youSection() []api.RulesSentence {
	y := b.you()
	eff, from, gs := b.effective()
	out := []api.RulesSentence{{Text: b.w.youAre(y.User, y.Groups)}}
	if b.v.Admin {
		out = append(out, api.RulesSentence{Text: b.w.scopeAdmin()})
	} else {
		out = append(out, api.RulesSentence{Text: b.w.scopeUser()})
	}
	switch from {
	case api.LimitsFromUser:
		out = append(out, api.RulesSentence{Text: b.w.limitsFromUser(y.User), Subject: "user:" + y.User})
	case api.LimitsFromGroups:
		out = append(out, api.RulesSentence{Text: b.w.limitsFromGroups(gs)})
	default:
		out = append(out, api.RulesSentence{Text: b.w.limitsFromDefaults(), Subject: "defaults"})
	}
	out = append(out, api.RulesSentence{Text: b.w.quota(who{"you", ""}, eff.Quota), Facts: y.Quota})
	if eff.Priority != 0 || eff.Preemptible {
		out = append(out, api.RulesSentence{Text: b.w.priority(who{"you", ""}, eff.Priority, eff.Preemptible),
			Facts: []api.RulesFact{numFact("priority", float64(eff.Priority), api.UnitPriority)}})
	}
	out = append(out, api.RulesSentence{Text: b.w.yourProfiles(y.Profiles), Facts: []api.RulesFact{{Field: "profiles", List: y.Profiles}}})
	out = append(out, api.RulesSentence{Text: b.w.yourBooking(y.MayBook, b.v.Admin)})
	return out
}

func (b *builder) quotas() []api.RulesSentence {
	var out []api.RulesSentence
	anyLimit, anyBudget, anySlices := false, false, false
	ps := b.principals()
	for _, e := range ps {
		q := e.p.Quota
		anyLimit = anyLimit || hasLimit(q)
		anyBudget = anyBudget || q.HasBudget()
		anySlices = anySlices || q.Slices != nil || q.GPUs != nil
		facts := quotaFacts(e.key+".quota", q)
		if e.who.kind != "defaults" && !hasLimit(q) {
			// A block without a quota: its members have no limit, which
			// is worth saying only when the defaults have one.
			if !hasLimit(b.pol.Defaults.Quota) {
				continue
			}
		}
		out = append(out, api.RulesSentence{Text: b.w.quota(e.who, q), Subject: subjectOf(e.who), Facts: facts})
	}
	for _, e := range ps {
		sn := e.p.Snapshots
		facts := snapshotFacts(e.key+".snapshots", sn)
		if len(facts) == 0 && (e.who.kind == "defaults" || len(snapshotFacts("", b.pol.Defaults.Snapshots)) == 0) {
			continue // no limits, and none to lift
		}
		out = append(out, api.RulesSentence{Text: b.w.snapshots(e.who, sn), Subject: subjectOf(e.who), Facts: facts})
	}
	for _, e := range ps {
		sl := e.p.Storage
		facts := storageFacts(e.key+".storage", sl)
		if len(facts) == 0 && (e.who.kind == "defaults" || len(storageFacts("", b.pol.Defaults.Storage)) == 0) {
			continue // no limits, and none to lift
		}
		out = append(out, api.RulesSentence{Text: b.w.storage(e.who, sl), Subject: subjectOf(e.who), Facts: facts})
	}
	if len(b.pol.Users) > 0 || len(b.pol.Groups) > 0 {
		out = append(out, api.RulesSentence{Text: b.w.combine()})
	}
	if anySlices {
		out = append(out, api.RulesSentence{Text: b.w.sliceNote()})
	}
	if anyBudget {
		out = append(out, api.RulesSentence{Text: b.w.gpuHours(b.zone), Facts: []api.RulesFact{{Field: "timezone", Text: b.zone}}})
	}
	if anyLimit {
		out = append(out, api.RulesSentence{Text: b.w.refuseOrWait()})
	}
	return out
}

func (b *builder) queue() []api.RulesSentence {
	q := b.pol.Queue
	order := q.Order
	if order == "" {
		order = config.OrderFIFO
	}
	facts := []api.RulesFact{{Field: "queue.order", Text: order}}
	if order == config.OrderFairshare {
		facts = append(facts, secsFact("queue.half_life", q.HalfLife))
	}
	out := []api.RulesSentence{{Text: b.w.order(order, q.HalfLife, policy.MaxAge), Facts: facts}}
	anyPrio, anyPreempt := false, false
	for _, e := range b.principals() {
		p := e.p
		if p.Priority == 0 && !p.Preemptible {
			continue
		}
		anyPrio = anyPrio || p.Priority != 0
		anyPreempt = anyPreempt || p.Preemptible
		var fs []api.RulesFact
		if p.Priority != 0 {
			fs = append(fs, numFact(e.key+".priority", float64(p.Priority), api.UnitPriority))
		}
		if p.Preemptible {
			fs = append(fs, api.RulesFact{Field: e.key + ".preemptible", Text: "true"})
		}
		out = append(out, api.RulesSentence{Text: b.w.priority(e.who, p.Priority, p.Preemptible), Subject: subjectOf(e.who), Facts: fs})
	}
	byPrio := map[int][]string{}
	for _, p := range b.profiles {
		if p.Priority != 0 {
			byPrio[p.Priority] = append(byPrio[p.Priority], p.Name)
		}
	}
	prios := sortedKeys(byPrio)
	slices.Reverse(prios)
	for _, pr := range prios {
		anyPrio = true
		out = append(out, api.RulesSentence{Text: b.w.profilePriority(byPrio[pr], pr),
			Facts: []api.RulesFact{numFact("profile.priority", float64(pr), api.UnitPriority), {Field: "profiles", List: byPrio[pr]}}})
	}
	if anyPrio {
		out = append(out, api.RulesSentence{Text: b.w.priorityAdds()})
	}
	// A user may be preemptible through a rule they cannot see; the
	// mechanism is said whenever any block is.
	for _, p := range b.allPrincipals() {
		anyPreempt = anyPreempt || p.Preemptible
	}
	if anyPreempt {
		out = append(out, api.RulesSentence{Text: b.w.preemption(policy.DefaultNotice, policy.DefaultMinRuntime)})
	}
	return out
}

func (b *builder) allPrincipals() []*config.Principal {
	out := []*config.Principal{&b.pol.Defaults}
	for _, p := range b.pol.Groups {
		out = append(out, p)
	}
	for _, p := range b.pol.Users {
		out = append(out, p)
	}
	return out
}

var weekdays = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

func clock(m int) string { return fmt.Sprintf("%02d:%02d", m/60%24, m%60) }

func dayOf(m int) string { return weekdays[(m/(24*60))%7] }

func (b *builder) windows() []api.RulesSentence {
	if len(b.pol.Windows) == 0 {
		return []api.RulesSentence{{Text: b.w.noWindows()}}
	}
	wins := policy.NewWindows(b.pol)
	t := b.now.In(b.loc)
	ws := time.Date(t.Year(), t.Month(), t.Day()-(int(t.Weekday())+6)%7, 0, 0, 0, 0, b.loc)
	we := ws.AddDate(0, 0, 7)
	var out []api.RulesSentence
	forbidsBatch := false
	for _, win := range b.pol.Windows {
		forbidsBatch = forbidsBatch || !win.Allows(config.ClassBatch)
		when := b.when(win)
		rule := b.w.windowRule(win.Classes, win.AtEnd, win.WarnBefore)
		rw := &api.RulesWindow{Name: win.Name, Zone: b.zone, When: when, Rule: rule, Spans: []api.RulesSpan{}, ThisWeek: []api.RulesOccurrence{}}
		for _, s := range mergeWeekEnd(win.Spans) {
			rw.Spans = append(rw.Spans, api.RulesSpan{StartDay: dayOf(s.Start), Start: clock(s.Start), EndDay: dayOf(s.End % (7 * 24 * 60)), End: clock(s.End)})
		}
		// A week on either side, so that an occurrence that crosses the
		// week's start or end is whole.
		for _, st := range wins.Stretches(ws.AddDate(0, 0, -7), we.AddDate(0, 0, 7)) {
			switch {
			case st.Window != win:
			case !st.Start.Before(ws) && st.Start.Before(we):
				rw.ThisWeek = append(rw.ThisWeek, api.RulesOccurrence{Start: st.Start.UTC(), End: st.End.UTC()})
			case !st.Start.After(ws) && !st.End.Before(we):
				// Open all week (every day, 00:00-24:00): the week itself.
				rw.ThisWeek = append(rw.ThisWeek, api.RulesOccurrence{Start: ws.UTC(), End: we.UTC()})
			}
		}
		facts := []api.RulesFact{{Field: "windows.classes", List: append([]string{}, win.Classes...)}, {Field: "windows.at_end", Text: win.AtEnd}}
		if win.Days != "" || win.Hours != "" {
			facts = append(facts, api.RulesFact{Field: "windows.days", Text: win.Days}, api.RulesFact{Field: "windows.hours", Text: win.Hours})
		} else {
			facts = append(facts, api.RulesFact{Field: "windows.from", Text: win.From}, api.RulesFact{Field: "windows.to", Text: win.To})
		}
		if win.AtEnd != config.AtEndNothing {
			facts = append(facts, secsFact("windows.warn_before", win.WarnBefore))
		}
		facts = append(facts, api.RulesFact{Field: "timezone", Text: b.zone})
		out = append(out, api.RulesSentence{Text: b.w.window(win.Name, when, b.zone, rule), Subject: "window:" + win.Name, Facts: facts, Window: rw})
	}
	out = append(out, api.RulesSentence{Text: b.w.outsideWindows()})
	if forbidsBatch {
		out = append(out, api.RulesSentence{Text: b.w.batchNote()})
	}
	var batch []string
	for _, p := range b.profiles {
		if p.Class == config.ClassBatch {
			batch = append(batch, p.Name)
		}
	}
	out = append(out, api.RulesSentence{Text: b.w.classes(batch, len(batch) < len(b.profiles)),
		Facts: []api.RulesFact{{Field: "profile.class", Text: config.ClassBatch, List: batch}}})
	return out
}

// mergeWeekEnd joins the span that ends the week to the one that starts it
// when they touch: one stretch from Sunday evening to Monday morning.
func mergeWeekEnd(spans []config.Span) []config.Span {
	const week = 7 * 24 * 60
	out := slices.Clone(spans)
	slices.SortFunc(out, func(a, b config.Span) int { return a.Start - b.Start })
	if n := len(out); n >= 2 && out[0].Start == 0 && out[n-1].End == week {
		out[n-1].End = week + out[0].End
		out = out[1:]
	}
	return out
}

// when is a window's times in words, as written: days and hours, or from
// and to.
func (b *builder) when(win *config.Window) string {
	if win.Days != "" || win.Hours != "" {
		days, _ := config.ParseDays(win.Days)
		start, length, _ := config.ParseHours(win.Hours)
		return b.w.whenDays(days, clock(start), clock(start+length), start+length > 24*60)
	}
	f, t := strings.Fields(win.From), strings.Fields(win.To)
	if len(f) != 2 || len(t) != 2 { // resolved windows always have both
		return win.From + " – " + win.To
	}
	return b.w.whenSpan(dayIndex(f[0]), f[1], dayIndex(t[0]), t[1])
}

// dayIndex is a weekday's number, Monday 0.
func dayIndex(name string) int {
	days, _ := config.ParseDays(name)
	for i, ok := range days {
		if ok {
			return i
		}
	}
	return 0
}

func (b *builder) reservations() []api.RulesSentence {
	r := b.pol.Reservations
	if r == nil {
		return []api.RulesSentence{{Text: b.w.noBooking(b.v.Admin)}}
	}
	facts := []api.RulesFact{{Field: "reservations.users", List: append([]string{}, r.Users...)},
		{Field: "reservations.groups", List: append([]string{}, r.Groups...)},
		{Field: "reservations.profiles", List: append([]string{}, r.Profiles...)}}
	may, bookable := b.mayBook()
	var text string
	switch {
	case b.v.Admin:
		text = b.w.bookers(r.Users, r.Groups, r.Profiles)
	case may:
		text = b.w.youMayBook(true, bookable)
		facts = []api.RulesFact{{Field: "reservations.profiles", List: bookable}}
	default:
		text = b.w.youMayBook(false, nil)
		facts = nil
	}
	out := []api.RulesSentence{{Text: text, Facts: facts}}
	if b.v.Admin || may {
		out = append(out, api.RulesSentence{Text: b.w.bookingLimits(r.MaxAhead, r.MaxLength, r.MaxVMs, r.MaxActive), Facts: []api.RulesFact{
			secsFact("reservations.max_ahead", r.MaxAhead), secsFact("reservations.max_length", r.MaxLength),
			numFact("reservations.max_vms", float64(r.MaxVMs), api.UnitCount), numFact("reservations.max_active", float64(r.MaxActive), api.UnitCount)}})
	}
	out = append(out, api.RulesSentence{Text: b.w.bookingEffect()})
	return out
}

// groupProfiles groups the viewer's profiles by key, in the order of their
// first profile.
func groupProfiles[K comparable](ps []*config.Profile, key func(*config.Profile) (K, bool)) ([]K, map[K][]string) {
	var keys []K
	names := map[K][]string{}
	for _, p := range ps {
		k, ok := key(p)
		if !ok {
			continue
		}
		if _, seen := names[k]; !seen {
			keys = append(keys, k)
		}
		names[k] = append(names[k], p.Name)
	}
	return keys, names
}

func (b *builder) leases() []api.RulesSentence {
	var out []api.RulesSentence
	keys, names := groupProfiles(b.profiles, func(p *config.Profile) (config.Lease, bool) {
		l := p.Lease
		l.IdleStop = 0 // the idle section says it
		return l, true
	})
	for _, l := range keys {
		facts := []api.RulesFact{{Field: "profiles", List: names[l]}, secsFact("profile.lease.default", l.Default), secsFact("profile.lease.max", l.Max),
			secsFact("profile.lease.warn_before", l.WarnBefore), {Field: "profile.lease.on_end", Text: l.OnEnd}}
		if l.OnEnd == config.LeaseEndStop {
			facts = append(facts, secsFact("profile.lease.grace", l.Grace))
		}
		out = append(out, api.RulesSentence{Text: b.w.lease(names[l], l), Facts: facts})
	}
	if len(b.profiles) > 0 {
		out = append(out, api.RulesSentence{Text: b.w.extend()})
	}
	host := ""
	if b.pol.Webhook != "" {
		if u, err := url.Parse(b.pol.Webhook); err == nil {
			host = u.Host
		}
	}
	s := api.RulesSentence{Text: b.w.notices(host != "", b.v.Admin, host)}
	if b.v.Admin && host != "" {
		s.Facts = []api.RulesFact{{Field: "webhook", Text: host}}
	}
	return append(out, s)
}

// tasks says which of the viewer's profiles can run a task, how one ends
// at its time limit, and that tasks wait as VMs do. None when no profile
// the viewer may use can run one (a task needs a Linux profile with
// cloud_init, for its runner).
func (b *builder) tasks() []api.RulesSentence {
	var can, batch []string
	for _, p := range b.profiles {
		if p.CloudInit == nil || p.OS == "windows" {
			continue
		}
		can = append(can, p.Name)
		if p.Class == config.ClassBatch {
			batch = append(batch, p.Name)
		}
	}
	if len(can) == 0 {
		return nil
	}
	out := []api.RulesSentence{
		{Text: b.w.taskProfiles(can), Facts: []api.RulesFact{{Field: "profiles", List: can}}},
		{Text: b.w.taskLimit(api.TaskKillWait, api.TaskMaxKillWait),
			Facts: []api.RulesFact{secsFact("task.kill_wait", api.TaskKillWait), secsFact("task.kill_wait.max", api.TaskMaxKillWait)}},
		{Text: b.w.taskRepeat(api.TaskMaxRetries, api.TaskMaxArrayElements),
			Facts: []api.RulesFact{numFact("task.retries.max", api.TaskMaxRetries, ""), numFact("task.array.max", api.TaskMaxArrayElements, "")}},
	}
	queue := api.RulesSentence{Text: b.w.taskQueue(batch, len(b.pol.Windows) > 0)}
	if len(batch) > 0 && len(b.pol.Windows) > 0 {
		queue.Facts = []api.RulesFact{{Field: "profiles", List: batch}}
	}
	return slices.Insert(out, 2, queue)
}

func (b *builder) idle() []api.RulesSentence {
	var out []api.RulesSentence
	keys, names := groupProfiles(b.profiles, func(p *config.Profile) (time.Duration, bool) {
		return p.Lease.IdleStop, p.Lease.IdleStop > 0
	})
	n := 0
	for _, d := range keys {
		n += len(names[d])
		out = append(out, api.RulesSentence{Text: b.w.idleStop(names[d], d), Facts: []api.RulesFact{{Field: "profiles", List: names[d]}, secsFact("profile.lease.idle_stop", d)}})
	}
	if n == 0 {
		return []api.RulesSentence{{Text: b.w.noIdle()}}
	}
	th := b.cfg.Server.Monitor.IdleThreshold
	out = append(out, api.RulesSentence{Text: b.w.idleMeans(th), Facts: []api.RulesFact{numFact("server.monitor.idle_threshold", th, api.UnitPercent)}})
	if n < len(b.profiles) {
		out = append(out, api.RulesSentence{Text: b.w.othersNeverIdle()})
	}
	return out
}

func (b *builder) profileAccess() []api.RulesSentence {
	if len(b.profiles) == 0 {
		return []api.RulesSentence{{Text: b.w.noProfiles()}}
	}
	var open []string
	var out []api.RulesSentence
	for _, p := range b.profiles {
		if p.Open() {
			open = append(open, p.Name)
		}
	}
	if len(open) > 0 {
		out = append(out, api.RulesSentence{Text: b.w.openProfiles(open), Facts: []api.RulesFact{{Field: "profiles", List: open}}})
	}
	for _, p := range b.profiles {
		if p.Open() {
			continue
		}
		s := api.RulesSentence{Subject: "profile:" + p.Name}
		if b.v.Admin {
			s.Text = b.w.restricted(p.Name, p.Groups, p.Users)
			s.Facts = []api.RulesFact{{Field: "profile.groups", List: append([]string{}, p.Groups...)}, {Field: "profile.users", List: append([]string{}, p.Users...)}}
		} else {
			var via []string
			for _, g := range p.Groups {
				if slices.Contains(b.v.Groups, g) {
					via = append(via, g)
				}
			}
			s.Text = b.w.restrictedYou(p.Name, via, slices.Contains(p.Users, b.v.User))
		}
		out = append(out, s)
	}
	return out
}

func (b *builder) alerts() []api.RulesSentence {
	if !b.v.Admin || len(b.pol.Alerts) == 0 {
		return nil
	}
	var out []api.RulesSentence
	for _, a := range b.pol.Alerts {
		host := a.Webhook
		if u, err := url.Parse(a.Webhook); err == nil {
			host = u.Host
		}
		facts := []api.RulesFact{{Field: "alerts.metric", Text: a.Metric}, secsFact("alerts.duration", a.Duration), {Field: "alerts.webhook", Text: host}}
		if a.Above != nil {
			facts = append(facts, numFact("alerts.above", *a.Above, ""))
		}
		if a.Below != nil {
			facts = append(facts, numFact("alerts.below", *a.Below, ""))
		}
		out = append(out, api.RulesSentence{Text: b.w.alert(a.Name, a.Metric, a.Above, a.Below, a.Duration, host), Subject: "alert:" + a.Name, Facts: facts})
	}
	return out
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
