package rules

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
)

// phrasebook writes each kind of sentence in one language. Every language
// implements all of it, so none can be left half-translated.
type phrasebook interface {
	title(section string) string

	youAre(user string, groups []string) string
	scopeAdmin() string
	scopeUser() string
	limitsFromUser(user string) string
	limitsFromGroups(groups []string) string
	limitsFromDefaults() string
	yourProfiles(names []string) string
	yourBooking(may, admin bool) string

	quota(w who, q config.Quota) string
	snapshots(w who, s config.Snapshots) string
	storage(w who, s config.StorageLimits) string
	combine() string
	sliceNote() string
	gpuHours(zone string) string
	refuseOrWait() string

	order(order string, halfLife, maxAge time.Duration) string
	priority(w who, priority int, preemptible bool) string
	profilePriority(profiles []string, priority int) string
	priorityAdds() string
	preemption(notice, minRuntime time.Duration) string

	noWindows() string
	whenDays(days [7]bool, start, end string, nextDay bool) string
	whenSpan(fromDay int, from string, toDay int, to string) string
	windowRule(classes []string, atEnd string, warnBefore time.Duration) string
	window(name, when, zone, rule string) string
	outsideWindows() string
	batchNote() string
	classes(batch []string, othersInteractive bool) string

	noBooking(admin bool) string
	bookers(users, groups, profiles []string) string
	youMayBook(may bool, profiles []string) string
	bookingLimits(ahead, length time.Duration, vms, active int) string
	bookingEffect() string

	lease(profiles []string, l config.Lease) string
	extend() string
	notices(webhook, admin bool, host string) string

	taskProfiles(profiles []string) string
	taskLimit(killWait, maxKillWait time.Duration) string
	taskQueue(batch []string, windows bool) string
	taskRepeat(retries, elements int) string

	idleStop(profiles []string, after time.Duration) string
	idleMeans(threshold float64) string
	othersNeverIdle() string
	noIdle() string

	noProfiles() string
	openProfiles(names []string) string
	restricted(profile string, groups, users []string) string
	restrictedYou(profile string, viaGroups []string, named bool) string

	alert(name, metric string, above, below *float64, d time.Duration, host string) string
}

var phrasebooks = map[string]phrasebook{English: en{}, Chinese: zh{}}

// number writes a number as short as it is exact: 10, 1.5.
func number(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// size writes bytes as "48 GiB".
func size(b uint64) string {
	s := config.FormatSize(b)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' && r != '.' })
	if i <= 0 {
		return s
	}
	return s[:i] + " " + s[i:]
}

// durationParts splits d into days, hours, minutes and seconds, the zero
// parts left out.
func durationParts(d time.Duration) [][2]int64 {
	var out [][2]int64
	for i, u := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if n := int64(d / u); n > 0 {
			out = append(out, [2]int64{int64(i), n})
			d %= u
		}
	}
	return out
}

// dayRuns are the runs of consecutive days of a week (Monday 0), as
// [first, length], going round the week's end: fri-mon is one run.
func dayRuns(days [7]bool) [][2]int {
	start := -1
	for i := range 7 {
		if days[i] && !days[(i+6)%7] {
			start = i
			break
		}
	}
	if start < 0 {
		return nil // none, or every day
	}
	var out [][2]int
	for k := 0; k < 7; k++ {
		i := (start + k) % 7
		if !days[i] {
			continue
		}
		if n := len(out); n > 0 && (out[n-1][0]+out[n-1][1])%7 == i {
			out[n-1][1]++
			continue
		}
		out = append(out, [2]int{i, 1})
	}
	return out
}

func allDays(days [7]bool) bool {
	for _, d := range days {
		if !d {
			return false
		}
	}
	return true
}

// en is English.
type en struct{}

