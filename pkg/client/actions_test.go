package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// What each action sends, and what it makes of the answer.
func TestActionMethods(t *testing.T) {
	ctx := context.Background()
	vmJSON := `{"id":"v1","name":"box","owner":"ann","profile":"seat","state":"running","hours":5,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z"}`
	answer := func(kind string) string {
		return `{"vm":` + vmJSON + `,"operation":{"id":"o1","vm_id":"v1","kind":"` + kind + `","state":"pending","created_at":"2026-01-02T03:04:05Z"}}`
	}
	for _, tc := range []struct {
		name, action, body string
		status             int
		call               func(c *Client) (any, error)
		answer             string
	}{
		{"start", "start", "", 202, func(c *Client) (any, error) { return c.StartVM(ctx, "box") }, answer("start")},
		{"stop", "stop", "", 202, func(c *Client) (any, error) { return c.StopVM(ctx, "box") }, answer("stop")},
		{"reboot", "reboot", "", 202, func(c *Client) (any, error) { return c.RebootVM(ctx, "box") }, answer("reboot")},
		{"extend", "extend", `{"hours":3}`, 200, func(c *Client) (any, error) { return c.ExtendVM(ctx, "box", 3) }, vmJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rec := fakeServer(t, tc.status, "application/json", tc.answer)
			got, err := tc.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if rec.method != "POST" || rec.path != "/prefix/v1/vms/box/actions/"+tc.action || rec.body != tc.body || rec.auth != "Bearer tok" {
				t.Errorf("sent %+v", rec)
			}
			switch r := got.(type) {
			case *api.VMActionResponse:
				if r.Operation.Kind != tc.action || r.Operation.ID != "o1" || r.VM.Name != "box" {
					t.Errorf("answer %+v", r)
				}
			case *api.VM:
				if r.Hours != 5 || r.ID != "v1" {
					t.Errorf("answer %+v", r)
				}
			default:
				t.Errorf("answer of type %T", got)
			}
		})
	}
	// Names are escaped; problems come back as *Problem.
	c, rec := fakeServer(t, 409, "application/problem+json",
		`{"type":"https://gpuvm.dev/problems/conflict","title":"Conflict","status":409,"detail":"VM \"a b\" is stopped"}`)
	_, err := c.RebootVM(ctx, "a b")
	if !IsConflict(err) || !strings.Contains(err.Error(), "is stopped") || rec.path != "/prefix/v1/vms/a b/actions/reboot" {
		t.Errorf("%v, sent %+v", err, rec)
	}
}

// The actions against the real API (its worker finishes start, stop and
// reboot operations without a hypervisor).
func TestActionsAgainstServer(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ann, err := New(env.URL, env.UserToken)
	if err != nil {
		t.Fatal(err)
	}
	ann.PollMin, ann.PollMax = 5*time.Millisecond, 20*time.Millisecond
	env.Worker.Pause()
	created, err := ann.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Name: "box", Hours: 3}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Extending a queued VM works at once.
	vm, err := ann.ExtendVM(ctx, "box", 2)
	if err != nil || vm.Hours != 5 || vm.State != "queued" {
		t.Fatalf("extend: %v %+v", err, vm)
	}
	env.Worker.Paused.Store(false)
	if vm, err := ann.WaitVM(ctx, created.VM.ID, nil); err != nil || vm.State != StateRunning {
		t.Fatalf("wait: %v %+v", err, vm)
	}
	_, err = ann.ExtendVM(ctx, "box", 4)
	if p, ok := AsProblem(err); !IsValidation(err) || !ok || p.Field != "hours" || !strings.Contains(p.Detail, "at most 8 hours") {
		t.Errorf("beyond the maximum: %v", err)
	}
	if _, err := ann.StartVM(ctx, "box"); !IsConflict(err) {
		t.Errorf("start a running VM: %v", err)
	}
	stop, err := ann.StopVM(ctx, "box")
	if err != nil || stop.Operation.Kind != "stop" || stop.VM.ID != created.VM.ID {
		t.Fatalf("stop: %v %+v", err, stop)
	}
	if op, err := ann.WaitOperation(ctx, stop.Operation.ID, nil); err != nil || op.State != "done" {
		t.Fatalf("wait for the stop: %v %+v", err, op)
	}
	// The test worker does not move the VM: stop it as the orchestrator would.
	cur, err := env.Store.GetVM(ctx, created.VM.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.UpdateVMState(ctx, cur.ID, cur.Version, store.VMUpdate{State: store.VMStopped}); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.RebootVM(ctx, "box"); !IsConflict(err) {
		t.Errorf("reboot a stopped VM: %v", err)
	}
	start, err := ann.StartVM(ctx, created.VM.ID)
	if err != nil || start.Operation.Kind != "start" {
		t.Fatalf("start: %v %+v", err, start)
	}
	if _, err := ann.StopVM(ctx, "nope"); !IsNotFound(err) || !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown VM: %v", err)
	}
}
