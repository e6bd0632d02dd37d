package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Hostile arrays, retries and signals: each a 4xx naming its field, and
// nothing made.
func TestCreateTaskHostileExtras(t *testing.T) {
	s, st := taskServer(t)
	body := func(extra string) string {
		return `{"profile":"seat","time_limit":"1h","command":["true"]` + extra + `}`
	}
	tests := []struct {
		name, body     string
		status         int
		problem, field string
	}{
		{"array of 10^9", body(`,"array":"0-1000000000"`), 422, "validation", "array"},
		{"array over 10000", body(`,"array":"0-10000"`), 422, "validation", "array"},
		{"array backwards", body(`,"array":"5-3"`), 422, "validation", "array"},
		{"array cap 0", body(`,"array":"0-3%0"`), 422, "validation", "array"},
		{"array only a cap", body(`,"array":"%0"`), 422, "validation", "array"},
		{"array letters", body(`,"array":"a-b"`), 422, "validation", "array"},
		{"array NUL", body(`,"array":"1\u00002"`), 422, "validation", "array"},
		{"array twice", body(`,"array":"1,1"`), 422, "validation", "array"},
		{"array a number", body(`,"array":7`), 400, "bad-request", "array"},
		{"array of 1 MB", body(`,"array":"` + strings.Repeat("1,", 1<<19) + `"`), 413, "too-large", ""},
		{"array of 100 KB", body(`,"array":"` + strings.Repeat("1,", 50<<10) + `1"`), 422, "validation", "array"},
		{"retries 11", body(`,"retries":11,"retry_on":[2]`), 422, "validation", "retries"},
		{"retries -1", body(`,"retries":-1,"retry_on":[2]`), 422, "validation", "retries"},
		{"retries 10^12", body(`,"retries":1000000000000000000000,"retry_on":[2]`), 400, "bad-request", "retries"},
		{"retries without retry_on", body(`,"retries":2`), 422, "validation", "retry_on"},
		{"retry_on without retries", body(`,"retry_on":[2]`), 422, "validation", "retries"},
		{"retry_on 256", body(`,"retries":2,"retry_on":[256]`), 422, "validation", "retry_on"},
		{"retry_on -1", body(`,"retries":2,"retry_on":[-1]`), 422, "validation", "retry_on"},
		{"retry_on timeout", body(`,"retries":2,"retry_on":["timeout"]`), 422, "validation", "retry_on"},
		{"retry_on an object", body(`,"retries":2,"retry_on":[{}]`), 400, "bad-request", "retry_on"},
		{"retry_on NUL", body(`,"retries":2,"retry_on":["2\u0000"]`), 422, "validation", "retry_on"},
		{"unknown signal", body(`,"signal":"FOO@1m"`), 422, "validation", "signal"},
		{"KILL as a warning", body(`,"signal":"KILL@1m"`), 422, "validation", "signal"},
		{"lead beyond the limit", body(`,"signal":"USR1@2h"`), 422, "validation", "signal"},
		{"lead of 10^9 hours", body(`,"signal":"USR1@1000000000h"`), 422, "validation", "signal"},
		{"signal NUL", body(`,"signal":"USR1\u0000@1m"`), 422, "validation", "signal"},
		{"array with 10^9 hours", `{"profile":"seat","command":["true"],"time_limit":"1000000000h","array":"0-3"}`, 422, "validation", "time_limit"},
		{"array of another's profile", `{"profile":"bobs","command":["true"],"time_limit":"1h","array":"0-3"}`, 404, "not-found", "profile"},
		{"array of an unknown profile", `{"profile":"nope","command":["true"],"time_limit":"1h","array":"0-3"}`, 404, "not-found", "profile"},
		{"array with a command of 1 MB", `{"profile":"seat","time_limit":"1h","array":"0-3","command":["` + strings.Repeat("a", 1<<20) + `"]}`, 413, "too-large", ""},
		{"array with NUL in the command", `{"profile":"seat","time_limit":"1h","array":"0-3","command":["a\u0000"]}`, 422, "validation", "command[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, b := send(t, s, "POST", "/v1/tasks", "ann-token", tc.body)
			if rec.Code != tc.status || b["type"] != ProblemBase+tc.problem || (tc.field != "" && b["field"] != tc.field) {
				t.Fatalf("%d %v; want %d %s field %q", rec.Code, b, tc.status, tc.problem, tc.field)
			}
		})
	}
	if vms, tasks := countRows(t, st); vms != 0 || tasks != 0 {
		t.Fatalf("refused tasks made %d VMs and %d tasks", vms, tasks)
	}
	// In the reader's language.
	if rec, b := send(t, s, "POST", "/v1/tasks", "ann-token", body(`,"array":"0-10000"`), "Accept-Language", "zh-CN"); rec.Code != 422 || b["detail"] != "最多 10000 个元素" {
		t.Fatalf("in Chinese: %d %v", rec.Code, b["detail"])
	}
	if els, _, err := st.ListArrayElementsAfter(context.Background(), "", -1, 1); err != nil || len(els) != 0 {
		t.Fatalf("refused arrays left %d rows without an array (%v)", len(els), err)
	}
}

