package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/orchestrator"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// fakeResizer plans every resize to "whole" and refuses "nope"; a queued
// resize's operation is done at once (by the fake or the test's worker,
// which finishes what it does not know, whichever comes first).
type fakeResizer struct {
	st      *store.Store
	queued  []string
	planned []string
}

func (f *fakeResizer) Admit(context.Context, string, []string, string, int) (scheduler.Admission, error) {
	return scheduler.Admission{}, nil
}

func (f *fakeResizer) PlanResize(_ context.Context, vm *store.VM, target string, _ orchestrator.ResizeBy) (api.ResizePlan, error) {
	f.planned = append(f.planned, target)
	if target == "nope" {
		return api.ResizePlan{}, &orchestrator.ResizeRefusal{Kind: orchestrator.RefuseNotFound, Field: "profile", Detail: `unknown profile "nope"`}
	}
	return api.ResizePlan{VM: vm.ID,
		From: api.ResizeSide{Profile: vm.Profile, Kind: "mig", GPU: "1g.10gb", VCPUs: 1, Memory: 1 << 30,
			Licences: []api.LicenceNeed{{Kind: "mig", Products: []string{"NVIDIA AI Enterprise"}, Why: "a MIG-backed vGPU", Source: "https://docs.nvidia.com/x"}}},
		To: api.ResizeSide{Profile: target, Kind: "passthrough", GPU: "H100", VCPUs: 4, Memory: 8 << 30,
			Licences: []api.LicenceNeed{{Kind: "passthrough", Why: "the data-center driver", Source: "https://docs.nvidia.com/y"}}},
		Driver: api.DriverNotNeeded, DriverDetail: "no vGPU manager to match", Disk: "kept", Snapshot: "take a snapshot first"}, nil
}

func (f *fakeResizer) QueueResize(ctx context.Context, vm *store.VM, target string, by orchestrator.ResizeBy) (api.ResizePlan, *store.Operation, *store.VM, error) {
	plan, err := f.PlanResize(ctx, vm, target, by)
	if err != nil {
		return plan, nil, nil, err
	}
	f.queued = append(f.queued, target)
	op := &store.Operation{VMID: vm.ID, Kind: store.OpResize, RequestedBy: by.Name}
	if err := f.st.CreateOperation(ctx, op); err != nil {
		return plan, nil, nil, err
	}
	// The test's worker finishes an operation it does not know too: it may
	// have finished this one first.
	if err := f.st.FinishOperation(ctx, op.ID, nil); err != nil && !errors.Is(err, store.ErrConflict) {
		return plan, nil, nil, err
	}
	return plan, op, vm, nil
}

func TestResizeCommand(t *testing.T) {
	f := &fakeResizer{}
	env := clienttest.New(t, clienttest.Options{Step: 5 * time.Millisecond, Admission: f})
	f.st = env.Store
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	var box api.VM
	decodeStrict(t, c.must("create", "seat", "--name", "box", "--wait", "--json"), &box)
	_ = box

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no profile", []string{"resize", "box"}, 2, "name the profile: --profile PROFILE, or --back"},
		{"profile and back", []string{"resize", "box", "--profile", "whole", "--back"}, 2, "exclude each other"},
		{"yes and snapshot", []string{"resize", "box", "--profile", "whole", "--yes", "--snapshot"}, 2, "exclude each other"},
		{"never resized", []string{"resize", "box", "--back"}, 1, "VM box was never resized"},
		{"unknown profile", []string{"resize", "box", "--profile", "nope", "--yes"}, 1, `unknown profile "nope"`},
		{"no answer", []string{"resize", "box", "--profile", "whole"}, 2, `no answer to "take a snapshot first?"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := c.run(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d %q, want %d %q", code, errOut, tc.code, tc.want)
			}
		})
	}
	if len(f.queued) != 0 {
		t.Fatalf("refused resizes were queued: %q", f.queued)
	}

	out := c.must("resize", "box", "--profile", "whole", "--dry-run")
	for _, want := range []string{"VM box: seat (mig 1g.10gb, 1 vCPUs, 1GiB) -> whole (passthrough H100, 4 vCPUs, 8GiB)",
		"Guest driver: not_needed", "Licence now:   mig: NVIDIA AI Enterprise", "Licence after: passthrough: no vGPU licence", "Disk: kept"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run: %q lacks %q", out, want)
		}
	}
	if len(f.queued) != 0 {
		t.Fatalf("a dry run queued: %q", f.queued)
	}

	// Asked, answered no: resized without a snapshot.
	c.term = &terminal{in: strings.NewReader("n\n")}
	out, errOut, code := c.run("resize", "box", "--profile", "whole", "--wait")
	if code != 0 || !strings.Contains(errOut, "Take a snapshot of the disk first? [y/N]") || !strings.Contains(out, "VM box now has profile whole (it had seat)") {
		t.Errorf("resize --wait: %d %q %q", code, out, errOut)
	}
	c.term = nil
	var resp api.ResizeVMResponse
	decodeStrict(t, c.must("resize", "box", "--profile", "whole", "--yes", "--json"), &resp)
	if resp.Operation == nil || resp.Operation.Kind != store.OpResize || resp.Plan.To.Profile != "whole" {
		t.Errorf("--json: %+v", resp)
	}
	if strings.Join(f.queued, ",") != "whole,whole" {
		t.Errorf("queued %q", f.queued)
	}
}
