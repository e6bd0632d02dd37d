package policy

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// Footprint is what a VM counts against quotas.
type Footprint struct {
	VMs    int     `json:"vms"`
	GPUs   int     `json:"gpus"`   // whole GPUs
	Slices int     `json:"slices"` // vGPUs and MIG instances
	Memory uint64  `json:"memory"` // GPU memory, bytes
	Share  float64 `json:"share"`  // parts of GPUs held, for GPU-hours
}

func (f *Footprint) add(g Footprint) {
	f.VMs += g.VMs
	f.GPUs += g.GPUs
	f.Slices += g.Slices
	f.Memory += g.Memory
	f.Share += g.Share
}

// PlacedFootprint is what a placed VM holds.
func PlacedFootprint(p scheduler.Placement) Footprint {
	f := Footprint{VMs: 1}
	for _, d := range p.Devices {
		switch d.Kind {
		case gpu.KindPassthrough:
			f.GPUs += 1 + len(d.Group)
		default:
			f.Slices++
		}
		f.Memory += d.Memory
		f.Share += d.Share
	}
	return f
}

// footprints are the needs' footprints worked out so far.
var footprints struct {
	sync.RWMutex
	m map[scheduler.NeedKey]Footprint
}

// NeedFootprint estimates what a need will hold before it is placed, from
// pkg/gpu's tables: exact for MIG profiles and vGPU types, the smallest
// matching board for passthrough, and a lower bound for abstract needs
// (their memory, as slices).
func NeedFootprint(n scheduler.Need) Footprint {
	key := n.MapKey()
	footprints.RLock()
	f, ok := footprints.m[key]
	footprints.RUnlock()
	if ok {
		return f
	}
	f = needFootprint(n)
	footprints.Lock()
	if footprints.m == nil {
		footprints.m = map[scheduler.NeedKey]Footprint{}
	}
	footprints.m[key] = f
	footprints.Unlock()
	return f
}

func needFootprint(n scheduler.Need) Footprint {
	count := max(n.Count, 1)
	f := Footprint{VMs: 1}
	switch n.Kind {
	case gpu.KindMIG:
		// A name may mean two profiles ("1g.10gb" is 1/7 of an 80 GB GPU and
		// 1/4 of a 40 GB one): take the smallest, so that an estimate never
		// refuses what the placement would allow.
		mem, share := uint64(0), 0.0
		for _, m := range gpu.Models() {
			if m.MIG == nil || (n.Model != "" && !m.MatchesName(n.Model)) {
				continue
			}
			if p, ok := m.MIG.Profile(n.Profile); ok {
				sh := max(float64(p.Compute)/float64(m.MIG.Compute), float64(p.Size)/float64(m.MIG.Slices))
				if share == 0 || sh < share {
					share = sh
				}
				if mem == 0 || uint64(p.MemoryGB)*gpu.GiB < mem {
					mem = uint64(p.MemoryGB) * gpu.GiB
				}
			}
		}
		f.Slices, f.Memory, f.Share = count, mem*uint64(count), share*float64(count)
	case gpu.KindVGPU:
		t, err := gpu.ParseVGPUType(n.Type)
		share := 0.0
		if err == nil {
			for _, m := range gpu.Models() {
				if strings.EqualFold(m.Board, t.Board) && m.Memory > 0 {
					share = float64(t.Memory) / float64(m.Memory)
					break
				}
			}
		}
		f.Slices, f.Memory, f.Share = count, t.Memory*uint64(count), share*float64(count)
	case gpu.KindPassthrough:
		mem := n.Memory
		if mem == 0 {
			for _, m := range gpu.Models() {
				if (n.Model == "" || m.MatchesName(n.Model)) && m.Memory > 0 && (mem == 0 || m.Memory < mem) {
					mem = m.Memory
				}
			}
		}
		f.GPUs, f.Memory, f.Share = count, mem*uint64(count), float64(count)
	default:
		big := uint64(0)
		for _, m := range gpu.Models() {
			big = max(big, m.Memory)
		}
		share := 0.0
		if big > 0 {
			share = float64(n.Memory) / float64(big)
		}
		f.Slices, f.Memory, f.Share = count, n.Memory*uint64(count), share*float64(count)
	}
	return f
}

