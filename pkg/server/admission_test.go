package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fakeAdmitter answers every admission the same, and remembers the last.
type fakeAdmitter struct {
	adm scheduler.Admission
	err error
	got []any
}

func (f *fakeAdmitter) Admit(_ context.Context, user string, groups []string, profile string, hours int) (scheduler.Admission, error) {
	f.got = []any{user, len(groups), profile, hours}
	return f.adm, f.err
}

func TestCreateVMAdmission(t *testing.T) {
	tests := []struct {
		name   string
		adm    fakeAdmitter
		status int
		// problem type; the problem's detail or the queued VM's reason
		problem, reason string
	}{
		{"refused by a rule", fakeAdmitter{adm: scheduler.Admission{Reason: scheduler.Reason{Code: scheduler.CodeQuota, Detail: "user ann: asks for 2 whole GPUs; the limit is 1 at once"}, Refuse: true}},
			403, "policy", "quota: user ann: asks for 2 whole GPUs; the limit is 1 at once"},
		{"waits for a rule", fakeAdmitter{adm: scheduler.Admission{Reason: scheduler.Reason{Code: scheduler.CodeQuota, Detail: "user ann: runs 2 of 2 VMs"}}}, 202, "", "quota: user ann: runs 2 of 2 VMs"},
		{"waits, no detail", fakeAdmitter{adm: scheduler.Admission{Reason: scheduler.Reason{Code: scheduler.CodeNoCapacity}}}, 202, "", "no_capacity"},
		{"nothing in the way", fakeAdmitter{}, 202, "", ""},
		{"policy unreadable", fakeAdmitter{err: errors.New("database gone")}, 500, "internal", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, st, w := vmServer(t)
			adm := tc.adm
			s.Admission = &adm
			rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","hours":3}`)
			if rec.Code != tc.status {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if len(adm.got) != 4 || adm.got[0] != "ann" || adm.got[2] != "seat" || adm.got[3] != 3 {
				t.Errorf("admitted %v", adm.got)
			}
			if tc.problem != "" {
				if body["type"] != ProblemBase+tc.problem || (tc.problem == "policy" && body["detail"] != tc.reason) {
					t.Errorf("problem %v", body)
				}
				page, _ := st.ListVMs(context.Background(), store.VMFilter{})
				if len(page.VMs) != 0 || w.n.Load() != 0 {
					t.Errorf("a refused request made %d VMs and %d wake-ups", len(page.VMs), w.n.Load())
				}
				return
			}
			var created api.CreateVMResponse
			json.Unmarshal(rec.Body.Bytes(), &created)
			if created.VM.State != store.VMQueued || created.VM.Reason != tc.reason {
				t.Errorf("created %+v", created.VM)
			}
		})
	}
}