var enTitles = map[string]string{
	SectionYou: "For you", SectionQuotas: "How much you may run", SectionQueue: "Who goes first",
	SectionWindows: "When what may start", SectionReservations: "Booking ahead", SectionLeases: "How long a VM runs",
	SectionTasks: "Tasks", SectionIdle: "Idle machines", SectionProfiles: "Who may use which machines", SectionAlerts: "Alerts (admins)",
}

func (en) title(s string) string { return enTitles[s] }

func (en) list(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

func (e en) quoted(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "“" + s + "”"
	}
	return e.list(q)
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func (en) dur(d time.Duration) string {
	if d <= 0 {
		return "0 minutes"
	}
	names := [][2]string{{"day", "days"}, {"hour", "hours"}, {"minute", "minutes"}, {"second", "seconds"}}
	var parts []string
	for _, p := range durationParts(d) {
		parts = append(parts, plural(p[1], names[p[0]][0], names[p[0]][1]))
	}
	return strings.Join(parts, " ")
}

func (e en) groupsWord(gs []string) string {
	if len(gs) == 1 {
		return "group " + e.quoted(gs)
	}
	return "groups " + e.quoted(gs)
}

func (e en) youAre(user string, groups []string) string {
	if len(groups) == 0 {
		return fmt.Sprintf("You are signed in as “%s”, in no group.", user)
	}
	return fmt.Sprintf("You are signed in as “%s”, in %s.", user, e.groupsWord(groups))
}

func (en) scopeAdmin() string {
	return "You are an admin: this page shows every rule, those of every user and group included."
}

func (en) scopeUser() string {
	return "This page shows the rules for everyone, and yours and your groups'; your admin can tell you the rest."
}

func (en) limitsFromUser(user string) string {
	return fmt.Sprintf("Your limits come from your own rule (user “%s”).", user)
}

func (e en) limitsFromGroups(gs []string) string {
	if len(gs) == 1 {
		return fmt.Sprintf("Your limits come from the rule of your group “%s”.", gs[0])
	}
	return fmt.Sprintf("Your limits are the most generous of the rules of your groups %s: each limit the largest of theirs.", e.quoted(gs))
}

func (en) limitsFromDefaults() string {
	return "Your limits are the defaults: neither you nor any of your groups has a rule of its own."
}

func (e en) yourProfiles(names []string) string {
	if len(names) == 0 {
		return "There is no machine (profile) you may ask for yet; ask your admin."
	}
	return fmt.Sprintf("You may ask for %s: %s.", plural(int64(len(names)), "kind of machine (profile)", "kinds of machine (profiles)"), e.list(names))
}

func (en) yourBooking(may, admin bool) string {
	if admin {
		return "As an admin you may book GPUs ahead, for yourself or for anyone, held only by the free capacity (see “Booking ahead”)."
	}
	if may {
		return "You may book GPUs ahead (see “Booking ahead”)."
	}
	return "You may not book GPUs ahead; an admin can book for you."
}

func (e en) who(w who) string {
	switch w.kind {
	case "defaults":
		return "Anyone without a rule of their own (or of one of their groups)"
	case "group":
		return fmt.Sprintf("Members of group “%s”", w.name)
	case "user":
		return fmt.Sprintf("User “%s”", w.name)
	}
	return "You"
}

func (e en) whose(w who) string {
	switch w.kind {
	case "defaults":
		return "The VMs of anyone without a rule of their own"
	case "group":
		return fmt.Sprintf("The VMs of members of group “%s”", w.name)
	case "user":
		return fmt.Sprintf("The VMs of user “%s”", w.name)
	}
	return "Your VMs"
}

func (e en) quota(w who, q config.Quota) string {
	if q.VMs != nil && *q.VMs == 0 {
		return e.who(w) + " may not run any VM."
	}
	var counts, budgets []string
	if q.VMs != nil {
		counts = append(counts, plural(int64(*q.VMs), "VM", "VMs"))
	}
	if q.GPUs != nil {
		counts = append(counts, plural(int64(*q.GPUs), "whole GPU", "whole GPUs"))
	}
	if q.Slices != nil {
		counts = append(counts, plural(int64(*q.Slices), "slice", "slices"))
	}
	if q.GPUMemory != nil {
		counts = append(counts, size(*q.GPUMemory)+" of GPU memory")
	}
	for _, b := range []struct {
		v    *float64
		unit string
	}{{q.GPUHoursPerDay, "a day"}, {q.GPUHoursPerWeek, "a week"}, {q.GPUHoursPerMonth, "a month"}} {
		if b.v != nil {
			budgets = append(budgets, number(*b.v)+" GPU-hours "+b.unit)
		}
	}
	switch {
	case len(counts) == 0 && len(budgets) == 0:
		return e.who(w) + " may run as much as the GPUs allow: no limit is set."
	case len(budgets) == 0:
		return fmt.Sprintf("%s may hold at most %s at once.", e.who(w), e.list(counts))
	case len(counts) == 0:
		return fmt.Sprintf("%s may use at most %s.", e.who(w), e.list(budgets))
	}
	return fmt.Sprintf("%s may hold at most %s at once, and use at most %s.", e.who(w), e.list(counts), e.list(budgets))
}

func (e en) snapshots(w who, s config.Snapshots) string {
	var parts []string
	switch {
	case s.Keep != nil && *s.Keep == 0:
		return e.who(w) + " may keep 0 disk snapshots: none may be taken."
	case s.Keep != nil:
		parts = append(parts, "may keep at most "+plural(int64(*s.Keep), "disk snapshot", "disk snapshots"))
	}
	if s.ExpireAfter != nil {
		parts = append(parts, "each disk snapshot is deleted "+e.dur(*s.ExpireAfter)+" after it is taken")
	}
	if len(parts) == 0 {
		return e.who(w) + " may keep disk snapshots without limit."
	}
	if s.Keep == nil {
		return fmt.Sprintf("%s: %s.", e.who(w), parts[0])
	}
	return fmt.Sprintf("%s %s.", e.who(w), strings.Join(parts, "; "))
}

func (e en) storage(w who, s config.StorageLimits) string {
	var parts []string
	if s.HomeQuota != nil {
		parts = append(parts, "a home of at most "+size(*s.HomeQuota))
	}
	if s.DiskQuota != nil {
		parts = append(parts, "data disks of at most "+size(*s.DiskQuota)+" together")
	}
	if len(parts) == 0 {
		return e.who(w) + " may keep a home and data disks without a size limit."
	}
	return fmt.Sprintf("%s may keep %s.", e.who(w), strings.Join(parts, ", and "))
}

func (en) combine() string {
	return "Each person's limits come from their user rule if they have one, else from the most generous of their groups' rules (each limit the largest of them), else from the defaults. A limit not written is no limit."
}

func (en) sliceNote() string {
	return "A slice is a vGPU or a MIG instance, a part of a GPU; a whole GPU is one a VM has to itself."
}

func (en) gpuHours(zone string) string {
	return fmt.Sprintf("GPU-hours count a slice as its share of its GPU (a 1g.10gb MIG instance of an 80 GB GPU is 1/7 of it, a vGPU its share of the GPU's memory): an hour on a seventh of a GPU is 1/7 GPU-hour. Days, weeks (from Monday) and months are calendar ones, in %s time.", zone)
}

func (en) refuseOrWait() string {
	return "A VM that asks for more than a limit allows is refused at once; one that only has to wait for your other VMs to end waits in the queue."
}

func (e en) order(order string, halfLife, maxAge time.Duration) string {
	switch order {
	case config.OrderPriority:
		return "Waiting VMs start by priority, highest first; at equal priority, first come, first served."
	case config.OrderSJF:
		return "Waiting VMs start shortest lease first; at equal leases, first come, first served."
	case config.OrderFairshare:
		return fmt.Sprintf("Waiting VMs start by fair share: whoever has used the least GPU time lately goes first. Past use counts half as much after %s, and a VM that waits gains ground for up to %s; at equal shares, higher priority first, then first come, first served.", e.dur(halfLife), e.dur(maxAge))
	}
	return "Waiting VMs start first come, first served: in the order they were asked for."
}

func (e en) priority(w who, p int, preemptible bool) string {
	switch {
	case p != 0 && preemptible:
		return fmt.Sprintf("%s have priority %d and may be preempted.", e.whose(w), p)
	case preemptible:
		return fmt.Sprintf("%s may be preempted.", e.whose(w))
	}
	return fmt.Sprintf("%s have priority %d.", e.whose(w), p)
}

func (e en) profilePriority(ps []string, p int) string {
	if len(ps) == 1 {
		return fmt.Sprintf("VMs of profile “%s” get %d more priority.", ps[0], p)
	}
	return fmt.Sprintf("VMs of profiles %s get %d more priority.", e.quoted(ps), p)
}

func (en) priorityAdds() string {
	return "Priorities run from 0 to 1000, higher first, and add up: a VM's is its profile's plus its owner's (their user rule's, or their highest group's)."
}

func (e en) preemption(notice, minRuntime time.Duration) string {
	return fmt.Sprintf("A waiting VM of higher priority that may not be preempted can stop one that may: its owner gets %s' notice, and no VM is preempted before it has run %s. A preempted VM gives its GPU back but keeps its disk; started again, it queues for a GPU.", e.dur(notice), e.dur(minRuntime))
}

func (en) noWindows() string { return "There are no time windows: any VM may start at any time." }

var enDays = []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}

