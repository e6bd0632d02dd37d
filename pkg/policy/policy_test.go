package policy

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the tests use Europe/Paris

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

var paris, _ = time.LoadLocation("Europe/Paris")

// monday is Monday 2 March 2026, 10:00 in Paris.
var monday = time.Date(2026, 3, 2, 10, 0, 0, 0, paris)

func parse(t testing.TB, src string) *config.Config {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "test.hcl", Data: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return cfg
}

func h100s(t testing.TB, n int) *scheduler.Inventory {
	t.Helper()
	h := scheduler.HostSpec{Name: "a"}
	for i := 0; i < n; i++ {
		h.GPUs = append(h.GPUs, scheduler.GPUSpec{Address: fmt.Sprintf("g%d", i), Model: "H100 PCIe 80GB", Allow: gpu.ModeMIG})
	}
	inv, err := scheduler.NewInventory([]scheduler.HostSpec{h}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func migReq(id, user, prof string, lease time.Duration, at time.Time) scheduler.Request {
	return scheduler.Request{ID: id, User: user, Need: scheduler.Need{Kind: gpu.KindMIG, Profile: prof, Count: 1}, Lease: lease, Submitted: at}
}

func ids(rs []scheduler.Request) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.ID)
	}
	return strings.Join(s, ",")
}

func TestOrders(t *testing.T) {
	q := []scheduler.Request{
		{ID: "a", User: "heavy", Priority: 1, Lease: 8 * time.Hour, Submitted: monday},
		{ID: "b", User: "light", Priority: 5, Lease: 1 * time.Hour, Submitted: monday.Add(time.Minute)},
		{ID: "c", User: "heavy", Priority: 5, Lease: 2 * time.Hour, Submitted: monday.Add(2 * time.Minute)},
		{ID: "d", User: "new", Priority: 0, Lease: 4 * time.Hour, Submitted: monday.Add(3 * time.Minute)},
	}
	usage := NewUsage(7 * 24 * time.Hour)
	usage.Add("heavy", 100, monday.Add(-time.Hour))
	usage.Add("light", 10, monday.Add(-time.Hour))
	cases := map[string]string{
		config.OrderFIFO:      "a,b,c,d",
		config.OrderPriority:  "b,c,a,d",
		config.OrderSJF:       "b,c,d,a",
		config.OrderFairshare: "d,b,a,c", // new (no usage), light, then heavy (older first: age)
	}
	for order, want := range cases {
		e, err := New(Config{Order: order, Usage: usage})
		if err != nil {
			t.Fatal(err)
		}
		got := ids(e.Begin(monday.Add(5*time.Minute), nil).Order(q))
		if got != want {
			t.Errorf("%s: %s, want %s", order, got, want)
		}
	}
	if _, err := New(Config{Order: "lottery"}); err == nil {
		t.Error("unknown order accepted")
	}
}

func TestUsageDecay(t *testing.T) {
	u := NewUsage(24 * time.Hour)
	u.Add("x", 8, monday)
	if got := u.At("x", monday.Add(24*time.Hour)); math.Abs(got-4) > 1e-9 {
		t.Errorf("after one half-life: %g, want 4", got)
	}
	// Charging a stretch integrates the decay: an hour of a whole GPU that
	// ended a half-life ago is worth about half an hour.
	u2 := NewUsage(24 * time.Hour)
	u2.Charge("y", 1, monday, monday.Add(time.Hour))
	if got := u2.At("y", monday.Add(25*time.Hour)); math.Abs(got-0.5) > 0.01 {
		t.Errorf("charged hour after a half-life: %g", got)
	}
	// Fair-share factors: 1 without usage, 0.5 at exactly one's share.
	f := fairshareFactors(map[string]float64{"a": 5, "b": 5}, []string{"a", "b", "c"})
	if f["c"] != 1 || f["a"] >= 1 || f["a"] != f["b"] {
		t.Errorf("factors %v", f)
	}
	f = fairshareFactors(map[string]float64{"a": 1, "b": 1}, []string{"a", "b"})
	if math.Abs(f["a"]-0.5) > 1e-12 {
		t.Errorf("exactly one's share: %g", f["a"])
	}
}

