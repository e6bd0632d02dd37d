package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/profile"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// Bookings hold capacity ahead of time for a user or a group, once or on
// recurring weekday slots (a course's lab every Tuesday 14:00–16:00). Book
// checks a booking against the rules and the capacity and pins the exact
// devices it holds; from the start of each occurrence those devices are the
// owner's, and no VM of anyone else starts if its lease would run into them.

// OwnerKind is who a booking is for.
type OwnerKind string

// Owner kinds.
const (
	OwnerUser  OwnerKind = "user"
	OwnerGroup OwnerKind = "group"
)

// Owner is the user or group a booking is for.
type Owner struct {
	Kind OwnerKind `json:"kind"`
	Name string    `json:"name"`
}

func (o Owner) String() string { return string(o.Kind) + " " + o.Name }

// Includes reports whether a request is the owner's.
func (o Owner) Includes(r *scheduler.Request) bool {
	switch o.Kind {
	case OwnerUser:
		return r.User == o.Name
	case OwnerGroup:
		return r.InGroup(o.Name)
	}
	return false
}

// Repeat frequencies.
const (
	Once   = ""
	Daily  = "daily"
	Weekly = "weekly"
)

// Limits of bookings whatever the rules say.
const (
	MaxRepeatSpan  = 366 * 24 * time.Hour // a recurring booking ends within a year
	MaxBookingVMs  = 1000
	MaxBookingDevs = 1000
)

// Recurrence repeats a booking.
type Recurrence struct {
	Freq string `json:"freq,omitempty"` // Once, Daily or Weekly
	// Days are the weekdays of a weekly booking (empty: the first
	// occurrence's weekday).
	Days []time.Weekday `json:"days,omitempty"`
	// Until: no occurrence starts at or after it. Required when repeating.
	Until time.Time `json:"until,omitzero"`
}

var rruleDays = []string{"SU", "MO", "TU", "WE", "TH", "FR", "SA"}

// ParseRRule reads the subset of RFC 5545 recurrence rules bookings use, as
// pkg/store keeps them: "FREQ=DAILY", "FREQ=WEEKLY;BYDAY=TU,TH", each with an
// optional UNTIL=20260630T000000Z (until, when not nil, wins).
func ParseRRule(rule string, until *time.Time) (Recurrence, error) {
	var r Recurrence
	if strings.TrimSpace(rule) == "" {
		return r, nil
	}
	for _, part := range strings.Split(rule, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return r, fmt.Errorf("recurrence %q: %q is not KEY=VALUE", rule, part)
		}
		switch strings.ToUpper(k) {
		case "FREQ":
			switch strings.ToUpper(v) {
			case "DAILY":
				r.Freq = Daily
			case "WEEKLY":
				r.Freq = Weekly
			default:
				return r, fmt.Errorf("recurrence %q: FREQ=%s; bookings repeat DAILY or WEEKLY", rule, v)
			}
		case "BYDAY":
			for _, d := range strings.Split(v, ",") {
				i := indexOf(rruleDays, strings.ToUpper(strings.TrimSpace(d)))
				if i < 0 {
					return r, fmt.Errorf("recurrence %q: %q is not a day (MO, TU, WE, TH, FR, SA, SU)", rule, d)
				}
				r.Days = append(r.Days, time.Weekday(i))
			}
		case "UNTIL":
			t, err := time.Parse("20060102T150405Z", v)
			if err != nil {
				return r, fmt.Errorf("recurrence %q: UNTIL=%s is not a UTC time like 20260630T000000Z", rule, v)
			}
			r.Until = t
		default:
			return r, fmt.Errorf("recurrence %q: %s is not supported (FREQ, BYDAY, UNTIL)", rule, k)
		}
	}
	if r.Freq == "" {
		return r, fmt.Errorf("recurrence %q has no FREQ", rule)
	}
	if len(r.Days) > 0 && r.Freq != Weekly {
		return r, fmt.Errorf("recurrence %q: BYDAY goes with FREQ=WEEKLY", rule)
	}
	if until != nil {
		r.Until = *until
	}
	return r, nil
}

