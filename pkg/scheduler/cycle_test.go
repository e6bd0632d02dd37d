package scheduler

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// fifo is the simplest policy: first come first, everything admitted, no
// bookings.
type fifo struct{ holds []Hold }

func (f fifo) Begin(time.Time, []Running) Session { return f }
func (fifo) Order(q []Request) []Request {
	out := append([]Request(nil), q...)
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Submitted.Equal(out[j].Submitted) {
			return out[i].Submitted.Before(out[j].Submitted)
		}
		return out[i].ID < out[j].ID
	})
	return out
}
func (fifo) Admit(*Request) (Reason, bool) { return Reason{}, false }
func (f fifo) Bookings(r *Request, from, to time.Time) (others, own []Hold) {
	for _, h := range f.holds {
		if h.ID == "own:"+r.User {
			own = append(own, h)
		} else {
			others = append(others, h)
		}
	}
	return others, own
}
func (fifo) Started(*Request, Placement, time.Time) {}
func (fifo) Actions([]Running) []Action             { return nil }

func req(id, profile string, lease time.Duration, at int) Request {
	return Request{ID: id, User: "u" + id, Need: mig(profile), Lease: lease, Submitted: t0.Add(time.Duration(at) * time.Second)}
}

func runningOn(inv *Inventory, id, host, addr, profile string, start int, started, end time.Time, prio int, preemptible bool) Running {
	p := Placement{Host: host, Devices: []Device{{GPU: addr, Kind: gpu.KindMIG, Profile: profile, Start: start}}}
	if err := inv.Allocate(id, p, end); err != nil {
		panic(err)
	}
	return Running{Request: Request{ID: id, User: "r" + id, Need: mig(profile), Priority: prio, Preemptible: preemptible}, Placement: p, Started: started, End: end}
}

func TestEASYBackfill(t *testing.T) {
	setup := func() (*Inventory, []Running, []Request) {
		inv := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG)})
		run := []Running{runningOn(inv, "old", "a", "0000:10:00.0", "3g.40gb", 0, t0.Add(-time.Hour), t0.Add(time.Hour), 0, false)}
		q := []Request{
			req("big", "7g.80gb", 4*time.Hour, 1),
			req("long", "3g.40gb", 3*time.Hour, 2),
			req("short", "3g.40gb", 30*time.Minute, 3),
		}
		return inv, run, q
	}
	inv, run, q := setup()
	d := Cycle(t0, inv, q, run, fifo{}, Options{Reserve: 1})
	if len(d.Start) != 1 || d.Start[0].ID != "short" {
		t.Fatalf("EASY started %+v, want only short (ends before the 7g's start)", d.Start)
	}
	if w := d.Waiting["big"]; w.Reason.Code != CodeNoCapacity || w.Position != 1 || !w.Estimate.Equal(t0.Add(time.Hour)) {
		t.Errorf("big: %+v", w)
	}
	if w := d.Waiting["long"]; w.Reason.Code != CodeHeld || w.Position != 2 {
		t.Errorf("long: %+v", w)
	}
	if len(d.Holds) != 1 || d.Holds[0].ID != "big" {
		t.Errorf("holds %+v", d.Holds)
	}

	inv, run, q = setup()
	d = Cycle(t0, inv, q, run, fifo{}, Options{Reserve: 0})
	if len(d.Start) != 1 || d.Start[0].ID != "long" {
		t.Fatalf("greedy started %+v, want long (first that fits)", d.Start)
	}
}

func TestCycleRefusesNever(t *testing.T) {
	inv := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG)})
	q := []Request{req("x", "1g.5gb", time.Hour, 0), {ID: "bad", Need: Need{Kind: "gpu"}}}
	d := Cycle(t0, inv, q, nil, fifo{}, Options{Reserve: 1})
	if len(d.Refused) != 2 || d.Refused[1].Reason.Code != CodeNever || d.Refused[0].Reason.Code != CodeInvalid {
		t.Errorf("refused %+v", d.Refused)
	}
}