// An array is one task in the list with counts by state; GET lists its
// elements, each addressable as ID_INDEX (logs, cancel); another person
// sees none of it; its cancel cancels every element.
func TestTaskArrayRoutes(t *testing.T) {
	s, st := taskServer(t)
	ctx := context.Background()
	rec, _ := send(t, s, "POST", "/v1/tasks", "ann-token",
		`{"profile":"seat","command":["sh","-c","echo $TASK_INDEX"],"time_limit":"1h","array":"0-5%2","retries":2,"retry_on":[2,"node_fail"],"signal":"USR1@10m"}`)
	if rec.Code != 202 {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	var tk api.Task
	if err := json.Unmarshal(rec.Body.Bytes(), &tk); err != nil {
		t.Fatal(err)
	}
	if tk.Array != "0-5%2" || tk.ArrayCounts[api.TaskPending] != 6 || tk.VMID != "" || tk.Retries != 2 ||
		strings.Join(tk.RetryOn, ",") != "2,node_fail" || tk.WarningSignal != "USR1@600s" || tk.Attempt != 1 {
		t.Fatalf("array = %+v", tk)
	}
	if vms, tasks := countRows(t, st); vms != 0 || tasks != 1 {
		t.Fatalf("the submit made %d VMs and lists %d tasks; want none (the supervisor makes them) and 1", vms, tasks)
	}
	var list api.TaskList
	rec, _ = send(t, s, "GET", "/v1/tasks", "ann-token", "")
	if json.Unmarshal(rec.Body.Bytes(), &list) != nil || len(list.Items) != 1 || list.Items[0].ArrayCounts[api.TaskPending] != 6 {
		t.Fatalf("list: %s", rec.Body)
	}
	var got api.Task
	rec, _ = send(t, s, "GET", "/v1/tasks/"+tk.ID, "ann-token", "")
	if json.Unmarshal(rec.Body.Bytes(), &got) != nil || len(got.Elements) != 6 || got.Elements[5].ID != tk.ID+"_5" ||
		*got.Elements[5].ArrayIndex != 5 || got.Elements[5].ArrayID != tk.ID || got.Elements[5].WarningSignal != "USR1@600s" {
		t.Fatalf("show: %s", rec.Body)
	}
	el := tk.ID + "_3"
	if rec, b := send(t, s, "GET", "/v1/tasks/"+el, "ann-token", ""); rec.Code != 200 || b["array_index"] != 3.0 {
		t.Fatalf("element: %d %v", rec.Code, b)
	}
	if rec, _ := send(t, s, "GET", "/v1/tasks/"+el+"/logs", "ann-token", ""); rec.Code != 200 {
		t.Fatalf("element's logs: %d", rec.Code)
	}
	if rec, b := send(t, s, "GET", "/v1/tasks/"+tk.ID+"/logs", "ann-token", ""); rec.Code != 422 || b["field"] != "id" {
		t.Fatalf("array's logs: %d %v", rec.Code, b)
	}
	for _, id := range []string{tk.ID, el, tk.ID + "_6", tk.ID + "_99999999999999999999"} {
		for _, c := range []struct{ method, path string }{{"GET", ""}, {"GET", "/logs"}, {"POST", "/cancel"}} {
			if rec, b := send(t, s, c.method, "/v1/tasks/"+id+c.path, "bob-token", ""); rec.Code != 404 || b["field"] != "id" {
				t.Fatalf("bob %s %s%s: %d %v", c.method, id, c.path, rec.Code, b)
			}
		}
	}
	// One element's cancel, then the array's: every unfinished element.
	if rec, _ := send(t, s, "POST", "/v1/tasks/"+el+"/cancel", "ann-token", ""); rec.Code != 202 {
		t.Fatalf("element's cancel: %d %s", rec.Code, rec.Body)
	}
	if e, _ := st.GetTask(ctx, el); e.State != api.TaskCancelled {
		t.Fatalf("a waiting element cancelled: %s", e.State)
	}
	if a, _ := st.GetTask(ctx, tk.ID); a.CancelAt != nil {
		t.Fatal("an element's cancel cancelled its array")
	}
	if rec, _ := send(t, s, "POST", "/v1/tasks/"+tk.ID+"/cancel", "ann-token", ""); rec.Code != 202 {
		t.Fatalf("array's cancel: %d %s", rec.Code, rec.Body)
	}
	elems, _, _ := st.ListArrayElementsAfter(ctx, tk.ID, -1, 1000)
	for _, e := range elems {
		if e.State != api.TaskCancelled || e.CancelAt == nil {
			t.Fatalf("after the array's cancel: %s is %s", e.ID, e.State)
		}
	}
}

// A GET of an array of 10,000 elements answers a page of them (100 unless
// ?limit says), with the cursor of the next; the pages, followed, give
// every element once, in order; the counts on every page are the whole
// array's.
func TestTaskArrayElementsPaged(t *testing.T) {
	s, _ := taskServer(t)
	rec, _ := send(t, s, "POST", "/v1/tasks", "ann-token", `{"profile":"seat","command":["true"],"time_limit":"1h","array":"0-9999%8"}`)
	var tk api.Task
	if rec.Code != 202 || json.Unmarshal(rec.Body.Bytes(), &tk) != nil {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := send(t, s, "POST", "/v1/tasks/"+tk.ID+"_7000/cancel", "ann-token", ""); rec.Code != 202 {
		t.Fatalf("element's cancel: %d %s", rec.Code, rec.Body)
	}
	wantCounts := map[string]int{api.TaskPending: 9999, api.TaskCancelled: 1}
	get := func(query string) api.Task {
		t.Helper()
		rec, _ := send(t, s, "GET", "/v1/tasks/"+tk.ID+query, "ann-token", "")
		var got api.Task
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
			t.Fatalf("GET %s: %d %s", query, rec.Code, rec.Body)
		}
		if !maps.Equal(got.ArrayCounts, wantCounts) {
			t.Fatalf("GET %s: counts %v, want %v", query, got.ArrayCounts, wantCounts)
		}
		return got
	}
	first := get("")
	if len(first.Elements) != 100 || first.Elements[0].ID != tk.ID+"_0" || first.ElementsNext != "99" {
		t.Fatalf("first page: %d elements, next %q", len(first.Elements), first.ElementsNext)
	}
	seen, next, pages := 0, "", 0
	for {
		q := "?limit=1000"
		if next != "" {
			q += "&after=" + next
		}
		page := get(q)
		pages++
		for _, e := range page.Elements {
			if e.ArrayIndex == nil || *e.ArrayIndex != seen || e.ID != fmt.Sprintf("%s_%d", tk.ID, seen) {
				t.Fatalf("page %d: element %s where %d was due", pages, e.ID, seen)
			}
			seen++
		}
		if next = page.ElementsNext; next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("the pages do not end")
		}
	}
	if seen != 10000 || pages != 10 {
		t.Fatalf("%d elements in %d pages, want 10000 in 10", seen, pages)
	}
	if last := get("?after=9998"); len(last.Elements) != 1 || last.ElementsNext != "" {
		t.Fatalf("the last element's page: %d elements, next %q", len(last.Elements), last.ElementsNext)
	}
	for _, q := range []struct{ query, field string }{{"?limit=0", "limit"}, {"?limit=1001", "limit"}, {"?limit=x", "limit"},
		{"?after=-1", "after"}, {"?after=x", "after"}, {"?after=1000000", "after"}} {
		if rec, b := send(t, s, "GET", "/v1/tasks/"+tk.ID+q.query, "ann-token", ""); rec.Code != 400 || b["field"] != q.field {
			t.Errorf("GET %s: %d %v, want 400 naming %s", q.query, rec.Code, b, q.field)
		}
	}
}