const quotaPolicy = `
policy {
  timezone = "Europe/Paris"
  defaults {
    quota {
      vms = 0
    }
  }
  group "students" {
    preemptible = true
    quota {
      vms                = 2
      slices             = 2
      gpu_memory         = "40GiB"
      gpu_hours_per_week = 10
    }
  }
  group "staff" {
    priority = 100
  }
}
`

func TestQuotas(t *testing.T) {
	cfg := parse(t, quotaPolicy)
	ledger := &Ledger{}
	e, _ := New(Config{Policy: &cfg.Policy, Ledger: ledger})
	student := func(id, prof string, lease time.Duration) *scheduler.Request {
		r := migReq(id, "sam", prof, lease, monday)
		r.Group = "students"
		return &r
	}
	s := e.Begin(monday, nil)
	check := func(r *scheduler.Request, code scheduler.Code, refuse bool) {
		t.Helper()
		why, ref := s.Admit(r)
		if why.Code != code || ref != refuse {
			t.Errorf("%s: %v refuse=%v, want %s refuse=%v", r.ID, why, ref, code, refuse)
		}
	}
	outsider := migReq("o", "olga", "1g.10gb", time.Hour, monday)
	check(&outsider, scheduler.CodeQuota, true)                                // defaults: vms = 0
	check(student("big", "7g.80gb", time.Hour), scheduler.CodeQuota, true)     // 80 GB > 40 GiB
	check(student("long", "1g.10gb", 80*time.Hour), scheduler.CodeQuota, true) // 80h × 1/7 > 10 GPU-hours
	ok := student("ok", "3g.40gb", 4*time.Hour)
	check(ok, "", false)
	// Two 3g.40gb: the second waits for memory (80 > 40 GiB)…
	s.Started(ok, scheduler.Placement{Host: "a", Devices: []scheduler.Device{{Kind: gpu.KindMIG, Memory: 40 << 30, Share: 0.5}}}, monday.Add(4*time.Hour))
	check(student("second", "3g.40gb", time.Hour), scheduler.CodeQuota, false)
	// …and the weekly budget counts what runs: 4h × 0.5 = 2 used; 17h more
	// of a 1/2 share is over 10.
	ledger.Add(Record{User: "sam", Group: "students", Share: 1, Start: monday.Add(-9 * time.Hour), End: monday.Add(-2 * time.Hour)})
	s = e.Begin(monday, []scheduler.Running{{Request: *ok, Placement: scheduler.Placement{Devices: []scheduler.Device{{Kind: gpu.KindMIG, Memory: 20 << 30, Share: 0.25}}}, Started: monday, End: monday.Add(4 * time.Hour)}})
	// used: 7 (ledger) + 1 (running: 4h × 0.25) = 8; 1g.10gb for 15h = 2.14 → over.
	check(student("budget", "1g.10gb", 15*time.Hour), scheduler.CodeQuota, false)
	check(student("fits", "1g.10gb", 7*time.Hour), "", false)
	// Group totals.
	e2, _ := New(Config{Policy: &cfg.Policy, GroupTotals: map[string]config.Quota{"students": {VMs: ptr(1)}}})
	s2 := e2.Begin(monday, []scheduler.Running{{Request: scheduler.Request{ID: "x", User: "other", Group: "students"}, Placement: scheduler.Placement{Devices: []scheduler.Device{{Kind: gpu.KindMIG}}}, Started: monday, End: monday.Add(time.Hour)}})
	r := student("grp", "1g.10gb", time.Hour)
	if why, refuse := s2.Admit(r); why.Code != scheduler.CodeQuota || refuse || !strings.Contains(why.Detail, "group students") {
		t.Errorf("group total: %v %v", why, refuse)
	}
}

