package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
)

// refusalPolicy lets batch VMs start only at night and at the weekend
// (the longest stretch free of the day window is Friday 18:00 to Monday
// 09:00, 63 hours), and gives students small quotas.
const refusalPolicy = `
policy {
  timezone = "Europe/Paris"
  window "day" {
    days    = "mon-fri"
    hours   = "09:00-18:00"
    classes = ["interactive"]
  }
  group "students" {
    quota {
      vms                = 2
      slices             = 2
      gpu_memory         = "40GiB"
      gpu_hours_per_week = 10
    }
  }
}
`

// Refusal says what Admit refuses, whenever Admit gets that far: at every
// hour of a week, with and without a VM of the user running (a reason to
// wait that hides the refusal), Admit refuses exactly the requests Refusal
// refuses, with its reason, or makes them wait; it never admits them.
func TestRefusalIsAdmitsRefusal(t *testing.T) {
	cfg := parse(t, refusalPolicy)
	e, err := New(Config{Policy: &cfg.Policy, MaxLease: 100 * time.Hour, GroupTotals: map[string]config.Quota{"lab": {GPUMemory: ptr(uint64(20 << 30))}}})
	if err != nil {
		t.Fatal(err)
	}
	var reqs []scheduler.Request
	for i, prof := range []string{"1g.10gb", "3g.40gb", "7g.80gb"} {
		for j, lease := range []time.Duration{0, time.Hour, 20 * time.Hour, 70 * time.Hour, 120 * time.Hour} {
			for k, class := range []string{"", config.ClassBatch} {
				for g, group := range []string{"", "students", "lab"} {
					r := migReq(fmt.Sprintf("r%d%d%d%d", i, j, k, g), "sam", prof, lease, monday)
					r.Class, r.Group = class, group
					switch group {
					case "students":
						r.Groups = []string{group}
					case "lab": // a student too: the user's quota comes first
						r.Groups = []string{"students", group}
					}
					reqs = append(reqs, r, r)
					reqs[len(reqs)-1].ID += "p"
					reqs[len(reqs)-1].Preemptible = true
				}
			}
		}
	}
	refused, hidden := 0, 0
	for _, r := range reqs {
		want, never := e.Refusal(&r)
		if never {
			refused++
		}
		reached := false
		for h := 0; h < 7*24; h++ {
			now := monday.Add(time.Duration(h) * time.Hour)
			mine := scheduler.Running{Request: scheduler.Request{ID: "mine", User: r.User, Group: r.Group, Groups: r.Groups},
				Placement: scheduler.Placement{Devices: []scheduler.Device{{Kind: gpu.KindMIG, Memory: 40 << 30, Share: 0.5}}}, Started: now, End: now.Add(time.Hour)}
			for _, running := range [][]scheduler.Running{nil, {mine}} {
				why, refuse := e.Begin(now, running).Admit(&r)
				switch {
				case refuse && (!never || why != want):
					t.Fatalf("%s at %s: Admit refuses (%v), Refusal says %v %v", r.ID, now, why, want, never)
				case never && why.OK():
					t.Fatalf("%s at %s: Admit admits what Refusal refuses (%v)", r.ID, now, want)
				}
				reached = reached || refuse
				if never && !refuse {
					hidden++
				}
			}
		}
		if never && !reached {
			t.Errorf("%s: Refusal refuses (%v), Admit never does in a week", r.ID, want)
		}
	}
	t.Logf("%d of %d refused, %d times behind a wait", refused, len(reqs), hidden)
	if refused < 20 || refused > len(reqs)-20 || hidden == 0 {
		t.Errorf("%d of %d refused, %d times behind a wait: the test does not test much", refused, len(reqs), hidden)
	}
}
