package orchestrator

import (
	"context"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// The round cache gives what the database holds: an operation's new step,
// a VM's new version or rank, a new operation; a finished one is gone.
// Unchanged rows are not read again.
func TestRoundCacheFollowsChanges(t *testing.T) {
	e := newEnv(t, "l40sx4")
	ctx := context.Background()
	var c roundCache
	st := &countingStore{Store: e.st}
	a, opA := e.submit("ann", "l40s-whole", "a")
	read := func() ([]store.Operation, map[string]*store.VM) {
		t.Helper()
		ops, vms, err := c.read(ctx, st, "")
		if err != nil {
			t.Fatal(err)
		}
		return ops, vms
	}
	ops, vms := read()
	if len(ops) != 1 || ops[0].ID != opA.ID || vms[a.ID] == nil || vms[a.ID].Name != "a" {
		t.Fatalf("first read: %+v %v", ops, vms)
	}
	vms[a.ID].Name = "changed by the round" // a copy: the cache keeps its own
	b, opB := e.submit("bob", "l40s-whole", "b")
	if err := e.st.SetOperationStep(ctx, opA.ID, StepAllocate); err != nil {
		t.Fatal(err)
	}
	cur := e.vm(a.ID)
	if _, err := e.st.UpdateVMState(ctx, a.ID, cur.Version, store.VMUpdate{State: store.VMQueued, Phase: PhaseQueued, StateReason: "why"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetQueue(ctx, map[string]store.QueueEntry{b.ID: {Position: 1, Phase: e.vm(b.ID).Phase, Reason: e.vm(b.ID).StateReason}}); err != nil {
		t.Fatal(err)
	}
	ops, vms = read()
	if len(ops) != 2 || ops[0].Step != StepAllocate || ops[0].State != store.OpRunning || ops[1].ID != opB.ID {
		t.Errorf("ops after a step and a create: %+v", ops)
	}
	if got := vms[a.ID]; got.Name != "a" || got.StateReason != "why" || got.Version != cur.Version+1 {
		t.Errorf("vm a: %+v", got)
	}
	if got := vms[b.ID]; got.QueueRank == 0 || got.Version != b.Version {
		t.Errorf("vm b after a ranking alone: rank %d version %d", got.QueueRank, got.Version)
	}
	if err := e.st.FinishOperation(ctx, opA.ID, nil); err != nil {
		t.Fatal(err)
	}
	ops, vms = read()
	if len(ops) != 1 || ops[0].ID != opB.ID || vms[a.ID] != nil || len(c.ops) != 1 || len(c.vms) != 1 {
		t.Errorf("after a finish: %+v %v, cached %d %d", ops, vms, len(c.ops), len(c.vms))
	}
	st.rows = 0
	if ops, vms = read(); len(ops) != 1 || vms[b.ID] == nil || st.rows != 0 {
		t.Errorf("nothing changed: %d operations, %d rows read again", len(ops), st.rows)
	}
}

// countingStore counts the rows a round cache reads whole.
type countingStore struct {
	*store.Store
	rows int
}

func (s *countingStore) GetVMs(ctx context.Context, ids []string) (map[string]*store.VM, error) {
	s.rows += len(ids)
	return s.Store.GetVMs(ctx, ids)
}

func (s *countingStore) GetOperations(ctx context.Context, ids []string) (map[string]*store.Operation, error) {
	s.rows += len(ids)
	return s.Store.GetOperations(ctx, ids)
}