// VMs without a GPU count against the quotas as one VM each: for VMs
// asked for without a GPU (AdmitWithoutGPU) and with one (Admit), for the
// user and for group totals; nothing else of theirs counts.
func TestQuotasCountVMsWithoutGPU(t *testing.T) {
	cfg := parse(t, quotaPolicy)
	plain := func(id, user string) scheduler.Request {
		return scheduler.Request{ID: id, User: user, Group: "students", Groups: []string{"students"}, Lease: time.Hour, Submitted: monday}
	}
	tests := []struct {
		name    string
		held    []scheduler.Request // live VMs without a GPU
		totals  map[string]config.Quota
		gpu     bool // the VM asked for has a GPU
		code    scheduler.Code
		refuse  bool
		details string
	}{
		{"first", nil, nil, false, "", false, ""},
		{"second", []scheduler.Request{plain("a", "sam")}, nil, false, "", false, ""},
		{"third waits", []scheduler.Request{plain("a", "sam"), plain("b", "sam")}, nil, false, scheduler.CodeQuota, false, "user sam: runs 2 of 2 VMs"},
		{"a GPU VM waits for them too", []scheduler.Request{plain("a", "sam"), plain("b", "sam")}, nil, true, scheduler.CodeQuota, false, "user sam: runs 2 of 2 VMs"},
		{"others' do not count", []scheduler.Request{plain("a", "tom"), plain("b", "tom")}, nil, false, "", false, ""},
		{"group total", []scheduler.Request{plain("a", "tom")}, map[string]config.Quota{"students": {VMs: ptr(1)}}, false, scheduler.CodeQuota, false, "group students"},
		{"no slice, memory or hours counted", []scheduler.Request{plain("a", "sam")}, map[string]config.Quota{"students": {Slices: ptr(0), GPUMemory: ptr(uint64(0))}}, false, "", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(Config{Policy: &cfg.Policy, GroupTotals: tc.totals})
			if err != nil {
				t.Fatal(err)
			}
			e.SetWithoutGPU(tc.held)
			var why scheduler.Reason
			var refuse bool
			if tc.gpu {
				r := migReq("new", "sam", "1g.10gb", time.Hour, monday)
				r.Group, r.Groups = "students", []string{"students"}
				why, refuse = e.Begin(monday, nil).Admit(&r)
			} else {
				r := plain("new", "sam")
				why, refuse = e.AdmitWithoutGPU(monday, nil, &r)
			}
			if why.Code != tc.code || refuse != tc.refuse || !strings.Contains(why.Detail, tc.details) {
				t.Errorf("%v refuse=%v, want %q %v %q", why, refuse, tc.code, tc.refuse, tc.details)
			}
		})
	}
	// One the round starts counts for the next.
	e, _ := New(Config{Policy: &cfg.Policy})
	e.AddWithoutGPU(plain("a", "sam"))
	e.AddWithoutGPU(plain("b", "sam"))
	r := plain("c", "sam")
	if why, _ := e.AdmitWithoutGPU(monday, nil, &r); why.Code != scheduler.CodeQuota {
		t.Errorf("after two started: %v", why)
	}
	// vms = 0 refuses one at once.
	o := plain("o", "olga")
	o.Group, o.Groups = "", nil
	if why, refuse := e.AdmitWithoutGPU(monday, nil, &o); why.Code != scheduler.CodeQuota || !refuse {
		t.Errorf("vms = 0: %v %v", why, refuse)
	}
}

func ptr[T any](v T) *T { return &v }

const windowPolicy = `
policy {
  timezone = "Europe/Paris"
  window "day" {
    days        = "mon-fri"
    hours       = "09:00-18:00"
    classes     = ["interactive"]
    at_end      = "stop"
    warn_before = "15m"
  }
  window "night" {
    days    = "mon-fri"
    hours   = "18:00-09:00"
    classes = ["batch", "interactive"]
  }
}
`

