package scheduler

import (
	"fmt"
	"slices"
	"time"
)

// Fitter places one VM of a booking so that its devices fit, over
// [First, Last), with each set of other devices held at the same time (the
// caller computes the sets from its rules: which bookings overlap when).
// Sets[0] is the most crowded; there is at least one set (maybe empty).
type Fitter struct {
	Need        Need
	First, Last time.Time
	Sets        [][]Hold
}

// Place chooses a placement on inv that fits with every set (and extra,
// devices held besides): it places against the most crowded set, checks
// the others (Inventory.Keep), and places again against the union of the
// sets it did not fit, until it fits all or cannot be placed.
func (f *Fitter) Place(inv *Inventory, extra []Hold) (Placement, Reason) {
	const probe = "booking:probe"
	against := slices.Concat(f.Sets[0], extra)
	used := map[int]bool{0: true}
	for {
		p, why := inv.Place(f.Need, PlaceOptions{Strategy: Pack, Now: f.First, End: f.Last, Holds: against})
		if !why.OK() {
			return p, why
		}
		bad := f.misfit(inv, probe, p, extra)
		if bad < 0 {
			return p, why
		}
		if used[bad] {
			return Placement{}, Reason{Code: CodeReservation, Detail: fmt.Sprintf("the room for %s is booked by others then", f.Need)}
		}
		used[bad] = true
		against = append(against, f.Sets[bad]...)
	}
}

// misfit is the first set p does not fit with on inv (-1: none).
func (f *Fitter) misfit(inv *Inventory, probe string, p Placement, extra []Hold) int {
	if inv.Allocate(probe, p, f.Last) != nil {
		return 0
	}
	defer inv.Release(probe)
	for i, set := range f.Sets {
		if why := inv.Keep(probe, PlaceOptions{Now: f.First, End: f.Last, Holds: slices.Concat(set, extra)}); !why.OK() {
			return i
		}
	}
	return -1
}

// Fits reports whether p fits with every set on inv, and if so records it
// there as id.
func (f *Fitter) Fits(inv *Inventory, id string, p Placement) bool {
	if f.misfit(inv, id+":probe", p, nil) >= 0 {
		return false
	}
	return inv.Allocate(id, p, f.Last) == nil
}
