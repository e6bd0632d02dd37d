package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/task"
)

func taskServer(t *testing.T) (*Server, *store.Store) {
	t.Helper()
	s, st, _ := reservationServer(t)
	s.TaskLogs = t.TempDir()
	return s, st
}

func countRows(t *testing.T, st *store.Store) (vms, tasks int) {
	t.Helper()
	ctx := context.Background()
	page, err := st.ListVMs(ctx, store.VMFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := st.ListTasks(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(page.VMs), len(ts)
}

// Every bad task is refused naming its field, and nothing is made.
func TestCreateTaskValidation(t *testing.T) {
	s, st := taskServer(t)
	body := func(extra string) string { return `{"profile":"seat","time_limit":"1h"` + extra + `}` }
	huge := strings.Repeat("a", 1<<20)
	tests := []struct {
		name, body     string
		status         int
		problem, field string
	}{
		{"no profile", `{"command":["true"],"time_limit":"1h"}`, 422, "validation", "profile"},
		{"unknown profile", `{"profile":"nope","command":["true"],"time_limit":"1h"}`, 404, "not-found", "profile"},
		{"another's profile", `{"profile":"bobs","command":["true"],"time_limit":"1h"}`, 404, "not-found", "profile"},
		{"no cloud-init", `{"profile":"whole","command":["true"],"time_limit":"1h"}`, 422, "validation", "profile"},
		{"no command", body(``), 422, "validation", "command"},
		{"command and script", body(`,"command":["true"],"script":"true"`), 422, "validation", "command"},
		{"empty program", body(`,"command":[""]`), 422, "validation", "command[0]"},
		{"command of 1 MB", body(`,"command":["echo","` + huge + `"]`), 413, "too-large", ""},
		{"command over 64 KiB", body(`,"command":["echo","` + strings.Repeat("a", 70<<10) + `"]`), 422, "validation", "command"},
		{"script over 64 KiB", body(`,"script":"` + strings.Repeat("a", 70<<10) + `"`), 422, "validation", "script"},
		{"NUL in an argument", body(`,"command":["echo","a\u0000b"]`), 422, "validation", "command[1]"},
		{"NUL in the script", body(`,"script":"echo a\u0000"`), 422, "validation", "script"},
		{"NUL in env", body(`,"command":["true"],"env":{"A":"\u0000"}`), 422, "validation", "env.A"},
		{"bad env name", body(`,"command":["true"],"env":{"A B":"x"}`), 422, "validation", "env"},
		{"heredoc end", body(`,"script":"echo\nGPUVM_TASK_SCRIPT_END\nrm -rf /"`), 422, "validation", "command"},
		{"no time limit", `{"profile":"seat","command":["true"]}`, 422, "validation", "time_limit"},
		{"10^9 hours", `{"profile":"seat","command":["true"],"time_limit":"1000000000h"}`, 422, "validation", "time_limit"},
		{"beyond the profile", `{"profile":"seat","command":["true"],"time_limit":"100000h"}`, 422, "validation", "time_limit"},
		{"negative", `{"profile":"seat","command":["true"],"time_limit":"-1h"}`, 422, "validation", "time_limit"},
		{"a number", `{"profile":"seat","command":["true"],"time_limit":3600}`, 400, "bad-request", "time_limit"},
		{"kill wait", body(`,"command":["true"],"kill_wait":"1h"`), 422, "validation", "kill_wait"},
		{"unknown field", body(`,"command":["true"],"gpus":4`), 400, "bad-request", "gpus"},
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
}

// A task is made with its VM through the VMs' path, owned like a VM; its
// logs are read back, followed; a cancel is recorded.
func TestTaskRoutes(t *testing.T) {
	s, st := taskServer(t)
	ctx := context.Background()
	rec, _ := send(t, s, "POST", "/v1/tasks", "ann-token",
		`{"profile":"seat","command":["python","train.py","--epochs","30"],"env":{"EPOCHS":"30"},"time_limit":"90m"}`)
	if rec.Code != 202 {
		t.Fatalf("submit: %d %s", rec.Code, rec.Body)
	}
	var tk api.Task
	if err := json.Unmarshal(rec.Body.Bytes(), &tk); err != nil {
		t.Fatal(err)
	}
	if tk.State != api.TaskPending || tk.Owner != "ann" || tk.TimeLimit != 5400 || tk.KillWait != 30 ||
		strings.Join(tk.Command, " ") != "python train.py --epochs 30" || tk.Env["EPOCHS"] != "30" || rec.Header().Get("Location") != "/v1/tasks/"+tk.ID {
		t.Fatalf("task = %+v", tk)
	}
	vm, err := st.GetVM(ctx, tk.VMID)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Hours != 2 || vm.Owner != "ann" || !strings.HasPrefix(vm.Name, "task-") || taskOfVM(vm) != tk.ID || vm.State != store.VMQueued {
		t.Fatalf("its VM = %+v", vm)
	}
	// Owned like VMs: bob sees nothing of it, the admin sees it.
	for _, c := range []struct{ method, path string }{{"GET", ""}, {"GET", "/logs"}, {"POST", "/cancel"}} {
		if rec, b := send(t, s, c.method, "/v1/tasks/"+tk.ID+c.path, "bob-token", ""); rec.Code != 404 || b["field"] != "id" {
			t.Fatalf("bob %s %s: %d %v", c.method, c.path, rec.Code, b)
		}
	}
	if rec, _ := send(t, s, "GET", "/v1/tasks/"+tk.ID, "admin-token", ""); rec.Code != 200 {
		t.Fatalf("admin: %d", rec.Code)
	}
	var list api.TaskList
	rec, _ = send(t, s, "GET", "/v1/tasks", "bob-token", "")
	if json.Unmarshal(rec.Body.Bytes(), &list) != nil || len(list.Items) != 0 {
		t.Fatalf("bob's list: %s", rec.Body)
	}
	rec, _ = send(t, s, "GET", "/v1/tasks?owner=ann", "admin-token", "")
	if json.Unmarshal(rec.Body.Bytes(), &list) != nil || len(list.Items) != 1 || list.Items[0].ID != tk.ID {
		t.Fatalf("admin's list: %s", rec.Body)
	}
	if rec, b := send(t, s, "GET", "/v1/tasks?limit=0", "ann-token", ""); rec.Code != 400 || b["field"] != "limit" {
		t.Fatalf("limit 0: %d %v", rec.Code, b)
	}
	// The task's VM is not started, stopped or extended by hand.
	for _, a := range []string{"start", "stop", "reboot", "extend"} {
		body := ""
		if a == "extend" {
			body = `{"hours":1}`
		}
		if rec, b := send(t, s, "POST", "/v1/vms/"+vm.ID+"/actions/"+a, "ann-token", body); rec.Code != 409 || !strings.Contains(fmt.Sprint(b["detail"]), "gpuvm task cancel "+tk.ID) {
			t.Fatalf("%s of the task's VM: %d %v", a, rec.Code, b)
		}
	}
	// Logs: what the supervisor kept, from an offset.
	if err := os.WriteFile(task.LogPath(s.TaskLogs, tk.ID), []byte("line 1\nline 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if rec, _ := send(t, s, "GET", "/v1/tasks/"+tk.ID+"/logs", "ann-token", ""); rec.Code != 200 || rec.Body.String() != "line 1\nline 2\n" {
		t.Fatalf("logs: %d %q", rec.Code, rec.Body)
	}
	if rec, _ := send(t, s, "GET", "/v1/tasks/"+tk.ID+"/logs?offset=7", "ann-token", ""); rec.Body.String() != "line 2\n" {
		t.Fatalf("logs from 7: %q", rec.Body)
	}
	for _, q := range []string{"offset=-1", "offset=x", "follow=yes"} {
		if rec, b := send(t, s, "GET", "/v1/tasks/"+tk.ID+"/logs?"+q, "ann-token", ""); rec.Code != 400 || b["field"] != strings.Split(q, "=")[0] {
			t.Fatalf("logs?%s: %d %v", q, rec.Code, b)
		}
	}
	// Cancel: recorded (the supervisor acts on it); twice is the same.
	for i := 0; i < 2; i++ {
		if rec, _ := send(t, s, "POST", "/v1/tasks/"+tk.ID+"/cancel", "ann-token", ""); rec.Code != 202 {
			t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
		}
	}
	got, _ := st.GetTask(ctx, tk.ID)
	if got.CancelAt == nil {
		t.Fatalf("cancel not recorded: %+v", got)
	}
	// Follow ends when the task has ended and its output is all written.
	code := 0
	if err := st.UpdateTask(ctx, tk.ID, nil, store.TaskUpdate{State: api.TaskCancelled, ExitCode: &code, Reason: "its VM was deleted before the command ended"}); err != nil {
		t.Fatal(err)
	}
	// Its reason, in the reader's language.
	if rec, b := send(t, s, "GET", "/v1/tasks/"+tk.ID, "ann-token", "", "Accept-Language", "zh-CN"); rec.Code != 200 || b["reason"] != "命令结束前其虚拟机已被删除" {
		t.Fatalf("in Chinese: %d %v", rec.Code, b["reason"])
	}
	done := make(chan string)
	go func() {
		rec, _ := send(t, s, "GET", "/v1/tasks/"+tk.ID+"/logs?follow=1", "ann-token", "")
		done <- rec.Body.String()
	}()
	select {
	case out := <-done:
		if out != "line 1\nline 2\n" {
			t.Fatalf("followed: %q", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow of an ended task did not end")
	}
	if rec, _ := send(t, s, "POST", "/v1/tasks/"+tk.ID+"/cancel", "ann-token", ""); rec.Code != 409 {
		t.Fatalf("cancel of an ended task: %d", rec.Code)
	}
	if rec, b := send(t, s, "GET", "/v1/tasks/"+filepath.Join("..", "x"), "ann-token", ""); rec.Code != 404 {
		t.Fatalf("a path as id: %d %v", rec.Code, b)
	}
}
