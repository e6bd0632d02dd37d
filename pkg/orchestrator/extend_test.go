package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// Without reservations or windows in the way, a running VM of every kind
// may extend its lease: the policy finds the devices it holds.
func TestCheckExtendEachKind(t *testing.T) {
	for _, tc := range []struct{ preset, profile string }{
		{"h100x8", "h100-mig"}, {"h100x8", "h100-vgpu"}, {"l40sx4", "l40s-seat"}, {"l40sx4", "l40s-whole"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			e := newEnv(t, tc.preset)
			ctx := context.Background()
			o := e.orch(nil)
			vm, _ := e.submit("ann", tc.profile, "x")
			o.Drain(ctx)
			if got := e.vm(vm.ID); got.State != store.VMRunning {
				t.Fatalf("VM is %s (%s)", got.State, got.StateReason)
			}
			if err := o.CheckExtend(ctx, vm.ID, time.Now().Add(5*time.Hour)); err != nil {
				t.Errorf("extend: %v", err)
			}
		})
	}
}
