package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func TestTaskCommands(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Profiles: clienttest.TaskProfiles})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	id := strings.TrimSpace(ann.must("task", "submit", "job", "--time", "90m", "--env", "EPOCHS=30", "-q", "--", "python", "train.py", "--epochs", "30"))
	var got api.Task
	decodeStrict(t, ann.must("task", "show", id, "--json"), &got)
	if strings.Join(got.Command, " ") != "python train.py --epochs 30" || got.Env["EPOCHS"] != "30" || got.TimeLimit != 5400 || got.State != api.TaskPending {
		t.Fatalf("submitted = %+v", got)
	}
	script := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	second := strings.TrimSpace(ann.must("task", "submit", "job", "--time", "1h", "--script", script, "--quiet"))
	if out := ann.must("task", "ls"); !strings.Contains(out, id) || !strings.Contains(out, second) || !strings.Contains(out, "1h30m0s") {
		t.Fatalf("ls:\n%s", out)
	}
	if out := ann.must("task", "show", second); !strings.Contains(out, "a script of 18 bytes") {
		t.Fatalf("show:\n%s", out)
	}
	if out, _, code := admin.run("task", "ls", "--owner", "ann", "-q"); code != 0 || strings.Count(out, "\n") != 2 {
		t.Fatalf("admin ls: %d\n%s", code, out)
	}
	for _, bad := range [][]string{
		{"task", "submit", "job", "--", "true"},                               // no --time
		{"task", "submit", "job", "--time", "1h"},                             // no command
		{"task", "submit", "job", "extra", "--time", "1h", "--", "true"},      // two profiles
		{"task", "submit", "job", "--time", "1h", "--env", "X", "--", "true"}, // not NAME=VALUE
		{"task", "submit", "job", "--time", "1h", "--after", "soon", "--", "true"},
	} {
		if _, errOut, code := ann.run(bad...); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", bad, code, errOut)
		}
	}
	if _, errOut, code := ann.run("task", "submit", "job", "--time", "1000000000h", "--", "true"); code != 1 || !strings.Contains(errOut, "time_limit") {
		t.Errorf("10^9 hours: exit %d\n%s", code, errOut)
	}
	if out := ann.must("task", "cancel", id); !strings.Contains(out, "cancel asked") {
		t.Fatalf("cancel: %s", out)
	}
	// logs -f of an ended task prints its output, says how it ended,
	// and fails unless it completed.
	code3, sig := 3, 0
	if err := env.Store.UpdateTask(context.Background(), second, nil, store.TaskUpdate{State: api.TaskFailed, Reason: "the command exited 3", ExitCode: &code3, Signal: &sig}); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := ann.run("task", "logs", "-f", second); code != 1 || !strings.Contains(errOut, "failed: the command exited 3") {
		t.Errorf("logs -f: exit %d\n%s", code, errOut)
	}
}

// gpuvm task show says when a task started, then when it ended: the same
// lines in the same order each time.
func TestPrintTaskTimesInOrder(t *testing.T) {
	start := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	end := start.Add(3 * time.Hour)
	task := &api.Task{ID: "t-1", Owner: "ann", Profile: "job", Command: []string{"true"}, State: api.TaskCompleted,
		TimeLimit: 4 * 3600, CreatedAt: start, StartedAt: &start, EndedAt: &end}
	var first string
	for i := range 20 {
		var b strings.Builder
		if err := printTask(&b, task); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		s, e := strings.Index(out, "Started:"), strings.Index(out, "Ended:")
		if s < 0 || e < 0 || s > e {
			t.Fatalf("gpuvm task show printed Started at %d and Ended at %d:\n%s", s, e, out)
		}
		if i == 0 {
			first = out
		} else if out != first {
			t.Fatalf("two calls printed differently:\n%s\n---\n%s", first, out)
		}
	}
}

