package orchestrator

import (
	"context"
	"maps"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// roundCache is the unfinished operations and their VMs as the last
// dispatch round read them (issue #26). A round reads every operation's
// stamp with its VM's (store.OpStamp, store.VMStamp) and the whole rows
// only of those that changed since: with thousands queued, nearly none.
// The cache is updated in place, not made again each round: with
// thousands queued, two maps of thousands made every round were most of
// what a round allocated besides the scheduling. Guarded by roundMu.
type roundCache struct {
	ops map[string]*cachedOp
	vms map[string]*cachedVM
	// round counts the reads; an entry not seen by the last one is gone.
	round uint64
}

// cachedOp is an operation read, with its stamp then.
type cachedOp struct {
	op    store.Operation
	stamp string
	seen  uint64 // the last read that found it unfinished
}

// cachedVM is a VM read.
type cachedVM struct {
	vm   store.VM
	seen uint64 // the last read that found an operation of it
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
		if vm, ok := c.vms[id]; !ok || vm.vm.Version != s.Version {
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
	if c.ops == nil {
		c.ops, c.vms = map[string]*cachedOp{}, map[string]*cachedVM{}
	}
	c.round++
	ops := make([]store.Operation, 0, len(stamps))
	for _, s := range stamps {
		op := c.ops[s.ID]
		if f := freshOps[s.ID]; f != nil {
			// Read after the stamp: kept with it, so that a change
			// between the two reads it again next round.
			op = &cachedOp{op: *f, stamp: s.Stamp}
			c.ops[s.ID] = op
		}
		if op == nil || op.op.Finished() {
			continue // finished since the stamps were read
		}
		op.seen = c.round
		ops = append(ops, op.op)
	}
	vms := make(map[string]*store.VM, len(vmStamps))
	copies := make([]store.VM, 0, len(vmStamps)) // the round's, one allocation
	for id, s := range vmStamps {
		vm := c.vms[id]
		if f := freshVMs[id]; f != nil {
			vm = &cachedVM{vm: *f}
			c.vms[id] = vm
		} else if vm != nil {
			vm.vm.QueueRank = s.QueueRank // the one change that bumps no version but counts here
		}
		if vm == nil {
			continue // gone since the stamps were read
		}
		vm.seen = c.round
		copies = append(copies, vm.vm)
		vms[id] = &copies[len(copies)-1]
	}
	maps.DeleteFunc(c.ops, func(_ string, op *cachedOp) bool { return op.seen != c.round })
	maps.DeleteFunc(c.vms, func(_ string, vm *cachedVM) bool { return vm.seen != c.round })
	return ops, vms, nil
}
