package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// CheckBooking names the field of every problem.
func TestCheckBookingFields(t *testing.T) {
	cfg := parse(t, `
policy {
  timezone = "Europe/Paris"
  group "staff" {}
  reservations {
    groups     = ["staff"]
    max_ahead  = "30d"
    max_length = "4h"
    max_vms    = 4
  }
}
`)
	tuesday := time.Date(2026, 3, 3, 14, 0, 0, 0, paris)
	base := Booking{ID: "b", Owner: Owner{OwnerUser, "ann"}, Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, VMs: 1,
		Start: tuesday, End: tuesday.Add(2 * time.Hour)}
	opts := BookOptions{Now: monday, Rules: cfg.Policy.Reservations, OwnerGroups: []string{"staff"}, Location: paris}
	if err := CheckBooking(base, opts); err != nil {
		t.Fatalf("a good booking: %v", err)
	}
	tests := []struct {
		field  string
		mutate func(b *Booking)
	}{
		{FieldStart, func(b *Booking) { b.Start = monday.Add(-time.Hour) }},
		{FieldEnd, func(b *Booking) { b.End = b.Start.Add(-time.Minute) }},
		{FieldEnd, func(b *Booking) { b.End = b.Start.Add(5 * time.Hour) }},
		{FieldStart, func(b *Booking) { b.Start, b.End = b.Start.AddDate(0, 0, 40), b.End.AddDate(0, 0, 40) }},
		{FieldVMs, func(b *Booking) { b.VMs = 5 }},
		{FieldVMs, func(b *Booking) { b.VMs = 0 }},
		{FieldNeed, func(b *Booking) { b.Need.Profile = "" }},
		{FieldOwner, func(b *Booking) { b.Owner = Owner{OwnerGroup, "ml101"} }},
		{FieldRepeat, func(b *Booking) {
			b.End = b.Start.Add(3 * time.Hour)
			b.Repeat = Recurrence{Freq: Weekly, Days: []time.Weekday{time.Tuesday, time.Wednesday}, Until: b.Start.AddDate(0, 1, 0)}
			b.End = b.Start.Add(25 * time.Hour)
		}},
		{FieldRepeatDays, func(b *Booking) {
			b.Repeat = Recurrence{Freq: Weekly, Days: []time.Weekday{time.Thursday}, Until: b.Start.AddDate(0, 1, 0)}
		}},
		{FieldRepeatUntil, func(b *Booking) { b.Repeat = Recurrence{Freq: Weekly} }},
		{FieldRepeatUntil, func(b *Booking) { b.Repeat = Recurrence{Freq: Daily, Until: b.Start.AddDate(2, 0, 0)} }},
	}
	for _, tc := range tests {
		b := base
		tc.mutate(&b)
		err := CheckBooking(b, opts)
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a field error", tc.field, err)
			continue
		}
		if fe.Field != tc.field {
			t.Errorf("%s: field %s (%v)", tc.field, fe.Field, err)
		}
	}
}

// The limits that bind admins too: a start past MaxBookingAhead or a
// length past MaxBookingLength, as far as time.Time goes.
func TestCheckBookingLimitsForAdmins(t *testing.T) {
	start := monday.Add(time.Hour)
	base := Booking{ID: "b", Owner: Owner{OwnerUser, "ann"}, Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, VMs: 1,
		Start: start, End: start.Add(2 * time.Hour)}
	opts := BookOptions{Now: monday, Admin: true, Location: paris}
	far := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name, field string // "" field: allowed
		mutate      func(b *Booking)
	}{
		{"as it is", "", func(b *Booking) {}},
		{"starts at the limit", "", func(b *Booking) { b.Start, b.End = monday.Add(MaxBookingAhead), monday.Add(MaxBookingAhead+time.Hour) }},
		{"lasts the longest", "", func(b *Booking) { b.End = b.Start.Add(MaxBookingLength) }},
		{"starts past the limit", FieldStart, func(b *Booking) {
			b.Start, b.End = monday.Add(MaxBookingAhead+time.Hour), monday.Add(MaxBookingAhead+2*time.Hour)
		}},
		{"starts in year 9999", FieldStart, func(b *Booking) { b.Start, b.End = far, far.Add(time.Hour) }},
		{"lasts past the limit", FieldEnd, func(b *Booking) { b.End = b.Start.Add(MaxBookingLength + time.Second) }},
		{"lasts until year 9999", FieldEnd, func(b *Booking) { b.End = far }},
		{"VMs overflowing", FieldVMs, func(b *Booking) { b.VMs = 1 << 62 }},
		{"VMs negative", FieldVMs, func(b *Booking) { b.VMs = -1 << 62 }},
	}
	for _, tc := range tests {
		b := base
		tc.mutate(&b)
		err := CheckBooking(b, opts)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want an error of field %s", tc.name, err, tc.field)
		}
	}
}

