package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func TestTaskCommands(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Profiles: clienttest.Profiles + `
template "plain" {
  content = "#cloud-config\n"
}
profile "job" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  cloud_init { template = "plain" }
}
`})
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