func (e en) whenDays(days [7]bool, start, end string, nextDay bool) string {
	var ds string
	if allDays(days) {
		ds = "every day"
	} else {
		var parts []string
		for _, r := range dayRuns(days) {
			if r[1] >= 3 {
				parts = append(parts, enDays[r[0]]+" to "+enDays[(r[0]+r[1]-1)%7])
				continue
			}
			for k := range r[1] {
				parts = append(parts, enDays[(r[0]+k)%7])
			}
		}
		ds = e.list(parts)
	}
	if nextDay {
		return fmt.Sprintf("%s, %s to %s the next day", ds, start, end)
	}
	return fmt.Sprintf("%s, %s to %s", ds, start, end)
}

func (en) whenSpan(fd int, from string, td int, to string) string {
	return fmt.Sprintf("from %s %s to %s %s", enDays[fd], from, enDays[td], to)
}

func (e en) windowRule(classes []string, atEnd string, warn time.Duration) string {
	var may string
	switch {
	case len(classes) == 0:
		may = "no VM may start"
	case len(classes) == 1:
		may = "only " + classes[0] + " VMs may start"
	default:
		may = "any VM may start"
	}
	switch atEnd {
	case config.AtEndWarn:
		return fmt.Sprintf("%s; when it ends, the owners of VMs that started in it are warned %s before", may, e.dur(warn))
	case config.AtEndStop:
		return fmt.Sprintf("%s; when it ends, the VMs that started in it are stopped, their owners warned %s before", may, e.dur(warn))
	}
	return may
}

