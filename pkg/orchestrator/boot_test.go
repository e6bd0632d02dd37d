package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fakeGuests stands for the guests of the test driver's domains, which run
// no guest: a domain that does not exist is not found, one that is not
// running has no address, and a running one has the addresses the test
// gave its guest (none until it does).
type fakeGuests struct {
	hv    *hypervisor.Conn
	mu    sync.Mutex
	addrs map[string][]hypervisor.Address
	err   error // every query fails with it
	asked map[string]int
}

func newFakeGuests(hv *hypervisor.Conn) *fakeGuests {
	return &fakeGuests{hv: hv, addrs: map[string][]hypervisor.Address{}, asked: map[string]int{}}
}

func (f *fakeGuests) Addresses(ctx context.Context, uuid string) ([]hypervisor.Address, error) {
	f.mu.Lock()
	f.asked[uuid]++
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	info, err := f.hv.Lookup(ctx, uuid)
	if err != nil || !info.Active() {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addrs[uuid], nil
}

// give gives a VM's guest an address, as its DHCP lease would.
func (f *fakeGuests) give(vmID, ip string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs[vmID] = []hypervisor.Address{{Interface: "vnet0", IP: netip.MustParseAddr(ip), Prefix: 24, Source: hypervisor.SourceLease}}
}

func (f *fakeGuests) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeGuests) queries(vmID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[vmID]
}

// orchGuests is e.orch watching guests through g.
func (e *env) orchGuests(g Guests, timeout time.Duration) *Orchestrator {
	return New(Config{
		Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
		Guests: g, BootTimeout: timeout, BootCheck: 10 * time.Millisecond,
	})
}

// wantPhase asserts a VM's state, phase and reason.
func (e *env) wantPhase(id, state, phase, reason string) *store.VM {
	e.t.Helper()
	vm := e.vm(id)
	if vm.State != state || vm.Phase != phase || vm.StateReason != reason {
		e.t.Fatalf("vm %s: %s (phase %q) %q, want %s (phase %q) %q", vm.Name, vm.State, vm.Phase, vm.StateReason, state, phase, reason)
	}
	return vm
}

// phases are the phases of a VM's running states, in the order of its
// vm.state events.
func (e *env) phases(vmID string) []string {
	e.t.Helper()
	evs, err := e.st.ListEventsSince(context.Background(), 0, store.EventFilter{VMID: vmID, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		var p struct{ State, Phase string }
		if ev.Type != api.EventVMState || json.Unmarshal(ev.Payload, &p) != nil || p.State != store.VMRunning {
			continue
		}
		out = append(out, p.Phase)
	}
	return out
}

// A VM whose domain started is running and booting (its create done) until
// its guest has an address, then ready; a start after a stop boots again.
// A VM changed while its guest is looked at is left for the next look.
func TestBootWaitsForGuestAddress(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	g := newFakeGuests(e.hv)
	o := e.orchGuests(g, time.Hour)
	vm, op := e.submit("ann", "l40s-seat", "vm1")
	o.Drain(ctx)
	booting := e.wantPhase(vm.ID, store.VMRunning, api.PhaseBooting, "")
	if booting.LeaseEnd == nil {
		t.Error("a booting VM has no lease end")
	}
	e.wantOp(op.ID, store.OpDone, "")

	o.life.checkBoots(ctx)
	e.wantPhase(vm.ID, store.VMRunning, api.PhaseBooting, "")
	if n := g.queries(vm.ID); n != 1 {
		t.Errorf("the guest was asked %d times, want 1", n)
	}

	// Its address comes while the VM changes (an extend): that look
	// leaves it, the next one makes it ready.
	g.give(vm.ID, "192.168.122.7")
	if _, err := e.st.UpdateVMState(ctx, vm.ID, booting.Version, store.VMUpdate{State: store.VMRunning, Phase: api.PhaseBooting}); err != nil {
		t.Fatal(err)
	}
	if err := o.life.checkBoot(ctx, booting, o.life.boots.list()[vm.ID]); err != nil {
		t.Fatalf("a VM changed meanwhile: %v", err)
	}
	e.wantPhase(vm.ID, store.VMRunning, api.PhaseBooting, "")
	o.life.checkBoots(ctx)
	e.wantPhase(vm.ID, store.VMRunning, api.PhaseReady, "")
	if w := o.life.boots.list(); len(w) != 0 {
		t.Errorf("still watched: %v", w)
	}
	if !strings.Contains(e.logs.String(), "192.168.122.7/24 (lease)") {
		t.Errorf("the log does not name the guest's address:\n%s", e.logs.String())
	}

	// Stop and start: booting again, ready once the guest answers.
	e.action(vm, store.OpStop)
	o.Drain(ctx)
	e.wantPhase(vm.ID, store.VMStopped, "", "stopped by ann; its GPU was given back")
	o.life.checkBoots(ctx)
	start := e.action(vm, store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpDone, "")
	e.wantPhase(vm.ID, store.VMRunning, api.PhaseBooting, "")
	o.life.checkBoots(ctx)
	e.wantPhase(vm.ID, store.VMRunning, api.PhaseReady, "")

	want := []string{api.PhaseBooting, api.PhaseBooting, api.PhaseReady, api.PhaseBooting, api.PhaseReady}
	if got := e.phases(vm.ID); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("running phases %v, want %v", got, want)
	}
}

