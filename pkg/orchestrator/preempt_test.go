package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// bob's VMs are preemptible; ann's have a higher priority.
const preemptPolicy = `policy {
  timezone = "UTC"
  webhook  = "https://hooks.example.com/notices"
  user "ann" {
    priority = 10
  }
  user "bob" {
    preemptible = true
  }
}`

// A waiting VM of higher priority has a preemptible VM stopped for it: not
// before the preemptible VM has run its minimum runtime (1h), after a
// notice (10m) given when it is chosen. Then the preemptible VM is
// stopped, which gives its GPU back and keeps its disk, and the waiting VM
// placed; started again, the preempted VM waits in the queue until a GPU
// is free, and is not preempted again for the notice it served. If the
// waiting VM leaves the queue before the notice ends, or the preemptible
// VM's owner stops it first, the preemption is called off.
func TestPreemption(t *testing.T) {
	for _, tc := range []struct {
		name         string
		waiterLeaves bool
		victimStops  bool
	}{
		{"notice ends", false, false},
		{"waiting VM deleted", true, false},
		{"preempted VM stopped first", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRulesEnv(t, "l40sx4", preemptPolicy) // one GPU for passthrough
			ctx := context.Background()
			o := e.orchRules(nil)
			victim := e.submitHours("bob", "l40s-whole", "victim", 4)
			o.Drain(ctx)
			e.wantVM(victim.ID, store.VMRunning, "")

			// Five minutes later ann waits: the victim is too young to stop
			// within the notice.
			e.clock.Set(rulesStart.Add(5 * time.Minute))
			waiter := e.submitHours("ann", "l40s-whole", "waiter", 2)
			o.Drain(ctx)
			e.wantVM(waiter.ID, store.VMQueued, "no GPU has room")
			if ws := e.warnings(victim.ID); len(ws) != 0 {
				t.Fatalf("preempted before it could have run its minimum: %+v", ws)
			}
			e.clock.Set(rulesStart.Add(49 * time.Minute))
			o.Drain(ctx)
			if ws := e.warnings(victim.ID); len(ws) != 0 {
				t.Fatalf("at 0:49 the notice would end before the minimum runtime: %+v", ws)
			}

			// At 0:50 its notice would end at 1:00, its minimum runtime.
			e.clock.Set(rulesStart.Add(50 * time.Minute))
			o.Drain(ctx)
			stopAt := rulesStart.Add(time.Hour)
			ws := e.warnings(victim.ID)
			if len(ws) != 1 || ws[0].Kind != api.WarningPreemption || ws[0].Action != api.NoticeStop || !ws[0].At.Equal(stopAt) ||
				ws[0].For != waiter.ID || ws[0].MinutesLeft != 10 || !strings.Contains(ws[0].Reason, `to make room for VM "waiter" of ann`) ||
				!strings.Contains(ws[0].Reason, "will be stopped at Wed 1 May 2030 10:00 UTC (in 10 minutes), giving its GPU back") {
				t.Fatalf("preemption notice %+v", ws)
			}
			e.wantVM(waiter.ID, store.VMQueued, "preemptible VMs were told to make room; they stop at 2030-05-01T10:00:00Z")
			if sent := e.notify.sent(); len(sent) != 1 || sent[0] != "preemption vm/"+victim.ID {
				t.Errorf("webhook got %v", sent)
			}
			// Later rounds choose nobody else, and the rules wait for the
			// notice to end.
			e.clock.Set(rulesStart.Add(55 * time.Minute))
			o.Drain(ctx)
			if rep := e.at(o, 55*time.Minute); !rep.Empty() {
				t.Fatalf("before the notice ends: %+v", rep)
			}
			if n := len(e.warnings(victim.ID)); n != 1 {
				t.Fatalf("%d preemption notices", n)
			}
			e.wantVM(waiter.ID, store.VMQueued, "preemptible VMs were told to make room; they stop at 2030-05-01T10:00:00Z")
			if tc.waiterLeaves {
				e.deleteOp(e.vm(waiter.ID))
				o.Drain(ctx)
				rep := e.at(o, 56*time.Minute)
				if len(rep.Cancelled) != 1 || rep.Cancelled[0] != victim.ID+" preemption" {
					t.Fatalf("waiting VM gone: %+v", rep)
				}
				if rep := e.at(o, time.Hour); !rep.Empty() {
					t.Fatalf("at the end of a called-off notice: %+v", rep)
				}
				o.Drain(ctx)
				e.wantVM(victim.ID, store.VMRunning, "")
				if ws := e.warnings(victim.ID); len(ws) != 2 || ws[1].Action != api.NoticeCancelled {
					t.Errorf("notices %+v", ws)
				}
				return
			}
			if tc.victimStops {
				// Its GPU is drained first, so that the waiting VM still
				// waits when the preempted VM's owner stops it.
				gpu := e.victimGPU(victim.ID)
				if err := e.st.DrainGPU(ctx, &store.GPUDrain{Host: "test-host", GPUAddress: gpu, Reason: "fan", DrainedBy: "admin"}); err != nil {
					t.Fatal(err)
				}
				e.action(e.vm(victim.ID), store.OpStop)
				o.Drain(ctx)
				e.wantVM(victim.ID, store.VMStopped, "stopped by bob; its GPU was given back")
				e.wantVM(waiter.ID, store.VMQueued, "")
				rep := e.at(o, 57*time.Minute)
				if len(rep.Cancelled) != 1 || rep.Cancelled[0] != victim.ID+" preemption" {
					t.Fatalf("preempted VM stopped by its owner: %+v", rep)
				}
				ws := e.warnings(victim.ID)
				if len(ws) != 2 || ws[1].Action != api.NoticeCancelled || !strings.Contains(ws[1].Reason, "the VM was stopped before its notice ended") {
					t.Fatalf("notices %+v", ws)
				}
				if rep := e.at(o, time.Hour); !rep.Empty() {
					t.Fatalf("at the end of a called-off notice: %+v", rep)
				}
				return
			}
			rep := e.at(o, time.Hour)
			if len(rep.Stopped) != 1 || rep.Stopped[0] != victim.ID+" preemption" {
				t.Fatalf("at the end of the notice: %+v", rep)
			}
			if op := e.unfinished(victim.ID); op == nil || op.Kind != store.OpStop || op.RequestedBy != ByPreemption {
				t.Fatalf("operation %+v", op)
			}
			o.Drain(ctx)
			e.wantVM(victim.ID, store.VMStopped, `preempted: stopped to make room for VM "waiter" of ann, which has a higher priority; its GPU was given back`)
			e.wantGPUGivenBack(victim.ID)
			e.wantVM(waiter.ID, store.VMRunning, "")

			// Its owner starts it again: it waits for a GPU.
			e.clock.Set(rulesStart.Add(70 * time.Minute))
			start := e.action(e.vm(victim.ID), store.OpStart)
			o.Drain(ctx)
			got := e.wantVM(victim.ID, store.VMQueued, "no GPU has room")
			if got.QueuePosition != 1 || e.op(start.ID).Finished() {
				t.Errorf("the preempted VM started again: position %d, start %s", got.QueuePosition, e.op(start.ID).State)
			}
			if rep := e.at(o, 75*time.Minute); !rep.Empty() {
				t.Fatalf("while the preempted VM waits: %+v", rep)
			}
			// The waiter is deleted: the preempted VM runs again, and the
			// notice it served does not stop it.
			e.deleteOp(e.vm(waiter.ID))
			o.Drain(ctx)
			o.Drain(ctx)
			e.wantOp(start.ID, store.OpDone, "")
			e.wantVM(victim.ID, store.VMRunning, "")
			e.wantDomainOnDevices(victim.ID)
			if rep := e.at(o, 80*time.Minute); !rep.Empty() {
				t.Fatalf("once the preempted VM runs again: %+v", rep)
			}
			e.wantVM(victim.ID, store.VMRunning, "")
		})
	}
}

// victimGPU is the GPU of a VM's one live allocation.
func (e *rulesEnv) victimGPU(vmID string) string {
	e.t.Helper()
	live, err := e.st.ListLiveAllocations(context.Background(), "")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range live {
		if a.VMID == vmID {
			return a.GPUAddress
		}
	}
	e.t.Fatalf("vm %s holds no GPU", vmID)
	return ""
}