func TestWindows(t *testing.T) {
	cfg := parse(t, windowPolicy)
	e, _ := New(Config{Policy: &cfg.Policy})
	batch := func(at time.Time, lease time.Duration, preemptible bool) (scheduler.Reason, bool) {
		r := migReq("b", "u", "1g.10gb", lease, at)
		r.Class, r.Preemptible = config.ClassBatch, preemptible
		return e.Begin(at, nil).Admit(&r)
	}
	if why, refuse := batch(monday, time.Hour, false); why.Code != scheduler.CodeWindow || refuse {
		t.Errorf("batch at 10:00 on a Monday: %v %v", why, refuse)
	}
	evening := time.Date(2026, 3, 2, 19, 0, 0, 0, paris)
	if why, _ := batch(evening, 10*time.Hour, false); !why.OK() {
		t.Errorf("batch 19:00 for 10h (to 05:00): %v", why)
	}
	if why, refuse := batch(evening, 16*time.Hour, false); why.Code != scheduler.CodeWindow || refuse {
		t.Errorf("batch 19:00 for 16h runs into the day: %v %v", why, refuse)
	}
	if why, _ := batch(evening, 16*time.Hour, true); !why.OK() {
		t.Errorf("preemptible batch may run into the day: %v", why)
	}
	friday := time.Date(2026, 3, 6, 19, 0, 0, 0, paris)
	if why, _ := batch(friday, 60*time.Hour, false); !why.OK() {
		t.Errorf("batch over the weekend: %v", why)
	}
	if why, refuse := batch(friday, 100*time.Hour, false); !refuse || why.Code != scheduler.CodeWindow {
		t.Errorf("batch longer than the weekend: %v %v", why, refuse)
	}
	// At the day's end: VMs started in it are warned 15 min before, then stopped.
	run := []scheduler.Running{
		{Request: scheduler.Request{ID: "in-day"}, Started: monday, End: monday.Add(12 * time.Hour)},
		{Request: scheduler.Request{ID: "short"}, Started: monday, End: monday.Add(time.Hour)},
		{Request: scheduler.Request{ID: "night"}, Started: evening, End: evening.Add(20 * time.Hour)},
	}
	at := func(h, m int) time.Time { return time.Date(2026, 3, 2, h, m, 0, 0, paris) }
	if a := e.Begin(at(17, 40), run).Actions(run); len(a) != 0 {
		t.Errorf("17:40: %+v", a)
	}
	a := e.Begin(at(17, 50), run).Actions(run)
	if len(a) != 1 || a[0].ID != "in-day" || a[0].Kind != scheduler.ActionWarn || !a[0].At.Equal(at(18, 0)) {
		t.Errorf("17:50: %+v", a)
	}
	a = e.Begin(at(18, 0), run).Actions(run)
	if len(a) != 1 || a[0].Kind != scheduler.ActionStop {
		t.Errorf("18:00: %+v", a)
	}
	// The lease may not be extended past the window that stops it.
	vm := run[0]
	vm.End = at(17, 0)
	if err := e.Extend(vm, at(19, 0), nil); err == nil || !strings.Contains(err.Error(), "stops it") {
		t.Errorf("extension past the window's end: %v", err)
	}
}

func TestWindowsDST(t *testing.T) {
	// Paris moves to summer time on Sunday 29 March 2026: the day window
	// still opens at 09:00 local time on Monday 30 March.
	cfg := parse(t, windowPolicy)
	w := NewWindows(&cfg.Policy)
	st, ok := w.At(time.Date(2026, 3, 30, 9, 30, 0, 0, paris))
	if !ok || st.Window.Name != "day" || st.Start.In(paris).Hour() != 9 || st.End.In(paris).Hour() != 18 {
		t.Errorf("stretch %+v", st)
	}
}