// Record is a stretch of GPU use that has ended (pkg/store's usage records).
type Record struct {
	User  string    `json:"user"`
	Group string    `json:"group,omitempty"`
	Share float64   `json:"share"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Ledger holds ended stretches of use for GPU-hour budgets. The zero Ledger
// is empty and ready.
type Ledger struct {
	byUser  map[string][]Record
	byGroup map[string][]Record
}

// Add records a stretch.
func (l *Ledger) Add(r Record) {
	if !r.End.After(r.Start) || r.Share <= 0 {
		return
	}
	if l.byUser == nil {
		l.byUser, l.byGroup = map[string][]Record{}, map[string][]Record{}
	}
	l.byUser[r.User] = append(l.byUser[r.User], r)
	if r.Group != "" {
		l.byGroup[r.Group] = append(l.byGroup[r.Group], r)
	}
}

// Prune forgets stretches that ended before t (budgets look back a month at
// most).
func (l *Ledger) Prune(t time.Time) {
	for _, m := range []map[string][]Record{l.byUser, l.byGroup} {
		for k, rs := range m {
			kept := rs[:0]
			for _, r := range rs {
				if r.End.After(t) {
					kept = append(kept, r)
				}
			}
			m[k] = kept
		}
	}
}

func overlapHours(aStart, aEnd, bStart, bEnd time.Time) float64 {
	s, e := aStart, aEnd
	if bStart.After(s) {
		s = bStart
	}
	if bEnd.Before(e) {
		e = bEnd
	}
	if !e.After(s) {
		return 0
	}
	return e.Sub(s).Hours()
}

func sumRecords(rs []Record, from, to time.Time) float64 {
	v := 0.0
	for _, r := range rs {
		v += r.Share * overlapHours(r.Start, r.End, from, to)
	}
	return v
}

// period is a calendar budget period.
type period struct {
	name  string // "day", "week", "month"
	limit *float64
	start time.Time
	end   time.Time
}

// periods are the calendar day, week (from Monday) and month around now in
// loc.
func periods(q config.Quota, now time.Time, loc *time.Location) []period {
	if !q.HasBudget() {
		return nil // no budget: no calendar to work out
	}
	if loc == nil {
		loc = time.UTC
	}
	t := now.In(loc)
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
	week := day.AddDate(0, 0, -((int(t.Weekday()) + 6) % 7))
	month := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, loc)
	var out []period
	if q.GPUHoursPerDay != nil {
		out = append(out, period{"daily", q.GPUHoursPerDay, day, day.AddDate(0, 0, 1)})
	}
	if q.GPUHoursPerWeek != nil {
		out = append(out, period{"weekly", q.GPUHoursPerWeek, week, week.AddDate(0, 0, 7)})
	}
	if q.GPUHoursPerMonth != nil {
		out = append(out, period{"monthly", q.GPUHoursPerMonth, month, month.AddDate(0, 1, 0)})
	}
	return out
}

// periodUnit names the calendar unit of a budget period.
var periodUnit = map[string]string{"daily": "day", "weekly": "week", "monthly": "month"}

// periodMax is the most hours of one lease that can fall in one period.
func periodMax(name string, lease time.Duration) float64 {
	limit := map[string]time.Duration{"daily": 24 * time.Hour, "weekly": 7 * 24 * time.Hour, "monthly": 28 * 24 * time.Hour}[name]
	return min(lease, limit).Hours()
}

// tally is what one user or group holds now.
type tally struct {
	Footprint
	running []*scheduler.Running // for budgets
	started []startedVM
}

type startedVM struct {
	share      float64
	start, end time.Time
}

// checkQuota checks a request against one principal's limits: refuse when
// the request alone is over a limit, else a reason to wait when what the
// principal holds plus the request is.
func checkQuota(who string, q config.Quota, held *tally, ledger []Record, need Footprint, r *scheduler.Request, now time.Time, loc *time.Location) (scheduler.Reason, bool) {
	if why, refuse := quotaNever(who, q, need, r); refuse {
		return why, true
	}
	wait := func(f string, a ...any) (scheduler.Reason, bool) {
		return scheduler.Reason{Code: scheduler.CodeQuota, Detail: who + ": " + fmt.Sprintf(f, a...)}, false
	}
	ps := periods(q, now, loc)
	if held == nil {
		held = &tally{}
	}
	switch {
	case q.VMs != nil && held.VMs+need.VMs > *q.VMs:
		return wait("runs %d of %d VMs", held.VMs, *q.VMs)
	case q.Slices != nil && held.Slices+need.Slices > *q.Slices:
		return wait("holds %d of %d slices", held.Slices, *q.Slices)
	case q.GPUs != nil && held.GPUs+need.GPUs > *q.GPUs:
		return wait("holds %d of %d whole GPUs", held.GPUs, *q.GPUs)
	case q.GPUMemory != nil && held.Memory+need.Memory > *q.GPUMemory:
		return wait("holds %s of %s GPU memory", config.FormatSize(held.Memory), config.FormatSize(*q.GPUMemory))
	}
	for _, p := range ps {
		used := sumRecords(ledger, p.start, p.end)
		for _, v := range held.running {
			used += PlacedFootprint(v.Placement).Share * overlapHours(v.Started, v.End, p.start, p.end)
		}
		for _, v := range held.started {
			used += v.share * overlapHours(v.start, v.end, p.start, p.end)
		}
		want := need.Share * overlapHours(now, now.Add(r.Lease), p.start, p.end)
		if used+want > *p.limit+1e-9 {
			return wait("%s budget: %.1f of %g GPU-hours used or planned, this lease needs %.1f more (resets %s)",
				p.name, used, *p.limit, want, p.end.Format("Mon 2 Jan 15:04"))
		}
	}
	return scheduler.Reason{}, false
}

// quotaNever is checkQuota's refusals: the request alone is over one of
// the principal's limits, whatever the time and whatever it holds.
func quotaNever(who string, q config.Quota, need Footprint, r *scheduler.Request) (scheduler.Reason, bool) {
	never := func(f string, a ...any) (scheduler.Reason, bool) {
		return scheduler.Reason{Code: scheduler.CodeQuota, Detail: who + ": " + fmt.Sprintf(f, a...)}, true
	}
	switch {
	case q.VMs != nil && need.VMs > *q.VMs:
		return never("may run %d VMs at once", *q.VMs)
	case q.Slices != nil && need.Slices > *q.Slices:
		return never("asks for %d slices; the limit is %d at once", need.Slices, *q.Slices)
	case q.GPUs != nil && need.GPUs > *q.GPUs:
		return never("asks for %d whole GPUs; the limit is %d at once", need.GPUs, *q.GPUs)
	case q.GPUMemory != nil && need.Memory > *q.GPUMemory:
		return never("asks for %s of GPU memory; the limit is %s at once", config.FormatSize(need.Memory), config.FormatSize(*q.GPUMemory))
	}
	// The budgets' periods, in periods' order; their calendar does not
	// matter here.
	for _, p := range periods(q, time.Time{}, time.UTC) {
		if want := need.Share * periodMax(p.name, r.Lease); want > *p.limit+1e-9 {
			return never("the lease needs %.1f GPU-hours in one %s period; the %s budget is %g", want, periodUnit[p.name], p.name, *p.limit)
		}
	}
	return scheduler.Reason{}, false
}

// BudgetPeriod is the calendar period of one GPU-hour budget around a
// time: Unit is day, week or month.
type BudgetPeriod struct {
	Unit       string
	Limit      float64
	Start, End time.Time
}

// BudgetPeriods are the periods q's GPU-hour budgets count in around now,
// in loc (nil: UTC): the ones the quota check uses.
func BudgetPeriods(q config.Quota, now time.Time, loc *time.Location) []BudgetPeriod {
	var out []BudgetPeriod
	for _, p := range periods(q, now, loc) {
		out = append(out, BudgetPeriod{Unit: periodUnit[p.name], Limit: *p.limit, Start: p.start, End: p.end})
	}
	return out
}
