package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// estimateEnv is a server with one up host of two whole L40S GPUs, both
// held by running VMs whose leases end in 1h and 3h, and two queued VMs.
type estimateEnv struct {
	s      *Server
	st     Store
	now    time.Time
	queued []string
	run    []string
}

// estimateConfig is a profile of a whole GPU whose lease may grow to
// leaseMax, and one without a GPU.
func estimateConfig(t testing.TB, leaseMax string) *config.Config {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(fmt.Sprintf(`
profile "whole" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    kind = "passthrough"
  }
  lease {
    default = "2h"
    max     = %q
  }
}
profile "seat" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
`, leaseMax))})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return cfg
}

func newEstimateEnv(t testing.TB, leaseMax string) *estimateEnv {
	t.Helper()
	cfg := estimateConfig(t, leaseMax)
	s := testServer(t, &fakeConfig{cfg: cfg})
	ctx := context.Background()
	e := &estimateEnv{s: s, st: s.Store, now: s.Store.Now()}
	// The orchestrator reads what the replay starts from, as its dispatch
	// rounds do: its host's GPUs from its backend, the devices held from
	// the allocations.
	pt := &backend.Mock{InventoryF: func(context.Context) (backend.Inventory, error) {
		inv := backend.Inventory{Backend: "passthrough", Host: "gpu-01"}
		for i := range 2 {
			inv.GPUs = append(inv.GPUs, backend.GPU{Address: estimateGPU(i), Model: "L40S", DeviceID: "10de:26b9", Memory: 48 << 30, Mode: gpu.ModeIdle, IOMMUGroup: fmt.Sprint(i)})
		}
		return inv, nil
	}}
	s.Bookings = orchestrator.New(orchestrator.Config{Store: s.Store.(*store.Store), Backends: fakeBackends{"passthrough": pt},
		Profiles: func() *config.Config { return s.Config.Load() }, Host: "gpu-01", Log: s.log})
	if err := s.Store.CreateUser(ctx, &store.User{Name: "ann", Groups: []string{"artists"}}); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, running bool, left time.Duration) string {
		vm := &store.VM{Name: name, Owner: "ann", Profile: "whole", Hours: 2, Spec: "{}"}
		if _, err := s.Store.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		if running {
			end, host := e.now.Add(left), "gpu-01"
			if _, err := s.Store.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Host: &host, LeaseEnd: &end}); err != nil {
				t.Fatal(err)
			}
		}
		return vm.ID
	}
	e.run = []string{mk("r1", true, time.Hour), mk("r2", true, 3*time.Hour)}
	e.queued = []string{mk("q1", false, 0), mk("q2", false, 0)}
	e.heartbeat(t, e.run...)
	return e
}

func estimateGPU(i int) string { return fmt.Sprintf("0000:%d:00.0", 41+i) }