func TestBookings(t *testing.T) {
	cfg := parse(t, `
policy {
  timezone = "Europe/Paris"
  group "ml101" {}
  group "staff" {}
  reservations {
    groups     = ["staff"]
    max_ahead  = "30d"
    max_length = "4h"
    max_vms    = 21
    max_active = 2
  }
}
`)
	rules := cfg.Policy.Reservations
	inv := h100s(t, 2)
	tuesday := time.Date(2026, 3, 3, 14, 0, 0, 0, paris)
	lab := Booking{ID: "lab", Owner: Owner{OwnerGroup, "staff"}, Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, VMs: 2,
		Start: tuesday, End: tuesday.Add(2 * time.Hour), Repeat: Recurrence{Freq: Weekly, Days: []time.Weekday{time.Tuesday}, Until: tuesday.AddDate(0, 0, 28)}}
	opts := BookOptions{Now: monday, Rules: rules, Location: paris, Inventory: inv}
	b, err := Book(lab, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Pinned) != 1 || len(b.Pinned[0].Devices) != 2 {
		t.Fatalf("pinned %+v", b.Pinned)
	}
	occ := b.Occurrences(monday, monday.AddDate(0, 2, 0), paris)
	if len(occ) != 4 {
		t.Errorf("%d occurrences, want 4", len(occ))
	}
	// The Tuesday after the DST change is still at 14:00 local.
	if got := occ[len(occ)-1].Start.In(paris); got.Hour() != 14 || got.Day() != 24 {
		t.Errorf("last occurrence %v", got)
	}

	bad := map[string]func(b *Booking, o *BookOptions){
		"starts in the past":  func(b *Booking, o *BookOptions) { b.Start, b.End = monday.Add(-time.Hour), monday.Add(time.Hour) },
		"before it starts":    func(b *Booking, o *BookOptions) { b.End = b.Start.Add(-time.Hour) },
		"names Tuesday twice": func(b *Booking, o *BookOptions) { b.Repeat.Days = []time.Weekday{time.Tuesday, time.Tuesday} },
		"overlap": func(b *Booking, o *BookOptions) {
			b.Repeat = Recurrence{Freq: Daily, Until: b.Until()}
			b.End = b.Start.Add(25 * time.Hour)
		},
		"1 to 1000 VMs": func(b *Booking, o *BookOptions) { b.VMs = 5000 },
		"count":         func(b *Booking, o *BookOptions) { b.Need.Count = -3 },
		"may not book":  func(b *Booking, o *BookOptions) { b.Owner = Owner{OwnerGroup, "ml101"} },
		"longest is 4h": func(b *Booking, o *BookOptions) { b.End = b.Start.Add(5 * time.Hour) },
		"ahead": func(b *Booking, o *BookOptions) {
			b.Start, b.End, b.Repeat.Until = b.Start.AddDate(0, 0, 35), b.End.AddDate(0, 0, 35), b.Start.AddDate(0, 0, 60)
		},
		"needs an end date":         func(b *Booking, o *BookOptions) { b.Repeat.Until = time.Time{} },
		"cannot be honoured":        func(b *Booking, o *BookOptions) { b.VMs = 5 },
		"no GPU here can ever give": func(b *Booking, o *BookOptions) { b.Need.Profile = "1g.5gb" },
		"nobody may book":           func(b *Booking, o *BookOptions) { o.Rules = nil },
		"exists":                    func(b *Booking, o *BookOptions) { o.Existing = []*Booking{{ID: "lab"}} },
	}
	for want, mutate := range bad {
		t.Run(want, func(t *testing.T) {
			b, o := lab, opts
			b.Repeat.Days = append([]time.Weekday(nil), lab.Repeat.Days...)
			mutate(&b, &o)
			if _, err := Book(b, o); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want an error with %q", err, want)
			}
		})
	}

	// A second booking overlapping the first cannot take its GPU: 2 more
	// 3g.40gb fit on the other GPU, a third does not.
	other := lab
	other.ID, other.VMs = "other", 2
	b2, err := Book(other, BookOptions{Now: monday, Rules: rules, Location: paris, Inventory: inv, Existing: []*Booking{b}})
	if err != nil {
		t.Fatal(err)
	}
	if b2.Pinned[0].Devices[0].GPU == b.Pinned[0].Devices[0].GPU {
		t.Errorf("second booking on the first's GPU: %+v / %+v", b2.Pinned, b.Pinned)
	}
	other.ID, other.VMs = "third", 1
	if _, err := Book(other, BookOptions{Now: monday, Rules: rules, Location: paris, Inventory: inv, Existing: []*Booking{b, b2}}); err == nil {
		t.Error("third booking fit on a full cluster")
	}
	// Max active: the owner holds two already.
	other.Start, other.End, other.Repeat = tuesday.AddDate(0, 0, 1), tuesday.AddDate(0, 0, 1).Add(time.Hour), Recurrence{}
	if _, err := Book(other, BookOptions{Now: monday, Rules: rules, Location: paris, Inventory: inv, Existing: []*Booking{b, b2}}); err == nil || !strings.Contains(err.Error(), "most is 2") {
		t.Errorf("max_active: %v", err)
	}
}

func (b Booking) Until() time.Time { return b.Repeat.Until }

