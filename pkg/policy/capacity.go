package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// FreeVMs is how many VMs of need a booking of [from, to) could get, at
// most most: Book's own count (pinOn) for a booking of that one
// occurrence, around the VMs of o.Running whose leases run past from and
// the devices of the bookings of o.Existing that overlap it. never, when
// not "", says why no GPU here could ever give need (the count is 0). o's
// Rules, Admin and Now are not looked at: this is capacity, not
// permission.
func FreeVMs(need scheduler.Need, from, to time.Time, o BookOptions, most int) (n int, never string, err error) {
	if o.Inventory == nil {
		return 0, "", fmt.Errorf("no inventory to count free capacity on")
	}
	if !to.After(from) {
		return 0, "", fmt.Errorf("the slot ends (%s) before it starts (%s)", to, from)
	}
	if most < 1 {
		return 0, "", nil
	}
	loc := o.Location
	if loc == nil {
		loc = time.UTC
	}
	probe := Booking{ID: "free-capacity", Need: need, VMs: most}
	_, cerr := pinOn(probe, []Interval{{from, to}}, o.Inventory, o.Running, o.Existing, loc)
	switch {
	case cerr == nil:
		return most, "", nil
	case cerr.Never:
		return 0, cerr.Cause, nil
	}
	return cerr.Fit, "", nil
}

// MayBook says whether the rules (the policy's reservations block; nil:
// nobody but admins books) let owner (a user in groups, or a group) book
// profile: nil, or every reason not, each a *FieldError, joined.
func MayBook(r *config.Reservations, owner Owner, groups []string, profile string) error {
	if r == nil {
		return &FieldError{FieldOwner, fmt.Errorf("nobody may book: the policy has no reservations block")}
	}
	var errs []error
	allowed := len(r.Users) == 0 && len(r.Groups) == 0
	switch owner.Kind {
	case OwnerUser:
		allowed = allowed || contains(r.Users, owner.Name)
		for _, g := range groups {
			allowed = allowed || contains(r.Groups, g)
		}
	case OwnerGroup:
		allowed = allowed || contains(r.Groups, owner.Name)
	}
	if !allowed {
		errs = append(errs, &FieldError{FieldOwner, fmt.Errorf("%s may not book (reservations allow users %v, groups %v)", owner, r.Users, r.Groups)})
	}
	if len(r.Profiles) > 0 && !contains(r.Profiles, profile) {
		errs = append(errs, &FieldError{FieldProfile, fmt.Errorf("profile %q may not be booked (bookable: %s)", profile, strings.Join(r.Profiles, ", "))})
	}
	return errors.Join(errs...)
}
