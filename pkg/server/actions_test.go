package server

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// createBox has ann ask for a VM and returns it.
func createBox(t *testing.T, s *Server, token, body string) api.CreateVMResponse {
	t.Helper()
	rec, _ := send(t, s, "POST", "/v1/vms", token, body)
	if rec.Code != 202 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var created api.CreateVMResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &created); err != nil {
		t.Fatal(err)
	}
	return created
}

// settle plays the worker: it finishes the VM's unfinished operations and
// puts the VM in state, with a lease end when it has run.
func settle(t *testing.T, st *store.Store, vmID, state string, leaseEnd *time.Time) {
	t.Helper()
	ctx := context.Background()
	ops, err := st.ListOperations(ctx, vmID)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if !op.Finished() {
			if err := st.FinishOperation(ctx, op.ID, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	vm, err := st.GetVM(ctx, vmID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateVMState(ctx, vmID, vm.Version, store.VMUpdate{State: state, LeaseEnd: leaseEnd}); err != nil {
		t.Fatal(err)
	}
}

func wantProblem(t *testing.T, what string, code int, body map[string]any, status int, kind, field, detail string) {
	t.Helper()
	d, _ := body["detail"].(string)
	f, _ := body["field"].(string)
	if code != status || body["type"] != ProblemBase+kind || f != field || !strings.Contains(d, detail) {
		t.Errorf("%s: %d %v, want %d %s field %q detail %q", what, code, body, status, kind, field, detail)
	}
}

func TestVMActionsAPI(t *testing.T) {
	s, st, w := vmServer(t)
	ctx := context.Background()
	box := createBox(t, s, "ann-token", `{"profile":"seat","name":"box"}`)
	id := box.VM.ID

	// The create is unfinished: every action but extend waits for it.
	rec, body := send(t, s, "POST", "/v1/vms/box/actions/stop", "ann-token", "")
	wantProblem(t, "stop while queued", rec.Code, body, 409, "conflict", "", "unfinished create operation ("+box.Operation.ID)
	settle(t, st, id, store.VMRunning, nil)
	woken := w.n.Load()

	for _, tc := range []struct {
		name, token, path, body string
		status                  int
		kind, field, detail     string
	}{
		{"another user's VM by ID", "bob-token", "/v1/vms/" + id + "/actions/stop", "", 404, "not-found", "", ""},
		{"another user's VM by name", "bob-token", "/v1/vms/box/actions/reboot", "", 404, "not-found", "", `no VM "box"`},
		{"another user's extend", "bob-token", "/v1/vms/" + id + "/actions/extend", `{"hours":1}`, 404, "not-found", "", ""},
		{"unknown VM", "ann-token", "/v1/vms/nope/actions/stop", "", 404, "not-found", "", `no VM "nope"`},
		{"unknown action", "ann-token", "/v1/vms/box/actions/pause", "", 404, "not-found", "", "no route POST /v1/vms/box/actions/pause"},
		{"start a running VM", "ann-token", "/v1/vms/box/actions/start", "", 409, "conflict", "", `VM "box" is running: only a stopped VM can be started`},
		{"unknown field", "ann-token", "/v1/vms/box/actions/stop", `{"force":true}`, 400, "bad-request", "force", ""},
		{"not JSON", "ann-token", "/v1/vms/box/actions/reboot", `{`, 400, "bad-request", "", "not valid JSON"},
		{"no token", "", "/v1/vms/box/actions/stop", "", 401, "unauthenticated", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, body := send(t, s, "POST", tc.path, tc.token, tc.body)
			wantProblem(t, tc.name, rec.Code, body, tc.status, tc.kind, tc.field, tc.detail)
		})
	}
	if w.n.Load() != woken {
		t.Error("the worker was woken for refused actions")
	}

	// Stop: 202 with the VM and the operation; the worker is woken and an
	// event recorded.
	rec, _ = send(t, s, "POST", "/v1/vms/box/actions/stop", "ann-token", "{}")
	var stop api.VMActionResponse
	json.Unmarshal(rec.Body.Bytes(), &stop)
	if rec.Code != 202 || stop.Operation.Kind != "stop" || stop.Operation.State != "pending" || stop.VM.ID != id ||
		rec.Header().Get("Location") != "/v1/operations/"+stop.Operation.ID {
		t.Fatalf("stop: %d %s %q", rec.Code, rec.Body, rec.Header().Get("Location"))
	}
	if w.n.Load() != woken+1 {
		t.Error("the worker was not woken")
	}
	evs, _ := st.ListEventsSince(ctx, 0, store.EventFilter{VMID: id})
	var p api.VMActionPayload
	for _, ev := range evs {
		if ev.Type == api.EventVMAction {
			json.Unmarshal(ev.Payload, &p)
		}
	}
	if p.Action != "stop" || p.OperationID != stop.Operation.ID || p.RequestedBy != "ann" || p.Result != "" {
		t.Errorf("vm.action event %+v", p)
	}
	// While it runs, other actions are refused, naming it.
	for _, a := range []string{"stop", "reboot", "start"} {
		rec, body := send(t, s, "POST", "/v1/vms/"+id+"/actions/"+a, "ann-token", "")
		wantProblem(t, a+" during stop", rec.Code, body, 409, "conflict", "", "unfinished stop operation ("+stop.Operation.ID)
	}
	settle(t, st, id, store.VMStopped, nil)
	for _, a := range []string{"stop", "reboot"} {
		rec, body := send(t, s, "POST", "/v1/vms/box/actions/"+a, "ann-token", "")
		wantProblem(t, a+" of a stopped VM", rec.Code, body, 409, "conflict", "", `VM "box" is stopped: only a running VM can be`)
	}
	// An admin may act on anyone's VM (by ID).
	rec, _ = send(t, s, "POST", "/v1/vms/"+id+"/actions/start", "admin-token", "")
	var start api.VMActionResponse
	json.Unmarshal(rec.Body.Bytes(), &start)
	if rec.Code != 202 || start.Operation.Kind != "start" {
		t.Fatalf("admin start: %d %s", rec.Code, rec.Body)
	}
	if op, _ := st.GetOperation(ctx, start.Operation.ID); op.RequestedBy != "admin" {
		t.Errorf("requested by %q", op.RequestedBy)
	}
	settle(t, st, id, store.VMRunning, nil)
	rec, _ = send(t, s, "POST", "/v1/vms/box/actions/reboot", "ann-token", "")
	if rec.Code != 202 {
		t.Errorf("reboot: %d %s", rec.Code, rec.Body)
	}
	settle(t, st, id, store.VMDeleted, nil)
	rec, body = send(t, s, "POST", "/v1/vms/"+id+"/actions/start", "ann-token", "")
	wantProblem(t, "deleted VM", rec.Code, body, 404, "not-found", "", "deleted")
}

func TestExtendAPI(t *testing.T) {
	s, st, _ := vmServer(t)
	ctx := context.Background()
	extend := func(token, ref, body string) (int, map[string]any, api.VM) {
		t.Helper()
		rec, m := send(t, s, "POST", "/v1/vms/"+ref+"/actions/extend", token, body)
		var vm api.VM
		json.Unmarshal(rec.Body.Bytes(), &vm)
		return rec.Code, m, vm
	}
	box := createBox(t, s, "ann-token", `{"profile":"seat","name":"box","hours":2}`)

	// A queued VM: only its hours grow (its lease starts when it runs).
	code, _, vm := extend("ann-token", "box", `{"hours":3}`)
	if code != 200 || vm.Hours != 5 || vm.LeaseEnd != nil || vm.State != "queued" {
		t.Fatalf("extend a queued VM: %d %+v", code, vm)
	}
	// A running one: hours and lease end.
	end := time.Now().Add(5 * time.Hour).UTC().Truncate(time.Second)
	settle(t, st, box.VM.ID, store.VMRunning, &end)
	code, _, vm = extend("ann-token", box.VM.ID, `{"hours":2}`)
	if code != 200 || vm.Hours != 7 || vm.LeaseEnd == nil || !vm.LeaseEnd.Equal(end.Add(2*time.Hour)) || vm.State != "running" {
		t.Fatalf("extend a running VM: %d %+v", code, vm)
	}
	for _, tc := range []struct {
		name, token, body   string
		status              int
		kind, field, detail string
	}{
		{"beyond the maximum", "ann-token", `{"hours":2}`, 422, "validation", "hours", "profile seat allows a lease of at most 8 hours; VM box has 7, so at most 1 more"},
		{"zero", "ann-token", `{"hours":0}`, 422, "validation", "hours", "at least 1"},
		{"no hours", "ann-token", `{}`, 422, "validation", "hours", "at least 1"},
		{"negative", "ann-token", `{"hours":-3}`, 422, "validation", "hours", "at least 1"},
		{"wrong type", "ann-token", `{"hours":"2"}`, 400, "bad-request", "hours", ""},
		{"overflowing a duration", "ann-token", `{"hours":2562048}`, 422, "validation", "hours", "at most 1 more"},
		{"int64 maximum", "ann-token", `{"hours":9223372036854775807}`, 422, "validation", "hours", "at most 1 more"},
		{"past int64", "ann-token", `{"hours":9223372036854775808}`, 400, "bad-request", "hours", "whole number"},
		{"duplicate key", "ann-token", `{"hours":1,"hours":1}`, 400, "bad-request", "hours", "twice"},
		{"no body", "ann-token", ``, 400, "bad-request", "", "empty"},
		{"another user", "bob-token", `{"hours":1}`, 404, "not-found", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := extend(tc.token, "box", tc.body)
			if tc.token == "bob-token" {
				code, body, _ = extend(tc.token, box.VM.ID, tc.body)
			}
			wantProblem(t, tc.name, code, body, tc.status, tc.kind, tc.field, tc.detail)
		})
	}
	if got, _ := st.GetVM(ctx, box.VM.ID); got.Hours != 7 {
		t.Errorf("refused extends changed the hours: %d", got.Hours)
	}
	// The last hour is allowed; the event says what was done.
	if code, _, vm = extend("ann-token", "box", `{"hours":1}`); code != 200 || vm.Hours != 8 {
		t.Errorf("up to the maximum: %d %+v", code, vm)
	}
	evs, _ := st.ListEventsSince(ctx, 0, store.EventFilter{VMID: box.VM.ID})
	var p api.VMActionPayload
	for _, ev := range evs {
		if ev.Type == api.EventVMAction {
			json.Unmarshal(ev.Payload, &p)
		}
	}
	if p.Action != "extend" || p.Hours != 1 || p.TotalHours != 8 || p.RequestedBy != "ann" || p.LeaseEnd == nil || !p.LeaseEnd.Equal(*vm.LeaseEnd) {
		t.Errorf("vm.action event %+v", p)
	}

	// A stopped VM's lease may be extended; a VM being deleted's may not,
	// nor a failed one's.
	box2 := createBox(t, s, "ann-token", `{"profile":"seat","name":"box2","hours":1}`)
	settle(t, st, box2.VM.ID, store.VMStopped, &end)
	if code, _, vm := extend("ann-token", "box2", `{"hours":1}`); code != 200 || vm.Hours != 2 || vm.State != "stopped" {
		t.Errorf("extend a stopped VM: %d %+v", code, vm)
	}
	rec, _ := send(t, s, "DELETE", "/v1/vms/box2", "ann-token", "")
	var del api.OperationResponse
	json.Unmarshal(rec.Body.Bytes(), &del)
	code, body, _ := extend("ann-token", "box2", `{"hours":1}`)
	wantProblem(t, "while deleting", code, body, 409, "conflict", "", "unfinished delete operation ("+del.Operation.ID)
	settle(t, st, box2.VM.ID, store.VMFailed, nil)
	code, body, _ = extend("ann-token", "box2", `{"hours":1}`)
	wantProblem(t, "failed VM", code, body, 409, "conflict", "", `VM "box2" is failed`)

	// A profile that names no maximum has the default one (24h); a huge
	// number of hours is refused, not overflowed.
	bobs := createBox(t, s, "bob-token", `{"profile":"staff-only","name":"long"}`)
	code, body, _ = extend("bob-token", "long", `{"hours":9223372036854775807}`)
	wantProblem(t, "huge extend", code, body, 422, "validation", "hours", "profile staff-only allows a lease of at most 24 hours; VM long has 8, so at most 16 more")
	if code, _, vm := extend("bob-token", bobs.VM.ID, `{"hours":16}`); code != 200 || vm.Hours != 24 {
		t.Errorf("extend to the default maximum: %d %+v", code, vm)
	}
}

// Four extends at once of one hour each, from 4 hours with a maximum of 8:
// each is applied (none lost to another), and a fifth is refused.
func TestExtendConcurrent(t *testing.T) {
	s, st, _ := vmServer(t)
	box := createBox(t, s, "ann-token", `{"profile":"seat","name":"box","hours":4}`)
	end := time.Now().Add(4 * time.Hour).UTC().Truncate(time.Second)
	settle(t, st, box.VM.ID, store.VMRunning, &end)
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, _ := send(t, s, "POST", "/v1/vms/box/actions/extend", "ann-token", `{"hours":1}`)
			codes[i] = rec.Code
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("extend %d: %d", i, c)
		}
	}
	vm, _ := st.GetVM(context.Background(), box.VM.ID)
	if vm.Hours != 8 || vm.LeaseEnd == nil || !vm.LeaseEnd.Equal(end.Add(4*time.Hour)) {
		t.Errorf("after four extends: %d hours, lease end %v (want 8, %v)", vm.Hours, vm.LeaseEnd, end.Add(4*time.Hour))
	}
	rec, body := send(t, s, "POST", "/v1/vms/box/actions/extend", "ann-token", `{"hours":1}`)
	wantProblem(t, "fifth", rec.Code, body, 422, "validation", "hours", "at most 0 more")
}

