package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// schedProfiles are profiles the scheduling tests add to testProfiles.
const schedProfiles = `
profile "h100-1g" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
}
`

// withPolicy replaces the env's configuration with testProfiles, the
// scheduling profiles and more HCL (a policy block).
func (e *env) withPolicy(extra string) {
	e.t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(testProfiles + schedProfiles)}, config.Source{Name: "policy.hcl", Data: []byte(extra)})
	if diags.HasErrors() {
		e.t.Fatal(diags)
	}
	e.cfg = cfg
}

// migPlacements are the MIG allocations of a VM as (GPU, start), with the
// placement of the device the mig backend made for it.
func (e *env) migPlacements(o *Orchestrator, vmID string) (allocs, devices []string) {
	e.t.Helper()
	live, err := liveAllocations(context.Background(), o.life.st, vmID)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range live {
		allocs = append(allocs, fmt.Sprintf("%s@%d", a.GPUAddress, a.PlacementStart))
	}
	for _, d := range e.devices()[vmID] {
		devices = append(devices, fmt.Sprintf("%s@%d", d.GPU, d.Placement))
	}
	return allocs, devices
}

// MIG instances go where the scheduler puts them, not where NVML's first
// fit would (the lowest free start): on an empty H100 a 3g.40gb goes to
// slot 4, keeping 0 for a 4g.40gb, and three 1g.10gb go to 6, 4, 5. The
// backend creates each at exactly that placement.
func TestMIGPlacedAtTheSchedulersStart(t *testing.T) {
	tests := []struct {
		profile string
		want    []string // per VM, in submission order
	}{
		{"h100-mig", []string{"0000:18:00.0@4", "0000:18:00.0@0"}},
		{"h100-1g", []string{"0000:18:00.0@6", "0000:18:00.0@4", "0000:18:00.0@5"}},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			e := newEnv(t, "h100x8")
			e.withPolicy("")
			ctx := context.Background()
			o := e.orch(nil)
			for i, want := range tc.want {
				vm, op := e.submit("ann", tc.profile, fmt.Sprintf("vm%d", i))
				o.Drain(ctx)
				e.checkRunning(vm, op, o, "type='pci'")
				allocs, devices := e.migPlacements(o, vm.ID)
				if len(allocs) != 1 || allocs[0] != want {
					t.Errorf("VM %d: allocations %v, want %s", i, allocs, want)
				}
				if len(devices) != 1 || devices[0] != want {
					t.Errorf("VM %d: the backend made %v, want %s", i, devices, want)
				}
			}
		})
	}
}

// VMs that wait are ranked 1..n in queue order with the scheduler's
// reason; when one starts the others move up, and a VM that left the
// queue has no position.
func TestQueuePositionsAndReasons(t *testing.T) {
	e := newEnv(t, "l40sx4") // one GPU for passthrough
	ctx := context.Background()
	o := e.orch(nil)
	var rounds []time.Duration // each round is timed (gpuvm_dispatch_round_seconds)
	o.ObserveRounds(func(d time.Duration) { rounds = append(rounds, d) })
	var vms []*store.VM
	for i := range 4 {
		vm, _ := e.submit([]string{"ann", "bob"}[i%2], "l40s-whole", fmt.Sprintf("w%d", i))
		vms = append(vms, vm)
	}
	o.Drain(ctx)
	if len(rounds) != 1 || rounds[0] <= 0 {
		t.Errorf("one round observed as %v", rounds)
	}
	check := func(running int, waiting []*store.VM) {
		t.Helper()
		if got := e.vm(vms[running].ID); got.State != store.VMRunning || got.QueuePosition != 0 {
			t.Errorf("%s: %s at %d, want running at 0", got.Name, got.State, got.QueuePosition)
		}
		for i, w := range waiting {
			got := e.vm(w.ID)
			if got.State != store.VMQueued || got.QueuePosition != i+1 || got.StateReason != "no GPU has room for a whole L40S now" || got.Phase != PhaseQueued {
				t.Errorf("%s: %s at %d, %q %q; want queued at %d", got.Name, got.State, got.QueuePosition, got.Phase, got.StateReason, i+1)
			}
		}
	}
	check(0, vms[1:])
	// The first leaves: the second starts, the others move up.
	e.deleteOp(e.vm(vms[0].ID))
	o.Drain(ctx)
	o.Drain(ctx)
	check(1, vms[2:])
	// A queued VM deleted keeps no position.
	e.deleteOp(e.vm(vms[2].ID))
	o.Drain(ctx)
	if got := e.vm(vms[2].ID); got.State != store.VMDeleted || got.QueuePosition != 0 {
		t.Errorf("deleted while queued: %s at %d", got.State, got.QueuePosition)
	}
	if got := e.vm(vms[3].ID); got.QueuePosition != 1 {
		t.Errorf("last VM at %d, want 1", got.QueuePosition)
	}
	if len(rounds) != 4 {
		t.Errorf("4 rounds observed as %v", rounds)
	}
	o.ObserveRounds(nil)
	o.Drain(ctx)
	if len(rounds) != 4 {
		t.Errorf("a round observed after ObserveRounds(nil): %v", rounds)
	}
}