// A booking the GPUs cannot give says which occurrence fails, how many VMs
// fit then and what holds the rest.
func TestCapacityError(t *testing.T) {
	inv := h100s(t, 1) // two 3g.40gb
	tuesday := time.Date(2026, 3, 3, 14, 0, 0, 0, paris)
	lab := Booking{ID: "lab", Owner: Owner{OwnerGroup, "ml"}, Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, VMs: 1,
		Start: tuesday, End: tuesday.Add(2 * time.Hour),
		Repeat: Recurrence{Freq: Weekly, Days: []time.Weekday{time.Tuesday}, Until: tuesday.AddDate(0, 0, 22)}}
	b, err := Book(lab, BookOptions{Now: monday, Admin: true, Location: paris, Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	// The third Tuesday someone booked the other half too.
	third := tuesday.AddDate(0, 0, 14)
	other, err := Book(Booking{ID: "other", Owner: Owner{OwnerUser, "bob"}, Need: lab.Need, VMs: 1, Start: third, End: third.Add(time.Hour)},
		BookOptions{Now: monday, Admin: true, Location: paris, Inventory: inv, Existing: []*Booking{b}})
	if err != nil {
		t.Fatal(err)
	}
	second := lab
	second.ID = "second"
	_, err = Book(second, BookOptions{Now: monday, Admin: true, Location: paris, Inventory: inv, Existing: []*Booking{b, other}})
	var ce *CapacityError
	if !errors.As(err, &ce) {
		t.Fatalf("%v, want a capacity error", err)
	}
	if !ce.From.Equal(third) || ce.Fit != 0 || ce.Want != 1 || ce.Cause != causeBookings {
		t.Errorf("%+v", ce)
	}
	if !strings.Contains(err.Error(), "0 of 1 VMs of 3g.40gb fit from Tue 17 Mar 2026 14:00 CET") {
		t.Errorf("message %q", err)
	}
	// A running VM that runs past the first start holds the rest then.
	vm := scheduler.Running{Request: migReq("vm", "cara", "3g.40gb", 30*time.Hour, monday), End: tuesday.Add(time.Hour)}
	p := scheduler.Placement{Host: "a", Devices: []scheduler.Device{{GPU: "g0", Kind: gpu.KindMIG, Profile: "3g.40gb", Start: 0}}}
	inv2 := h100s(t, 1)
	if err := inv2.Allocate("vm", p, vm.End); err != nil {
		t.Fatal(err)
	}
	vm.Placement = p
	two := Booking{ID: "two", Owner: Owner{OwnerUser, "ann"}, Need: lab.Need, VMs: 2, Start: tuesday, End: tuesday.Add(time.Hour)}
	_, err = Book(two, BookOptions{Now: monday, Admin: true, Location: paris, Inventory: inv2, Running: []scheduler.Running{vm}})
	if !errors.As(err, &ce) || ce.Fit != 1 || ce.Cause != causeRunning {
		t.Errorf("%v (%+v)", err, ce)
	}
	// A profile no GPU here has.
	never := two
	never.Need.Profile = "1g.5gb"
	if _, err = Book(never, BookOptions{Now: monday, Admin: true, Location: paris, Inventory: inv2}); !errors.As(err, &ce) || !ce.Never {
		t.Errorf("never: %v", err)
	}
}

// Pin keeps the devices a booking held while they hold; chooses others
// when they do not; and, after a restart, prefers the owner's VMs that run
// in it.
func TestPin(t *testing.T) {
	inv := h100s(t, 2)
	tuesday := time.Date(2026, 3, 3, 14, 0, 0, 0, paris)
	lab := Booking{ID: "lab", Owner: Owner{OwnerUser, "ann"}, Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, VMs: 2,
		Start: tuesday, End: tuesday.Add(2 * time.Hour)}
	b, err := Book(lab, BookOptions{Now: monday, Admin: true, Location: paris, Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	prev := b.SplitPinned()
	if len(prev) != 2 {
		t.Fatalf("split %+v", prev)
	}
	// A VM of bob's now sits on one of the devices past the start (a lease
	// extended): the devices are kept (bob must make way), not moved.
	bob := scheduler.Running{Request: migReq("bob1", "bob", "3g.40gb", 8*time.Hour, monday), Placement: prev[0], End: tuesday.Add(time.Hour)}
	inv2 := inv.Clone()
	if err := inv2.Allocate("bob1", prev[0], bob.End); err != nil {
		t.Fatal(err)
	}
	again, err := Pin(lab, BookOptions{Now: monday, Location: paris, Inventory: inv2, Running: []scheduler.Running{bob}, Prefer: prev})
	if err != nil {
		t.Fatal(err)
	}
	if got := again.SplitPinned(); len(got) != 2 || got[0].String() != prev[0].String() || got[1].String() != prev[1].String() {
		t.Errorf("kept %v, want %v", got, prev)
	}
	// Without what it held (a restart), it goes around bob's VM.
	fresh, err := Pin(lab, BookOptions{Now: monday, Location: paris, Inventory: inv2, Running: []scheduler.Running{bob}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range fresh.SplitPinned() {
		if p.String() == prev[0].String() {
			t.Errorf("fresh pins on bob's device: %v", fresh.Pinned)
		}
	}
	// An owner's VM in it is preferred after a restart.
	ann := scheduler.Running{Request: migReq("ann1", "ann", "3g.40gb", 2*time.Hour, tuesday), Placement: prev[1], End: tuesday.Add(2 * time.Hour)}
	inv3 := inv.Clone()
	if err := inv3.Allocate("ann1", prev[1], ann.End); err != nil {
		t.Fatal(err)
	}
	mine, err := Pin(lab, BookOptions{Now: tuesday.Add(10 * time.Minute), Location: paris, Inventory: inv3, Running: []scheduler.Running{ann}, Prefer: []scheduler.Placement{ann.Placement}})
	if err != nil {
		t.Fatal(err)
	}
	if got := mine.SplitPinned(); len(got) != 2 || got[0].String() != prev[1].String() {
		t.Errorf("pinned %v, want ann's %v first", got, prev[1])
	}
	// A preferred device another overlapping booking holds is not kept.
	other := &Booking{ID: "other", Owner: Owner{OwnerUser, "cara"}, Need: lab.Need, VMs: 1, Start: tuesday, End: tuesday.Add(time.Hour),
		Pinned: []scheduler.Placement{prev[0]}}
	moved, err := Pin(lab, BookOptions{Now: monday, Location: paris, Inventory: inv, Existing: []*Booking{other}, Prefer: prev})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range moved.SplitPinned() {
		if p.String() == prev[0].String() {
			t.Errorf("kept a device another booking holds: %v", moved.Pinned)
		}
	}
	// Over: nothing held.
	if over, err := Pin(lab, BookOptions{Now: tuesday.Add(3 * time.Hour), Location: paris, Inventory: inv}); err != nil || len(over.Pinned) != 0 {
		t.Errorf("over: %v %v", over, err)
	}
	// Too little left: a capacity error.
	big := lab
	big.VMs = 5
	var ce *CapacityError
	if _, err := Pin(big, BookOptions{Now: monday, Location: paris, Inventory: inv}); !errors.As(err, &ce) || ce.Fit != 4 {
		t.Errorf("five on two GPUs: %v", err)
	}
}