// A guest that shows no address, or whose addresses cannot be read, is
// ready once the boot timeout has passed, and its reason says why.
func TestBootTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		wantLog string
	}{
		{"no address", nil, "VM ready without a guest address"},
		{"query fails", errors.New("guest agent: injected failure"), "injected failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "l40sx4")
			var mu sync.Mutex
			now := time.Date(2030, 5, 1, 9, 0, 0, 0, time.UTC)
			e.useClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
			advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
			ctx := context.Background()
			g := newFakeGuests(e.hv)
			g.fail(tc.err)
			o := e.orchGuests(g, DefaultBootTimeout)
			vm, _ := e.submit("ann", "l40s-seat", "vm1")
			o.Drain(ctx)
			e.wantPhase(vm.ID, store.VMRunning, api.PhaseBooting, "")
			advance(DefaultBootTimeout - time.Second)
			o.life.checkBoots(ctx)
			e.wantPhase(vm.ID, store.VMRunning, api.PhaseBooting, "")
			advance(time.Second)
			o.life.checkBoots(ctx)
			e.wantPhase(vm.ID, store.VMRunning, api.PhaseReady, "the guest reported no address within 5m")
			if g.queries(vm.ID) != 2 {
				t.Errorf("the guest was asked %d times, want 2", g.queries(vm.ID))
			}
			if !strings.Contains(e.logs.String(), tc.wantLog) {
				t.Errorf("the log lacks %q:\n%s", tc.wantLog, e.logs.String())
			}
		})
	}
}

// The phase is the VM row's: a gpuvmd that starts again watches the VMs
// the previous one left booting, and leaves alone those that stopped or
// went meanwhile. One that does not watch guests makes them ready.
func TestBootWatchSurvivesRestart(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	first := e.orchGuests(newFakeGuests(e.hv), time.Hour)
	up, _ := e.submit("ann", "l40s-seat", "up")
	stopped, _ := e.submit("ann", "l40s-seat", "stopped")
	gone, _ := e.submit("bob", "l40s-seat", "gone")
	unwatched, _ := e.submit("bob", "l40s-seat", "unwatched")
	first.Drain(ctx)
	for _, vm := range []*store.VM{up, stopped, gone, unwatched} {
		e.wantPhase(vm.ID, store.VMRunning, api.PhaseBooting, "")
	}
	e.action(stopped, store.OpStop)
	e.deleteOp(gone)
	first.Drain(ctx)
	e.wantPhase(stopped.ID, store.VMStopped, "", "stopped by ann; its GPU was given back")
	e.wantPhase(gone.ID, store.VMDeleted, "", "")

	// "first" has stopped without having looked at a guest. The next
	// gpuvmd sees the guests of "up" and "unwatched" up.
	g := newFakeGuests(e.hv)
	g.give(up.ID, "10.0.0.5")
	second := e.orchGuests(g, time.Hour)
	// Until both were looked at: a round may be stopped between two VMs.
	runFor(t, second, func() bool { return e.vm(up.ID).Phase == api.PhaseReady && g.queries(unwatched.ID) > 0 })
	e.wantPhase(up.ID, store.VMRunning, api.PhaseReady, "")
	e.wantPhase(unwatched.ID, store.VMRunning, api.PhaseBooting, "")
	e.wantPhase(stopped.ID, store.VMStopped, "", "stopped by ann; its GPU was given back")
	if n := g.queries(stopped.ID) + g.queries(gone.ID); n != 0 {
		t.Errorf("guests of VMs not running were asked %d times", n)
	}
	if n := g.queries(unwatched.ID); n == 0 {
		t.Error("the guest of the VM left booting was never asked")
	}

	// A gpuvmd that does not watch guests has nothing to wait for.
	third := e.orch(nil)
	runFor(t, third, func() bool { return e.vm(unwatched.ID).Phase == api.PhaseReady })
	e.wantPhase(unwatched.ID, store.VMRunning, api.PhaseReady, "")
}