// TestBookingInCycle: a course books the lab; from Tuesday 14:00 its members
// run on the booked slices; others' VMs that would run into the lab do not
// start on them.
func TestBookingInCycle(t *testing.T) {
	inv := h100s(t, 1)
	tuesday := time.Date(2026, 3, 3, 14, 0, 0, 0, paris)
	b, err := Book(Booking{ID: "lab", Owner: Owner{OwnerGroup, "ml101"}, Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, VMs: 1,
		Start: tuesday, End: tuesday.Add(2 * time.Hour)}, BookOptions{Now: monday, Admin: true, Location: paris, Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := New(Config{Bookings: []*Booking{b}})
	booked := b.Pinned[0].Devices[0].Start
	// Tuesday 12:00: an outsider's 3h VM would run into the lab: it gets
	// the other half of the GPU; a second one waits for the reservation.
	noon := tuesday.Add(-2 * time.Hour)
	q := []scheduler.Request{migReq("x1", "olga", "3g.40gb", 3*time.Hour, noon), migReq("x2", "olga", "3g.40gb", 3*time.Hour, noon.Add(time.Second))}
	d := scheduler.Cycle(noon, inv, q, nil, e, scheduler.Options{Reserve: 1})
	if len(d.Start) != 1 || d.Start[0].Placement.Devices[0].Start == booked {
		t.Fatalf("noon: %+v", d.Start)
	}
	if w := d.Waiting["x2"]; w.Reason.Code != scheduler.CodeReservation {
		t.Errorf("x2: %+v", w)
	}
	// A 1h VM ends before the lab: it may use the booked slices now.
	short := migReq("x3", "olga", "3g.40gb", time.Hour, noon)
	d = scheduler.Cycle(noon, inv.Clone(), []scheduler.Request{short}, nil, e, scheduler.Options{Reserve: 1})
	if len(d.Start) != 1 {
		t.Errorf("short: %+v", d)
	}
	// 14:00: a student starts on the booked slice, and their lease is cut
	// to the lab's end.
	st := migReq("s1", "sam", "3g.40gb", 8*time.Hour, tuesday)
	st.Groups = []string{"ml101"}
	d = scheduler.Cycle(tuesday, inv, []scheduler.Request{st}, nil, e, scheduler.Options{Reserve: 1})
	if len(d.Start) != 1 || d.Start[0].Booking != "lab" || !d.Start[0].End.Equal(tuesday.Add(2*time.Hour)) || d.Start[0].Placement.Devices[0].Start != booked {
		t.Errorf("student: %+v", d.Start)
	}
}

func TestExtend(t *testing.T) {
	cfg := parse(t, `
profile "p" {
  vcpus  = 1
  memory = "1GiB"
  gpu {
    kind    = "mig"
    profile = "3g.40gb"
  }
  boot {
    kernel = "/boot/vmlinuz"
  }
  lease {
    default = "2h"
    max     = "6h"
  }
}
`)
	inv := h100s(t, 1)
	r := migReq("vm", "u", "3g.40gb", 2*time.Hour, monday)
	r.Profile = "p"
	p := scheduler.Placement{Host: "a", Devices: []scheduler.Device{{GPU: "g0", Kind: gpu.KindMIG, Profile: "3g.40gb", Start: 4}}}
	if err := inv.Allocate("vm", p, monday.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	vm := scheduler.Running{Request: r, Placement: p, Started: monday, End: monday.Add(2 * time.Hour)}
	e, _ := New(Config{Profiles: cfg.Profiles})
	if err := e.Extend(vm, monday.Add(4*time.Hour), inv); err != nil {
		t.Errorf("within max: %v", err)
	}
	if err := e.Extend(vm, monday.Add(7*time.Hour), inv); err == nil || !strings.Contains(err.Error(), "at most 6h") {
		t.Errorf("past max: %v", err)
	}
	// A booking of the whole GPU from +3h forbids running past it.
	b, err := Book(Booking{ID: "all", Owner: Owner{OwnerUser, "boss"}, Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb"}, VMs: 2,
		Start: monday.Add(3 * time.Hour), End: monday.Add(5 * time.Hour)}, BookOptions{Now: monday, Admin: true, Inventory: inv, Running: []scheduler.Running{vm}})
	if err != nil {
		t.Fatal(err)
	}
	e.SetBookings([]*Booking{b})
	if err := e.Extend(vm, monday.Add(4*time.Hour), inv); err == nil || !strings.Contains(err.Error(), "held for someone else") {
		t.Errorf("into a booking: %v", err)
	}
	if err := e.Extend(vm, monday.Add(3*time.Hour), inv); err != nil {
		t.Errorf("up to the booking: %v", err)
	}
}

func TestIdleStop(t *testing.T) {
	at := func(m int) time.Time { return monday.Add(time.Duration(m) * time.Minute) }
	var busyThenIdle []Sample
	for m := 0; m <= 90; m += 5 {
		u := 80.0
		if m >= 30 {
			u = 1
		}
		busyThenIdle = append(busyThenIdle, Sample{at(m), u})
	}
	cases := []struct {
		name    string
		samples []Sample
		now     int
		stop    bool
		since   int
	}{
		{"idle an hour", busyThenIdle, 90, true, 30},
		{"idle 45 min", busyThenIdle, 75 - 0, false, 30},
		{"no data", nil, 90, false, -1},
		{"stale data", busyThenIdle[:10], 90, false, -1},
		{"gap in data", append(append([]Sample{}, busyThenIdle[:8]...), busyThenIdle[15:]...), 90, false, 75},
	}
	for _, c := range cases {
		s := c.samples
		if c.name == "idle 45 min" {
			s = busyThenIdle[:16]
		}
		stop, since := IdleStop(at(c.now), s, time.Hour, 5, 10*time.Minute)
		if stop != c.stop || (c.since >= 0 && !since.Equal(at(c.since))) {
			t.Errorf("%s: stop=%v since=%v, want %v since %v", c.name, stop, since, c.stop, at(c.since))
		}
	}
}

func TestFillLabConfig(t *testing.T) {
	cfg, diags := config.Load("../../configs/lab")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, tc := range []struct {
		user, group, profile string
		check                func(r scheduler.Request) bool
	}{
		{"sam", "students", "student", func(r scheduler.Request) bool {
			return r.Need.Kind == gpu.KindMIG && r.Need.Profile == "1g.5gb" && r.Preemptible && r.Class == config.ClassInteractive
		}},
		{"tom", "staff", "staff", func(r scheduler.Request) bool { return r.Priority == 150 && !r.Preemptible }},
		{"tom", "staff", "no-such-profile", func(r scheduler.Request) bool { return r.Need.Kind == "" && r.Need.Count == 0 && r.Class == "" }},
	} {
		r := scheduler.Request{ID: "1", User: tc.user, Groups: []string{tc.group}, Profile: tc.profile}
		Fill(cfg, &r)
		if !tc.check(r) {
			t.Errorf("%s/%s: %+v", tc.user, tc.profile, r)
		}
	}
}

func TestRequestOf(t *testing.T) {
	cfg, diags := config.Load("../../configs/lab")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, tc := range []struct {
		name  string
		hours int
		lease time.Duration
	}{
		{"no hours count as one", 0, time.Hour},
		{"negative hours count as one", -3, time.Hour},
		{"eight hours", 8, 8 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := RequestOf(cfg, "vm-1", "sam", "students", []string{"students"}, "student", tc.hours, monday)
			if r.ID != "vm-1" || r.User != "sam" || r.Group != "students" || r.Profile != "student" || !r.Submitted.Equal(monday) ||
				r.Lease != tc.lease || r.Need.Kind != gpu.KindMIG || !r.Preemptible {
				t.Errorf("%+v, want lease %s and the student profile's need filled", r, tc.lease)
			}
		})
	}
}

func TestRRule(t *testing.T) {
	r, err := ParseRRule("FREQ=WEEKLY;BYDAY=TU,TH", nil)
	if err != nil || r.Freq != Weekly || len(r.Days) != 2 || r.RRule() != "FREQ=WEEKLY;BYDAY=TU,TH" {
		t.Errorf("%+v %v", r, err)
	}
	for _, bad := range []string{"FREQ=HOURLY", "BYDAY=XX", "FREQ=DAILY;BYDAY=MO", "FREQ=WEEKLY;COUNT=3", "nonsense"} {
		if _, err := ParseRRule(bad, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