// A queued VM shows its place in the queue, counted from the ranks the
// rounds store: 1..n in the queue's order, in a list and alone, however
// sparse the ranks; once it leaves the queue it shows none, whatever the
// column still holds, and those behind it move up at once.
func TestVMQueuePosition(t *testing.T) {
	s, st, _ := vmServer(t)
	ctx := context.Background()
	var ids []string
	for range 5 {
		rec, _ := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat"}`)
		var created api.CreateVMResponse
		json.Unmarshal(rec.Body.Bytes(), &created)
		if created.VM.ID == "" {
			t.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
		ids = append(ids, created.VM.ID)
	}
	// A round ranks them in reverse order of creation.
	round := func(queue []string) {
		t.Helper()
		entries := map[string]store.QueueEntry{}
		for i, id := range queue {
			entries[id] = store.QueueEntry{Position: i + 1, Phase: "waiting for a GPU", Reason: "no GPU has room"}
		}
		if _, err := st.SetQueue(ctx, entries); err != nil {
			t.Fatal(err)
		}
	}
	queue := slices.Clone(ids)
	slices.Reverse(queue)
	round(queue)
	get := func(id string) api.VM {
		t.Helper()
		rec, _ := send(t, s, "GET", "/v1/vms/"+id, "ann-token", "")
		var vm api.VM
		json.Unmarshal(rec.Body.Bytes(), &vm)
		return vm
	}
	want := func(queue []string) {
		t.Helper()
		for i, id := range queue {
			if vm := get(id); vm.QueuePosition != i+1 || vm.Reason != "no GPU has room" {
				t.Errorf("GET %s: position %d %q, want %d", id, vm.QueuePosition, vm.Reason, i+1)
			}
		}
		rec, _ := send(t, s, "GET", "/v1/vms?limit=2", "ann-token", "") // pages of two
		var page api.VMList
		json.Unmarshal(rec.Body.Bytes(), &page)
		for page.Next != "" {
			rec, _ = send(t, s, "GET", "/v1/vms?limit=2&after="+page.Next, "ann-token", "")
			var next api.VMList
			json.Unmarshal(rec.Body.Bytes(), &next)
			page.Items, page.Next = append(page.Items, next.Items...), next.Next
		}
		at := map[string]int{}
		for _, vm := range page.Items {
			at[vm.ID] = vm.QueuePosition
		}
		for i, id := range queue {
			if at[id] != i+1 {
				t.Errorf("listed %s at %d, want %d", id, at[id], i+1)
			}
		}
	}
	want(queue)
	// The head leaves: it shows no position, the others move up before
	// the next round, and the round leaves them as they are.
	for range 2 {
		vm, err := st.GetVM(ctx, queue[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMAllocating}); err != nil {
			t.Fatal(err)
		}
		if vm := get(queue[0]); vm.QueuePosition != 0 {
			t.Errorf("allocating: position %d", vm.QueuePosition)
		}
		queue = queue[1:]
		want(queue)
		round(queue)
		want(queue)
	}
}

// extendChecker is an admitter that also checks extensions.
type extendChecker struct {
	fakeAdmitter
	refuse error
	asked  []time.Time
}

func (e *extendChecker) CheckExtend(_ context.Context, _ string, newEnd time.Time) error {
	e.asked = append(e.asked, newEnd)
	return e.refuse
}

// An extension the sharing policy forbids (a reservation, a window) is
// refused with the rule; one it allows goes through; a queued VM, which
// holds no GPU yet, is not asked about.
func TestExtendAsksThePolicy(t *testing.T) {
	s, st, _ := vmServer(t)
	ec := &extendChecker{refuse: errors.New("GPU 0000:41:00.0 is booked from 12:00 by bob (reservation 3)")}
	s.Admission = ec
	box := createBox(t, s, "ann-token", `{"profile":"seat","name":"box","hours":2}`)
	if rec, _ := send(t, s, "POST", "/v1/vms/box/actions/extend", "ann-token", `{"hours":1}`); rec.Code != 200 || len(ec.asked) != 0 {
		t.Fatalf("queued: %d, asked %v", rec.Code, ec.asked)
	}
	end := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	settle(t, st, box.VM.ID, store.VMRunning, &end)
	rec, body := send(t, s, "POST", "/v1/vms/box/actions/extend", "ann-token", `{"hours":2}`)
	if rec.Code != 403 || body["type"] != api.ProblemBase+"policy" || body["field"] != "hours" ||
		!strings.Contains(body["detail"].(string), "booked from 12:00 by bob") {
		t.Fatalf("refused: %d %v", rec.Code, body)
	}
	if len(ec.asked) != 1 || !ec.asked[0].Equal(end.Add(2*time.Hour)) {
		t.Errorf("asked about %v, want %v", ec.asked, end.Add(2*time.Hour))
	}
	if vm, _ := st.GetVM(context.Background(), box.VM.ID); !vm.LeaseEnd.Equal(end) || vm.Hours != 3 {
		t.Errorf("a refused extension changed the VM: %v %d", vm.LeaseEnd, vm.Hours)
	}
	ec.refuse = nil
	if rec, _ := send(t, s, "POST", "/v1/vms/box/actions/extend", "ann-token", `{"hours":2}`); rec.Code != 200 {
		t.Errorf("allowed: %d %s", rec.Code, rec.Body)
	}
}
