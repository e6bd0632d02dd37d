package usage

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The periodic review report: usage, waste, queue waits and when in the
// week GPUs are wanted, computed here for GET /v1/reports/summary; gpuvm
// report renders it (pkg/report).

// ReportStore is what a report reads besides the ledger (pkg/store).
type ReportStore interface {
	ListQueueWaits(ctx context.Context, q store.UsageQuery) ([]store.QueueWait, error)
	ListHosts(ctx context.Context) ([]store.Host, error)
}

// Report thresholds.
const (
	// DefaultIdleBelow is the utilisation under which a VM counts as
	// idle.
	DefaultIdleBelow = 0.10
	// idleMinHours is how long a VM must have held a GPU, measured, to be
	// called idle: a VM that just started is not.
	idleMinHours = 1.0
	// maxIdleVMs bounds the list of idle VMs.
	maxIdleVMs = 50
	// dayStart and dayEnd bound the day (local hours) of the notes.
	dayStart, dayEnd = 8, 20
	// lowOccupancy is the share of capacity allocated under which a part
	// of the day counts as idle; queueNoticed the VM-hours of waiting
	// that count as a queue.
	lowOccupancy = 0.5
	queueNoticed = 1.0
	// waitLookback is how long before the range a VM may have been asked
	// for and still wait in it.
	waitLookback = 14 * 24 * time.Hour
)

// ReportQuery asks for a report summary.
type ReportQuery struct {
	From, To time.Time
	// Location is the time zone of the heatmaps and of day and night (nil:
	// UTC); LocationName names it for people (default Location's name).
	Location     *time.Location
	LocationName string
	// IdleBelow is the utilisation under which a VM is idle, 0..1 (0:
	// DefaultIdleBelow).
	IdleBelow float64
	// SimulatedHosts are the hosts that are simulated GPU servers (as
	// Query's): what was held on them is counted as simulated, never as
	// measured, used or held idle, and their samples are left out of the
	// utilisation heatmap.
	SimulatedHosts map[string]bool
}

