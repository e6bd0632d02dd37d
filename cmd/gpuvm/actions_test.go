package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func TestActionCommands(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	var box api.VM
	decodeStrict(t, c.must("create", "seat", "--name", "box", "--hours", "3", "--wait", "--json"), &box)

	// Refusals: exit 1 with the server's words; usage errors: exit 2.
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"start a running VM", []string{"start", "box"}, 1, `VM "box" is running: only a stopped VM can be started`},
		{"unknown VM", []string{"stop", "nope"}, 1, `Not found: no VM "nope"`},
		{"beyond the maximum", []string{"extend", "box", "--hours", "6"}, 1, "not valid: profile seat allows a lease of at most 8 hours; VM box has 3, so at most 5 more\n"},
		{"extend without hours", []string{"extend", "box"}, 2, "--hours N, at least 1"},
		{"extend by nothing", []string{"extend", "box", "--hours", "0"}, 2, "--hours N, at least 1"},
		{"stop without VM", []string{"stop"}, 2, "takes one VM name or ID"},
		{"reboot two VMs", []string{"reboot", "a", "b"}, 2, "takes one VM name or ID"},
		{"json and quiet", []string{"stop", "box", "--json", "--quiet"}, 2, "exclude each other"},
		{"extend has no quiet", []string{"extend", "box", "--hours", "1", "--quiet"}, 2, "unknown flag: --quiet"},
		{"bad start time", []string{"create", "seat", "--start-at", "tomorrow"}, 2, `--start-at "tomorrow": give an RFC 3339 time`},
		{"start time past", []string{"create", "seat", "--start-at", "2020-01-01T00:00:00Z"}, 1, "is not in the future"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := c.run(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d %q, want %d %q", code, errOut, tc.code, tc.want)
			}
		})
	}

	// extend: the new lease, or the VM as JSON.
	out := c.must("extend", "box", "--hours", "2")
	if !strings.Contains(out, "Extended VM box by 2 hours: its lease is 5 hours, until ") || !strings.Contains(out, "(5h left)") {
		t.Errorf("extend: %q", out)
	}
	var vm api.VM
	decodeStrict(t, c.must("extend", box.ID, "--hours", "1", "--json"), &vm)
	if vm.Hours != 6 || vm.LeaseEnd == nil || !vm.LeaseEnd.Equal(box.LeaseEnd.Add(3*time.Hour)) {
		t.Errorf("extend --json: %+v", vm)
	}

	// stop, reboot: a line, the operation's ID, the answer as JSON. (The
	// test server's worker finishes their operations without a hypervisor.)
	out = c.must("stop", "box")
	if !strings.Contains(out, "Stopping VM box ("+box.ID+"): operation ") || !strings.Contains(out, "It gives its GPU back and keeps its disk; its lease runs on; 'gpuvm start box' queues it for a GPU again.") {
		t.Errorf("stop: %q", out)
	}
	waitFor(t, func() bool {
		ops, _ := env.Store.ListUnfinishedOperations(context.Background())
		return len(ops) == 0
	})
	id := strings.TrimSpace(c.must("reboot", "box", "--quiet"))
	// A second action while the first is unfinished is refused (409):
	// let the test worker finish it.
	waitFor(t, func() bool {
		ops, _ := env.Store.ListUnfinishedOperations(context.Background())
		return len(ops) == 0
	})
	var op api.Operation
	decodeStrict(t, c.must("reboot", "box", "--wait", "--json"), &op)
	if op.Kind != "reboot" || op.State != "done" || op.ID == id || len(id) < 10 {
		t.Errorf("reboot --quiet %q, then --wait --json %+v", id, op)
	}
	var resp api.VMActionResponse
	st := env.Store
	cur, _ := st.GetVM(context.Background(), box.ID)
	if _, err := st.UpdateVMState(context.Background(), box.ID, cur.Version, store.VMUpdate{State: store.VMStopped}); err != nil {
		t.Fatal(err)
	}
	// An action while another runs names it; extend is not held up.
	env.Worker.Pause()
	decodeStrict(t, c.must("start", "box", "--json"), &resp)
	if resp.Operation.Kind != "start" || resp.VM.ID != box.ID || resp.VM.State != "stopped" {
		t.Errorf("start --json: %+v", resp)
	}
	if _, errOut, code := c.run("extend", "box", "--hours", "1"); code != 0 {
		t.Errorf("extend during a start: exit %d %q", code, errOut)
	}
	if _, errOut, code := c.run("stop", "box"); code != 1 || !strings.Contains(errOut, "unfinished start operation ("+resp.Operation.ID) {
		t.Errorf("stop during a start: exit %d %q", code, errOut)
	}
	env.Worker.Paused.Store(false)

	// create --start-at: queued until then, saying so.
	var created api.CreateVMResponse
	before := time.Now()
	decodeStrict(t, c.must("create", "seat", "--name", "later", "--start-at", "2h", "--json"), &created)
	if s := created.VM.StartAt; s == nil || s.Before(before.Add(2*time.Hour).Add(-time.Second)) || s.After(time.Now().Add(2*time.Hour)) ||
		!strings.HasPrefix(created.VM.Reason, "starts at ") {
		t.Errorf("create --start-at 2h: %+v", created.VM)
	}

	// Completion of VM names.
	if got := c.must("__complete", "stop", "b"); !strings.HasPrefix(got, "box\t") {
		t.Errorf("complete stop b: %q", got)
	}
	if got := c.must("__complete", "extend", ""); !strings.Contains(got, "box\t") || !strings.Contains(got, "later\t") {
		t.Errorf("complete extend: %q", got)
	}
}

