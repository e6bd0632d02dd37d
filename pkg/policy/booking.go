package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
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
	MaxRepeatSpan = 366 * 24 * time.Hour // a recurring booking ends within a year
	// A booking starts within two years and lasts at most a year (admins'
	// too, whom the rules' max_ahead and max_length do not bind): times
	// beyond stay far from what time.Time.Sub can tell apart (292 years).
	MaxBookingAhead  = 2 * 366 * 24 * time.Hour
	MaxBookingLength = MaxRepeatSpan
	MaxBookingVMs    = 1000
	MaxBookingDevs   = 1000
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
	Rules *config.Reservations
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
	// Prefer are devices Pin keeps when it can, one VM's each.
	Prefer []scheduler.Placement
}

// Book checks a booking and pins its devices. It returns a new Booking
// with Pinned set, or every reason it cannot be made; nothing is changed
// either way, so nothing is ever half-booked.
func Book(b Booking, o BookOptions) (*Booking, error) {
	if err := CheckBooking(b, o); err != nil {
		return nil, err
	}
	loc := o.Location
	if loc == nil {
		loc = time.UTC
	}
	return pin(b, o, loc)
}

// Fields of a booking that FieldError names.
const (
	FieldID          = "id"
	FieldOwner       = "owner"
	FieldProfile     = "profile"
	FieldNeed        = "need"
	FieldVMs         = "vms"
	FieldStart       = "start"
	FieldEnd         = "end"
	FieldRepeat      = "repeat"
	FieldRepeatDays  = "repeat.days"
	FieldRepeatUntil = "repeat.until"
)

