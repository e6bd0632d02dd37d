package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/estimate"
	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// swapConfig is a configuration whose reload puts next in force.
type swapConfig struct {
	cur  atomic.Pointer[config.Config]
	next *config.Config
}

func (c *swapConfig) Load() *config.Config { return c.cur.Load() }
func (c *swapConfig) Reload() (string, error) {
	c.cur.Store(c.next)
	return "", nil
}

// checkServedIsFresh compares what the server serves, once its worker has
// caught up, with a fresh replay of the state: each queued VM's estimate,
// and the profile's next free and free counts.
func checkServedIsFresh(t *testing.T, e *estimateEnv, step string) {
	t.Helper()
	ctx := context.Background()
	caughtUp(t, e.s)
	fresh := e.s.replayQueue(ctx)
	if fresh.err != nil {
		t.Fatalf("%s: fresh replay: %v", step, fresh.err)
	}
	queued, err := store.AllVMs(ctx, e.s.Store, store.VMFilter{States: []string{store.VMQueued}})
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range queued {
		_, body := do(t, e.s, "GET", "/v1/vms/"+vm.ID, "ann-token")
		want := fresh.vms[vm.ID]
		if body["estimate_stale"] != nil || body["estimate_computed_at"] == nil {
			t.Errorf("%s: %s: stale %v, computed at %v", step, vm.Name, body["estimate_stale"], body["estimate_computed_at"])
		}
		if note, _ := body["estimated_start_note"].(string); note != want.Reason {
			t.Errorf("%s: %s: note %q, a fresh replay says %q", step, vm.Name, note, want.Reason)
		}
		switch {
		case !want.Known() && body["estimated_start"] != nil:
			t.Errorf("%s: %s: estimated %v, a fresh replay knows none", step, vm.Name, body["estimated_start"])
		case want.Known() && !near(parseTime(t, body["estimated_start"]), want.At):
			t.Errorf("%s: %s: estimated %v, a fresh replay says %s", step, vm.Name, body["estimated_start"], want.At)
		case want.Known() && body["estimated_start_uncertain"] != want.Uncertain:
			t.Errorf("%s: %s: uncertain %v, a fresh replay says %v", step, vm.Name, body["estimated_start_uncertain"], want.Uncertain)
		}
	}
	var ps []struct {
		Name     string           `json:"name"`
		NextFree *time.Time       `json:"next_free_at"`
		Free     *api.ProfileFree `json:"free"`
		Stale    bool             `json:"estimate_stale"`
	}
	// A probe carried over from an earlier snapshot (not asked for since)
	// is served said stale, and redone because it was asked for: the next
	// look has it fresh.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ps = nil // not ps[:0]: a field absent from the answer would keep the last one's value
		if err := json.Unmarshal(httpGet(t, e.s, "/v1/profiles", "ann-token"), &ps); err != nil {
			t.Fatal(err)
		}
		stale := false
		for _, p := range ps {
			stale = stale || p.Name == "whole" && p.Stale
		}
		if !stale || time.Now().After(deadline) {
			break
		}
	}
	freeNow := e.s.hostModels(ctx, true).free(fresh.cfg.SortedProfiles())
	for _, p := range ps {
		if p.Name != "whole" {
			continue
		}
		next := nextFreeAt(&estimateSnap{state: fresh.state, probes: map[string]estimate.Estimate{probeKey("ann", "whole"): probe(fresh, probeWant{user: "ann", groups: []string{"artists"}, profile: "whole"})}},
			"ann", fresh.cfg.Profiles["whole"])
		if (next == nil) != (p.NextFree == nil) || next != nil && !near(*next, *p.NextFree) {
			t.Errorf("%s: next free %v, a fresh replay says %v", step, p.NextFree, next)
		}
		if w := freeNow["whole"]; fmt.Sprint(w) != fmt.Sprint(p.Free) {
			t.Errorf("%s: free %v, counted afresh %v", step, p.Free, w)
		}
		if p.Stale {
			t.Errorf("%s: profiles stale once caught up", step)
		}
	}
}