func (en) window(name, when, zone, rule string) string {
	return fmt.Sprintf("Window “%s”, %s (%s time): %s.", name, when, zone, rule)
}

func (en) outsideWindows() string { return "Outside these windows any VM may start." }

func (en) batchNote() string {
	return "A batch VM that may not be preempted does not start if its lease would run into a window where batch VMs may not start."
}

func (e en) classes(batch []string, others bool) string {
	switch {
	case len(batch) == 0:
		return "Every machine is interactive."
	case !others:
		return "Every machine is batch."
	case len(batch) == 1:
		return fmt.Sprintf("Machines of profile “%s” are batch; the others are interactive.", batch[0])
	}
	return fmt.Sprintf("Machines of profiles %s are batch; the others are interactive.", e.quoted(batch))
}

func (en) noBooking(admin bool) string {
	if admin {
		return "The policy has no reservations block: nobody but an admin may book GPUs ahead. You may, for yourself or for anyone; add a reservations block to let others."
	}
	return "Booking GPUs ahead is not offered on this server; an admin can book for you."
}

func (e en) profilesWord(ps []string) string {
	switch len(ps) {
	case 0:
		return "any machine"
	case 1:
		return "profile " + e.quoted(ps)
	}
	return "profiles " + e.quoted(ps)
}