// With order = "fairshare" the user who used less goes first, whoever
// asked first; with fifo the first asked goes first.
func TestFairshareOrdersByUsage(t *testing.T) {
	tests := []struct {
		order, first string
	}{
		{"fifo", "ann"},
		{"fairshare", "bob"},
	}
	for _, tc := range tests {
		t.Run(tc.order, func(t *testing.T) {
			e := newEnv(t, "l40sx4")
			e.withPolicy(`policy {
  queue { order = "` + tc.order + `" }
}`)
			ctx := context.Background()
			// ann used a whole GPU for ten hours yesterday, with a VM
			// long deleted.
			old := &store.VM{Name: "old", Owner: "ann", Profile: "l40s-whole", Hours: 10, State: store.VMDeleted}
			if _, err := e.st.CreateVM(ctx, old, store.CreateVMOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.st.UpdateVMState(ctx, old.ID, old.Version, store.VMUpdate{State: store.VMDeleted}); err != nil {
				t.Fatal(err)
			}
			ops, _ := e.st.ListOperations(ctx, old.ID)
			for _, op := range ops {
				if err := e.st.FinishOperation(ctx, op.ID, nil); err != nil {
					t.Fatal(err)
				}
			}
			now := e.st.Now()
			end := now.Add(-14 * time.Hour)
			err := e.st.InsertUsageRecord(ctx, &store.UsageRecord{VMID: old.ID, User: "ann", GPUAddress: "0000:a1:00.0", Kind: gpu.KindPassthrough,
				Share: 1, StartedAt: end.Add(-10 * time.Hour), EndedAt: &end})
			if err != nil {
				t.Fatal(err)
			}
			o := e.orch(nil)
			a, _ := e.submit("ann", "l40s-whole", "a")
			b, _ := e.submit("bob", "l40s-whole", "b")
			o.Drain(ctx)
			first, second := a, b
			if tc.first == "bob" {
				first, second = b, a
			}
			if got := e.vm(first.ID); got.State != store.VMRunning {
				t.Errorf("%s's VM: %s %q, want running", got.Owner, got.State, got.StateReason)
			}
			if got := e.vm(second.ID); got.State != store.VMQueued || got.QueuePosition != 1 {
				t.Errorf("%s's VM: %s at %d, want queued at 1", got.Owner, got.State, got.QueuePosition)
			}
		})
	}
}

const quotaPolicy = `policy {
  timezone = "UTC"
  defaults {
    quota { vms = 1 }
  }
  user "bob" {
    quota { gpus = 0 }
  }
  user "cara" {
    quota { gpu_hours_per_day = 1 }
  }
}`

// Admission refuses at once what a rule means can never start, naming
// the rule, and says why a request that could start later waits.
func TestAdmission(t *testing.T) {
	e := newEnv(t, "l40sx4")
	e.withPolicy(quotaPolicy)
	ctx := context.Background()
	o := e.orch(nil)
	tests := []struct {
		user, profile string
		hours         int
		why           string
		refuse        bool
	}{
		{"bob", "l40s-whole", 2, "quota: user bob: asks for 1 whole GPUs; the limit is 0 at once", true},
		{"bob", "l40s-seat", 2, "", false}, // a slice is not a whole GPU
		{"cara", "l40s-whole", 2, "quota: user cara: the lease needs 2.0 GPU-hours in one day period; the daily budget is 1", true},
		{"cara", "l40s-whole", 1, "", false},
		{"ann", "nogpu", 8, "", false},
		{"ann", "l40s-seat", 2, "", false},
	}
	for _, tc := range tests {
		why, refuse, err := admitText(ctx, o, tc.user, nil, tc.profile, tc.hours)
		if err != nil || why != tc.why || refuse != tc.refuse {
			t.Errorf("%s %s %dh: %q %v %v; want %q %v", tc.user, tc.profile, tc.hours, why, refuse, err, tc.why, tc.refuse)
		}
	}
	// ann runs one VM: a second waits for her quota, at admission and in
	// the queue.
	first, _ := e.submit("ann", "l40s-seat", "one")
	o.Drain(ctx)
	if got := e.vm(first.ID); got.State != store.VMRunning {
		t.Fatalf("first VM: %s %q", got.State, got.StateReason)
	}
	const wait = "quota: user ann: runs 1 of 1 VMs"
	if why, refuse, err := admitText(ctx, o, "ann", nil, "l40s-seat", 2); err != nil || why != wait || refuse {
		t.Errorf("second VM at admission: %q %v %v", why, refuse, err)
	}
	second, _ := e.submit("ann", "l40s-seat", "two")
	o.Drain(ctx)
	if got := e.vm(second.ID); got.State != store.VMQueued || got.StateReason != wait || got.QueuePosition != 1 {
		t.Errorf("second VM: %s at %d %q", got.State, got.QueuePosition, got.StateReason)
	}
	// A VM the rules refuse in the queue (the policy changed since it was
	// asked for) fails, saying why.
	blocked, blockedOp := e.submit("bob", "l40s-whole", "whole")
	o.Drain(ctx)
	if got := e.vm(blocked.ID); got.State != store.VMFailed || !strings.Contains(got.StateReason, "the limit is 0 at once") {
		t.Errorf("refused in the queue: %s %q", got.State, got.StateReason)
	}
	if op := e.op(blockedOp.ID); op.State != store.OpFailed {
		t.Errorf("its create: %s", op.State)
	}
}

// The vms quota counts every VM, with a GPU or without: a user with vms = 2
// runs two VMs of a GPU-less profile at once, and a third waits, saying so,
// at admission and in the queue; GPU VMs wait for them too; vms = 0 refuses
// a GPU-less VM at once; a stopped one that would pass the quota cannot
// start; a deleted one makes room.
func TestQuotaCountsVMsWithoutGPU(t *testing.T) {
	e := newEnv(t, "l40sx4")
	e.withPolicy(`policy {
  timezone = "UTC"
  defaults {
    quota { vms = 2 }
  }
  user "bob" {
    quota { vms = 0 }
  }
  group "lab" {
    quota { vms = 5 }
  }
}`)
	ctx := context.Background()
	o := e.orch(nil)
	if why, refuse, err := admitText(ctx, o, "bob", nil, "nogpu", 1); err != nil || !refuse || why != "quota: user bob: may run 0 VMs at once" {
		t.Errorf("bob at admission: %q %v %v", why, refuse, err)
	}
	one, _ := e.submit("ann", "nogpu", "one")
	two, _ := e.submit("ann", "nogpu", "two")
	three, _ := e.submit("ann", "nogpu", "three")
	o.Drain(ctx)
	e.wantVM(one.ID, store.VMRunning, "")
	e.wantVM(two.ID, store.VMRunning, "")
	const wait = "quota: user ann: runs 2 of 2 VMs"
	if got := e.vm(three.ID); got.State != store.VMQueued || got.StateReason != wait {
		t.Errorf("third VM: %s %q, want queued %q", got.State, got.StateReason, wait)
	}
	for _, prof := range []string{"nogpu", "l40s-seat"} {
		if why, refuse, err := admitText(ctx, o, "ann", nil, prof, 1); err != nil || refuse || why != wait {
			t.Errorf("ann's next %s at admission: %q %v %v, want %q", prof, why, refuse, err, wait)
		}
	}
	gpuVM, _ := e.submit("ann", "l40s-seat", "gpu")
	o.Drain(ctx)
	if got := e.vm(gpuVM.ID); got.State != store.VMQueued || got.StateReason != wait {
		t.Errorf("GPU VM: %s %q, want queued %q", got.State, got.StateReason, wait)
	}
	// Another user is not held up by ann's VMs.
	if err := e.st.CreateUser(ctx, &store.User{Name: "cara"}); err != nil {
		t.Fatal(err)
	}
	other, _ := e.submit("cara", "nogpu", "other")
	o.Drain(ctx)
	e.wantVM(other.ID, store.VMRunning, "")

	// One stopped: the third takes its place; the stopped one may not
	// start then.
	e.action(e.vm(one.ID), store.OpStop)
	o.Drain(ctx)
	e.wantVM(one.ID, store.VMStopped, "")
	if got := e.vm(three.ID); got.State != store.VMRunning {
		t.Fatalf("third VM after a stop: %s %q", got.State, got.StateReason)
	}
	start := e.action(e.vm(one.ID), store.OpStart)
	o.Drain(ctx)
	e.wantOp(start.ID, store.OpFailed, "refused by the sharing policy: "+wait)
	if got := e.vm(one.ID); got.State != store.VMStopped {
		t.Errorf("refused start: %s", got.State)
	}
	// A delete makes room for the GPU VM that waited.
	e.deleteOp(e.vm(two.ID))
	o.Drain(ctx)
	if got := e.vm(gpuVM.ID); got.State != store.VMRunning {
		t.Errorf("GPU VM after a delete: %s %q", got.State, got.StateReason)
	}
}

// A VM is charged from its claim to its release: an open usage record
// with its part of the GPU while it holds it, ended when it is deleted.
func TestUsageRecordsFollowAllocations(t *testing.T) {
	e := newEnv(t, "h100x8")
	ctx := context.Background()
	o := e.orch(nil)
	start := e.st.Now()
	vm, _ := e.submit("ann", "h100-mig", "vm1")
	o.Drain(ctx)
	if got := e.vm(vm.ID); got.State != store.VMRunning {
		t.Fatalf("%s %q", got.State, got.StateReason)
	}
	open, err := e.st.SumUsageByUser(ctx, start.Add(-time.Hour), start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].User != "ann" {
		t.Fatalf("usage while running: %+v", open)
	}
	if ended, _ := e.st.ListEndedUsage(ctx, start.Add(-time.Hour)); len(ended) != 0 {
		t.Fatalf("ended usage while running: %+v", ended)
	}
	e.deleteOp(e.vm(vm.ID))
	o.Drain(ctx)
	ended, err := e.st.ListEndedUsage(ctx, start.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// 3g.40gb on an H100: 4 of 8 memory slices, 3 of 7 compute: half a GPU.
	if len(ended) != 1 || ended[0].VMID != vm.ID || ended[0].Share != 0.5 || ended[0].Kind != gpu.KindMIG || ended[0].Profile != "3g.40gb" ||
		ended[0].EndedAt == nil || ended[0].EndedAt.Before(ended[0].StartedAt) {
		t.Errorf("usage after delete: %+v", ended)
	}
}

// A dispatch round with 1,000 and with 10,000 VMs queued for one whole
// GPU: every VM is read, the scheduler orders and ranks them all, and the
// positions of all are written (they all move up: the first is deleted
// before each round). Target at 10,000: under 100 ms.
func BenchmarkScheduleRound(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) { benchScheduleRound(b, n) })
	}
}