// TestEstimateFollowsEachChange: after each kind of change of the state,
// made through the API or behind the server's back (as another gpuvmd of
// a fleet, or the orchestrator, writes it), the served estimates are a
// fresh replay's, once the worker has caught up.
func TestEstimateFollowsEachChange(t *testing.T) {
	e := newEstimateEnv(t, "8h")
	sc := &swapConfig{next: estimateConfig(t, "2h")}
	sc.cur.Store(e.s.Config.Load())
	e.s.Config = sc
	metrics := monitor.NewExporter("gpu-01", nil, nil, nil, e.s.log)
	e.s.Metrics = metrics
	ctx := context.Background()
	st := e.st.(*store.Store)
	checkServedIsFresh(t, e, "at first")

	// bob books a GPU from +2h: q1 waits for it to end, not r1.
	if err := st.CreateReservation(ctx, &store.Reservation{OwnerKind: store.OwnerUser, Owner: "bob", Profile: "whole", Count: 1,
		StartAt: e.now.Add(2 * time.Hour), EndAt: e.now.Add(5 * time.Hour), CreatedBy: "admin"}); err != nil {
		t.Fatal(err)
	}
	checkServedIsFresh(t, e, "booking")

	rec, _ := send(t, e.s, "POST", "/v1/vms", "ann-token", `{"profile":"whole","name":"q3"}`)
	if rec.Code != 202 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	checkServedIsFresh(t, e, "create")

	setState := func(id string, u store.VMUpdate) {
		t.Helper()
		vm, err := st.GetVM(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.UpdateVMState(ctx, vm.ID, vm.Version, u); err != nil {
			t.Fatal(err)
		}
	}
	setState(e.run[0], store.VMUpdate{State: store.VMDeleted})
	e.heartbeat(t, "", e.run[1])
	checkServedIsFresh(t, e, "delete")

	host, end := "gpu-01", e.now.Add(2*time.Hour)
	setState(e.queued[0], store.VMUpdate{State: store.VMRunning, Host: &host, LeaseEnd: &end})
	e.heartbeat(t, e.queued[0], e.run[1])
	checkServedIsFresh(t, e, "start")

	later := e.now.Add(6 * time.Hour)
	setState(e.run[1], store.VMUpdate{State: store.VMRunning, LeaseEnd: &later})
	checkServedIsFresh(t, e, "extend")

	if rec, _ := do(t, e.s, "POST", "/v1/admin/reload", "admin-token"); rec.Code != 200 {
		t.Fatalf("reload: %d %s", rec.Code, rec.Body)
	}
	checkServedIsFresh(t, e, "config reload")

	if _, err := st.MarkHostsDown(ctx, e.s.Store.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkServedIsFresh(t, e, "host down")

	// Each replay is timed for /metrics: one at least for each of the 8
	// states above.
	if replays := replaysOf(t, metrics); replays < 8 {
		t.Errorf("gpuvm_estimate_replay_seconds counts %d replays, want at least 8", replays)
	}
}

// TestEstimatesWorkerStopsWithClose: the worker starts with the first
// request that needs it and stops, with nothing left running, on Close.
func TestEstimatesWorkerStopsWithClose(t *testing.T) {
	e := newEstimateEnv(t, "2h")
	leaks := goleak.IgnoreCurrent()
	httpGet(t, e.s, "/v1/profiles", "ann-token")
	e.s.Close()
	goleak.VerifyNone(t, leaks)
	// Closed, it answers with the last computation, and starts nothing.
	_, body := do(t, e.s, "GET", "/v1/vms/"+e.queued[0], "ann-token")
	if body["estimated_start"] == nil {
		t.Errorf("after Close: %v", body)
	}
	goleak.VerifyNone(t, leaks)
}

// TestProbesFollowWhoLooks: a change redoes the next-free probes asked for
// since the last snapshot; one nobody asked for since is carried over,
// said stale, and redone once asked for.
func TestProbesFollowWhoLooks(t *testing.T) {
	e := newEstimateEnv(t, "8h")
	metrics := monitor.NewExporter("gpu-01", nil, nil, nil, e.s.log)
	e.s.Metrics = metrics
	ctx := context.Background()
	st := e.st.(*store.Store)
	staleOf := func() bool {
		var ps []struct {
			Name  string `json:"name"`
			Stale bool   `json:"estimate_stale"`
		}
		if err := json.Unmarshal(httpGet(t, e.s, "/v1/profiles", "ann-token"), &ps); err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Name == "whole" {
				return p.Stale
			}
		}
		t.Fatal("no profile whole")
		return false
	}
	if staleOf() {
		t.Fatal("the first look is stale")
	}
	// Two changes, the profiles not looked at between them: the first
	// redoes ann's probe (asked for since the last snapshot), the second
	// carries it over.
	for i := range 2 {
		if err := st.CreateReservation(ctx, &store.Reservation{OwnerKind: store.OwnerUser, Owner: "bob", Profile: "whole", Count: 1,
			StartAt: e.now.Add(time.Duration(10+i*5) * time.Hour), EndAt: e.now.Add(time.Duration(12+i*5) * time.Hour), CreatedBy: "admin"}); err != nil {
			t.Fatal(err)
		}
		caughtUp(t, e.s)
	}
	e.s.estimates.mu.Lock()
	old := e.s.estimates.snap.oldProbes[probeKey("ann", "whole")]
	e.s.estimates.mu.Unlock()
	if !old {
		t.Fatal("a probe nobody asked for since the last snapshot was redone at a change")
	}
	replays := replaysOf(t, metrics)
	if !staleOf() {
		t.Error("a carried-over probe is not said stale")
	}
	for deadline := time.Now().Add(10 * time.Second); staleOf(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a carried-over probe asked for again was not redone")
		}
	}
	// The probe redone alone is a replay too (gpuvm_estimate_replay_seconds).
	if got := replaysOf(t, metrics); got <= replays {
		t.Errorf("the probe redone was not counted as a replay: %d, then %d", replays, got)
	}
}

