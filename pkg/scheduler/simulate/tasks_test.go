package simulate

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/race"
)

// TestAsTasksDraw: every drawn run is within the draw's part of its lease
// and at most the lease; the same seed draws the same runs, another seed
// others; a bad draw is refused naming the field.
func TestAsTasksDraw(t *testing.T) {
	_, tr := loadExample(t, "vgpu-cluster.hcl", "vgpu-mixed.csv")
	a, err := AsTasks(tr, DefaultTaskDraw)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := AsTasks(tr, DefaultTaskDraw)
	other, _ := AsTasks(tr, TaskDraw{Seed: 2, Min: 0.2, Max: 1})
	same, diff := 0, 0
	var sum float64
	for i, it := range a.Items {
		lease := it.Request.Lease
		if it.Runtime < time.Duration(0.2*float64(lease))-time.Second || it.Runtime > lease {
			t.Fatalf("%s: run %v of a %v lease, want 20–100 %%", it.Request.ID, it.Runtime, lease)
		}
		if tr.Items[i].Runtime != lease {
			t.Fatalf("AsTasks changed the trace it was given")
		}
		if b.Items[i].Runtime == it.Runtime {
			same++
		}
		if other.Items[i].Runtime != it.Runtime {
			diff++
		}
		sum += it.Runtime.Hours() / lease.Hours()
	}
	if same != len(a.Items) || diff < len(a.Items)/2 {
		t.Errorf("same seed: %d of %d runs equal; another seed: %d differ", same, len(a.Items), diff)
	}
	if mean := sum / float64(len(a.Items)); math.Abs(mean-0.6) > 0.03 {
		t.Errorf("mean run %.3f of the lease, want about 0.6", mean)
	}
	for _, d := range []TaskDraw{{Min: 0, Max: 1}, {Min: 0.5, Max: 0.4}, {Min: 0.2, Max: 1.5}} {
		if _, err := AsTasks(tr, d); err == nil {
			t.Errorf("draw %+v accepted", d)
		}
	}
}

// TestCompareTasksByHand: one H100 in MIG mode, a 7g.80gb for 2h at 0 and
// another at 60 s (max wait 3h). As VMs the second waits the first's 2h
// lease; as tasks running half their lease, 1h; each gives back 1 GPU-hour.
func TestCompareTasksByHand(t *testing.T) {
	c := smallCluster(t, `host "a" {
  gpu {
    model = "H100 PCIe 80GB"
    mode  = "mig"
  }
}`)
	tr := trace(t, goodHeader+"0,u1,g,mig,7g.80gb,1,2,0,false\n60,u2,g,mig,7g.80gb,1,2,0,false\n", TraceOptions{})
	cmp, err := CompareTasks(Setup{Cluster: c, MaxWait: 3 * time.Hour}, tr, PolicySpec(config.OrderFIFO), TaskDraw{Seed: 7, Min: 0.5, Max: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	v, k := cmp.VMs, cmp.Tasks
	if v.GrantedGPUHours != 4 || v.UsedGPUHours != 4 || v.GivenBackGPUHours != 0 || v.Accepted != 2 {
		t.Errorf("as VMs: %+v", v)
	}
	if k.GrantedGPUHours != 4 || k.UsedGPUHours != 2 || k.GivenBackGPUHours != 2 || k.Accepted != 2 {
		t.Errorf("as tasks: %+v", k)
	}
	// Waits: 0 and 119 min as VMs, 0 and 59 as tasks.
	if v.MeanWaitMin != 59.5 || k.MeanWaitMin != 29.5 || v.P90WaitMin != 119 || k.P90WaitMin != 59 {
		t.Errorf("waits: VMs %g/%g, tasks %g/%g", v.MeanWaitMin, v.P90WaitMin, k.MeanWaitMin, k.P90WaitMin)
	}
	if cmp.Largest != "7g.80gb" || v.LargestAccepted != 2 || v.LargestRequested != 2 {
		t.Errorf("largest %q: %d/%d", cmp.Largest, v.LargestAccepted, v.LargestRequested)
	}
}

// TestTasksAgainstVMs replays the MIG example trace under fifo as VMs
// and as tasks and checks the accounting: used ≤ granted on each side,
// given back = granted − used, as VMs only preemptions give back, as
// tasks about 40 % of the granted GPU-hours (the draw's mean), (the
// figures are logged).
func TestTasksAgainstVMs(t *testing.T) {
	if testing.Short() || race.Enabled {
		t.Skip("replays a week-long trace twice (skipped with -short and -race)")
	}
	setup, tr := loadExample(t, "mig-cluster.hcl", "mig-saturated.csv")
	spec := PolicySpec(config.OrderFIFO)
	a, err := CompareTasks(setup, tr, spec, DefaultTaskDraw)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]TaskSide{"vms": a.VMs, "tasks": a.Tasks} {
		if s.UsedGPUHours > s.GrantedGPUHours+0.01 || s.GivenBackGPUHours < 0 || math.Abs(s.GivenBackGPUHours-(s.GrantedGPUHours-s.UsedGPUHours)) > 0.011 {
			t.Errorf("%s: granted %.2f used %.2f given back %.2f", name, s.GrantedGPUHours, s.UsedGPUHours, s.GivenBackGPUHours)
		}
		if s.Accepted == 0 || s.Requests != len(tr.Items) {
			t.Errorf("%s: accepted %d of %d", name, s.Accepted, s.Requests)
		}
	}
	if a.VMs.Result.Preemptions == 0 && a.VMs.GivenBackGPUHours != 0 {
		t.Errorf("VMs gave back %.2f GPU-hours without a preemption", a.VMs.GivenBackGPUHours)
	}
	if share := a.Tasks.GivenBackGPUHours / a.Tasks.GrantedGPUHours; share < 0.3 || share > 0.55 {
		t.Errorf("tasks gave back %.1f%% of their granted GPU-hours, want about 40%%", 100*share)
	}
	ja, _ := json.Marshal(a)
	t.Logf("%s", ja)
}

// TestCompareTasksDeterministic: the same seed replays the same, on a part
// of the vGPU example trace.
func TestCompareTasksDeterministic(t *testing.T) {
	setup, tr := loadExample(t, "vgpu-cluster.hcl", "vgpu-mixed.csv")
	tr.Items = tr.Items[:400]
	spec := PolicySpec(config.OrderFairshare)
	a, err := CompareTasks(setup, tr, spec, DefaultTaskDraw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := CompareTasks(setup, tr, spec, DefaultTaskDraw)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Errorf("two replays with the same seed differ:\n%s\n%s", ja, jb)
	}
	if a.Tasks.GivenBackGPUHours <= a.VMs.GivenBackGPUHours {
		t.Errorf("tasks gave back %.2f GPU-hours, VMs %.2f", a.Tasks.GivenBackGPUHours, a.VMs.GivenBackGPUHours)
	}
}
