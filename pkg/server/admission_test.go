package server

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fakeAdmitter answers every admission the same, and remembers the last.
type fakeAdmitter struct {
	why    string
	refuse bool
	err    error
	got    []any
}

func (f *fakeAdmitter) Admit(_ context.Context, user string, groups []string, profile string, hours int) (string, bool, error) {
	f.got = []any{user, len(groups), profile, hours}
	return f.why, f.refuse, f.err
}

func TestCreateVMAdmission(t *testing.T) {
	tests := []struct {
		name   string
		adm    fakeAdmitter
		status int
		// problem type, or the queued VM's reason
		problem, reason string
	}{
		{"refused by a rule", fakeAdmitter{why: "quota: user ann: asks for 2 whole GPUs; the limit is 1 at once", refuse: true}, 403, "policy", ""},
		{"waits for a rule", fakeAdmitter{why: "quota: user ann: runs 2 of 2 VMs"}, 202, "", "quota: user ann: runs 2 of 2 VMs"},
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
				if body["type"] != ProblemBase+tc.problem || (tc.problem == "policy" && body["detail"] != tc.adm.why) {
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

// A queued VM shows its place in the queue; once it leaves the queue it
// shows none, whatever the column still holds.
func TestVMQueuePosition(t *testing.T) {
	s, st, _ := vmServer(t)
	ctx := context.Background()
	rec, _ := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat"}`)
	var created api.CreateVMResponse
	json.Unmarshal(rec.Body.Bytes(), &created)
	if _, err := st.SetQueue(ctx, map[string]store.QueueEntry{created.VM.ID: {Position: 3, Phase: "waiting for a GPU", Reason: "no GPU has room"}}); err != nil {
		t.Fatal(err)
	}
	get := func() api.VM {
		t.Helper()
		rec, _ := send(t, s, "GET", "/v1/vms/"+created.VM.ID, "ann-token", "")
		var vm api.VM
		json.Unmarshal(rec.Body.Bytes(), &vm)
		return vm
	}
	if vm := get(); vm.QueuePosition != 3 || vm.Reason != "no GPU has room" {
		t.Errorf("queued: %+v", vm)
	}
	vm, err := st.GetVM(ctx, created.VM.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMAllocating}); err != nil {
		t.Fatal(err)
	}
	if vm := get(); vm.QueuePosition != 0 {
		t.Errorf("allocating: position %d", vm.QueuePosition)
	}
}