// runFor runs o until cond holds (or fails the test after 20s), then stops
// it and waits for it.
func runFor(t *testing.T, o *Orchestrator, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { o.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBootTimeoutReason(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{DefaultBootTimeout, "the guest reported no address within 5m"},
		{90 * time.Second, "the guest reported no address within 1m30s"},
		{time.Hour, "the guest reported no address within 1h"},
		{time.Hour + 30*time.Minute, "the guest reported no address within 1h30m"},
		{45 * time.Second, "the guest reported no address within 45s"},
	} {
		if got := BootTimeoutReason(tc.d); got != tc.want {
			t.Errorf("BootTimeoutReason(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	if o := New(Config{}); o.life.settings().BootTimeout != DefaultBootTimeout || o.life.settings().BootCheck != DefaultBootCheck {
		t.Errorf("defaults: timeout %v, check %v", o.life.settings().BootTimeout, o.life.settings().BootCheck)
	}
}

// cloudInitGuests are fakeGuests whose guests also say what cloud-init
// reported, as the test sets it; a guest the test said nothing of has no
// agent.
type cloudInitGuests struct {
	*fakeGuests
	status map[string]hypervisor.CloudInitStatus
}

func (g *cloudInitGuests) CloudInitStatus(_ context.Context, uuid string) (hypervisor.CloudInitStatus, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.status[uuid]
	if !ok {
		return hypervisor.CloudInitStatus{}, hypervisor.ErrNoAgent
	}
	return st, nil
}

func (g *cloudInitGuests) report(vmID string, st hypervisor.CloudInitStatus) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.status[vmID] = st
}

// A ready VM of a profile with cloud_init is watched until its cloud-init
// has finished: errors become its reason (it stays ready: the guest may
// still be of use); success ends the watch with no reason. A VM of a
// profile without cloud_init is not watched.
func TestCloudInitFailureIsTheReason(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	g := &cloudInitGuests{fakeGuests: newFakeGuests(e.hv), status: map[string]hypervisor.CloudInitStatus{}}
	o := e.orchGuests(g, time.Hour)
	bad, _ := e.submit("ann", "l40s-seat", "bad")
	good, _ := e.submit("ann", "l40s-seat", "good")
	plain, _ := e.submit("ann", "l40s-seat", "plain")
	o.Drain(ctx)
	for _, vm := range []*store.VM{bad, good} {
		g.give(vm.ID, "192.168.122.7")
	}
	// The profile gains its cloud_init block after the creates (whose seed
	// would need its template): the watch reads the profile at ready.
	e.cfg.Profiles["l40s-seat"].CloudInit = &config.CloudInit{Template: "seed"}
	o.life.checkBoots(ctx)
	e.cfg.Profiles["l40s-seat"].CloudInit = nil
	g.give(plain.ID, "192.168.122.8")
	o.life.checkBoots(ctx)
	for _, vm := range []*store.VM{bad, good, plain} {
		e.wantPhase(vm.ID, store.VMRunning, api.PhaseReady, "")
	}
	look := func() {
		o.life.initsNext = time.Time{}
		o.life.checkCloudInits(ctx)
	}
	look() // no agent yet: still watched
	if w := o.life.inits.list(); len(w) != 2 {
		t.Fatalf("watched %v, want bad and good", w)
	}
	g.report(bad.ID, hypervisor.CloudInitStatus{}) // running, not finished
	look()
	errs := []string{"('users_groups', KeyError('nobody'))", "a", "b", "c"}
	g.report(bad.ID, hypervisor.CloudInitStatus{Done: true, Errors: errs})
	g.report(good.ID, hypervisor.CloudInitStatus{Done: true})
	look()
	want := "cloud-init failed in the guest: ('users_groups', KeyError('nobody')); a; b (and 1 more)"
	if CloudInitFailedReason(errs) != want {
		t.Errorf("reason %q, want %q", CloudInitFailedReason(errs), want)
	}
	e.wantPhase(bad.ID, store.VMRunning, api.PhaseReady, want)
	e.wantPhase(good.ID, store.VMRunning, api.PhaseReady, "")
	if w := o.life.inits.list(); len(w) != 0 {
		t.Errorf("still watched: %v", w)
	}
	if !strings.Contains(e.logs.String(), "cloud-init failed in the guest") {
		t.Errorf("the failure is not logged:\n%s", e.logs.String())
	}
}