// replaysOf is what gpuvm_estimate_replay_seconds counts.
func replaysOf(t *testing.T, m *monitor.Exporter) uint64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "gpuvm_estimate_replay_seconds" {
			return f.Metric[0].Histogram.GetSampleCount()
		}
	}
	return 0
}

// TestWritesNobodyReadsCostNoVersionReads: a write of this server reads
// the state version at once only while somebody reads the estimates; else
// the answers say stale until the next read of the version, which the
// first request to find them so asks for.
func TestWritesNobodyReadsCostNoVersionReads(t *testing.T) {
	e := newEstimateEnv(t, "2h")
	caughtUp(t, e.s)
	est := e.s.estimates
	polls := func() uint64 {
		est.mu.Lock()
		defer est.mu.Unlock()
		return est.pollsStarted
	}
	// Nobody has read since the last replay began. caughtUp's read may
	// come after it (on a slow machine the first replay may begin before
	// caughtUp is called, and caughtUp then only waits for a poll): say
	// so here rather than rely on the order.
	est.mu.Lock()
	est.read = time.Time{}
	est.mu.Unlock()
	before := polls()
	for range 5 {
		e.s.noteWrite()
		time.Sleep(50 * time.Millisecond)
	}
	if n := polls() - before; n > 1 { // the worker's own poll, once a second, may come
		t.Errorf("%d version reads for 5 writes nobody looked at; want at most the poll's one", n)
	}
	ctx := context.Background()
	// A write's answers say stale until the next poll reads the version
	// (the worker's poll, once a second, may come between the two: then
	// there is nothing to say).
	e.s.noteWrite()
	p := polls()
	if _, stale := e.s.awaitEstimates(ctx, 0, false, func(*estimateSnap) bool { return true }); !stale && polls() == p {
		t.Error("after a write, the estimates read are not said stale")
	}
	caughtUp(t, e.s)
	// Somebody read the estimates since the last replay began: a write is
	// looked at at once.
	e.s.awaitEstimates(ctx, 0, false, func(*estimateSnap) bool { return true })
	before = polls()
	e.s.noteWrite()
	for deadline := time.Now().Add(10 * time.Second); polls() == before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a write while the estimates are read did not read the state version")
		}
	}
}

// TestEstimatesRefreshedUnread: a replay that grows estimateRefresh old is
// made again though nobody reads the estimates, so that the first reader
// after a quiet spell never meets an older one.
func TestEstimatesRefreshedUnread(t *testing.T) {
	e := newEstimateEnv(t, "2h")
	caughtUp(t, e.s)
	entered, release := holdEstimates(e.s)
	defer close(release)
	est := e.s.estimates
	est.mu.Lock()
	old := *est.snap
	old.computed = time.Now().Add(-estimateRefresh)
	est.snap = &old
	est.read = time.Time{} // nobody has looked since
	est.mu.Unlock()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("a replay estimateRefresh old was not made again while nobody read it")
	}
}
