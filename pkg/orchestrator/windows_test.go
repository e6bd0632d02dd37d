package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// A window's at_end applies to the VMs that started in it and would run
// past its end: warn_before ahead their owners are warned, once; with
// at_end = "stop" the VMs are stopped at the end, giving their GPUs back,
// once (one its owner starts again is left alone); with "warn" they run on.
func TestWindowEndWarnsThenStops(t *testing.T) {
	tests := []struct {
		atEnd  string
		action string // of the warning
		stops  bool
	}{
		{"stop", api.NoticeStop, true},
		{"warn", api.NoticeNone, false},
	}
	for _, tc := range tests {
		t.Run(tc.atEnd, func(t *testing.T) {
			// The clock starts on Wednesday at 09:00: 10:00 is in the lab
			// window, which ends at 17:00.
			e := newRulesEnv(t, "l40sx4", `policy {
  timezone = "UTC"
  webhook  = "https://hooks.example.com/notices"
  window "lab" {
    days        = "daily"
    hours       = "10:00-17:00"
    classes     = ["interactive"]
    at_end      = "`+tc.atEnd+`"
    warn_before = "15m"
  }
}`)
			ctx := context.Background()
			o := e.orchRules(nil)
			e.clock.Set(rulesStart.Add(time.Hour))
			vm := e.submitHours("ann", "l40s-seat", "lab", 8) // till 18:00
			o.Drain(ctx)
			e.wantVM(vm.ID, store.VMRunning, "")
			end := time.Date(2030, 5, 1, 17, 0, 0, 0, time.UTC)
			if rep := e.at(o, 7*time.Hour+44*time.Minute); !rep.Empty() {
				t.Fatalf("16:44: %+v", rep)
			}
			rep := e.at(o, 7*time.Hour+46*time.Minute)
			if len(rep.Warned) != 1 || rep.Warned[0] != vm.ID+" window_end" {
				t.Fatalf("16:46: %+v", rep)
			}
			ws := e.warnings(vm.ID)
			if len(ws) != 1 || ws[0].Kind != api.WarningWindowEnd || ws[0].Action != tc.action || !ws[0].At.Equal(end) || ws[0].MinutesLeft != 14 ||
				!strings.Contains(ws[0].Reason, `window "lab" ends at Wed 1 May 2030 17:00 UTC`) {
				t.Fatalf("warning %+v", ws)
			}
			// Told once, whatever this gpuvmd remembers: a new one reads
			// the notices given.
			e.at(o, 7*time.Hour+50*time.Minute)
			o2 := e.orchRules(nil)
			e.at(o2, 7*time.Hour+55*time.Minute)
			if n := len(e.warnings(vm.ID)); n != 1 {
				t.Fatalf("warned %d times", n)
			}
			rep = e.at(o, 8*time.Hour)
			if !tc.stops {
				if !rep.Empty() || e.unfinished(vm.ID) != nil {
					t.Fatalf("17:00 with at_end = warn: %+v", rep)
				}
				return
			}
			if len(rep.Stopped) != 1 || rep.Stopped[0] != vm.ID+" window_end" {
				t.Fatalf("17:00: %+v", rep)
			}
			o.Drain(ctx)
			e.wantVM(vm.ID, store.VMStopped, `window "lab" ends at Wed 1 May 2030 17:00 UTC`)
			e.wantVM(vm.ID, store.VMStopped, "; its GPU was given back")
			e.wantGPUGivenBack(vm.ID)
			// Its owner starts it again: it is not stopped twice.
			start := e.action(e.vm(vm.ID), store.OpStart)
			o.Drain(ctx)
			e.wantOp(start.ID, store.OpDone, "")
			if rep := e.at(o2, 8*time.Hour+5*time.Minute); !rep.Empty() {
				t.Errorf("after a start: %+v", rep)
			}
			e.wantVM(vm.ID, store.VMRunning, "")
			if sent := e.notify.sent(); len(sent) != 2 || sent[0] != "window_end vm/"+vm.ID || sent[1] != "window_end vm/"+vm.ID {
				t.Errorf("webhook got %v", sent)
			}
		})
	}
}

// A batch VM never starts if its lease would run into a window that
// forbids batch, unless it is preemptible: the scheduler's admission keeps
// it waiting, saying why, while a preemptible one, a shorter one and an
// interactive one start.
func TestBatchWaitsForAWindowThatForbidsIt(t *testing.T) {
	e := newRulesEnv(t, "l40sx4", `
profile "batch-seat" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  class = "batch"
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
policy {
  timezone = "UTC"
  user "bob" {
    preemptible = true
  }
  window "day" {
    days    = "daily"
    hours   = "10:00-18:00"
    classes = ["interactive"]
  }
}`)
	ctx := context.Background()
	o := e.orchRules(nil)
	// 09:00: the day window forbids batch from 10:00.
	long := e.submitHours("ann", "batch-seat", "long", 2)
	preemptible := e.submitHours("bob", "batch-seat", "preemptible", 2)
	shortVM := e.submitHours("ann", "batch-seat", "short", 1)
	interactive := e.submitHours("ann", "l40s-seat", "interactive", 2)
	o.Drain(ctx)
	got := e.wantVM(long.ID, store.VMQueued, `the lease would run into window "day"`)
	if got.QueuePosition != 1 {
		t.Errorf("queue position %d", got.QueuePosition)
	}
	e.wantVM(preemptible.ID, store.VMRunning, "")
	e.wantVM(shortVM.ID, store.VMRunning, "")
	e.wantVM(interactive.ID, store.VMRunning, "")
	// After the window it starts.
	e.clock.Set(rulesStart.Add(9 * time.Hour))
	o.Drain(ctx)
	e.wantVM(long.ID, store.VMRunning, "")
}