func TestCreateStartAt(t *testing.T) {
	s, _, _ := vmServer(t)
	at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	created := createBox(t, s, "ann-token", `{"profile":"seat","name":"later","start_at":"`+at.Format(time.RFC3339)+`"}`)
	vm := created.VM
	if vm.State != "queued" || vm.StartAt == nil || !vm.StartAt.Equal(at) || vm.Reason != "starts at "+at.Format(time.RFC3339) || vm.Phase != startAtPhase {
		t.Fatalf("created %+v", vm)
	}
	rec, _ := send(t, s, "GET", "/v1/vms/later", "ann-token", "")
	var got api.VM
	json.Unmarshal(rec.Body.Bytes(), &got)
	if got.StartAt == nil || !got.StartAt.Equal(at) {
		t.Errorf("GET: start_at %v", got.StartAt)
	}
	// An offset is taken as the instant it names.
	local := at.In(time.FixedZone("UTC+2", 2*3600)).Format(time.RFC3339)
	if vm := createBox(t, s, "ann-token", `{"profile":"seat","name":"zoned","start_at":"`+local+`"}`).VM; !vm.StartAt.Equal(at) {
		t.Errorf("start_at %s read as %v", local, vm.StartAt)
	}
	for _, tc := range []struct {
		name, startAt       string
		status              int
		kind, field, detail string
	}{
		{"past", time.Now().Add(-time.Minute).Format(time.RFC3339), 422, "validation", "start_at", "not in the future"},
		{"too far", time.Now().Add(31 * 24 * time.Hour).Format(time.RFC3339), 422, "validation", "start_at", "at most 30 days ahead"},
		{"not a time", "tomorrow", 400, "bad-request", "start_at", "parsing time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, body := send(t, s, "POST", "/v1/vms", "ann-token", `{"profile":"seat","start_at":"`+tc.startAt+`"}`)
			wantProblem(t, tc.name, rec.Code, body, tc.status, tc.kind, tc.field, tc.detail)
		})
	}
}