// RRule writes the recurrence as ParseRRule reads it (without UNTIL, which
// pkg/store keeps apart).
func (r Recurrence) RRule() string {
	switch r.Freq {
	case Daily:
		return "FREQ=DAILY"
	case Weekly:
		s := "FREQ=WEEKLY"
		if len(r.Days) > 0 {
			var ds []string
			for _, d := range r.Days {
				ds = append(ds, rruleDays[d])
			}
			s += ";BYDAY=" + strings.Join(ds, ",")
		}
		return s
	}
	return ""
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// Booking is capacity held ahead for an owner.
type Booking struct {
	ID    string `json:"id"`
	Owner Owner  `json:"owner"`
	// Profile is the profile booked; only the owner's VMs of that profile
	// use the booking ("" any of theirs).
	Profile string         `json:"profile,omitempty"`
	Need    scheduler.Need `json:"need"` // one VM's devices
	VMs     int            `json:"vms"`
	// Start and End are the first occurrence.
	Start  time.Time  `json:"start"`
	End    time.Time  `json:"end"`
	Repeat Recurrence `json:"repeat"`
	Note   string     `json:"note,omitempty"`
	// Pinned lists the devices held, one entry per host, set by Book.
	Pinned []scheduler.Placement `json:"pinned,omitempty"`
}

// Interval is one occurrence.
type Interval struct{ Start, End time.Time }

// Occurrences lists the booking's occurrences that overlap [from, to), in
// order, with wall-clock times in loc (so that a 14:00 lab stays at 14:00
// across daylight-saving changes).
func (b *Booking) Occurrences(from, to time.Time, loc *time.Location) []Interval {
	if loc == nil {
		loc = time.UTC
	}
	if b.Repeat.Freq == Once {
		if b.Start.Before(to) && b.End.After(from) {
			return []Interval{{b.Start, b.End}}
		}
		return nil
	}
	s, e := b.Start.In(loc), b.End.In(loc)
	days := daysBetween(s, e)
	length := b.End.Sub(b.Start)
	first := time.Date(s.Year(), s.Month(), s.Day(), 0, 0, 0, 0, loc)
	if back := from.Add(-length - 48*time.Hour); back.After(first) {
		b := back.In(loc)
		first = time.Date(b.Year(), b.Month(), b.Day(), 0, 0, 0, 0, loc)
	}
	var out []Interval
	for d := first; d.Before(to) && d.Before(b.Repeat.Until); d = d.AddDate(0, 0, 1) {
		if b.Repeat.Freq == Weekly && !b.onDay(d.Weekday(), s.Weekday()) {
			continue
		}
		os := time.Date(d.Year(), d.Month(), d.Day(), s.Hour(), s.Minute(), s.Second(), 0, loc)
		oe := time.Date(d.Year(), d.Month(), d.Day()+days, e.Hour(), e.Minute(), e.Second(), 0, loc)
		if os.Before(b.Start) || !os.Before(b.Repeat.Until) {
			continue
		}
		if os.Before(to) && oe.After(from) {
			out = append(out, Interval{os, oe})
		}
	}
	return out
}

func (b *Booking) onDay(d, first time.Weekday) bool {
	if len(b.Repeat.Days) == 0 {
		return d == first
	}
	for _, x := range b.Repeat.Days {
		if x == d {
			return true
		}
	}
	return false
}

func daysBetween(a, b time.Time) int {
	da := time.Date(a.Year(), a.Month(), a.Day(), 0, 0, 0, 0, time.UTC)
	db := time.Date(b.Year(), b.Month(), b.Day(), 0, 0, 0, 0, time.UTC)
	return int(db.Sub(da).Hours()+12) / 24
}

// last is when the last occurrence ends.
func (b *Booking) last(loc *time.Location) time.Time {
	if b.Repeat.Freq == Once {
		return b.End
	}
	occ := b.Occurrences(b.Start, b.Repeat.Until, loc)
	if len(occ) == 0 {
		return b.End
	}
	return occ[len(occ)-1].End
}

// holds are the booking's pinned devices over [from, to).
func (b *Booking) holds(from, to time.Time, loc *time.Location) []scheduler.Hold {
	var out []scheduler.Hold
	for _, o := range b.Occurrences(from, to, loc) {
		for _, p := range b.Pinned {
			out = append(out, scheduler.Hold{ID: b.ID, Code: scheduler.CodeReservation, Host: p.Host, Devices: p.Devices, From: o.Start, To: o.End})
		}
	}
	return out
}

// BookOptions are the circumstances of a booking.
type BookOptions struct {
	Now time.Time
	// Rules are the policy's reservations block (nil: nobody but admins
	// may book).
	Rules *profile.Reservations
	// Admin books without the rules (capacity still counts).
	Admin bool
	// OwnerGroups are the groups of a user owner, for the rules.
	OwnerGroups []string
	Location    *time.Location
	// Inventory and Running are the GPUs and the VMs that run now; Existing
	// the bookings already made.
	Inventory *scheduler.Inventory
	Running   []scheduler.Running
	Existing  []*Booking
}

// Book checks a booking and pins its devices. It returns a new Booking
// with Pinned set, or every reason it cannot be made; nothing is changed
// either way, so nothing is ever half-booked.
func Book(b Booking, o BookOptions) (*Booking, error) {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	loc := o.Location
	if loc == nil {
		loc = time.UTC
	}
	if b.ID == "" {
		bad("a booking needs an ID")
	}
	for _, x := range o.Existing {
		if x.ID == b.ID {
			bad("booking %q exists", b.ID)
		}
	}
	if (b.Owner.Kind != OwnerUser && b.Owner.Kind != OwnerGroup) || b.Owner.Name == "" {
		bad("the owner is a user or a group, with a name (got %q %q)", b.Owner.Kind, b.Owner.Name)
	}
	if b.VMs < 1 || b.VMs > MaxBookingVMs {
		bad("a booking is for 1 to %d VMs, not %d", MaxBookingVMs, b.VMs)
	}
	if err := b.Need.Validate(); err != nil {
		bad("the need: %v", err)
	} else if b.VMs*max(b.Need.Count, 1) > MaxBookingDevs {
		bad("%d VMs × %d devices is more than %d devices", b.VMs, max(b.Need.Count, 1), MaxBookingDevs)
	}
	switch {
	case b.Start.IsZero() || b.End.IsZero():
		bad("a booking has a start and an end")
	case !b.End.After(b.Start):
		bad("the booking ends (%s) before it starts (%s)", stamp(b.End, loc), stamp(b.Start, loc))
	case b.Start.Before(o.Now):
		bad("the booking starts in the past (%s; it is %s)", stamp(b.Start, loc), stamp(o.Now, loc))
	}
	length := b.End.Sub(b.Start)
	switch b.Repeat.Freq {
	case Once:
		if len(b.Repeat.Days) > 0 || !b.Repeat.Until.IsZero() {
			bad("days and until are for repeating bookings")
		}
	case Daily:
		if length >= 24*time.Hour {
			bad("a daily booking of %s overlaps its next occurrence", profile.FormatDuration(length))
		}
	case Weekly:
		seen := map[time.Weekday]bool{}
		for _, d := range b.Repeat.Days {
			if d < time.Sunday || d > time.Saturday {
				bad("%d is not a weekday", d)
				continue
			}
			if seen[d] {
				bad("the weekly booking names %s twice", d)
			}
			seen[d] = true
		}
		if len(b.Repeat.Days) > 0 && !seen[b.Start.In(loc).Weekday()] {
			bad("the first occurrence (%s) is not on one of the booking's days", stamp(b.Start, loc))
		}
		if gap := minGap(b.Repeat.Days, b.Start.In(loc).Weekday()); length > gap {
			bad("occurrences of %s overlap: two of the days are %s apart", profile.FormatDuration(length), profile.FormatDuration(gap))
		}
	default:
		bad("repeat %q is not daily or weekly", b.Repeat.Freq)
	}
	if b.Repeat.Freq != Once {
		switch {
		case b.Repeat.Until.IsZero():
			bad("a repeating booking needs an end date (until)")
		case !b.Repeat.Until.After(b.Start):
			bad("the repetition ends (%s) before the first occurrence (%s)", stamp(b.Repeat.Until, loc), stamp(b.Start, loc))
		case b.Repeat.Until.Sub(b.Start) > MaxRepeatSpan:
			bad("a repeating booking ends within a year of its start (until %s)", stamp(b.Repeat.Until, loc))
		}
	}
	if !o.Admin {
		errs = append(errs, checkRules(b, o, loc)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return pin(b, o, loc)
}

func stamp(t time.Time, loc *time.Location) string {
	return t.In(loc).Format("Mon 2 Jan 2006 15:04 MST")
}

// minGap is the shortest time between two consecutive weekly starts.
func minGap(days []time.Weekday, first time.Weekday) time.Duration {
	if len(days) == 0 {
		days = []time.Weekday{first}
	}
	ds := append([]time.Weekday(nil), days...)
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	gap := 7 * 24 * time.Hour
	for i := range ds {
		next := ds[(i+1)%len(ds)]
		d := int(next - ds[i])
		if d <= 0 {
			d += 7
		}
		if g := time.Duration(d) * 24 * time.Hour; g < gap {
			gap = g
		}
	}
	return gap
}

func checkRules(b Booking, o BookOptions, loc *time.Location) []error {
	var errs []error
	r := o.Rules
	if r == nil {
		return []error{fmt.Errorf("nobody may book: the policy has no reservations block")}
	}
	allowed := len(r.Users) == 0 && len(r.Groups) == 0
	switch b.Owner.Kind {
	case OwnerUser:
		allowed = allowed || contains(r.Users, b.Owner.Name)
		for _, g := range o.OwnerGroups {
			allowed = allowed || contains(r.Groups, g)
		}
	case OwnerGroup:
		allowed = allowed || contains(r.Groups, b.Owner.Name)
	}
	if !allowed {
		errs = append(errs, fmt.Errorf("%s may not book (reservations allow users %v, groups %v)", b.Owner, r.Users, r.Groups))
	}
	if len(r.Profiles) > 0 && !contains(r.Profiles, b.Profile) {
		errs = append(errs, fmt.Errorf("profile %q may not be booked (bookable: %s)", b.Profile, strings.Join(r.Profiles, ", ")))
	}
	if r.MaxAhead > 0 && b.Start.Sub(o.Now) > r.MaxAhead {
		errs = append(errs, fmt.Errorf("the booking starts more than %s ahead", profile.FormatDuration(r.MaxAhead)))
	}
	if r.MaxLength > 0 && b.End.Sub(b.Start) > r.MaxLength {
		errs = append(errs, fmt.Errorf("the booking lasts %s; the longest is %s", profile.FormatDuration(b.End.Sub(b.Start)), profile.FormatDuration(r.MaxLength)))
	}
	if r.MaxVMs > 0 && b.VMs > r.MaxVMs {
		errs = append(errs, fmt.Errorf("the booking is for %d VMs; the most is %d", b.VMs, r.MaxVMs))
	}
	if r.MaxActive > 0 {
		n := 1
		for _, x := range o.Existing {
			if x.Owner == b.Owner && x.last(loc).After(o.Now) {
				n++
			}
		}
		if n > r.MaxActive {
			errs = append(errs, fmt.Errorf("%s would hold %d bookings; the most is %d", b.Owner, n, r.MaxActive))
		}
	}
	return errs
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

var (
	farPast   = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	farFuture = time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// pin chooses the devices: one set for every occurrence, so that the lab
// is always on the same GPUs. A VM that runs now and into the first
// occurrence keeps its devices; another booking that overlaps any
// occurrence keeps its own.
func pin(b Booking, o BookOptions, loc *time.Location) (*Booking, error) {
	if o.Inventory == nil {
		return nil, fmt.Errorf("no inventory to book on")
	}
	occ := b.Occurrences(b.Start, farFuture, loc)
	if len(occ) == 0 {
		return nil, fmt.Errorf("the booking has no occurrence before %s", stamp(b.Repeat.Until, loc))
	}
	first, last := occ[0].Start, occ[len(occ)-1].End
	trial := o.Inventory.Clone()
	for _, r := range o.Running {
		if !r.End.After(first) {
			trial.Release(r.ID)
		}
	}
	var holds []scheduler.Hold
	for _, x := range o.Existing {
		if !overlapsAny(occ, x.Occurrences(first, last, loc)) {
			continue
		}
		for _, p := range x.Pinned {
			holds = append(holds, scheduler.Hold{ID: x.ID, Code: scheduler.CodeReservation, Host: p.Host, Devices: p.Devices, From: farPast, To: farFuture})
		}
	}
	byHost := map[string]*scheduler.Placement{}
	var hosts []string
	for k := 0; k < b.VMs; k++ {
		p, why := trial.Place(b.Need, scheduler.PlaceOptions{Strategy: scheduler.Pack, Now: first, End: last, Holds: holds})
		if !why.OK() {
			return nil, fmt.Errorf("the booking cannot be honoured: %d of %d VMs fit from %s (%s)", k, b.VMs, stamp(first, loc), why.Detail)
		}
		if err := trial.Allocate(fmt.Sprintf("booking:%s:%d", b.ID, k), p, last); err != nil {
			return nil, fmt.Errorf("the booking cannot be honoured: %v", err)
		}
		if byHost[p.Host] == nil {
			byHost[p.Host] = &scheduler.Placement{Host: p.Host}
			hosts = append(hosts, p.Host)
		}
		byHost[p.Host].Devices = append(byHost[p.Host].Devices, p.Devices...)
	}
	sort.Strings(hosts)
	out := b
	out.Pinned = nil
	for _, h := range hosts {
		out.Pinned = append(out.Pinned, *byHost[h])
	}
	return &out, nil
}

func overlapsAny(a, b []Interval) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i].Start.Before(b[j].End) && b[j].Start.Before(a[i].End) {
			return true
		}
		if a[i].End.Before(b[j].End) {
			i++
		} else {
			j++
		}
	}
	return false
}
