package scheduler

import (
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// A preferred host is a preference: the request goes there when it fits
// there, else wherever it would go without one; an unknown or empty one
// changes nothing.
func TestPreferHost(t *testing.T) {
	// a is the fuller host: pack puts a 1g there without a preference.
	setup := func(bFull bool) (*Inventory, []Running) {
		inv := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG), h100Host("b", 1, gpu.ModeMIG)})
		run := []Running{runningOn(inv, "on-a", "a", "0000:10:00.0", "3g.40gb", 0, t0.Add(-time.Hour), t0.Add(time.Hour), 0, false)}
		if bFull {
			run = append(run, runningOn(inv, "on-b", "b", "0000:10:00.0", "7g.80gb", 0, t0.Add(-time.Hour), t0.Add(time.Hour), 0, false))
		}
		return inv, run
	}
	for _, c := range []struct {
		name   string
		prefer string
		bFull  bool
		want   string
	}{
		{"no preference: pack's choice", "", false, "a"},
		{"prefers b", "b", false, "b"},
		{"prefers a, pack's choice anyway", "a", false, "a"},
		{"b cannot serve it: elsewhere", "b", true, "a"},
		{"unknown host: no preference", "zz", false, "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			inv, run := setup(c.bFull)
			r := req("x", "1g.10gb", time.Hour, 0)
			r.PreferHost = c.prefer
			d := Cycle(t0, inv, []Request{r}, run, fifo{}, Options{Strategy: Pack, Reserve: 1})
			if len(d.Start) != 1 || d.Start[0].Placement.Host != c.want {
				t.Fatalf("started %+v (waiting %+v), want x on %s", d.Start, d.Waiting, c.want)
			}
			inv, _ = setup(c.bFull)
			p, why := inv.Place(r.Need, PlaceOptions{Now: t0, End: t0.Add(time.Hour), Prefer: c.prefer})
			if !why.OK() || p.Host != c.want {
				t.Fatalf("Place: %+v, %v; want on %s", p, why, c.want)
			}
		})
	}
	// Full everywhere: the reason is the one without a preference.
	inv, _ := setup(true)
	runningOn(inv, "more-a", "a", "0000:10:00.0", "3g.40gb", 4, t0, t0.Add(time.Hour), 0, false)
	need := mig("7g.80gb")
	_, without := inv.Place(need, PlaceOptions{Now: t0, End: t0.Add(time.Hour)})
	_, with := inv.Place(need, PlaceOptions{Now: t0, End: t0.Add(time.Hour), Prefer: "b"})
	if without.OK() || with != without {
		t.Fatalf("no room: with a preference %v, without %v; want the same refusal", with, without)
	}
}

// The requester's booking comes before a preferred host: a request whose
// owner booked a device on a goes there, though it prefers b (its home's
// host, say), which has room, and takes the booked slice. Without the
// booking it goes to b.
func TestPreferHostAfterOwnBooking(t *testing.T) {
	for _, c := range []struct {
		name     string
		booked   bool
		want     string
		wantBook string
	}{
		{"booked on a, prefers b: the booking", true, "a", "own:ux"},
		{"no booking, prefers b: b", false, "b", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			// a is the fuller host: pack puts a 1g there without a
			// preference or a booking.
			setup := func() (*Inventory, []Running) {
				inv := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG), h100Host("b", 1, gpu.ModeMIG)})
				return inv, []Running{runningOn(inv, "on-a", "a", "0000:10:00.0", "3g.40gb", 0, t0.Add(-time.Hour), t0.Add(time.Hour), 0, false)}
			}
			inv, run := setup()
			var pol fifo
			book := Hold{ID: "own:ux", Code: CodeReservation, Host: "a", From: t0, To: t0.Add(2 * time.Hour),
				Devices: []Device{{GPU: "0000:10:00.0", Kind: gpu.KindMIG, Profile: "1g.10gb", Start: 6}}}
			if c.booked {
				pol.holds = []Hold{book}
			}
			r := req("x", "1g.10gb", time.Hour, 0)
			r.PreferHost = "b"
			d := Cycle(t0, inv, []Request{r}, run, pol, Options{Strategy: Pack, Reserve: 1})
			if len(d.Start) != 1 || d.Start[0].Placement.Host != c.want || d.Start[0].Booking != c.wantBook {
				t.Fatalf("started %+v (waiting %+v), want x on %s, booking %q", d.Start, d.Waiting, c.want, c.wantBook)
			}
			if c.booked && d.Start[0].Placement.Devices[0].Start != 6 {
				t.Errorf("x on %v, want the booked slice at 6", d.Start[0].Placement)
			}
			inv, _ = setup() // the cycle placed x in it
			var own []Hold
			if c.booked {
				own = []Hold{book}
			}
			p, why := inv.Place(r.Need, PlaceOptions{Now: t0, End: t0.Add(time.Hour), Own: own, Prefer: "b"})
			if !why.OK() || p.Host != c.want {
				t.Fatalf("Place: %+v, %v; want on %s", p, why, c.want)
			}
		})
	}
}