func (e en) bookers(users, groups, profiles []string) string {
	var who string
	switch {
	case len(users) == 0 && len(groups) == 0:
		who = "Everyone"
	case len(users) == 0:
		who = "Members of " + e.groupsWord(groups)
	case len(groups) == 0:
		who = "Users " + e.quoted(users)
		if len(users) == 1 {
			who = "User " + e.quoted(users)
		}
	default:
		who = "Members of " + e.groupsWord(groups) + " and users " + e.quoted(users)
		if len(users) == 1 {
			who = "Members of " + e.groupsWord(groups) + " and user " + e.quoted(users)
		}
	}
	return fmt.Sprintf("%s may book GPUs ahead for %s.", who, e.profilesWord(profiles))
}

func (e en) youMayBook(may bool, profiles []string) string {
	if !may {
		return "You may not book GPUs ahead; only some people may, and an admin can book for you."
	}
	return fmt.Sprintf("You may book GPUs ahead for %s.", e.profilesWord(profiles))
}

func (e en) bookingLimits(ahead, length time.Duration, vms, active int) string {
	return fmt.Sprintf("A booking starts at most %s ahead, lasts at most %s and holds at most %s; one person holds at most %s at once.",
		e.dur(ahead), e.dur(length), plural(int64(vms), "VM", "VMs"), plural(int64(active), "booking", "bookings"))
}

func (en) bookingEffect() string {
	return "While a booking holds GPUs, nothing else starts on them if its lease would run into the booking."
}

func (e en) lease(ps []string, l config.Lease) string {
	var b strings.Builder
	if len(ps) == 1 {
		fmt.Fprintf(&b, "Profile “%s”", ps[0])
	} else {
		fmt.Fprintf(&b, "Profiles %s", e.quoted(ps))
	}
	fmt.Fprintf(&b, ": a VM runs %s unless you ask for another time, at most %s counting extensions", e.dur(l.Default), e.dur(l.Max))
	if l.WarnBefore > 0 {
		fmt.Fprintf(&b, "; its owner is warned %s before the end", e.dur(l.WarnBefore))
	}
	switch l.OnEnd {
	case config.LeaseEndDelete:
		b.WriteString("; at the end it is deleted, with its disk.")
	case config.LeaseEndKeep:
		b.WriteString("; at the end it is stopped and kept until its owner extends or deletes it.")
	default:
		fmt.Fprintf(&b, "; at the end it is stopped, and deleted %s later unless its owner extends it.", e.dur(l.Grace))
	}
	return b.String()
}

func (en) extend() string {
	return "You may extend a lease up to its profile's longest, counted from the VM's start, but not past the end of the booking it runs in or of a window that stops it, nor onto GPUs booked for someone else."
}

func (en) notices(webhook, admin bool, host string) string {
	switch {
	case webhook && admin:
		return fmt.Sprintf("Notices to owners (a lease about to end, a VM stopped by a rule) come as events in the portal and in “gpuvm events”, and are also posted to the webhook at %s.", host)
	case webhook:
		return "Notices to you (a lease about to end, a VM stopped by a rule) come as events in the portal and in “gpuvm events”, and are also posted to this site's notice webhook."
	}
	return "Notices to you (a lease about to end, a VM stopped by a rule) come as events in the portal and in “gpuvm events”."
}