// Each hostile request on every task route is a 4xx naming its field.
func TestTaskRoutesHostile(t *testing.T) {
	s, st := taskServer(t)
	rec, _ := send(t, s, "POST", "/v1/tasks", "ann-token", `{"profile":"seat","command":["true"],"time_limit":"1h"}`)
	var tk api.Task
	if rec.Code != 202 || json.Unmarshal(rec.Body.Bytes(), &tk) != nil {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"GET", "/v1/tasks/" + strings.Repeat("x", 10000), "", 404, "id"},
		{"GET", "/v1/tasks/%00", "", 404, "id"},
		{"GET", "/v1/tasks/" + tk.ID + "_0", "", 404, "id"},
		{"GET", "/v1/tasks?limit=1000000000000", "", 400, "limit"},
		{"GET", "/v1/tasks/" + tk.ID + "/logs?offset=99999999999999999999", "", 400, "offset"},
		{"POST", "/v1/tasks/" + tk.ID + "/cancel", `{"now":true}`, 400, "now"},
		{"POST", "/v1/tasks/" + tk.ID + "/cancel", `{"x":"` + strings.Repeat("a", 1<<20) + `"}`, 413, ""},
	} {
		rec, b := send(t, s, c.method, c.path, "ann-token", c.body)
		if rec.Code != c.status || (c.field != "" && b["field"] != c.field) {
			t.Fatalf("%s %.60s: %d %v; want %d field %q", c.method, c.path, rec.Code, b, c.status, c.field)
		}
	}
	if got, _ := st.GetTask(context.Background(), tk.ID); got.CancelAt != nil {
		t.Fatal("a refused cancel cancelled")
	}
}