// FieldError is what is wrong with one field of a booking (Field*).
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// CheckBooking checks a booking against the limits and, unless o.Admin,
// the rules (o.Rules), without looking at capacity: every problem, each a
// *FieldError, joined (errors.Join), or nil.
func CheckBooking(b Booking, o BookOptions) error {
	var errs []error
	bad := func(field, f string, a ...any) { errs = append(errs, &FieldError{field, fmt.Errorf(f, a...)}) }
	loc := o.Location
	if loc == nil {
		loc = time.UTC
	}
	if b.ID == "" {
		bad(FieldID, "a booking needs an ID")
	}
	for _, x := range o.Existing {
		if x.ID == b.ID {
			bad(FieldID, "booking %q exists", b.ID)
		}
	}
	if (b.Owner.Kind != OwnerUser && b.Owner.Kind != OwnerGroup) || b.Owner.Name == "" {
		bad(FieldOwner, "the owner is a user or a group, with a name (got %q %q)", b.Owner.Kind, b.Owner.Name)
	}
	if b.VMs < 1 || b.VMs > MaxBookingVMs {
		bad(FieldVMs, "a booking is for 1 to %d VMs, not %d", MaxBookingVMs, b.VMs)
	}
	if err := b.Need.Validate(); err != nil {
		bad(FieldNeed, "the need: %v", err)
	} else if b.VMs*max(b.Need.Count, 1) > MaxBookingDevs {
		bad(FieldVMs, "%d VMs × %d devices is more than %d devices", b.VMs, max(b.Need.Count, 1), MaxBookingDevs)
	}
	switch {
	case b.Start.IsZero():
		bad(FieldStart, "a booking has a start and an end")
	case b.End.IsZero():
		bad(FieldEnd, "a booking has a start and an end")
	case !b.End.After(b.Start):
		bad(FieldEnd, "the booking ends (%s) before it starts (%s)", stamp(b.End, loc), stamp(b.Start, loc))
	case b.Start.Before(o.Now):
		bad(FieldStart, "the booking starts in the past (%s; it is %s)", stamp(b.Start, loc), stamp(o.Now, loc))
	case b.Start.Sub(o.Now) > MaxBookingAhead:
		bad(FieldStart, "the booking starts (%s) more than %s ahead, the most for anyone", stamp(b.Start, loc), config.FormatDuration(MaxBookingAhead))
	case b.End.Sub(b.Start) > MaxBookingLength:
		bad(FieldEnd, "the booking lasts more than %s, the most for anyone", config.FormatDuration(MaxBookingLength))
	}
	length := b.End.Sub(b.Start)
	switch b.Repeat.Freq {
	case Once:
		if len(b.Repeat.Days) > 0 || !b.Repeat.Until.IsZero() {
			bad(FieldRepeat, "days and until are for repeating bookings")
		}
	case Daily:
		if length >= 24*time.Hour {
			bad(FieldRepeat, "a daily booking of %s overlaps its next occurrence", config.FormatDuration(length))
		}
	case Weekly:
		seen := map[time.Weekday]bool{}
		for _, d := range b.Repeat.Days {
			if d < time.Sunday || d > time.Saturday {
				bad(FieldRepeatDays, "%d is not a weekday", d)
				continue
			}
			if seen[d] {
				bad(FieldRepeatDays, "the weekly booking names %s twice", d)
			}
			seen[d] = true
		}
		if len(b.Repeat.Days) > 0 && !seen[b.Start.In(loc).Weekday()] {
			bad(FieldRepeatDays, "the first occurrence (%s) is not on one of the booking's days", stamp(b.Start, loc))
		}
		if gap := minGap(b.Repeat.Days, b.Start.In(loc).Weekday()); length > gap {
			bad(FieldRepeat, "occurrences of %s overlap: two of the days are %s apart", config.FormatDuration(length), config.FormatDuration(gap))
		}
	default:
		bad(FieldRepeat, "repeat %q is not daily or weekly", b.Repeat.Freq)
	}
	if b.Repeat.Freq != Once {
		switch {
		case b.Repeat.Until.IsZero():
			bad(FieldRepeatUntil, "a repeating booking needs an end date (until)")
		case !b.Repeat.Until.After(b.Start):
			bad(FieldRepeatUntil, "the repetition ends (%s) before the first occurrence (%s)", stamp(b.Repeat.Until, loc), stamp(b.Start, loc))
		case b.Repeat.Until.Sub(b.Start) > MaxRepeatSpan:
			bad(FieldRepeatUntil, "a repeating booking ends within a year of its start (until %s)", stamp(b.Repeat.Until, loc))
		}
	}
	if !o.Admin {
		errs = append(errs, checkRules(b, o, loc)...)
	}
	return errors.Join(errs...)
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
	bad := func(field, f string, a ...any) { errs = append(errs, &FieldError{field, fmt.Errorf(f, a...)}) }
	r := o.Rules
	if r == nil {
		return []error{&FieldError{FieldOwner, fmt.Errorf("nobody may book: the policy has no reservations block")}}
	}
	if err := MayBook(r, b.Owner, o.OwnerGroups, b.Profile); err != nil {
		errs = append(errs, err)
	}
	if r.MaxAhead > 0 && b.Start.Sub(o.Now) > r.MaxAhead {
		bad(FieldStart, "the booking starts more than %s ahead", config.FormatDuration(r.MaxAhead))
	}
	if r.MaxLength > 0 && b.End.Sub(b.Start) > r.MaxLength {
		bad(FieldEnd, "the booking lasts %s; the longest is %s", config.FormatDuration(b.End.Sub(b.Start)), config.FormatDuration(r.MaxLength))
	}
	if r.MaxVMs > 0 && b.VMs > r.MaxVMs {
		bad(FieldVMs, "the booking is for %d VMs; the most is %d", b.VMs, r.MaxVMs)
	}
	if r.MaxActive > 0 {
		n := 1
		for _, x := range o.Existing {
			if x.Owner == b.Owner && x.last(loc).After(o.Now) {
				n++
			}
		}
		if n > r.MaxActive {
			bad(FieldOwner, "%s would hold %d bookings; the most is %d", b.Owner, n, r.MaxActive)
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

// CapacityError says a booking cannot be honoured: from From to To only
// Fit of its Want VMs of Need fit on the GPUs.
type CapacityError struct {
	Need      scheduler.Need
	Want, Fit int
	// From and To are the occurrence that fails: the first one the GPUs
	// cannot give alone, else the first of all (no one set of devices is
	// free at every occurrence).
	From, To time.Time
	// Cause says what holds the rest: other bookings, VMs that run into
	// the booking, or the host itself (too few GPUs of that kind).
	Cause string
	// Never is true when no GPU here could ever give the need.
	Never bool
	loc   *time.Location
}

func (e *CapacityError) Error() string {
	if e.loc == nil {
		e.loc = time.UTC
	}
	what := e.Need.String()
	if e.Never {
		return fmt.Sprintf("the booking cannot be honoured: %s", e.Cause)
	}
	to := stamp(e.To, e.loc)
	if f, t := e.From.In(e.loc), e.To.In(e.loc); f.YearDay() == t.YearDay() && f.Year() == t.Year() {
		to = t.Format("15:04")
	}
	return fmt.Sprintf("the booking cannot be honoured: %d of %d VMs of %s fit from %s to %s; %s",
		e.Fit, e.Want, what, stamp(e.From, e.loc), to, e.Cause)
}

// Capacity causes.
const (
	causeBookings = "other bookings hold the rest then"
	causeRunning  = "VMs whose leases run past the start hold the rest"
	causeBoth     = "other bookings and VMs whose leases run past the start hold the rest"
	causeHost     = "this host has too few GPUs of that kind free then"
	causeSpread   = "no one set of devices is free at every occurrence"
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
		return nil, &FieldError{FieldRepeatUntil, fmt.Errorf("the booking has no occurrence before %s", stamp(b.Repeat.Until, loc))}
	}
	placed, cerr := pinOn(b, occ, o.Inventory, o.Running, o.Existing, loc)
	if cerr != nil {
		return nil, diagnose(b, occ, o, loc, cerr)
	}
	out := b
	out.Pinned = scheduler.MergeByHost(placed)
	return &out, nil
}

// pinOn places b.VMs VMs for the occurrences occ: around the running VMs
// that end after the first occurrence starts, and so that at every instant
// of the occurrences its devices and those of the bookings of existing
// that hold theirs then fit together (holdSets). It returns one placement
// per VM.
func pinOn(b Booking, occ []Interval, inv *scheduler.Inventory, running []scheduler.Running, existing []*Booking, loc *time.Location) ([]scheduler.Placement, *CapacityError) {
	first, last := occ[0].Start, occ[len(occ)-1].End
	trial := inv.Clone()
	for _, r := range running {
		if !r.End.After(first) {
			trial.Release(r.ID)
		}
	}
	f := scheduler.Fitter{Need: b.Need, First: first, Last: last, Sets: holdSets(b.ID, occ, existing, loc)}
	var out []scheduler.Placement
	for k := 0; k < b.VMs; k++ {
		p, why := f.Place(trial, nil)
		if why.OK() {
			if err := trial.Allocate(fmt.Sprintf("booking:%s:%d", b.ID, k), p, last); err != nil {
				why = scheduler.Reason{Code: scheduler.CodeNoCapacity, Detail: err.Error()}
			}
		}
		if !why.OK() {
			return nil, &CapacityError{Need: b.Need, Want: b.VMs, Fit: k, From: first, To: occ[0].End, Never: why.Code == scheduler.CodeNever, Cause: why.Detail, loc: loc}
		}
		out = append(out, p)
	}
	return out, nil
}

// holdSets are the sets of other bookings' devices that are held at the
// same time during the occurrences occ: the occurrences are cut where
// another booking's occurrence starts or ends, and each piece holds the
// devices of the bookings whose occurrences cover it. Each distinct set is
// given once, its holds spanning all time (so that the scheduler counts
// them together). There is at least one set (maybe empty).
func holdSets(id string, occ []Interval, existing []*Booking, loc *time.Location) [][]scheduler.Hold {
	first, last := occ[0].Start, occ[len(occ)-1].End
	type xocc struct {
		b *Booking
		i Interval
	}
	var xs []xocc
	longest := time.Duration(0)
	for _, x := range existing {
		if x.ID == id || len(x.Pinned) == 0 {
			continue
		}
		for _, i := range x.Occurrences(first, last, loc) {
			xs = append(xs, xocc{x, i})
			longest = max(longest, i.End.Sub(i.Start))
		}
	}
	if len(xs) == 0 {
		return [][]scheduler.Hold{nil}
	}
	sort.Slice(xs, func(a, b int) bool { return xs[a].i.Start.Before(xs[b].i.Start) })
	seen := map[string]bool{}
	var sets [][]scheduler.Hold
	for _, o := range occ {
		// The other occurrences that may overlap o.
		lo := sort.Search(len(xs), func(k int) bool { return !xs[k].i.Start.Before(o.Start.Add(-longest)) })
		var near []xocc
		cuts := []time.Time{o.Start, o.End}
		for k := lo; k < len(xs) && xs[k].i.Start.Before(o.End); k++ {
			x := xs[k]
			if !x.i.End.After(o.Start) {
				continue
			}
			near = append(near, x)
			for _, t := range []time.Time{x.i.Start, x.i.End} {
				if t.After(o.Start) && t.Before(o.End) {
					cuts = append(cuts, t)
				}
			}
		}
		sort.Slice(cuts, func(a, b int) bool { return cuts[a].Before(cuts[b]) })
		for c := 0; c+1 < len(cuts); c++ {
			from, to := cuts[c], cuts[c+1]
			if !to.After(from) {
				continue
			}
			var ids []string
			var holds []scheduler.Hold
			for _, x := range near {
				if x.i.Start.Before(to) && x.i.End.After(from) {
					ids = append(ids, x.b.ID)
					for _, p := range x.b.Pinned {
						holds = append(holds, scheduler.Hold{ID: x.b.ID, Code: scheduler.CodeReservation, Host: p.Host, Devices: p.Devices, From: farPast, To: farFuture})
					}
				}
			}
			sort.Strings(ids)
			key := strings.Join(ids, "\x00")
			if !seen[key] {
				seen[key] = true
				sets = append(sets, holds)
			}
		}
	}
	// The most crowded first: the placement is chosen against it.
	sort.SliceStable(sets, func(a, b int) bool { return len(sets[a]) > len(sets[b]) })
	return sets
}

// diagnose explains a booking that cannot be pinned: the first occurrence
// that the GPUs cannot give on its own (how many VMs fit then, and what
// holds the rest), or that no one set of devices is free at all of them.
func diagnose(b Booking, occ []Interval, o BookOptions, loc *time.Location, cerr *CapacityError) error {
	if cerr.Never {
		return cerr
	}
	const most = 400              // a daily booking for a year
	var idle *scheduler.Inventory // no VM runs
	for i, oc := range occ {
		if i == most {
			break
		}
		one := []Interval{oc}
		// VMs that end before the occurrence starts are released (pinOn).
		_, e := pinOn(b, one, o.Inventory, o.Running, o.Existing, loc)
		if e == nil {
			continue
		}
		e.From, e.To = oc.Start, oc.End
		if idle == nil {
			idle = o.Inventory.Clone()
			for _, r := range o.Running {
				idle.Release(r.ID)
			}
		}
		_, noBookings := pinOn(b, one, o.Inventory, o.Running, nil, loc)
		_, noVMs := pinOn(b, one, idle, nil, o.Existing, loc)
		switch {
		case noBookings == nil && noVMs == nil:
			e.Cause = causeBoth
		case noBookings == nil:
			e.Cause = causeBookings
		case noVMs == nil:
			e.Cause = causeRunning
		default:
			_, bare := pinOn(b, one, idle, nil, nil, loc)
			if bare == nil {
				e.Cause = causeBoth
			} else {
				e.Cause = causeHost
			}
		}
		return e
	}
	cerr.Cause = causeSpread
	return cerr
}

// SplitPinned splits a booking's pinned devices into one placement per VM
// (need.Count devices each, in the order Book chose them): what Pin takes
// as BookOptions.Prefer to keep them.
func (b *Booking) SplitPinned() []scheduler.Placement {
	per := max(b.Need.Count, 1)
	var out []scheduler.Placement
	for _, p := range b.Pinned {
		for i := 0; i+per <= len(p.Devices); i += per {
			out = append(out, scheduler.Placement{Host: p.Host, Devices: append([]scheduler.Device(nil), p.Devices[i:i+per]...)})
		}
	}
	return out
}

// Pin chooses again the devices of a booking that was made (Book checked
// it), for the occurrences from o.Now on: each scheduling round, after a
// restart, when the GPUs changed. It checks no rule. It keeps each
// placement of o.Prefer (one VM's devices each: those held before, see
// SplitPinned) that the GPUs can still give and no overlapping booking of
// o.Existing holds; it places the other VMs around the VMs of o.Running
// that run into the first occurrence, except the owner's (they run in the
// booking), and where that fails over them: the booking was promised, and
// those VMs are told to make way. A booking with no occurrence left holds
// nothing. The error is a *CapacityError when the GPUs cannot give it.
func Pin(b Booking, o BookOptions) (*Booking, error) {
	loc := o.Location
	if loc == nil {
		loc = time.UTC
	}
	out := b
	out.Pinned = nil
	if o.Inventory == nil {
		return nil, fmt.Errorf("no inventory to pin booking %s on", b.ID)
	}
	occ := b.Occurrences(o.Now, farFuture, loc)
	if len(occ) == 0 {
		return &out, nil
	}
	first, last := occ[0].Start, occ[len(occ)-1].End
	f := scheduler.Fitter{Need: b.Need, First: first, Last: last, Sets: holdSets(b.ID, occ, o.Existing, loc)}
	// free has no VM, and the devices chosen so far: what the GPUs can
	// give at all.
	free := o.Inventory.Clone()
	for _, r := range o.Running {
		free.Release(r.ID)
	}
	var placed []scheduler.Placement
	var mine []scheduler.Hold // the devices chosen so far, for around
	choose := func(p scheduler.Placement) {
		placed = append(placed, p)
		mine = append(mine, scheduler.Hold{ID: b.ID, Code: scheduler.CodeReservation, Host: p.Host, Devices: p.Devices, From: farPast, To: farFuture})
	}
	for i, p := range o.Prefer {
		if len(placed) == b.VMs {
			break
		}
		if f.Fits(free, fmt.Sprintf("booking:%s:keep:%d", b.ID, i), p) {
			choose(p)
		}
	}
	around := o.Inventory.Clone()
	for _, r := range o.Running {
		if !r.End.After(first) || (b.Owner.Includes(&r.Request) && (b.Profile == "" || b.Profile == r.Profile)) {
			around.Release(r.ID)
		}
	}
	for k := len(placed); k < b.VMs; k++ {
		p, why := f.Place(around, mine)
		if !why.OK() {
			p, why = f.Place(free, nil)
		}
		if !why.OK() {
			return nil, &CapacityError{Need: b.Need, Want: b.VMs, Fit: k, From: first, To: occ[0].End, Never: why.Code == scheduler.CodeNever, Cause: why.Detail, loc: loc}
		}
		if err := free.Allocate(fmt.Sprintf("booking:%s:%d", b.ID, k), p, last); err != nil {
			return nil, &CapacityError{Need: b.Need, Want: b.VMs, Fit: k, From: first, To: occ[0].End, Cause: err.Error(), loc: loc}
		}
		choose(p)
	}
	out.Pinned = scheduler.MergeByHost(placed)
	return &out, nil
}
