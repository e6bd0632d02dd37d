package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

func TestEventsCommand(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	c.must("create", "seat", "--name", "box", "--wait")

	// Replay from the start: creation, then each state up to running
	// (the test worker queues the VM once, with a reason).
	out := c.must("events", "--after", "0", "--count", "5", "--vm", "box")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "vm.created") || !strings.Contains(lines[4], "vm.state  running") {
		t.Errorf("events:\n%s", out)
	}
	out = c.must("events", "--after", "0", "--count", "2", "--json")
	var seen []api.Event
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var e api.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		seen = append(seen, e)
	}
	if len(seen) != 2 || seen[0].ID != 1 || seen[1].ID != 2 || seen[0].Owner != "ann" {
		t.Errorf("--json: %+v", seen)
	}
	if _, errOut, code := c.run("events", "--vm", "nope"); code != 1 || !strings.Contains(errOut, `no VM "nope"`) {
		t.Errorf("unknown VM: exit %d %q", code, errOut)
	}
	if _, _, code := c.run("events", "--json", "extra"); code != 2 {
		t.Errorf("positional argument: exit %d", code)
	}
}