// Summarize computes the report of q from the ledger and the store.
func Summarize(ctx context.Context, l *Ledger, st ReportStore, q ReportQuery) (*api.ReportSummary, error) {
	if q.Location == nil {
		q.Location = time.UTC
	}
	if q.IdleBelow <= 0 {
		q.IdleBelow = DefaultIdleBelow
	}
	from, to := q.From.UTC(), q.To.UTC()
	if !to.After(from) {
		return nil, fmt.Errorf("report: %w: the time range [%s, %s) is empty", store.ErrInvalid, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	now := l.st.Now().UTC()
	out := &api.ReportSummary{From: from, To: to, GeneratedAt: now, Location: cmp.Or(q.LocationName, q.Location.String()),
		IdleBelow: q.IdleBelow}
	charges, err := l.Charges(ctx, store.UsageQuery{From: from, To: to})
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	for i := range charges {
		if q.SimulatedHosts[charges[i].Span.Record.Host] {
			charges[i].Simulated, charges[i].Measured, charges[i].Utilization = true, false, 0
		}
	}
	out.ByUser, out.Total = GroupCharges(charges, api.UsageByUser)
	out.ByGroup, _ = GroupCharges(charges, api.UsageByGroup)
	out.ByProfile, _ = GroupCharges(charges, api.UsageByProfile)
	out.IdleVMs = idleVMs(charges, q.IdleBelow)

	if out.GPUs, err = fleetGPUs(ctx, st); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if out.GPUs == 0 {
		out.GPUs = heldGPUs(charges)
	}
	out.CapacityGPUHours = float64(out.GPUs) * to.Sub(from).Hours()

	waits, err := st.ListQueueWaits(ctx, store.UsageQuery{From: from.Add(-waitLookback), To: to})
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	end := earlier(now, to)
	out.QueueWaits = waitStats(waits, from, to, end)

	hm := newWeek(q.Location)
	hm.spread(from, to, func(slot *weekSlot, hours float64) { slot.hours += hours })
	for _, c := range charges {
		share := c.Span.Record.Share
		hm.spread(c.Span.From, c.Span.To, func(slot *weekSlot, hours float64) { slot.allocated += share * hours })
	}
	for _, w := range waits {
		if left := waitEnd(w, end); left.After(w.Since) {
			hm.spread(later(w.Since, from), earlier(left, to), func(slot *weekSlot, hours float64) { slot.queued += hours })
		}
	}
	if err := hm.utilization(ctx, l, from, to, q.SimulatedHosts); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	out.Heatmaps = hm.heatmaps()
	out.Notes = reportNotes(out, hm)
	return out, nil
}

// fleetGPUs counts the GPUs of the hosts' last inventories.
func fleetGPUs(ctx context.Context, st ReportStore) (int, error) {
	hosts, err := st.ListHosts(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, h := range hosts {
		var inv gpu.HostInventory
		if h.Inventory == "" || json.Unmarshal([]byte(h.Inventory), &inv) != nil {
			continue
		}
		n += len(inv.GPUs)
	}
	return n, nil
}

// heldGPUs counts the GPUs that charges held.
func heldGPUs(charges []Charge) int {
	gpus := map[[2]string]bool{}
	for _, c := range charges {
		gpus[[2]string{c.Span.Record.Host, c.Span.Record.GPUAddress}] = true
	}
	return len(gpus)
}

// idleVMs are the VMs measured for at least idleMinHours with a
// utilisation under below, most idle GPU-hours first.
func idleVMs(charges []Charge, below float64) []api.IdleVM {
	type acc struct {
		vm                   api.IdleVM
		held, measured, used float64 // GPU-seconds
		measuredHours        float64
	}
	byVM := map[string]*acc{}
	var order []string
	for _, c := range charges {
		r := c.Span.Record
		a := byVM[r.VMID]
		if a == nil {
			a = &acc{vm: api.IdleVM{ID: r.VMID, Name: cmp.Or(c.Span.VMName, r.VMID), Owner: r.User, Group: r.Group,
				Profile: cmp.Or(c.Span.VMProfile, r.Profile)}}
			byVM[r.VMID] = a
			order = append(order, r.VMID)
		}
		a.held += c.GPUSeconds
		a.vm.Running = a.vm.Running || c.Span.Open
		if c.Measured {
			a.measured += c.GPUSeconds
			a.used += c.UsedSeconds()
			a.measuredHours = max(a.measuredHours, c.Span.To.Sub(c.Span.From).Hours())
		}
	}
	var out []api.IdleVM
	for _, id := range order {
		a := byVM[id]
		if a.measured <= 0 || a.measuredHours < idleMinHours || a.used/a.measured >= below {
			continue
		}
		v := a.vm
		v.GPUHours, v.MeasuredGPUHours = a.held/3600, a.measured/3600
		v.IdleGPUHours, v.Utilization = (a.measured-a.used)/3600, a.used/a.measured
		out = append(out, v)
	}
	slices.SortStableFunc(out, func(a, b api.IdleVM) int {
		return cmp.Or(cmp.Compare(b.IdleGPUHours, a.IdleGPUHours), cmp.Compare(a.Owner, b.Owner), cmp.Compare(a.Name, b.Name))
	})
	if len(out) > maxIdleVMs {
		out = out[:maxIdleVMs]
	}
	if out == nil {
		out = []api.IdleVM{}
	}
	return out
}

// waitEnd is when a VM stopped waiting: it ran, it gave up, or (still
// waiting) end.
func waitEnd(w store.QueueWait, end time.Time) time.Time {
	switch {
	case w.Ran != nil:
		return *w.Ran
	case w.Left != nil:
		return *w.Left
	}
	return end
}

// waitStats sums up the waits that began in [from, to) per profile, by
// profile, then over all of them (profile "total").
func waitStats(waits []store.QueueWait, from, to, end time.Time) []api.QueueWaitStats {
	byProfile := map[string][]store.QueueWait{}
	var all []store.QueueWait
	for _, w := range waits {
		if w.Since.Before(from) || !w.Since.Before(to) {
			continue
		}
		byProfile[w.Profile] = append(byProfile[w.Profile], w)
		all = append(all, w)
	}
	out := make([]api.QueueWaitStats, 0, len(byProfile)+1)
	for _, p := range slices.Sorted(maps.Keys(byProfile)) {
		out = append(out, waitStat(cmp.Or(p, "-"), byProfile[p], end))
	}
	return append(out, waitStat("total", all, end))
}

func waitStat(profile string, waits []store.QueueWait, end time.Time) api.QueueWaitStats {
	s := api.QueueWaitStats{Profile: profile, Requests: len(waits)}
	var secs []float64
	for _, w := range waits {
		switch {
		case w.Ran != nil:
			s.Started++
			secs = append(secs, max(0, w.Ran.Sub(w.Since).Seconds()))
		case w.Left != nil && w.State == store.VMFailed:
			s.Failed++
		case w.Left != nil:
			s.GaveUp++
		default:
			s.Waiting++
		}
	}
	if len(secs) == 0 {
		return s
	}
	sort.Float64s(secs)
	total := 0.0
	for _, x := range secs {
		total += x
	}
	s.MeanSeconds = total / float64(len(secs))
	// p95 by nearest rank.
	s.P95Seconds = secs[int(math.Ceil(0.95*float64(len(secs))))-1]
	s.MaxSeconds = secs[len(secs)-1]
	return s
}

// weekSlot sums one hour of the week over the range.
type weekSlot struct {
	hours     float64 // how long the range spent in this slot
	allocated float64 // GPU-hours held
	queued    float64 // VM-hours waiting
	util      utilSums
}

// week is the weekday × hour-of-day slots of a time zone; [0] is Monday.
type week struct {
	loc   *time.Location
	slots [7][24]weekSlot
}

func newWeek(loc *time.Location) *week { return &week{loc: loc} }

// slot is the slot of the local hour that t falls in.
func (w *week) slot(t time.Time) *weekSlot {
	lt := t.In(w.loc)
	return &w.slots[(int(lt.Weekday())+6)%7][lt.Hour()]
}

// spread calls fn for each local hour [from, to) touches, with the hours
// of it inside [from, to).
func (w *week) spread(from, to time.Time, fn func(slot *weekSlot, hours float64)) {
	for t := from; t.Before(to); {
		lt := t.In(w.loc)
		next := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), 0, 0, 0, w.loc).Add(time.Hour)
		if !next.After(t) { // a local hour repeated when clocks go back
			next = t.Add(time.Hour).Truncate(time.Hour)
		}
		next = earlier(next, to)
		fn(w.slot(t), next.Sub(t).Hours())
		t = next
	}
}

// utilization adds the utilisation of every VM's samples in [from, to) to
// the slots: an hour's samples go to the local hour that holds its middle.
// The samples of simulated hosts are the simulator's, not a GPU's: left out.
func (w *week) utilization(ctx context.Context, l *Ledger, from, to time.Time, simulated map[string]bool) error {
	type cell struct {
		hour time.Time
		key  utilKey
		s    utilSums
	}
	var cells []cell
	byKey := map[utilKey]*utilSums{}
	err := l.utilization(ctx, from, to, func(hour time.Time, b store.UtilBucket) {
		if simulated[b.Host] {
			return
		}
		k := utilKey{b.VMID, b.Host, b.GPUAddress, b.Device}
		cells = append(cells, cell{hour, k, utilSums{b.Sum, b.Count}})
		byKey[k] = byKey[k].add(b.Sum, b.Count)
	})
	if err != nil {
		return err
	}
	devices := withDeviceSamples(byKey)
	for _, c := range cells {
		if c.key.device == devices[c.key.vm] {
			slot := w.slot(c.hour.Add(30 * time.Minute))
			slot.util.sum += c.s.sum
			slot.util.n += c.s.n
		}
	}
	return nil
}

func (w *week) heatmaps() api.Heatmaps {
	var h api.Heatmaps
	for d := range w.slots {
		for hr, s := range w.slots[d] {
			if s.hours > 0 {
				h.AllocatedGPUs[d][hr] = s.allocated / s.hours
				h.QueuedVMs[d][hr] = s.queued / s.hours
			}
			if s.util.n > 0 {
				u := s.util.mean()
				h.Utilization[d][hr] = &u
			}
		}
	}
	return h
}

// dayNight sums the slots of the day (dayStart to dayEnd) and of the night.
func (w *week) dayNight() (day, night weekSlot) {
	for d := range w.slots {
		for hr, s := range w.slots[d] {
			p := &night
			if hr >= dayStart && hr < dayEnd {
				p = &day
			}
			p.hours += s.hours
			p.allocated += s.allocated
			p.queued += s.queued
		}
	}
	return day, night
}

// reportNotes says what stands out, in plain language.
func reportNotes(r *api.ReportSummary, w *week) []string {
	var out []string
	pct := func(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }
	hours := api.FormatGPUHours
	t := r.Total
	switch {
	case t.GPUHours == 0:
		out = append(out, "No VM held a GPU in this period.")
	case r.CapacityGPUHours > 0:
		gpus := fmt.Sprintf("%d GPUs", r.GPUs)
		if r.GPUs == 1 {
			gpus = "1 GPU"
		}
		out = append(out, fmt.Sprintf("VMs held %s GPU-hours of the %s the %s offered (%s).",
			hours(t.GPUHours), hours(r.CapacityGPUHours), gpus, pct(t.GPUHours/r.CapacityGPUHours)))
	}
	// Unmeasured is what no GPU measured, the simulated aside.
	unmeasured := t.GPUHours - t.MeasuredGPUHours - t.SimulatedGPUHours
	switch {
	case t.Utilization == nil && unmeasured > 1e-9:
		out = append(out, "No GPU reported its utilisation for these VMs: how much of the time held was used is unknown. Is gpuvmd's sampler running?")
	case t.Utilization != nil:
		s := fmt.Sprintf("Where utilisation was measured (%s GPU-hours), the GPUs were busy %s of the time: %s GPU-hours were held idle.",
			hours(t.MeasuredGPUHours), pct(*t.Utilization), hours(t.IdleGPUHours))
		if unmeasured > 1e-9 {
			s += fmt.Sprintf(" For the other %s GPU-hours no utilisation was reported.", hours(unmeasured))
		}
		out = append(out, s)
	}
	if t.SimulatedGPUHours > 0 {
		out = append(out, fmt.Sprintf("%s GPU-hours were held on simulated GPU servers: their utilisation is the simulator's, not a GPU's, so it is counted neither as used nor as held idle.",
			hours(t.SimulatedGPUHours)))
	}
	if n := len(r.IdleVMs); n > 0 {
		running := 0
		for _, v := range r.IdleVMs {
			if v.Running {
				running++
			}
		}
		out = append(out, idleNote(n, running, pct(r.IdleBelow)))
	}
	day, night := w.dayNight()
	if r.GPUs > 0 && day.hours > 0 && night.hours > 0 {
		dayOcc := day.allocated / (float64(r.GPUs) * day.hours)
		nightOcc := night.allocated / (float64(r.GPUs) * night.hours)
		span := fmt.Sprintf("%02d:00 and %02d:00 (%s)", dayStart, dayEnd, r.Location)
		switch {
		case dayOcc < lowOccupancy && night.queued >= queueNoticed && night.queued > day.queued:
			out = append(out, fmt.Sprintf("Daytime capacity idles while night requests queue: between %s the GPUs were %s allocated, "+
				"yet requests waited %s VM-hours in the queue at night (%s by day). Letting that work run by day (time windows, "+
				"reservations) would use the idle daytime GPUs.", span, pct(dayOcc), hours(night.queued), hours(day.queued)))
		case nightOcc < lowOccupancy && day.queued >= queueNoticed && day.queued > night.queued:
			out = append(out, fmt.Sprintf("Night capacity idles while daytime requests queue: outside %s the GPUs were %s allocated, "+
				"yet requests waited %s VM-hours in the queue by day (%s at night). Work that can wait could be booked for the night "+
				"(gpuvm create --start-at) to shorten daytime waits.", span, pct(nightOcc), hours(day.queued), hours(night.queued)))
		default:
			out = append(out, fmt.Sprintf("Day and night are in balance: GPUs were %s allocated between %s and %s outside; "+
				"requests waited %s VM-hours by day and %s at night.", pct(dayOcc), span, pct(nightOcc), hours(day.queued), hours(night.queued)))
		}
	}
	if n := len(r.QueueWaits); n > 0 {
		if all := r.QueueWaits[n-1]; all.Started > 0 {
			out = append(out, fmt.Sprintf("Requests: %d; started: %d, after waiting %s on average (95%% within %s); still waiting: %d; failed: %d; deleted before they started: %d.",
				all.Requests, all.Started, humanSeconds(all.MeanSeconds), humanSeconds(all.P95Seconds), all.Waiting, all.Failed, all.GaveUp))
		} else if all.Requests > 0 {
			out = append(out, fmt.Sprintf("Requests: %d; none started; still waiting: %d; failed: %d; deleted before they started: %d.",
				all.Requests, all.Waiting, all.Failed, all.GaveUp))
		}
	}
	return out
}

// idleNote says how many VMs held a GPU idle and how many of them still
// hold it, in the number each takes.
func idleNote(n, running int, below string) string {
	head := fmt.Sprintf("%d VMs held a GPU for an hour or more at under %s utilisation; ", n, below)
	if n == 1 {
		head = fmt.Sprintf("1 VM held a GPU for an hour or more at under %s utilisation; ", below)
		if running == 1 {
			return head + "it still holds it (see Idle VMs)."
		}
		return head + "it no longer holds it (see Idle VMs)."
	}
	if running == 1 {
		return head + "1 of them still holds it (see Idle VMs)."
	}
	return head + fmt.Sprintf("%d of them still hold it (see Idle VMs).", running)
}

// humanSeconds is "45s", "12m", "3h20m", "2d4h".
func humanSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		h := int(d.Hours())
		if m := int(d.Minutes()) % 60; m > 0 {
			return fmt.Sprintf("%dh%02dm", h, m)
		}
		return fmt.Sprintf("%dh", h)
	}
	days := int(d.Hours()) / 24
	if h := int(d.Hours()) % 24; h > 0 {
		return fmt.Sprintf("%dd%dh", days, h)
	}
	return fmt.Sprintf("%dd", days)
}