// heartbeat gives the host's GPUs, in order, to vms ("": free): their
// allocations (what the replay counts), and the host's stored inventory
// with their devices (what the profiles' free counts read).
func (e *estimateEnv) heartbeat(t testing.TB, vms ...string) {
	t.Helper()
	ctx := context.Background()
	st := e.st.(*store.Store)
	live, err := st.ListLiveAllocations(ctx, "gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	holder := map[string]string{}
	for _, a := range live {
		holder[a.GPUAddress] = a.VMID
	}
	inv := gpu.HostInventory{}
	for i := range 2 {
		addr := estimateGPU(i)
		inv.GPUs = append(inv.GPUs, gpu.HostGPU{Address: addr, Model: "L40S", DeviceID: "10de:26b9", Mode: gpu.ModePassthrough, IOMMUGroup: fmt.Sprint(i), Backends: map[string]string{"passthrough": ""}})
		want := ""
		if i < len(vms) {
			want = vms[i]
		}
		if old := holder[addr]; old != want && old != "" {
			if _, err := st.ReleaseAllocations(ctx, old); err != nil {
				t.Fatal(err)
			}
		}
		if want == "" {
			continue
		}
		inv.Devices = append(inv.Devices, gpu.HostDevice{ID: addr, Backend: "passthrough", Kind: gpu.KindPassthrough, GPU: addr, VMUUID: want})
		if holder[addr] != want {
			if _, err := st.ClaimAllocation(ctx, want, []store.SlotClaim{{Host: "gpu-01", GPUAddress: addr, Backend: "passthrough", Kind: gpu.KindPassthrough}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterHost(ctx, &store.Host{Name: "gpu-01", APIURL: "http://gpu-01:8080", Version: "test", Inventory: string(b)}); err != nil {
		t.Fatal(err)
	}
}

func parseTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("%v is not an RFC 3339 time: %v", v, err)
	}
	return at
}

func near(a, b time.Time) bool { d := a.Sub(b); return d > -2*time.Second && d < 2*time.Second }

func TestEstimatedStart(t *testing.T) {
	cases := []struct {
		name      string
		leaseMax  string
		uncertain bool
		note      string
	}{
		{"leases at their maximum: certain", "2h", false, "1 running VM's lease ends"},
		{"leases that may be extended: uncertain", "8h", true, "uncertain: leases may be extended"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEstimateEnv(t, c.leaseMax)
			rec, body := do(t, e.s, "GET", "/v1/vms/"+e.queued[0], "ann-token")
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if at := parseTime(t, body["estimated_start"]); !near(at, e.now.Add(time.Hour)) {
				t.Errorf("q1 estimated %s, want now+1h (%s)", at, e.now.Add(time.Hour))
			}
			if body["estimated_start_uncertain"] != c.uncertain {
				t.Errorf("uncertain %v, want %v (%v)", body["estimated_start_uncertain"], c.uncertain, body["estimated_start_note"])
			}
			if note, _ := body["estimated_start_note"].(string); !strings.Contains(note, c.note) {
				t.Errorf("note %q lacks %q", note, c.note)
			}
			// The second waits for r2's lease (q1 took r1's GPU).
			_, body = do(t, e.s, "GET", "/v1/vms/"+e.queued[1], "ann-token")
			if at := parseTime(t, body["estimated_start"]); !near(at, e.now.Add(3*time.Hour)) {
				t.Errorf("q2 estimated %s, want now+3h", at)
			}
			// A running VM has none.
			_, body = do(t, e.s, "GET", "/v1/vms/"+e.run[0], "ann-token")
			for _, k := range []string{"estimated_start", "estimated_start_uncertain", "estimated_start_note"} {
				if _, ok := body[k]; ok {
					t.Errorf("a running VM has %s: %v", k, body[k])
				}
			}
		})
	}
}

// TestEstimateStaleUntilCaughtUp: requests read the last replay without
// waiting for the next one; while the state has changed since, they say
// so (estimate_stale), and once the worker has caught up they serve the
// new one.
func TestEstimateStaleUntilCaughtUp(t *testing.T) {
	e := newEstimateEnv(t, "2h")
	_, body := do(t, e.s, "GET", "/v1/vms/"+e.queued[0], "ann-token")
	first := body["estimated_start"]
	if body["estimate_stale"] != nil || body["estimate_computed_at"] == nil {
		t.Fatalf("first answer: stale %v, computed at %v", body["estimate_stale"], body["estimate_computed_at"])
	}
	// The worker is held before its next replay.
	entered, release := holdEstimates(e.s)
	// r1 is deleted (behind the server's back, as another node would).
	ctx := context.Background()
	vm, err := e.st.GetVM(ctx, e.run[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMDeleted}); err != nil {
		t.Fatal(err)
	}
	e.heartbeat(t, "", e.run[1])
	e.s.kickEstimates()
	changeSeen(t, e.s)
	// Nobody has read the estimates since: the change is not replayed.
	select {
	case <-entered:
		t.Error("a change replayed before anybody read the estimates")
	case <-time.After(300 * time.Millisecond):
	}
	_, body = do(t, e.s, "GET", "/v1/vms/"+e.queued[0], "ann-token")
	if body["estimated_start"] != first || body["estimate_stale"] != true {
		t.Errorf("before the replay: estimated %v (first %v), stale %v; want the last one, stale", body["estimated_start"], first, body["estimate_stale"])
	}
	<-entered // the read asked for the replay
	close(release)
	caughtUp(t, e.s)
	_, body = do(t, e.s, "GET", "/v1/vms/"+e.queued[0], "ann-token")
	if at := parseTime(t, body["estimated_start"]); !near(at, e.s.Store.Now()) || body["estimate_stale"] != nil {
		t.Errorf("caught up: estimated %s (first %v), stale %v; want now: r1's GPU is free", at, first, body["estimate_stale"])
	}
}

// holdEstimates makes the worker wait before its next replays until
// release is closed; entered gets a value as each one starts waiting.
func holdEstimates(s *Server) (entered chan uint64, release chan struct{}) {
	entered, release = make(chan uint64, 16), make(chan struct{})
	s.estimates.mu.Lock()
	s.estimates.beforeCompute = func(gen uint64) {
		entered <- gen
		<-release
	}
	s.estimates.mu.Unlock()
	return entered, release
}

// changeSeen waits until the estimates' worker has seen a change its last
// snapshot has not.
func changeSeen(t testing.TB, s *Server) {
	t.Helper()
	e := s.estimates
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		e.mu.Lock()
		seen := e.snap != nil && e.snap.gen < e.gen
		e.mu.Unlock()
		if seen {
			return
		}
	}
	t.Fatal("the estimates' worker did not see the change in a minute")
}

// caughtUp waits until the estimates' worker has seen every change made
// before the call and published their replay.
func caughtUp(t testing.TB, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sn, stale := s.awaitEstimates(ctx, time.Minute, true, func(*estimateSnap) bool { return false })
	if sn == nil || stale {
		t.Fatalf("the estimates did not catch up in a minute (snapshot %v, stale %v)", sn != nil, stale)
	}
}

func TestProfilesNextFree(t *testing.T) {
	e := newEstimateEnv(t, "2h")
	rec := httpGet(t, e.s, "/v1/profiles", "ann-token")
	var ps []map[string]any
	if err := json.Unmarshal(rec, &ps); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, p := range ps {
		got[p["name"].(string)] = p["next_free_at"]
	}
	// q1 takes r1's GPU at +1h, q2 r2's at +3h, when q1 (2h) ends too:
	// the next one is free for the caller at +3h.
	if at := parseTime(t, got["whole"]); !near(at, e.now.Add(3*time.Hour)) {
		t.Errorf("whole: next free %s, want now+3h", at)
	}
	if v, ok := got["seat"]; !ok || v != nil {
		t.Errorf("a profile without a GPU: next_free_at %v (listed %v)", v, ok)
	}
	// GET /v1/profiles/{name} says the same.
	var one map[string]any
	if err := json.Unmarshal(httpGet(t, e.s, "/v1/profiles/whole", "ann-token"), &one); err != nil {
		t.Fatal(err)
	}
	if at := parseTime(t, one["next_free_at"]); !near(at, e.now.Add(3*time.Hour)) {
		t.Errorf("GET /v1/profiles/whole: next free %s, want now+3h", at)
	}
}

func TestProfilesFreeNowHasNoNextFree(t *testing.T) {
	e := newEstimateEnv(t, "2h")
	ctx := context.Background()
	for _, id := range append(e.queued, e.run[0]) {
		vm, err := e.st.GetVM(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMDeleted}); err != nil {
			t.Fatal(err)
		}
	}
	e.heartbeat(t, e.run[1])
	var ps []map[string]any
	if err := json.Unmarshal(httpGet(t, e.s, "/v1/profiles", "ann-token"), &ps); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if v, ok := p["next_free_at"]; ok {
			t.Errorf("%s: next_free_at %v with a GPU free now", p["name"], v)
		}
	}
}

