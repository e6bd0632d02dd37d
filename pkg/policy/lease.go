package policy

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// Extend checks a lease extension of a running VM to newEnd: within the
// profile's lease.max counted from the start, not past the end of the
// booking it runs in or of the window that stops it, not into a window that
// forbids a batch VM that is not preemptible, and not onto devices booked
// for someone else. It returns nil when the extension may be granted.
func (e *Engine) Extend(vm scheduler.Running, newEnd time.Time, inv *scheduler.Inventory) error {
	loc := e.loc
	if !newEnd.After(vm.End) {
		return fmt.Errorf("the lease already ends at %s", stamp(vm.End, loc))
	}
	if vm.Stopping {
		return fmt.Errorf("the VM is being stopped")
	}
	maxLease := e.cfg.MaxLease
	if p, ok := e.cfg.Profiles[vm.Profile]; ok && p != nil && p.Lease.Max > 0 {
		maxLease = p.Lease.Max
	}
	if maxLease > 0 && newEnd.Sub(vm.Started) > maxLease {
		return fmt.Errorf("a lease lasts at most %s: this VM may run until %s", config.FormatDuration(maxLease), stamp(vm.Started.Add(maxLease), loc))
	}
	if vm.Booking != "" {
		for _, b := range e.cfg.Bookings {
			if b.ID != vm.Booking {
				continue
			}
			for _, o := range b.Occurrences(vm.Started, vm.Started.Add(time.Second), loc) {
				if newEnd.After(o.End) {
					return fmt.Errorf("the VM runs in booking %s, which ends at %s", b.ID, stamp(o.End, loc))
				}
			}
		}
	}
	if st, ok := e.windows.At(vm.Started); ok && st.Window.AtEnd == config.AtEndStop && newEnd.After(st.End) {
		return fmt.Errorf("window %q, which the VM started in, stops it at %s", st.Window.Name, stamp(st.End, loc))
	}
	if vm.Class == config.ClassBatch && !vm.Preemptible {
		if st, ok := e.windows.Forbidding(config.ClassBatch, vm.End, newEnd); ok {
			return fmt.Errorf("the extension would run into window %q (%s), which forbids batch", st.Window.Name, stamp(st.Start, loc))
		}
	}
	if inv != nil {
		r := vm.Request
		var others []scheduler.Hold
		for _, b := range e.cfg.Bookings {
			if b.ID == vm.Booking || (b.Owner.Includes(&r) && (b.Profile == "" || b.Profile == r.Profile)) {
				continue
			}
			others = append(others, b.holds(vm.End, newEnd, loc)...)
		}
		if why := inv.Keep(vm.ID, scheduler.PlaceOptions{Now: vm.End, End: newEnd, Holds: others}); !why.OK() {
			return fmt.Errorf("%s", why.Detail)
		}
	}
	return nil
}

// Sample is one GPU utilisation reading of a VM's devices, in percent.
type Sample struct {
	At          time.Time
	Utilization float64
}

// IdleStop decides the idle stop of a VM from its utilisation samples: it
// is idle since the first of the trailing samples that are all at or below
// threshold, with no gap between readings (nor since the last) longer than
// maxGap: missing data never counts as idle. stop is true once it has been
// idle for idleAfter (the profile's lease.idle_stop; 0 never stops).
func IdleStop(now time.Time, samples []Sample, idleAfter time.Duration, threshold float64, maxGap time.Duration) (stop bool, since time.Time) {
	if idleAfter <= 0 || len(samples) == 0 {
		return false, time.Time{}
	}
	s := append([]Sample(nil), samples...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].At.Before(s[j].At) })
	last := s[len(s)-1]
	if now.Sub(last.At) > maxGap || last.Utilization > threshold {
		return false, time.Time{}
	}
	since = last.At
	for i := len(s) - 2; i >= 0; i-- {
		if s[i].Utilization > threshold || s[i+1].At.Sub(s[i].At) > maxGap {
			break
		}
		since = s[i].At
	}
	return now.Sub(since) >= idleAfter, since
}