// LaunchTask makes the VM of a waiting element as the submit would have:
// its name tells the element and attempt, its spec names the task.
func TestLaunchTask(t *testing.T) {
	s, st := taskServer(t)
	ctx := context.Background()
	rec, _ := send(t, s, "POST", "/v1/tasks", "ann-token", `{"profile":"seat","command":["true"],"time_limit":"90m","array":"4,7"}`)
	var tk api.Task
	if rec.Code != 202 || json.Unmarshal(rec.Body.Bytes(), &tk) != nil {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	el, err := st.GetTask(ctx, tk.ID+"_7")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LaunchTask(ctx, el); err != nil {
		t.Fatal(err)
	}
	el, _ = st.GetTask(ctx, el.ID)
	vm, err := st.GetVM(ctx, el.VMID)
	if err != nil {
		t.Fatal(err)
	}
	if taskOfVM(vm) != el.ID || vm.Hours != 2 || vm.Owner != "ann" || !strings.HasSuffix(vm.Name, "-7") || vm.State != store.VMQueued {
		t.Fatalf("the element's VM = %+v", vm)
	}
	if err := s.LaunchTask(ctx, el); err == nil {
		t.Fatal("a task launched twice")
	}
	el.Profile = "gone"
	if err := s.LaunchTask(ctx, el); err == nil || !strings.Contains(fmt.Sprint(err), "not configured") {
		t.Fatalf("a gone profile: %v", err)
	}
}

// A task's checks against its profile: a warning signal a Windows guest's
// runner cannot send is refused naming signal, before (and apart from)
// today's refusal of Windows profiles, so it holds once they are allowed.
func TestCheckTaskProfile(t *testing.T) {
	linux := &config.Profile{Name: "lin", OS: "linux", CloudInit: &config.CloudInit{Template: "t"}}
	win := &config.Profile{Name: "win", OS: "windows", CloudInit: &config.CloudInit{Template: "t"}}
	bare := &config.Profile{Name: "bare", OS: "linux"}
	for _, tc := range []struct {
		p           *config.Profile
		sig         string
		hours       int
		field, want string
	}{
		{linux, "USR1", 1, "", ""},
		{linux, "", 1, "", ""},
		{win, "USR1", 1, "signal", "profile win runs Windows, where a task's command can be warned with TERM or INT only (Ctrl+Break), not USR1"},
		{win, "HUP", 1, "signal", "not HUP"},
		{win, "TERM", 1, "profile", "tasks need a Linux profile"},
		{win, "INT", 1, "profile", "tasks need a Linux profile"},
		{win, "", 1, "profile", "tasks need a Linux profile"},
		{bare, "USR1", 1, "profile", "no cloud-init seed"},
		{linux, "", 100000, "time_limit", "allows at most"},
	} {
		field, detail := checkTaskProfile(tc.p, tc.sig, tc.hours)
		if field != tc.field || !strings.Contains(detail, tc.want) {
			t.Errorf("%s, signal %q, %dh: %s %q; want %s %q", tc.p.Name, tc.sig, tc.hours, field, detail, tc.field, tc.want)
		}
	}
}

// At submit, a Windows profile's task with a warning signal other than
// TERM or INT is refused naming signal, and nothing is made.
func TestCreateTaskWindowsSignal(t *testing.T) {
	s, st := taskServer(t)
	seat := *s.config().Profiles["seat"]
	seat.Name, seat.OS = "winseat", "windows"
	s.config().Profiles["winseat"] = &seat
	body := func(sig string) string {
		return `{"profile":"winseat","time_limit":"1h","command":["train.exe"],"signal":"` + sig + `"}`
	}
	for _, tc := range []struct{ sig, field string }{{"USR1@10m", "signal"}, {"HUP", "signal"}, {"TERM@5m", "profile"}, {"INT", "profile"}} {
		rec, b := send(t, s, "POST", "/v1/tasks", "ann-token", body(tc.sig))
		if rec.Code != 422 || b["field"] != tc.field {
			t.Errorf("signal %s: %d %v; want 422 naming %s", tc.sig, rec.Code, b, tc.field)
		}
	}
	if vms, tasks := countRows(t, st); vms != 0 || tasks != 0 {
		t.Fatalf("refused tasks made %d VMs and %d tasks", vms, tasks)
	}
}
