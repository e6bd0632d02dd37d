package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Drained GPUs take no new allocations: a round marks them Draining in the
// scheduler's inventory (placementState), so the scheduler keeps what runs
// on them and places nothing new there, and a VM that only a drained GPU
// has room for is told which: "GPU 0000:41:00.0 is drained (fan)".

// drainsOf reads the drained GPUs of a host, by address.
func drainsOf(ctx context.Context, st *store.Store, host string) (map[string]store.GPUDrain, error) {
	ds, err := st.ListGPUDrains(ctx, host)
	if err != nil {
		return nil, err
	}
	out := make(map[string]store.GPUDrain, len(ds))
	for _, d := range ds {
		out[d.GPUAddress] = d
	}
	return out, nil
}

// undrained is the inventory as it would be if no GPU were drained, with
// the round's starts: where a request held back by drains would go.
func undrained(st *state, starts []scheduler.Start) *scheduler.Inventory {
	spec := st.spec
	spec.GPUs = slices.Clone(spec.GPUs)
	for i := range spec.GPUs {
		spec.GPUs[i].Draining = false
	}
	inv, _ := buildInventory(spec, st.allocs)
	if inv == nil {
		return nil
	}
	for _, s := range starts {
		_ = inv.Allocate(s.ID, s.Placement, s.End)
	}
	return inv
}

// drainedWhy names the drained GPUs a waiting request would get if they
// were not drained: "GPU 0000:41:00.0 is drained (fan replacement)".
func drainedWhy(inv *scheduler.Inventory, r *scheduler.Request, st *state) string {
	if inv == nil || r == nil {
		return ""
	}
	p, why := inv.Place(r.Need, scheduler.PlaceOptions{Now: st.now, End: st.now.Add(r.Lease)})
	if !why.OK() {
		return ""
	}
	var addrs []string
	for _, d := range p.Devices {
		for _, g := range append([]string{d.GPU}, d.Group...) {
			if _, ok := st.drained[g]; ok && !slices.Contains(addrs, g) {
				addrs = append(addrs, g)
			}
		}
	}
	return drainedText(addrs, st.drained)
}

// drainedText says which GPUs are drained, with the admin's reason when
// there is one GPU.
func drainedText(addrs []string, drained map[string]store.GPUDrain) string {
	switch len(addrs) {
	case 0:
		return ""
	case 1:
		s := fmt.Sprintf("GPU %s is drained", addrs[0])
		if r := drained[addrs[0]].Reason; r != "" {
			s += " (" + r + ")"
		}
		return s
	}
	slices.Sort(addrs)
	return fmt.Sprintf("GPUs %s are drained", strings.Join(addrs, ", "))
}