func TestPreemption(t *testing.T) {
	inv := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG)})
	run := []Running{
		runningOn(inv, "young", "a", "0000:10:00.0", "3g.40gb", 0, t0.Add(-5*time.Minute), t0.Add(5*time.Hour), 0, true),
		runningOn(inv, "old", "a", "0000:10:00.0", "3g.40gb", 4, t0.Add(-2*time.Hour), t0.Add(5*time.Hour), 0, true),
	}
	hi := req("vip", "3g.40gb", time.Hour, 0)
	hi.Priority = 100
	o := Options{Reserve: 1, Preempt: true, Notice: 10 * time.Minute, MinRuntime: time.Hour}
	d := Cycle(t0, inv.Clone(), []Request{hi}, run, fifo{}, o)
	if len(d.Preempt) != 1 || d.Preempt[0].ID != "old" || !d.Preempt[0].StopAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("preempt %+v, want old at +10m (young has run under its minimum)", d.Preempt)
	}
	if w := d.Waiting["vip"]; w.Reason.Code != CodePreempting {
		t.Errorf("vip waits %+v", w)
	}
	// A preemptible request, or one of no higher priority, preempts nobody.
	for _, r := range []Request{{ID: "p", Need: mig("3g.40gb"), Lease: time.Hour, Priority: 100, Preemptible: true}, {ID: "q", Need: mig("3g.40gb"), Lease: time.Hour}} {
		if d := Cycle(t0, inv.Clone(), []Request{r}, run, fifo{}, o); len(d.Preempt) != 0 {
			t.Errorf("%s preempted %+v", r.ID, d.Preempt)
		}
	}
	// Next cycle: old is stopping for vip; no second preemption, vip's room
	// is held so that a small request does not take it.
	run[1].Stopping, run[1].PreemptedFor, run[1].End = true, "vip", t0.Add(10*time.Minute)
	small := req("small", "1g.10gb", 2*time.Hour, 5)
	d = Cycle(t0.Add(time.Minute), inv.Clone(), []Request{hi, small}, run, fifo{}, Options{Reserve: 0, Preempt: true, Notice: 10 * time.Minute, MinRuntime: time.Hour})
	if len(d.Preempt) != 0 || len(d.Start) != 0 {
		t.Errorf("second cycle: preempt %+v start %+v", d.Preempt, d.Start)
	}
}

func TestBookingOwnerFirstAndClipped(t *testing.T) {
	inv := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG)})
	lab := Hold{ID: "own:ustudent", Code: CodeReservation, Host: "a", From: t0, To: t0.Add(2 * time.Hour),
		Devices: []Device{{GPU: "0000:10:00.0", Kind: gpu.KindMIG, Profile: "3g.40gb", Start: 0}}}
	pol := fifo{holds: []Hold{lab}}
	other := req("other", "3g.40gb", 8*time.Hour, 0)
	student := req("student", "3g.40gb", 8*time.Hour, 1)
	d := Cycle(t0, inv, []Request{other, student}, nil, pol, Options{Reserve: 1})
	if len(d.Start) != 2 {
		t.Fatalf("starts %+v waiting %+v", d.Start, d.Waiting)
	}
	for _, s := range d.Start {
		switch s.ID {
		case "other":
			if s.Placement.Devices[0].Start != 4 {
				t.Errorf("other took the booked slot: %v", s.Placement)
			}
		case "student":
			if s.Placement.Devices[0].Start != 0 || s.Booking != lab.ID || !s.End.Equal(lab.To) {
				t.Errorf("student: %+v", s)
			}
		}
	}
}

// TestLookahead: a GPU empties; a small request ahead in the queue would
// take it and the 7g behind would wait for hours. With lookahead the 7g,
// the largest blocked request, holds the empty GPU and starts now; the
// small one waits for room elsewhere.
func TestLookahead(t *testing.T) {
	setup := func() (*Inventory, []Running) {
		inv := mustInv(t, []HostSpec{h100Host("a", 2, gpu.ModeMIG)})
		run := []Running{runningOn(inv, "busy", "a", "0000:11:00.0", "7g.80gb", 0, t0.Add(-time.Hour), t0.Add(3*time.Hour), 0, false)}
		return inv, run
	}
	q := []Request{req("small", "1g.10gb", 2*time.Hour, 0), req("big", "7g.80gb", time.Hour, 1)}
	inv, run := setup()
	d := Cycle(t0, inv, q, run, fifo{}, Options{Reserve: 1})
	if len(d.Start) != 1 || d.Start[0].ID != "small" {
		t.Fatalf("EASY: %+v", d.Start)
	}
	inv, run = setup()
	d = Cycle(t0, inv, q, run, fifo{}, Options{Reserve: 1, Lookahead: 4})
	if len(d.Start) != 1 || d.Start[0].ID != "big" {
		t.Fatalf("lookahead: %+v", d.Start)
	}
	if w := d.Waiting["small"]; w.Reason.Code != CodeHeld || w.Position != 1 {
		t.Errorf("small: %+v", w)
	}
}

