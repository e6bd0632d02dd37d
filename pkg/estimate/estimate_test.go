package estimate

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// passthroughHost is one host of n whole L40S GPUs.
func passthroughHost(n int) []scheduler.HostSpec {
	h := scheduler.HostSpec{Name: "h"}
	for i := 0; i < n; i++ {
		h.GPUs = append(h.GPUs, scheduler.GPUSpec{Address: "0000:0" + string(rune('1'+i)) + ":00.0", Model: "L40S", Allow: gpu.ModePassthrough, Mode: gpu.ModePassthrough, IOMMUGroup: string(rune('a' + i))})
	}
	return []scheduler.HostSpec{h}
}

func whole(id string, hours int, at time.Time) scheduler.Request {
	return scheduler.Request{ID: id, User: "u-" + id, Need: scheduler.Need{Kind: gpu.KindPassthrough, Count: 1}, Lease: time.Duration(hours) * time.Hour, Submitted: at}
}

// state builds a State of hosts whose running VMs (id → hours left) hold
// a whole GPU each, in order, and the queue.
func state(t *testing.T, hosts []scheduler.HostSpec, running []scheduler.Request, left []time.Duration, queue []scheduler.Request, order string) State {
	t.Helper()
	inv, err := scheduler.NewInventory(hosts, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(policy.Config{Order: order})
	if err != nil {
		t.Fatal(err)
	}
	s := State{Now: t0, Inventory: inv, Queue: queue, Policy: eng, Options: scheduler.DefaultOptions(policy.DefaultNotice, policy.DefaultMinRuntime)}
	for i, r := range running {
		p, why := inv.Place(r.Need, scheduler.PlaceOptions{Strategy: scheduler.Pack})
		if !why.OK() {
			t.Fatalf("running %s does not fit: %s", r.ID, why)
		}
		end := time.Time{}
		if left[i] > 0 {
			end = t0.Add(left[i])
		}
		if err := inv.Allocate(r.ID, p, end); err != nil {
			t.Fatal(err)
		}
		s.Running = append(s.Running, scheduler.Running{Request: r, Placement: p, Started: t0.Add(-time.Hour), End: end})
	}
	return s
}

func TestQueue(t *testing.T) {
	never := func(*scheduler.Running) bool { return false }
	type want struct {
		at        time.Duration // from t0; -1: unknown
		uncertain bool
		reason    string // a part of the reason
	}
	cases := []struct {
		name       string
		gpus       int
		running    []scheduler.Request
		left       []time.Duration
		queue      []scheduler.Request
		order      string
		extendable func(*scheduler.Running) bool
		overtake   string
		notBefore  map[string]time.Time
		rank       map[string]int
		want       map[string]want
	}{
		{
			name: "a free GPU: next round", gpus: 2,
			queue: []scheduler.Request{whole("q1", 2, t0)},
			want:  map[string]want{"q1": {0, false, "next scheduling round"}},
		},
		{
			name: "waits for the first lease end", gpus: 2,
			running: []scheduler.Request{whole("r1", 4, t0), whole("r2", 4, t0)}, left: []time.Duration{90 * time.Minute, 3 * time.Hour},
			queue:      []scheduler.Request{whole("q1", 2, t0)},
			extendable: never,
			want:       map[string]want{"q1": {90 * time.Minute, false, "1 running VM's lease ends"}},
		},
		{
			name: "the queue in order: the second waits for the first's lease too", gpus: 1,
			running: []scheduler.Request{whole("r1", 4, t0)}, left: []time.Duration{time.Hour},
			queue:      []scheduler.Request{whole("q2", 3, t0.Add(time.Minute)), whole("q1", 2, t0)},
			extendable: never,
			want: map[string]want{
				"q1": {time.Hour, false, "room is held for it"},
				// Room is held for the first only: a later request may
				// take what q2 waits for.
				"q2": {3 * time.Hour, true, WhyBackfill},
			},
		},
		{
			name: "leases that may be extended make it uncertain", gpus: 1,
			running: []scheduler.Request{whole("r1", 4, t0)}, left: []time.Duration{2 * time.Hour},
			queue: []scheduler.Request{whole("q1", 2, t0)},
			want:  map[string]want{"q1": {2 * time.Hour, true, WhyExtended}},
		},
		{
			name: "an order that lets later requests first", gpus: 1,
			running: []scheduler.Request{whole("r1", 4, t0)}, left: []time.Duration{2 * time.Hour},
			queue: []scheduler.Request{whole("q1", 2, t0)}, order: config.OrderPriority, extendable: never,
			overtake: "requests asked later may go first (priority order)",
			want:     map[string]want{"q1": {2 * time.Hour, true, "priority order"}},
		},
		{
			name: "more than a day ahead", gpus: 1,
			running: []scheduler.Request{whole("r1", 40, t0)}, left: []time.Duration{30 * time.Hour},
			queue: []scheduler.Request{whole("q1", 2, t0)}, extendable: never,
			want: map[string]want{"q1": {30 * time.Hour, true, WhyFar}},
		},
		{
			name: "the dispatcher's ranks win over the policy's order", gpus: 1,
			running: []scheduler.Request{whole("r1", 4, t0)}, left: []time.Duration{time.Hour},
			queue:      []scheduler.Request{whole("q1", 2, t0), whole("q2", 3, t0.Add(time.Minute)), whole("q3", 1, t0.Add(2*time.Minute))},
			rank:       map[string]int{"q2": 1, "q1": 2},
			extendable: never,
			want: map[string]want{
				"q2": {time.Hour, false, "1 running VM's lease ends"},
				"q1": {4 * time.Hour, true, "2 running VMs' leases end"},
				"q3": {6 * time.Hour, true, "3 running VMs' leases end"}, // unranked: last
			},
		},
		{
			name: "a start asked for later", gpus: 2,
			queue: []scheduler.Request{whole("q1", 2, t0)}, notBefore: map[string]time.Time{"q1": t0.Add(5 * time.Hour)},
			want: map[string]want{"q1": {5 * time.Hour, true, WhyBackfill + "; when the rules let it start"}},
		},
		{
			name: "a lease with no end: unknown", gpus: 1,
			running: []scheduler.Request{whole("r1", 4, t0)}, left: []time.Duration{0},
			queue: []scheduler.Request{whole("q1", 2, t0)},
			want:  map[string]want{"q1": {-1, false, "no estimate"}},
		},
		{
			name: "nothing here can ever give it", gpus: 1,
			queue: []scheduler.Request{{ID: "q1", User: "u", Need: scheduler.Need{Kind: gpu.KindMIG, Profile: "3g.40gb", Count: 1}, Lease: time.Hour, Submitted: t0}},
			want:  map[string]want{"q1": {-1, false, "no estimate: no GPU here can ever give"}},
		},
		{
			name: "two GPUs at once wait for both", gpus: 2,
			running: []scheduler.Request{whole("r1", 4, t0), whole("r2", 4, t0)}, left: []time.Duration{time.Hour, 2 * time.Hour},
			queue: []scheduler.Request{{ID: "q1", User: "u", Need: scheduler.Need{Kind: gpu.KindPassthrough, Count: 2}, Lease: time.Hour, Submitted: t0}}, extendable: never,
			want: map[string]want{"q1": {2 * time.Hour, false, "2 running VMs' leases end"}},
		},
		{
			name: "one that gives up first has no estimate", gpus: 1,
			running: []scheduler.Request{whole("r1", 4, t0)}, left: []time.Duration{2 * time.Hour},
			queue: []scheduler.Request{func() scheduler.Request { r := whole("q1", 1, t0); r.StartBy = t0.Add(time.Hour); return r }()},
			want:  map[string]want{"q1": {-1, false, "gives up"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := state(t, passthroughHost(c.gpus), c.running, c.left, c.queue, c.order)
			s.Extendable, s.Overtake, s.NotBefore, s.Rank = c.extendable, c.overtake, c.notBefore, c.rank
			before := s.Inventory.Allocations()
			got := Queue(s, Options{})
			if len(got) != len(c.want) {
				t.Fatalf("%d estimates for %d queued: %+v", len(got), len(c.want), got)
			}
			for id, w := range c.want {
				e, ok := got[id]
				if !ok {
					t.Fatalf("no estimate for %s", id)
				}
				if w.at < 0 {
					if e.Known() {
						t.Errorf("%s: estimated %s, want none", id, e.At)
					}
				} else if !e.At.Equal(t0.Add(w.at)) {
					t.Errorf("%s: at %s, want %s (%+v)", id, e.At.Sub(t0), w.at, e)
				}
				if e.Uncertain != w.uncertain {
					t.Errorf("%s: uncertain %v, want %v (%s)", id, e.Uncertain, w.uncertain, e.Reason)
				}
				if !strings.Contains(e.Reason, w.reason) {
					t.Errorf("%s: reason %q lacks %q", id, e.Reason, w.reason)
				}
			}
			if after := s.Inventory.Allocations(); len(after) != len(before) {
				t.Errorf("the inventory given changed: %d allocations, then %d", len(before), len(after))
			}
		})
	}
}

func TestQueueWithoutState(t *testing.T) {
	got := Queue(State{Now: t0, Queue: []scheduler.Request{whole("q1", 1, t0)}}, Options{})
	if e := got["q1"]; e.Known() || !strings.Contains(e.Reason, "not known") {
		t.Errorf("without an inventory: %+v", e)
	}
	if got := Queue(State{Now: t0}, Options{}); len(got) != 0 {
		t.Errorf("an empty queue gave %v", got)
	}
}

func TestNextFree(t *testing.T) {
	never := func(*scheduler.Running) bool { return false }
	s := state(t, passthroughHost(2), []scheduler.Request{whole("r1", 4, t0), whole("r2", 4, t0)}, []time.Duration{time.Hour, 3 * time.Hour},
		[]scheduler.Request{whole("q1", 2, t0.Add(-time.Minute))}, "")
	s.Extendable = never
	// q1 takes r1's GPU at +1h; the next one frees when r2 ends.
	e, now := NextFree(s, whole("x", 1, time.Time{}), Options{})
	if now || !e.At.Equal(t0.Add(3*time.Hour)) {
		t.Errorf("next free %+v (now %v), want +3h", e, now)
	}
	s2 := state(t, passthroughHost(3), []scheduler.Request{whole("r1", 4, t0)}, []time.Duration{time.Hour}, nil, "")
	if _, now := NextFree(s2, whole("x", 1, time.Time{}), Options{}); !now {
		t.Error("a free GPU is not free now")
	}
}

func TestPreemptionIsUncertain(t *testing.T) {
	// A preemptible VM of low priority is stopped (after the notice) for
	// a request of higher priority: the replay assumes it.
	r1 := whole("r1", 8, t0)
	r1.Preemptible, r1.Priority = true, 0
	q := whole("q1", 1, t0)
	q.Priority = 10
	s := state(t, passthroughHost(1), []scheduler.Request{r1}, []time.Duration{6 * time.Hour}, []scheduler.Request{q}, config.OrderPriority)
	s.Running[0].Started = t0.Add(-2 * time.Hour)
	s.Options.Notice, s.Options.MinRuntime = 10*time.Minute, time.Hour
	s.Extendable = func(*scheduler.Running) bool { return false }
	e := Queue(s, Options{})["q1"]
	if !e.At.Equal(t0.Add(10*time.Minute)) || !e.Uncertain || !strings.Contains(e.Reason, WhyPreempted) {
		t.Errorf("preemption: %+v", e)
	}
}

func TestHorizon(t *testing.T) {
	s := state(t, passthroughHost(1), []scheduler.Request{whole("r1", 4, t0)}, []time.Duration{3 * time.Hour}, []scheduler.Request{whole("q1", 1, t0)}, "")
	e := Queue(s, Options{Horizon: 2 * time.Hour})["q1"]
	if e.Known() || !e.NotBefore.Equal(t0.Add(2*time.Hour)) || !strings.Contains(e.Reason, "not started by") {
		t.Errorf("beyond the horizon: %+v", e)
	}
	if e := Queue(s, Options{Horizon: 4 * time.Hour})["q1"]; !e.At.Equal(t0.Add(3 * time.Hour)) {
		t.Errorf("within the horizon: %+v", e)
	}
}

// TestCompleteRanks: the requests the dispatcher has not ranked are ranked
// once, after the ranked ones, in the order the rules give them now, under
// fair share — also when none is ranked yet (a burst onto an empty queue
// before the first round) — so that a replay does not sort the queue again
// each cycle; under an order by the requests' own fields, or rules whose
// order is not known, the ranks are left as they are.
func TestCompleteRanks(t *testing.T) {
	by := func(id, user string, at time.Duration) scheduler.Request {
		r := whole(id, 1, t0.Add(at))
		r.User = user
		return r
	}
	// ann runs a VM: under fair share bob and cy, who run none, go first.
	running := []scheduler.Request{by("r1", "ann", 0)}
	queue := []scheduler.Request{by("a1", "ann", time.Minute), by("b1", "bob", 2*time.Minute), by("a2", "ann", 3*time.Minute), by("c1", "cy", 4*time.Minute)}
	cases := []struct {
		name  string
		order string
		rank  map[string]int
		other bool // rules that do not say their order
		want  map[string]int
	}{
		{name: "fair share, none ranked", order: config.OrderFairshare, want: map[string]int{"b1": 1, "c1": 2, "a1": 3, "a2": 4}},
		{name: "fair share, some ranked", order: config.OrderFairshare, rank: map[string]int{"a2": 5, "a1": 9},
			want: map[string]int{"a2": 5, "a1": 9, "b1": 10, "c1": 11}},
		{name: "fifo, none ranked", order: config.OrderFIFO},
		{name: "fifo, some ranked", order: config.OrderFIFO, rank: map[string]int{"a2": 1}, want: map[string]int{"a2": 1}},
		{name: "rules of unknown order, none ranked", order: config.OrderFairshare, other: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := state(t, passthroughHost(2), running, []time.Duration{time.Hour}, queue, c.order)
			s.Rank = c.rank
			if c.other {
				s.Policy = struct{ scheduler.Policy }{s.Policy}
			}
			got := completeRanks(s).Rank
			if len(got) != len(c.want) || (len(c.want) > 0 && !reflect.DeepEqual(got, c.want)) {
				t.Errorf("ranks %v, want %v", got, c.want)
			}
		})
	}
}