// A scripted server: the steps of stop --wait, one per poll, then the VM.
func TestActionWait(t *testing.T) {
	steps := []api.Operation{
		{State: "pending"},
		{State: "running", Step: "shut down domain"},
	}
	for _, tc := range []struct {
		name, action string
		final        api.Operation
		vm           api.VM
		code         int
		want, stderr []string
	}{
		{"stop", "stop", api.Operation{State: "done"}, api.VM{State: "stopped", Reason: "stopped by ann", Hours: 2}, 0,
			[]string{"stop pending\n", "stop running: shut down domain\n", "stop done\n", "VM box is stopped (stopped by ann). It keeps its disk; lease 2 hours"}, nil},
		{"start", "start", api.Operation{State: "done"}, api.VM{State: "running"}, 0,
			[]string{"start running: shut down domain\n", "start done\n", "VM box is running.\n"}, nil},
		{"reboot", "reboot", api.Operation{State: "done"}, api.VM{State: "running"}, 0,
			[]string{"reboot done\n", "VM box was asked to restart; it is running.\n"}, nil},
		{"fails", "start", api.Operation{State: "failed", Error: "the mdev could not be made"}, api.VM{State: "stopped"}, 1,
			[]string{"start failed: the mdev could not be made\n"}, []string{"gpuvm: the start of VM box failed: the mdev could not be made"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				vm := tc.vm
				vm.ID, vm.Name, vm.Owner, vm.Profile = "v1", "box", "ann", "seat"
				switch {
				case r.Method == "POST" && r.URL.Path == "/v1/vms/box/actions/"+tc.action:
					w.WriteHeader(202)
					json.NewEncoder(w).Encode(api.VMActionResponse{VM: vm, Operation: api.Operation{ID: "o1", VMID: "v1", Kind: tc.action, State: "pending"}})
				case r.Method == "GET" && r.URL.Path == "/v1/operations/o1":
					s := append(append([]api.Operation{}, steps...), tc.final)
					op := s[min(n, len(s)-1)]
					n++
					op.ID, op.VMID, op.Kind = "o1", "v1", tc.action
					json.NewEncoder(w).Encode(op)
				case r.Method == "GET" && r.URL.Path == "/v1/vms/v1":
					json.NewEncoder(w).Encode(vm)
				default:
					w.WriteHeader(404)
				}
			}))
			defer srv.Close()
			c := newCLI(t, map[string]string{"GPUVM_URL": srv.URL, "GPUVM_TOKEN": "t"})
			out, errOut, code := c.run(tc.action, "box", "--wait")
			if code != tc.code {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%q", w, out)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%q", w, errOut)
				}
			}
		})
	}
}

func TestParseStartAt(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	local := func(s string) time.Time {
		t, err := time.ParseInLocation("2006-01-02 15:04", s, time.Local)
		if err != nil {
			panic(err)
		}
		return t
	}
	for _, tc := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{"2026-06-02T18:00:00Z", time.Date(2026, 6, 2, 18, 0, 0, 0, time.UTC), ""},
		{"2026-06-02T18:00:00+02:00", time.Date(2026, 6, 2, 16, 0, 0, 0, time.UTC), ""},
		{"2026-06-02 18:00", local("2026-06-02 18:00"), ""},
		{"2026-06-02T18:00", local("2026-06-02 18:00"), ""},
		{"2h30m", now.Add(150 * time.Minute), ""},
		{"+90m", now.Add(90 * time.Minute), ""},
		{"-1h", time.Time{}, "a delay must be positive"},
		{"0s", time.Time{}, "a delay must be positive"},
		{"next tuesday", time.Time{}, `--start-at "next tuesday": give an RFC 3339 time`},
		{"2026-13-01 10:00", time.Time{}, "give an RFC 3339 time"},
	} {
		got, err := parseStartAt(tc.in, now)
		switch {
		case tc.err != "":
			if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want a usage error %q", tc.in, err, tc.err)
			}
		case err != nil || got == nil || !got.Equal(tc.want):
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
	if got, err := parseStartAt(" ", now); got != nil || err != nil {
		t.Errorf("empty: %v %v", got, err)
	}
}

// gpuvm snapshot --wait --json prints the end: the snapshot ready, its
// operation done — not the answer that accepted it.
func TestSnapshotWaitJSON(t *testing.T) {
	profiles := clienttest.Profiles + `
image "desk" { imported = "ubuntu" }
profile "desk" {
  vcpus  = 1
  memory = "1GiB"
  disk { image = "desk" }
}
`
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond, Profiles: profiles})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	c.must("create", "desk", "--name", "box", "--hours", "1", "--wait")
	var resp api.SnapshotResponse
	decodeStrict(t, c.must("snapshot", "box", "--label", "before", "--wait", "--json"), &resp)
	if resp.Snapshot.State != "ready" || resp.Snapshot.Consistency != api.SnapshotCrashConsistent || resp.Operation.State != api.OpDone {
		t.Errorf("snapshot --wait --json: snapshot %s (%s), operation %s; want ready, crash-consistent, done",
			resp.Snapshot.State, resp.Snapshot.Consistency, resp.Operation.State)
	}
	if resp.Snapshot.Label != "before" {
		t.Errorf("label %q, want before", resp.Snapshot.Label)
	}
}
