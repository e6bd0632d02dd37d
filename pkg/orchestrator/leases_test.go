package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/monitor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fakeNotifier collects the notifications the rules send.
type fakeNotifier struct {
	mu    sync.Mutex
	notes []api.AlertNotification
	urls  []string
}

func (f *fakeNotifier) Notify(url string, n api.AlertNotification) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.urls = append(f.urls, url)
	f.notes = append(f.notes, n)
}

// rules lists the notifications' kinds ("lease_end vm/<id>") in order.
func (f *fakeNotifier) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, n := range f.notes {
		out = append(out, n.Rule+" "+n.Subject)
	}
	return out
}

// fakeIdle is an idle detector that says what the test sets.
type fakeIdle struct {
	mu   sync.Mutex
	idle map[string]time.Duration
	err  error
}

func (f *fakeIdle) set(vmID string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle == nil {
		f.idle = map[string]time.Duration{}
	}
	f.idle[vmID] = d
}

func (f *fakeIdle) IdleVMs(context.Context) ([]monitor.VMIdle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []monitor.VMIdle
	for id, d := range f.idle {
		out = append(out, monitor.VMIdle{VMID: id, For: d})
	}
	return out, f.err
}

type fakeLeader struct {
	mu     sync.Mutex
	leader bool
}

func (f *fakeLeader) IsLeader() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.leader }

func (f *fakeLeader) set(b bool) { f.mu.Lock(); defer f.mu.Unlock(); f.leader = b }

// rulesEnv is an env on a clock the test moves, with the rules' fakes.
type rulesEnv struct {
	*env
	clock  *clocktest.Clock
	notify *fakeNotifier
	idle   *fakeIdle
}

var rulesStart = time.Date(2030, 5, 1, 9, 0, 0, 0, time.UTC) // a Wednesday

func newRulesEnv(t *testing.T, preset, policy string) *rulesEnv {
	e := &rulesEnv{env: newEnv(t, preset), clock: clocktest.New(rulesStart), notify: &fakeNotifier{}, idle: &fakeIdle{}}
	e.useClock(e.clock.Now)
	e.withPolicy(policy)
	return e
}

// orchRules is an orchestrator with the rules' fakes (and leader, when not
// nil).
func (e *rulesEnv) orchRules(leader Leader) *Orchestrator {
	return New(Config{
		Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
		Idle: e.idle, Notifier: e.notify, Leader: leader,
	})
}

// at moves the clock to start+d and applies the rules.
func (e *rulesEnv) at(o *Orchestrator, d time.Duration) RulesReport {
	e.t.Helper()
	e.clock.Set(rulesStart.Add(d))
	rep, err := o.ApplyRules(context.Background())
	if err != nil {
		e.t.Fatalf("rules at +%s: %v", d, err)
	}
	return rep
}

// submitHours asks for a VM of a profile for hours.
func (e *env) submitHours(owner, prof, name string, hours int) *store.VM {
	e.t.Helper()
	vm := &store.VM{Name: name, Owner: owner, Profile: prof, Hours: hours}
	if _, err := e.st.CreateVM(context.Background(), vm, store.CreateVMOptions{RequestedBy: owner}); err != nil {
		e.t.Fatal(err)
	}
	return vm
}