// With lookahead a hold never lets a request overtake one as large, or
// larger, that is ahead of it: of two 7g.80gb for one empty GPU the first
// asked starts, and a 7g ahead of a held 3g takes the GPU the 3g holds.
func TestLookaheadKeepsOrderOfEqualSizes(t *testing.T) {
	tests := []struct {
		name  string
		queue []Request
		start string
	}{
		{"equal", []Request{req("first", "7g.80gb", time.Hour, 0), req("second", "7g.80gb", time.Hour, 1)}, "first"},
		{"larger ahead", []Request{req("large", "7g.80gb", time.Hour, 0), req("medium", "4g.40gb", time.Hour, 1), req("medium2", "4g.40gb", time.Hour, 2)}, "large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv := mustInv(t, []HostSpec{h100Host("a", 2, gpu.ModeMIG)})
			run := []Running{runningOn(inv, "busy", "a", "0000:11:00.0", "7g.80gb", 0, t0.Add(-time.Hour), t0.Add(3*time.Hour), 0, false)}
			d := Cycle(t0, inv, tc.queue, run, fifo{}, Options{Reserve: 1, Lookahead: 4})
			if len(d.Start) != 1 || d.Start[0].ID != tc.start {
				t.Fatalf("started %+v, want %s", d.Start, tc.start)
			}
			for i, r := range tc.queue[1:] {
				if w := d.Waiting[r.ID]; w.Position != i+1 {
					t.Errorf("%s: %+v", r.ID, w)
				}
			}
		})
	}
}

// CycleReport says whether the planning pass found its Lookahead blocked
// requests before the end of the queue, and how many holds the main pass
// gave without lookahead; its Decision is Cycle's.
func TestCycleReport(t *testing.T) {
	queue := func(n int) []Request {
		var q []Request
		for i := 0; i < n; i++ {
			q = append(q, req(string(rune('a'+i)), "7g.80gb", time.Hour, i))
		}
		return q
	}
	run := func(n int, o Options) (Decision, Report) {
		inv := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG)})
		r := []Running{runningOn(inv, "old", "a", "0000:10:00.0", "3g.40gb", 0, t0.Add(-time.Hour), t0.Add(time.Hour), 0, false)}
		d, rep := CycleReport(t0, inv, queue(n), r, fifo{}, o)
		inv2 := mustInv(t, []HostSpec{h100Host("a", 1, gpu.ModeMIG)})
		r2 := []Running{runningOn(inv2, "old", "a", "0000:10:00.0", "3g.40gb", 0, t0.Add(-time.Hour), t0.Add(time.Hour), 0, false)}
		if d2 := Cycle(t0, inv2, queue(n), r2, fifo{}, o); !reflect.DeepEqual(d, d2) {
			t.Errorf("CycleReport %+v, Cycle %+v", d, d2)
		}
		return d, rep
	}
	look := Options{Reserve: 1, Lookahead: 3}
	if _, rep := run(3, look); !rep.Lookahead {
		t.Errorf("3 blocked of 3, lookahead 3: %+v, want the pass stopped", rep)
	}
	if _, rep := run(2, look); rep.Lookahead {
		t.Errorf("2 blocked, lookahead 3: %+v, want the pass to the end", rep)
	}
	if d, rep := run(3, Options{Reserve: 1}); rep.Reserved != 1 || len(d.Holds) != 1 || rep.Lookahead {
		t.Errorf("EASY: %+v, %d holds; want 1 reserved", rep, len(d.Holds))
	}
}