// An array: one line in ls with its counts; show lists its elements; an
// element is ID_INDEX; bad arrays, retries and signals are refused naming
// the field.
func TestTaskArrayCommands(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Profiles: clienttest.TaskProfiles})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	id := strings.TrimSpace(ann.must("task", "submit", "job", "--time", "1h", "--array", "0-5%2", "--retries", "2", "--retry-on", "2,137,node_fail",
		"--signal", "USR1@10m", "-q", "--", "sh", "-c", "echo $TASK_INDEX"))
	out := ann.must("task", "ls")
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, "array 0-5%2: 6 pending") {
		t.Fatalf("ls:\n%s", out)
	}
	out = ann.must("task", "show", id)
	for _, want := range []string{"Array:", "0-5%2 (6 pending)", id + "_5", "Attempt:", "1 of at most 3 (retried on 2,137,node_fail)", "Warning signal:", "USR1@600s"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show lacks %q:\n%s", want, out)
		}
	}
	// A longer array: the first 100 elements and how many more; --all
	// pages through them all.
	long := strings.TrimSpace(ann.must("task", "submit", "job", "--time", "1h", "--array", "0-149", "-q", "--", "true"))
	out = ann.must("task", "show", long)
	if !strings.Contains(out, long+"_99 ") || strings.Contains(out, long+"_100 ") || !strings.Contains(out, "… and 50 more elements: gpuvm task show "+long+" --all") {
		t.Fatalf("show of an array of 150:\n%s", out)
	}
	if out := ann.must("task", "show", long, "--all"); !strings.Contains(out, long+"_149 ") || strings.Contains(out, "more elements") {
		t.Fatalf("show --all of an array of 150:\n%s", out)
	}
	var whole api.Task
	decodeStrict(t, ann.must("task", "show", long, "--all", "--json"), &whole)
	if len(whole.Elements) != 150 || whole.ElementsNext != "" || whole.ArrayCounts[api.TaskPending] != 150 {
		t.Fatalf("show --all --json: %d elements, next %q, counts %v", len(whole.Elements), whole.ElementsNext, whole.ArrayCounts)
	}
	if out := ann.must("task", "show", id+"_4"); !strings.Contains(out, "4 of array "+id) {
		t.Fatalf("show of an element:\n%s", out)
	}
	if out := ann.must("task", "cancel", id); !strings.Contains(out, "cancel asked") {
		t.Fatalf("cancel: %s", out)
	}
	if out := ann.must("task", "show", id+"_4", "-q"); strings.TrimSpace(out) != api.TaskCancelled {
		t.Fatalf("an element after the array's cancel: %s", out)
	}
	for _, bad := range []struct{ flag, value, field string }{
		{"--array", "0-1000000000", "array"}, {"--array", "5-3", "array"}, {"--retries", "11", "retries"},
		{"--signal", "FOO", "signal"}, {"--signal", "USR1@2h", "signal"},
	} {
		args := []string{"task", "submit", "job", "--time", "1h", bad.flag, bad.value}
		if bad.flag == "--retries" {
			args = append(args, "--retry-on", "2")
		}
		if _, errOut, code := ann.run(append(args, "--", "true")...); code != 1 || !strings.Contains(errOut, bad.field) {
			t.Errorf("%s %s: exit %d\n%s", bad.flag, bad.value, code, errOut)
		}
	}
	if _, _, code := ann.run("task", "submit", "job", "--time", "1h", "--array", "0-3", "-f", "--", "true"); code != 2 {
		t.Errorf("--follow of an array: exit %d, want 2", code)
	}
}

// A pending task in the owner's own VM: show prints its estimated start,
// the VM and the steps done; ls adds the estimate to its reason.
func TestPrintTaskInAndEstimate(t *testing.T) {
	at := time.Date(2026, 12, 1, 22, 30, 0, 0, time.Local)
	task := &api.Task{ID: "t1", Owner: "ann", Profile: "h100-whole", Command: []string{"train"}, State: api.TaskPending,
		Reason: "waits for a whole H100", EstimatedStart: &at, EstimatedStartStale: true, In: "vm-1", InProfile: "desk-1g",
		InSteps: []string{"VM desk resized from profile desk-1g to h100-whole"}}
	var b strings.Builder
	if err := printTask(&b, task); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Estimated start:  2026-12-01 22:30:00 (from before the queue last changed)", "In VM:", "vm-1 (its own profile desk-1g)",
		"step:", "VM desk resized from profile desk-1g to h100-whole"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("show lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := printTasks(&b, &api.TaskList{Items: []api.Task{*task}}, outputOpts{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "waits for a whole H100; starts about 2026-12-01 22:30:00") {
		t.Errorf("ls:\n%s", b.String())
	}
}

// show --all follows the pages of an array's elements; with --quiet,
// which prints the state alone, it asks for the task once.
func TestTaskShowAllQuiet(t *testing.T) {
	for _, tc := range []struct {
		args []string
		out  string
		gets []string // the ?after of each GET
	}{
		{[]string{"--all", "--quiet"}, "pending\n", []string{""}},
		{[]string{"--quiet"}, "pending\n", []string{""}},
		{[]string{"--all", "--json"}, `"arr_1"`, []string{"", "0"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var mu sync.Mutex
			var gets []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != "GET" || r.URL.Path != "/v1/tasks/arr" {
					w.WriteHeader(404)
					return
				}
				mu.Lock()
				gets = append(gets, r.URL.Query().Get("after"))
				mu.Unlock()
				i0, i1 := 0, 1
				tk := api.Task{ID: "arr", State: api.TaskPending, Array: "0-1", ArrayCounts: map[string]int{api.TaskPending: 2}}
				if r.URL.Query().Get("after") == "" {
					tk.Elements, tk.ElementsNext = []api.Task{{ID: "arr_0", State: api.TaskPending, ArrayIndex: &i0}}, "0"
				} else {
					tk.Elements = []api.Task{{ID: "arr_1", State: api.TaskPending, ArrayIndex: &i1}}
				}
				json.NewEncoder(w).Encode(tk)
			}))
			defer srv.Close()
			c := newCLI(t, map[string]string{"GPUVM_URL": srv.URL, "GPUVM_TOKEN": "t"})
			out := c.must(append([]string{"task", "show", "arr"}, tc.args...)...)
			if !strings.Contains(out, tc.out) || !slices.Equal(gets, tc.gets) {
				t.Errorf("printed %q after GETs after %q; want %q after %q", out, gets, tc.out, tc.gets)
			}
		})
	}
}
