package client_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

// The client against the real API: every route, with the real store.
func TestAgainstServer(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ann, err := client.New(env.URL, env.UserToken)
	if err != nil {
		t.Fatal(err)
	}
	ann.PollMin, ann.PollMax = 5*time.Millisecond, 20*time.Millisecond
	admin, _ := client.New(env.URL, env.AdminToken)
	nobody, _ := client.New(env.URL, "not-a-token")

	ps, err := ann.ListProfiles(ctx)
	if err != nil || len(ps) != 3 || ps[2].Name != "seat" || ps[2].Lease.Max != 8*3600 || ps[1].GPU == nil || ps[1].GPU.Profile != "3g.40gb" {
		t.Fatalf("%v %+v", err, ps)
	}
	if p, err := ann.GetProfile(ctx, "seat"); err != nil || p.Description != "a test seat" {
		t.Errorf("%v %+v", err, p)
	}
	if _, err := ann.GetProfile(ctx, "nope"); !client.IsNotFound(err) {
		t.Errorf("unknown profile: %v", err)
	}
	if _, err := nobody.ListProfiles(ctx); !client.IsUnauthenticated(err) || !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("bad token: %v", err)
	}

	// Create, and follow it to running (the worker starts once the wait
	// has seen the VM queued).
	env.Worker.Pause()
	created, err := ann.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Name: "box", Hours: 3}, "idem-1")
	if err != nil || created.VM.State != "queued" || created.Operation.Kind != "create" {
		t.Fatalf("%v %+v", err, created)
	}
	again, err := ann.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Name: "box", Hours: 3}, "idem-1")
	if err != nil || again.VM.ID != created.VM.ID {
		t.Errorf("replay: %v %+v", err, again)
	}
	_, err = ann.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Name: "box"}, "")
	if p, ok := client.AsProblem(err); !client.IsConflict(err) || !ok || p.Field != "name" {
		t.Errorf("same name: %v", err)
	}
	_, err = ann.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Hours: 99}, "")
	if p, ok := client.AsProblem(err); !client.IsValidation(err) || !ok || p.Field != "hours" {
		t.Errorf("too many hours: %v", err)
	}
	// The guest stays booting until the wait has seen it booting.
	var states, running []string
	env.Worker.HoldBoot.Store(true)
	vm, err := ann.WaitVMReady(ctx, created.VM.ID, func(vm api.VM) {
		if len(states) == 0 || states[len(states)-1] != vm.State {
			states = append(states, vm.State)
		}
		if vm.State == "running" {
			running = append(running, vm.Phase)
			env.Worker.HoldBoot.Store(false)
		}
		env.Worker.Paused.Store(false)
	})
	if err != nil || vm.State != "running" || vm.Phase != "ready" || vm.LeaseEnd == nil || vm.Host != "test-host" {
		t.Fatalf("%v %+v", err, vm)
	}
	if states[0] != "queued" || states[len(states)-1] != "running" || strings.Join(running, ",") != "booting,ready" {
		t.Errorf("states %v, running phases %v", states, running)
	}
	// Once up: the guest's address and how to open the display (read
	// live for this VM only: lists have neither).
	if len(vm.Addresses) != 1 || vm.Addresses[0].Source != "lease" || !strings.HasPrefix(vm.Addresses[0].IP, "192.0.2.") ||
		vm.Console == nil || vm.Console.Protocol != "vnc" || vm.Console.TicketURL != env.URL+"/v1/vms/"+vm.ID+"/console" {
		t.Errorf("addresses %+v, console %+v", vm.Addresses, vm.Console)
	}
	if op, err := ann.GetOperation(ctx, created.Operation.ID); err != nil || op.State != "done" {
		t.Errorf("%v %+v", err, op)
	}

	// A VM that fails.
	bad, err := ann.CreateVM(ctx, api.CreateVMRequest{Profile: clienttest.FailProfile}, "")
	if err != nil {
		t.Fatal(err)
	}
	if vm, err := ann.WaitVM(ctx, bad.VM.ID, nil); err != nil || vm.State != "failed" || vm.Reason == "" {
		t.Errorf("%v %+v", err, vm)
	}

	// Reads: by name, lists, others' VMs.
	if vm, err := ann.GetVM(ctx, "box"); err != nil || vm.ID != created.VM.ID {
		t.Errorf("%v %+v", err, vm)
	}
	if l, err := ann.ListVMs(ctx, client.ListVMsOptions{States: []string{"running"}}); err != nil || len(l.Items) != 1 || l.Items[0].Addresses != nil || l.Items[0].Console != nil {
		t.Errorf("%v %+v", err, l)
	}
	if _, err := ann.ListVMs(ctx, client.ListVMsOptions{States: []string{"bogus"}}); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("bad state: %v", err)
	}
	if all, err := admin.ListAllVMs(ctx, client.ListVMsOptions{Limit: 1}); err != nil || len(all) != 2 {
		t.Errorf("admin pages: %v %d", err, len(all))
	}

	// Delete and wait for the operation.
	op, err := ann.DeleteVM(ctx, "box")
	if err != nil || op.Kind != "delete" {
		t.Fatalf("%v %+v", err, op)
	}
	if op, err := ann.WaitOperation(ctx, op.ID, nil); err != nil || op.State != "done" {
		t.Errorf("%v %+v", err, op)
	}
	if vm, err := ann.GetVM(ctx, created.VM.ID); err != nil || vm.State != "deleted" {
		t.Errorf("%v %+v", err, vm)
	}
	if _, err := ann.GetVM(ctx, "box"); !client.IsNotFound(err) {
		t.Errorf("deleted by name: %v", err)
	}

	// Admin routes.
	if _, err := ann.GPUs(ctx); !client.IsForbidden(err) {
		t.Errorf("ann's GPUs: %v", err)
	}
	hi, err := admin.GPUs(ctx)
	if err != nil || len(hi.GPUs) != 1 || hi.GPUs[0].Model != "H100" || !slices.Contains(hi.Backends, "mig") {
		t.Errorf("%v %+v", err, hi)
	}
	if r, err := admin.Reload(ctx); err != nil || r.Config == "" {
		t.Errorf("%v %+v", err, r)
	}
	env.Config.Broken.Store(true)
	_, err = admin.Reload(ctx)
	if p, ok := client.AsProblem(err); !ok || !errors.Is(err, client.ErrInvalidConfig) || p.Diagnostics == "" {
		t.Errorf("broken reload: %v", err)
	}
}