func (e en) taskProfiles(ps []string) string {
	return fmt.Sprintf("A task (“gpuvm task submit”, or the portal's Tasks page) runs a command in a fresh VM of %s and gives its GPU back the moment the command ends: the VM is deleted.", e.ofProfiles(ps))
}

func (e en) taskLimit(killWait, maxKillWait time.Duration) string {
	return fmt.Sprintf("A task's time limit is at most its profile's longest lease. At the limit the command gets SIGTERM, then SIGKILL %s later (the task may set up to %s), and its VM is powered off: the task ends timed out.", e.dur(killWait), e.dur(maxKillWait))
}

func (e en) taskQueue(batch []string, windows bool) string {
	s := "A task waits in the same queue as VMs, under the same quotas and bookings, and says why it waits and when it should start."
	if len(batch) > 0 && windows {
		s += fmt.Sprintf(" Tasks of %s are batch work: they start only in a window that lets batch VMs start.", e.ofProfiles(batch))
	}
	return s
}

func (e en) taskRepeat(retries, elements int) string {
	return fmt.Sprintf("A task may be run again on the exit codes it lists, at most %d times, and an array runs up to %s elements of one command, each with its own TASK_INDEX.", retries, thousands(elements))
}

// thousands writes n with commas: 10,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ofProfiles writes "profile “a”" or "profiles “a” and “b”".
func (e en) ofProfiles(ps []string) string {
	if len(ps) == 1 {
		return "profile “" + ps[0] + "”"
	}
	return "profiles " + e.quoted(ps)
}

func (e en) idleStop(ps []string, d time.Duration) string {
	what := "a VM of profile “" + ps[0] + "”"
	if len(ps) > 1 {
		what = "a VM of profiles " + e.quoted(ps)
	}
	return fmt.Sprintf("%s%s whose GPU (or, without a GPU, its CPU) has been idle for %s is stopped: it gives its GPU back and keeps its disk.", strings.ToUpper(what[:1]), what[1:], e.dur(d))
}

func (en) idleMeans(th float64) string {
	return fmt.Sprintf("Idle means under %s%% busy.", number(th))
}

func (en) othersNeverIdle() string {
	return "VMs of the other profiles are never stopped for being idle."
}

func (en) noIdle() string { return "No VM is stopped for being idle." }

func (en) noProfiles() string { return "There is no machine (profile) you may use." }

func (e en) openProfiles(names []string) string {
	return fmt.Sprintf("Everyone may use %s.", e.quoted(names))
}

func (e en) restricted(p string, groups, users []string) string {
	var who []string
	if len(groups) > 0 {
		who = append(who, "members of "+e.groupsWord(groups))
	}
	if len(users) == 1 {
		who = append(who, "user "+e.quoted(users))
	} else if len(users) > 1 {
		who = append(who, "users "+e.quoted(users))
	}
	return fmt.Sprintf("Only %s may use “%s”.", e.list(who), p)
}

func (e en) restrictedYou(p string, via []string, named bool) string {
	switch {
	case len(via) > 0:
		return fmt.Sprintf("“%s” is for %s, and so for you.", p, "members of "+e.groupsWord(via))
	case named:
		return fmt.Sprintf("“%s” is for some people only; you are one of them.", p)
	}
	return fmt.Sprintf("“%s” is for some people only.", p)
}

func (e en) alert(name, metric string, above, below *float64, d time.Duration, host string) string {
	var cond string
	switch {
	case above != nil && below != nil:
		cond = fmt.Sprintf("is above %s or below %s", number(*above), number(*below))
	case above != nil:
		cond = "is above " + number(*above)
	default:
		cond = "is below " + number(*below)
	}
	return fmt.Sprintf("Alert “%s” fires when %s %s for %s, and is posted to %s.", name, metric, cond, e.dur(d), host)
}