func benchScheduleRound(b *testing.B, n int) {
	e := newEnv(b, "l40sx4")
	ctx := context.Background()
	o := e.orch(nil)
	busy, _ := e.submit("ann", "l40s-whole", "busy")
	o.Drain(ctx)
	if got := e.vm(busy.ID); got.State != store.VMRunning {
		b.Fatalf("%s %q", got.State, got.StateReason)
	}
	ids := make([]string, 0, n)
	for i := range n {
		vm, _ := e.submit([]string{"ann", "bob"}[i%2], "l40s-whole", fmt.Sprintf("q%d", i))
		ids = append(ids, vm.ID)
	}
	o.Drain(ctx) // the first ranking writes every position
	head := 0
	for b.Loop() {
		b.StopTimer()
		// The head of the queue leaves: every other VM moves up one.
		e.deleteOp(e.vm(ids[head]))
		o.Drain(ctx) // deletes it (and ranks the rest)
		head++
		e.deleteOp(e.vm(ids[head]))
		b.StartTimer()
		o.Drain(ctx)
		head++
	}
	b.StopTimer()
	if got := e.vm(ids[head]); got.State != store.VMQueued || got.QueuePosition != 1 {
		b.Fatalf("head of the queue: %s at %d", got.State, got.QueuePosition)
	}
	if got := e.vm(ids[n-1]); got.QueuePosition != n-head {
		b.Fatalf("last of the queue at %d, want %d", got.QueuePosition, n-head)
	}
}

// admitText is o.Admit with its reason as the server writes it.
func admitText(ctx context.Context, o *Orchestrator, user string, groups []string, profile string, hours int) (why string, refuse bool, err error) {
	a, err := o.Admit(ctx, user, groups, profile, hours)
	return a.Reason.Text(), a.Refuse, err
}

// BenchmarkAdmit is one admission (what each create asks first) with VMs
// running and a queue: what the quotas count is read once while nothing
// of it changes (admitcache.go).
func BenchmarkAdmit(b *testing.B) {
	e := newEnv(b, "l40sx4")
	e.withPolicy(quotaPolicy)
	ctx := context.Background()
	o := e.orch(nil)
	for i := range 4 {
		e.submit([]string{"ann", "bob"}[i%2], "l40s-seat", fmt.Sprintf("run%d", i))
	}
	o.Drain(ctx)
	for i := range 200 {
		e.submit("ann", "l40s-seat", fmt.Sprintf("q%d", i))
	}
	o.Drain(ctx)
	for b.Loop() {
		if _, _, err := admitText(ctx, o, "bob", nil, "l40s-seat", 2); err != nil {
			b.Fatal(err)
		}
	}
}