func httpGet(t *testing.T, s *Server, path, token string) []byte {
	t.Helper()
	rec, _ := do(t, s, "GET", path, token)
	if rec.Code != 200 {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// TestEstimatesRestEndsWhenQuiet: after a replay that the state changed
// under, the worker rests a multiple of the replay's time while changes
// keep coming, but only the replay's time once they have stopped (a
// burst's estimates catch up a replay sooner).
func TestEstimatesRestEndsWhenQuiet(t *testing.T) {
	e := newEstimateEnv(t, "8h")
	do(t, e.s, "GET", "/v1/vms/"+e.queued[0], "ann-token")
	const took = 600 * time.Millisecond
	starts := make(chan time.Time, 16)
	hold := make(chan struct{}, 16) // one value: the next replay takes took
	e.s.estimates.mu.Lock()
	e.s.estimates.restTimes = 8 // a full rest: 4.8 s
	e.s.estimates.beforeCompute = func(uint64) {
		starts <- time.Now()
		select {
		case <-hold:
			time.Sleep(took)
		default:
		}
	}
	e.s.estimates.mu.Unlock()
	lease := 0
	change := func() { // the lease of a running VM extended: an event
		t.Helper()
		ctx := context.Background()
		vm, err := e.st.GetVM(ctx, e.run[1])
		if err != nil {
			t.Fatal(err)
		}
		lease++
		end := vm.LeaseEnd.Add(time.Duration(lease) * time.Minute)
		if _, err := e.st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: vm.State, Phase: vm.Phase, LeaseEnd: &end}); err != nil {
			t.Fatal(err)
		}
	}
	read := func() { do(t, e.s, "GET", "/v1/vms/"+e.queued[0], "ann-token") }
	// replayUnder starts a replay of took, changes the state while it
	// runs, reads the estimates once it is over (the stale answer a person
	// sees), and returns when that replay began.
	replayUnder := func() time.Time {
		t.Helper()
		hold <- struct{}{}
		change()
		e.s.kickEstimates()
		changeSeen(t, e.s)
		read() // asks for the replay
		var began time.Time
		select {
		case began = <-starts:
		case <-time.After(time.Minute):
			t.Fatal("no replay in a minute")
		}
		time.Sleep(took / 3)
		change() // while it replays
		time.Sleep(took)
		read()
		return began
	}
	next := func() time.Time {
		t.Helper()
		select {
		case at := <-starts:
			return at
		case <-time.After(time.Minute):
			t.Fatal("no next replay in a minute")
		}
		return time.Time{}
	}

	// Quiet after the replay: the next one follows its own time, not
	// eight times it.
	began := replayUnder()
	if gap := next().Sub(began); gap > took+3*time.Second {
		t.Errorf("quiet after the replay: the next began %v after it, want about 2 × %v (a full rest: %v more)", gap, took, 8*took)
	}
	caughtUp(t, e.s)

	// Changes in the rest too: the full rest.
	began = replayUnder()
	var at time.Time
	for deadline := time.Now().Add(time.Minute); at.IsZero(); {
		select {
		case at = <-starts:
		case <-time.After(100 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no next replay in a minute")
			}
			if time.Since(began) < 4*took {
				change()
			}
		}
	}
	if gap := at.Sub(began); gap < 7*took {
		t.Errorf("changes still coming: the next replay began %v after the last began, want at least %v (its time and eight times it)", gap, 9*took)
	}
}
