package orchestrator

import (
	"context"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// roundCache is the unfinished operations and their VMs as the last
// dispatch round read them (issue #26). A round reads every operation's
// stamp with its VM's (store.OpStamp, store.VMStamp) and the whole rows
// only of those that changed since: with thousands queued, nearly none.
// Guarded by roundMu.
type roundCache struct {
	ops map[string]cachedOp
	vms map[string]store.VM
}

// cachedOp is an operation read, with its stamp then.
type cachedOp struct {
	op    store.Operation
	stamp string
}

// read returns the unfinished operations, oldest first, and their VMs,
// keyed by ID (a VM that does not exist has no key), as they are now: each
// a copy the round may change; onHost ("": all) reads only those of VMs on
// that host. It keeps only these for the next round.
func (c *roundCache) read(ctx context.Context, st dispatchStore, onHost string) ([]store.Operation, map[string]*store.VM, error) {
	stamps, vmStamps, err := st.ListUnfinishedOperationStamps(ctx, onHost)
	if err != nil {
		return nil, nil, err
	}
	var staleOps, staleVMs []string
	for _, s := range stamps {
		if op, ok := c.ops[s.ID]; !ok || op.stamp != s.Stamp {
			staleOps = append(staleOps, s.ID)
		}
	}
	for id, s := range vmStamps {
		if vm, ok := c.vms[id]; !ok || vm.Version != s.Version {
			staleVMs = append(staleVMs, id)
		}
	}
	freshOps, err := st.GetOperations(ctx, staleOps)
	if err != nil {
		return nil, nil, err
	}
	freshVMs, err := st.GetVMs(ctx, staleVMs)
	if err != nil {
		return nil, nil, err
	}
	nextOps := make(map[string]cachedOp, len(stamps))
	ops := make([]store.Operation, 0, len(stamps))
	for _, s := range stamps {
		op, ok := c.ops[s.ID]
		if f := freshOps[s.ID]; f != nil {
			// Read after the stamp: kept with it, so that a change
			// between the two reads it again next round.
			op, ok = cachedOp{*f, s.Stamp}, true
		}
		if !ok || op.op.Finished() {
			continue // finished since the stamps were read
		}
		nextOps[s.ID] = op
		ops = append(ops, op.op)
	}
	nextVMs := make(map[string]store.VM, len(vmStamps))
	vms := make(map[string]*store.VM, len(vmStamps))
	for id, s := range vmStamps {
		vm, ok := c.vms[id]
		if f := freshVMs[id]; f != nil {
			vm, ok = *f, true
		} else {
			vm.QueueRank = s.QueueRank // the one change that bumps no version but counts here
		}
		if !ok {
			continue // gone since the stamps were read
		}
		nextVMs[id] = vm
		cp := vm
		vms[id] = &cp
	}
	c.ops, c.vms = nextOps, nextVMs
	return ops, vms, nil
}