// warnings are the vm.warning notices of a VM, in order, as
// ListEventsSince gives them.
func (e *env) warnings(vmID string) []api.VMWarningPayload {
	e.t.Helper()
	evs, err := e.st.ListEventsSince(context.Background(), 0, store.EventFilter{VMID: vmID, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []api.VMWarningPayload
	for _, ev := range evs {
		if ev.Type != api.EventVMWarning {
			continue
		}
		var n api.VMWarningPayload
		if err := json.Unmarshal(ev.Payload, &n); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// unfinished is the VM's unfinished operation, nil if none.
func (e *env) unfinished(vmID string) *store.Operation {
	e.t.Helper()
	ops, err := e.st.ListOperations(context.Background(), vmID)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range ops {
		if !ops[i].Finished() {
			return &ops[i]
		}
	}
	return nil
}

const leaseProfile = `
profile "leased" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
  lease {
    default     = "2h"
    max         = "8h"
    warn_before = "30m"
    idle_stop   = "4h"
    %s
  }
}
policy {
  timezone = "UTC"
  webhook  = "https://hooks.example.com/notices"
}
`

// A lease's owner is warned once, warn_before its end; an extension clears
// the warning, and the new end is warned of again. At the end the VM is
// stopped (then deleted grace later), deleted, or stopped and kept, as
// on_end says; stopped, it holds no GPU. Every notice is an event and goes
// to the webhook.
func TestLeaseWarnStopDelete(t *testing.T) {
	tests := []struct {
		onEnd     string
		atEnd     string // state after the end's operation
		deletedAt time.Duration
	}{
		{`on_end = "stop"
    grace = "1h"`, store.VMStopped, 4 * time.Hour},
		{`on_end = "delete"`, store.VMDeleted, 0},
		{`on_end = "keep"`, store.VMStopped, 0},
	}
	for _, tc := range tests {
		t.Run(strings.Trim(strings.Fields(tc.onEnd)[2], `"`), func(t *testing.T) {
			e := newRulesEnv(t, "l40sx4", strings.Replace(leaseProfile, "%s", tc.onEnd, 1))
			ctx := context.Background()
			o := e.orchRules(nil)
			vm := e.submitHours("ann", "leased", "vm1", 2)
			o.Drain(ctx)
			end := rulesStart.Add(2 * time.Hour)
			if got := e.wantVM(vm.ID, store.VMRunning, ""); got.LeaseEnd == nil || !got.LeaseEnd.Equal(end) {
				t.Fatalf("lease end %v, want %v", got.LeaseEnd, end)
			}
			if rep := e.at(o, 89*time.Minute); !rep.Empty() || len(e.warnings(vm.ID)) != 0 {
				t.Fatalf("31 minutes before the end: %+v, %+v", rep, e.warnings(vm.ID))
			}
			if rep := e.at(o, 91*time.Minute); len(rep.Warned) != 1 || rep.Warned[0] != vm.ID+" lease_end" {
				t.Fatalf("29 minutes before the end: %+v", rep)
			}
			ws := e.warnings(vm.ID)
			if len(ws) != 1 || ws[0].Kind != api.WarningLeaseEnd || !ws[0].At.Equal(end) || ws[0].MinutesLeft != 29 ||
				!strings.Contains(ws[0].Reason, "the lease ends at Wed 1 May 2030 11:00 UTC (in 29 minutes)") {
				t.Fatalf("warning %+v", ws)
			}
			if got := e.vm(vm.ID); got.LeaseWarnedAt == nil || !got.LeaseWarnedAt.Equal(rulesStart.Add(91*time.Minute)) {
				t.Errorf("lease_warned_at %v", got.LeaseWarnedAt)
			}
			e.at(o, 100*time.Minute)
			if n := len(e.warnings(vm.ID)); n != 1 {
				t.Fatalf("warned %d times", n)
			}

			// The owner extends the lease by an hour, as the API does: the
			// warning is forgotten, and the new end warned of.
			cur := e.vm(vm.ID)
			newEnd, hours := end.Add(time.Hour), 3
			if _, err := e.st.UpdateVMState(ctx, vm.ID, cur.Version, store.VMUpdate{State: cur.State, Phase: cur.Phase, LeaseEnd: &newEnd, Hours: &hours}); err != nil {
				t.Fatal(err)
			}
			if got := e.vm(vm.ID); got.LeaseWarnedAt != nil {
				t.Fatalf("lease_warned_at after an extension: %v", got.LeaseWarnedAt)
			}
			e.at(o, 130*time.Minute)
			if n := len(e.warnings(vm.ID)); n != 1 {
				t.Fatalf("warned %d times 50 minutes before the new end", n)
			}
			e.at(o, 151*time.Minute)
			if ws := e.warnings(vm.ID); len(ws) != 2 || !ws[1].At.Equal(newEnd) {
				t.Fatalf("after the extension: %+v", ws)
			}
			if e.unfinished(vm.ID) != nil {
				t.Fatal("an operation before the end")
			}

			// The end.
			rep := e.at(o, 3*time.Hour)
			op := e.unfinished(vm.ID)
			if op == nil || op.RequestedBy != ByLease {
				t.Fatalf("at the end: %+v, operation %+v", rep, op)
			}
			if again := e.at(o, 3*time.Hour+time.Minute); !again.Empty() {
				t.Errorf("a second round before the first operation ran: %+v", again)
			}
			o.Drain(ctx)
			got := e.vm(vm.ID)
			if got.State != tc.atEnd {
				t.Fatalf("after the end: %s %q, want %s", got.State, got.StateReason, tc.atEnd)
			}
			if got.State == store.VMStopped {
				if !strings.Contains(got.StateReason, "the lease ended at Wed 1 May 2030 12:00 UTC") || !strings.Contains(got.StateReason, "; its GPU was given back") {
					t.Errorf("reason of the stop: %q", got.StateReason)
				}
				e.wantGPUGivenBack(vm.ID)
			}
			// A stopped VM waits out its grace, or is kept.
			if got.State == store.VMStopped {
				deleteAt := tc.deletedAt
				if deleteAt == 0 {
					deleteAt = 100 * time.Hour // kept: never
				}
				e.at(o, deleteAt-time.Minute)
				if op := e.unfinished(vm.ID); op != nil {
					t.Fatalf("before the grace ended: %+v", op)
				}
				e.at(o, deleteAt)
				o.Drain(ctx)
				if tc.deletedAt == 0 {
					e.wantVM(vm.ID, store.VMStopped, "")
				} else {
					e.wantVM(vm.ID, store.VMDeleted, "")
				}
			}
			kinds := []string{}
			for _, w := range e.warnings(vm.ID) {
				kinds = append(kinds, w.Kind+"/"+w.Action)
			}
			sent := e.notify.sent()
			if len(sent) != len(kinds) || sent[0] != "lease_end vm/"+vm.ID || e.notify.urls[0] != "https://hooks.example.com/notices" {
				t.Errorf("webhook got %v for the notices %v", sent, kinds)
			}
			if n := e.notify.notes[0]; n.Metric != NoticeMetric || n.Value != 29 || !strings.Contains(n.Summary, `VM "vm1" of ann: the lease ends`) {
				t.Errorf("first notification %+v", n)
			}
		})
	}
}

// A VM whose GPU stays idle for its profile's idle_stop is stopped, saying
// so, and gives its GPU back: the next VM gets the very slot; one a minute
// short, or of a profile without idle_stop, is not.
func TestIdleStop(t *testing.T) {
	e := newRulesEnv(t, "l40sx4", strings.Replace(leaseProfile, "%s", "", 1))
	ctx := context.Background()
	o := e.orchRules(nil)
	idle := e.submitHours("ann", "leased", "idle", 8)
	other := e.submitHours("bob", "l40s-seat", "other", 8)
	busy := e.submitHours("bob", "leased", "busy", 8) // not idle
	o.Drain(ctx)
	e.wantVM(idle.ID, store.VMRunning, "")
	e.wantVM(other.ID, store.VMRunning, "")
	e.idle.set(idle.ID, 4*time.Hour-time.Minute)
	e.idle.set(other.ID, 10*time.Hour)
	if rep := e.at(o, time.Minute); !rep.Empty() {
		t.Fatalf("3h59m idle: %+v", rep)
	}
	e.idle.set(idle.ID, 4*time.Hour+30*time.Second)
	rep := e.at(o, 2*time.Minute)
	if len(rep.Stopped) != 1 || rep.Stopped[0] != idle.ID+" idle" {
		t.Fatalf("4h idle: %+v", rep)
	}
	idleSlot := e.slotOf(idle.ID)
	o.Drain(ctx)
	e.wantVM(idle.ID, store.VMStopped, "idle for 4h on its GPU; its GPU was given back")
	e.wantGPUGivenBack(idle.ID)
	e.wantVM(other.ID, store.VMRunning, "")
	next := e.submitHours("bob", "leased", "next", 2)
	o.Drain(ctx)
	if slot := e.slotOf(next.ID); slot != idleSlot {
		t.Errorf("the next VM got %s, not the slot the idle VM gave back (%s)", slot, idleSlot)
	}
	if ws := e.warnings(idle.ID); len(ws) != 1 || ws[0].Kind != api.WarningIdle || ws[0].Action != api.NoticeStop || ws[0].OperationID == "" {
		t.Errorf("notices %+v", ws)
	}
	if got := e.actionResults(idle.ID); len(got) != 2 || got[0] != "stop " || got[1] != "stop done" {
		t.Errorf("vm.action events %v", got)
	}
	if sent := e.notify.sent(); len(sent) != 1 || sent[0] != "idle vm/"+idle.ID {
		t.Errorf("webhook got %v", sent)
	}
	// A detector that fails keeps no other rule from applying.
	e.idle.err = errors.New("samples unreadable")
	e.clock.Set(rulesStart.Add(8 * time.Hour))
	rep, err := o.ApplyRules(ctx)
	if err == nil || !strings.Contains(err.Error(), "samples unreadable") || len(rep.Stopped) != 3 ||
		!strings.Contains(strings.Join(rep.Stopped, ","), other.ID+" lease_end") || !strings.Contains(strings.Join(rep.Stopped, ","), busy.ID+" lease_end") ||
		!strings.Contains(strings.Join(rep.Stopped, ","), next.ID+" lease_end") {
		t.Errorf("with a failing detector: %+v %v", rep, err)
	}
}

// Only the fleet's leader applies the rules.
func TestRulesOnlyOnLeader(t *testing.T) {
	e := newRulesEnv(t, "l40sx4", strings.Replace(leaseProfile, "%s", "", 1))
	ctx := context.Background()
	leader := &fakeLeader{}
	o := e.orchRules(leader)
	vm := e.submitHours("ann", "leased", "vm1", 2)
	o.Drain(ctx)
	if rep := e.at(o, 3*time.Hour); !rep.Skipped || !rep.Empty() || e.unfinished(vm.ID) != nil || len(e.warnings(vm.ID)) != 0 {
		t.Fatalf("not the leader: %+v", rep)
	}
	leader.set(true)
	if rep := e.at(o, 3*time.Hour); rep.Skipped || len(rep.Stopped) != 1 {
		t.Fatalf("the leader: %+v", rep)
	}
}

// Run applies the rules every RulesEvery and carries out what they start.
func TestRunAppliesRules(t *testing.T) {
	e := newRulesEnv(t, "l40sx4", strings.Replace(leaseProfile, "%s", "", 1))
	o := New(Config{
		Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: time.Hour, RulesEvery: 20 * time.Millisecond, ShutdownTimeout: time.Second, Notifier: e.notify,
	})
	vm := e.submitHours("ann", "leased", "vm1", 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { o.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, ok func(*store.VM) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := e.vm(vm.ID)
			if ok(got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the VM is %s %q", what, got.State, got.StateReason)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("running", func(v *store.VM) bool { return v.State == store.VMRunning })
	e.clock.Set(rulesStart.Add(2 * time.Hour))
	waitFor("stopped at the lease's end", func(v *store.VM) bool {
		return v.State == store.VMStopped && strings.Contains(v.StateReason, "the lease ended")
	})
}

// slotOf is a VM's one live allocation as "GPU slot".
func (e *env) slotOf(vmID string) string {
	e.t.Helper()
	live, err := e.st.ListLiveAllocations(context.Background(), "")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range live {
		if a.VMID == vmID {
			return a.GPUAddress + " " + a.Slot
		}
	}
	e.t.Fatalf("vm %s holds no GPU", vmID)
	return ""
}
