package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// taskInConfig adds to resizeConfig the profiles of tasks: a whole GPU
// on the VMs' image, one on another image, each with a cloud-init seed.
const taskInConfig = resizeConfig + `
image "other" {
  path = "/images/other.qcow2"
}
template "t" {
  content = "#cloud-config\n"
}
profile "night" {
  vcpus  = 4
  memory = "8GiB"
  disk { image = "cuda" }
  network { type = "none" }
  cloud_init { template = "t" }
  gpu {
    kind  = "passthrough"
    model = "H100"
  }
}
profile "elsewhere" {
  vcpus  = 4
  memory = "8GiB"
  disk { image = "other" }
  network { type = "none" }
  cloud_init { template = "t" }
}
`

// A task in ann's own stopped VM is made pending, the VM's spec naming
// it, the VM otherwise unchanged and no VM made; the task shows the VM,
// and the VM refuses a second task.
func TestCreateTaskIn(t *testing.T) {
	s, st, vms := resizeServerWith(t, taskInConfig)
	ctx := context.Background()
	rec, body := send(t, s, "POST", "/v1/tasks", "ann-token", `{"profile":"night","command":["train"],"time_limit":"8h","in":"down"}`)
	if rec.Code != 202 {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	id, _ := body["id"].(string)
	down := mustVM(t, st, vms["down"].ID)
	if body["in"] != down.ID || body["vm_id"] != down.ID || body["in_profile"] != "slice" || body["state"] != api.TaskPending {
		t.Errorf("task %s", rec.Body)
	}
	if store.TaskOfSpec(down.Spec) != id || down.Profile != "slice" || down.State != store.VMStopped || !strings.Contains(down.Spec, `"hours":2`) {
		t.Errorf("the VM after the submit: %+v", down)
	}
	page, _ := st.ListVMs(ctx, store.VMFilter{Limit: 100})
	if len(page.VMs) != 3 {
		t.Errorf("%d VMs, want the 3 there were", len(page.VMs))
	}
	tk, err := st.GetTask(ctx, id)
	if err != nil || tk.InVM != down.ID || tk.InProfile != "slice" {
		t.Fatalf("task row %+v %v", tk, err)
	}
	rec, body = send(t, s, "POST", "/v1/tasks", "ann-token", `{"profile":"night","command":["train"],"time_limit":"8h","in":"`+down.ID+`"}`)
	if detail, _ := body["detail"].(string); rec.Code != 409 || body["field"] != "in" || !strings.Contains(detail, "runs task "+id) {
		t.Errorf("a second task in the VM: %d %s", rec.Code, rec.Body)
	}
}

// Every refused task --in names in (or the profile), and changes nothing.
func TestCreateTaskInRefusals(t *testing.T) {
	s, st, vms := resizeServerWith(t, taskInConfig)
	ctx := context.Background()
	gone := &store.VM{Name: "gone", Owner: "ann", Profile: "slice", Hours: 2, Spec: `{"hours":2}`}
	if _, err := st.CreateVM(ctx, gone, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateVMState(ctx, gone.ID, gone.Version, store.VMUpdate{State: store.VMDeleted}); err != nil {
		t.Fatal(err)
	}
	body := func(in, extra string) string {
		return `{"profile":"night","command":["train"],"time_limit":"8h","in":"` + in + `"` + extra + `}`
	}
	for _, tc := range []struct {
		name, body    string
		status        int
		field, detail string
	}{
		{"running", body("up", ""), 409, "in", `VM up is running: a task runs only in a stopped VM`},
		{"another's VM", body("caras", ""), 404, "in", `you have no VM "caras"`},
		{"another's VM by ID", body(vms["caras"].ID, ""), 404, "in", "you have no VM"},
		{"no such VM", body("nope", ""), 404, "in", `you have no VM "nope"`},
		{"deleted", body(gone.ID, ""), 409, "in", "is deleted"},
		{"an array", body("down", `,"array":"0-3"`), 422, "in", "an array cannot run in one VM"},
		{"retries", body("down", `,"retries":2,"retry_on":[1]`), 422, "in", "not retried"},
		{"another image", `{"profile":"elsewhere","command":["x"],"time_limit":"1h","in":"down"}`, 422, "in", `disk.image "other"`},
		{"unknown profile", `{"profile":"nope","command":["x"],"time_limit":"1h","in":"down"}`, 404, "profile", `unknown profile "nope"`},
		{"in a number", `{"profile":"night","command":["x"],"time_limit":"1h","in":7}`, 400, "in", ""},
	} {
		before := mustVM(t, st, vms["down"].ID)
		rec, b := send(t, s, "POST", "/v1/tasks", "ann-token", tc.body)
		field, _ := b["field"].(string)
		detail, _ := b["detail"].(string)
		if rec.Code != tc.status || field != tc.field || !strings.Contains(detail, tc.detail) {
			t.Errorf("%s: %d field %q %.200q, want %d %q %q", tc.name, rec.Code, field, detail, tc.status, tc.field, tc.detail)
		}
		if after := mustVM(t, st, vms["down"].ID); after.Version != before.Version || after.Spec != before.Spec {
			t.Errorf("%s: the refusal changed the VM: %+v", tc.name, after)
		}
	}
	if ts, _ := st.ListTasks(ctx, "", 0); len(ts) != 0 {
		t.Errorf("refusals made %d tasks", len(ts))
	}
}

// A pending task whose VM is queued has the VM's estimated start, in GET
// /v1/tasks/{id} and in the list.
func TestTaskEstimatedStart(t *testing.T) {
	e := newEstimateEnv(t, "2h")
	ctx := context.Background()
	st := e.st.(*store.Store)
	q1, err := st.GetVM(ctx, e.queued[0])
	if err != nil {
		t.Fatal(err)
	}
	tk := &store.Task{ID: "0193c000-0000-7000-8000-00000000e571", Owner: "ann", Profile: "whole", Command: `["x"]`, TimeLimitS: 3600, KillWaitS: 30, State: api.TaskPending}
	if err := st.CreateTaskIn(ctx, tk, q1, `{"task":"`+tk.ID+`"}`, "queued"); err != nil {
		t.Fatal(err)
	}
	rec, body := do(t, e.s, "GET", "/v1/tasks/"+tk.ID, "ann-token")
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if at := parseTime(t, body["estimated_start"]); !near(at, e.now.Add(time.Hour)) {
		t.Errorf("task estimated %s, want now+1h (%s)", at, e.now.Add(time.Hour))
	}
	rec, _ = do(t, e.s, "GET", "/v1/tasks", "ann-token")
	var list api.TaskList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("list %s %v", rec.Body, err)
	}
	if at := list.Items[0].EstimatedStart; at == nil || !near(*at, e.now.Add(time.Hour)) {
		t.Errorf("listed task estimated %v, want now+1h", at)
	}
}
