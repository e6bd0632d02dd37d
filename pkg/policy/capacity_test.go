package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// FreeVMs counts what a booking of a slot could get: two H100s give four
// 3g.40gb, less what bookings overlapping the slot and VMs running into it
// hold.
func TestFreeVMs(t *testing.T) {
	need := scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}
	slot := monday.Add(4 * time.Hour) // 14:00
	booked := func(t *testing.T, inv *scheduler.Inventory, at time.Time, vms int) *Booking {
		t.Helper()
		b, err := Book(Booking{ID: "lab", Owner: Owner{OwnerUser, "ann"}, Need: need, VMs: vms, Start: at, End: at.Add(2 * time.Hour)},
			BookOptions{Now: monday, Admin: true, Location: paris, Inventory: inv})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	running := func(t *testing.T, inv *scheduler.Inventory, end time.Time) scheduler.Running {
		t.Helper()
		r := migReq("vm1", "bob", "3g.40gb", end.Sub(monday), monday)
		p, why := inv.Place(r.Need, scheduler.PlaceOptions{Now: monday, End: end})
		if !why.OK() {
			t.Fatal(why)
		}
		if err := inv.Allocate(r.ID, p, end); err != nil {
			t.Fatal(err)
		}
		return scheduler.Running{Request: r, Placement: p, Started: monday, End: end}
	}
	tests := []struct {
		name  string
		need  scheduler.Need
		most  int
		setup func(t *testing.T, inv *scheduler.Inventory, o *BookOptions)
		want  int
		never string
	}{
		{name: "all free", most: 100, want: 4},
		{name: "at most most", most: 3, want: 3},
		{name: "none asked", most: 0, want: 0},
		{name: "a booking overlaps", most: 100, want: 2, setup: func(t *testing.T, inv *scheduler.Inventory, o *BookOptions) {
			o.Existing = []*Booking{booked(t, inv, slot.Add(30*time.Minute), 2)}
		}},
		{name: "a booking after the slot", most: 100, want: 4, setup: func(t *testing.T, inv *scheduler.Inventory, o *BookOptions) {
			o.Existing = []*Booking{booked(t, inv, slot.Add(time.Hour), 2)}
		}},
		{name: "a VM runs into the slot", most: 100, want: 3, setup: func(t *testing.T, inv *scheduler.Inventory, o *BookOptions) {
			o.Running = []scheduler.Running{running(t, inv, slot.Add(30*time.Minute))}
		}},
		{name: "a VM ends before the slot", most: 100, want: 4, setup: func(t *testing.T, inv *scheduler.Inventory, o *BookOptions) {
			o.Running = []scheduler.Running{running(t, inv, slot)}
		}},
		{name: "never", need: scheduler.Need{Kind: gpu.KindMIG, Profile: "1g.5gb", Count: 1}, most: 100, want: 0, never: "1g.5gb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv := h100s(t, 2)
			o := BookOptions{Now: monday, Location: paris, Inventory: inv}
			if tc.setup != nil {
				tc.setup(t, inv, &o)
			}
			n := tc.need
			if n.Kind == "" {
				n = need
			}
			got, never, err := FreeVMs(n, slot, slot.Add(time.Hour), o, tc.most)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("free %d, want %d", got, tc.want)
			}
			if (tc.never == "") != (never == "") || !strings.Contains(never, tc.never) {
				t.Errorf("never %q, want one with %q", never, tc.never)
			}
		})
	}
	if _, _, err := FreeVMs(need, slot, slot, BookOptions{Inventory: h100s(t, 1)}, 1); err == nil {
		t.Error("an empty slot was counted")
	}
	if _, _, err := FreeVMs(need, slot, slot.Add(time.Hour), BookOptions{}, 1); err == nil {
		t.Error("no inventory was counted")
	}
}

// MayBook: who the reservations block lets book which profile.
func TestMayBook(t *testing.T) {
	rules := &config.Reservations{Users: []string{"ann"}, Groups: []string{"staff"}, Profiles: []string{"lab"}}
	for _, tc := range []struct {
		name    string
		rules   bool
		owner   Owner
		groups  []string
		profile string
		want    string // "" : may
	}{
		{"a listed user", true, Owner{OwnerUser, "ann"}, nil, "lab", ""},
		{"a member of a listed group", true, Owner{OwnerUser, "bob"}, []string{"staff"}, "lab", ""},
		{"a listed group", true, Owner{OwnerGroup, "staff"}, nil, "lab", ""},
		{"someone else", true, Owner{OwnerUser, "bob"}, nil, "lab", "user bob may not book"},
		{"a profile not bookable", true, Owner{OwnerUser, "ann"}, nil, "big", `profile "big" may not be booked (bookable: lab)`},
		{"no reservations block", false, Owner{OwnerUser, "ann"}, nil, "lab", "nobody may book"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rules
			if !tc.rules {
				r = nil
			}
			err := MayBook(r, tc.owner, tc.groups, tc.profile)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// BenchmarkFreeVMsWeek counts a week of hours (what the book page asks
// for) on two H100s with a weekly booking in the way.
func BenchmarkFreeVMsWeek(b *testing.B) {
	need := scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}
	inv := h100s(b, 2)
	lab, err := Book(Booking{ID: "lab", Owner: Owner{OwnerGroup, "staff"}, Need: need, VMs: 2, Start: monday.Add(4 * time.Hour), End: monday.Add(6 * time.Hour),
		Repeat: Recurrence{Freq: Daily, Until: monday.AddDate(0, 0, 30)}}, BookOptions{Now: monday, Admin: true, Location: paris, Inventory: inv})
	if err != nil {
		b.Fatal(err)
	}
	o := BookOptions{Now: monday, Location: paris, Inventory: inv, Existing: []*Booking{lab}}
	b.ResetTimer()
	for range b.N {
		for h := range 7 * 24 {
			from := monday.Add(time.Duration(h) * time.Hour)
			if _, _, err := FreeVMs(need, from, from.Add(time.Hour), o, 100); err != nil {
				b.Fatal(err)
			}
		}
	}
}
