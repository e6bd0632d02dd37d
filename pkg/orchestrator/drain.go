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

// drainsOf reads the drained GPUs of every host, by host and address.
func drainsOf(ctx context.Context, st interface {
	ListGPUDrains(ctx context.Context, host string) ([]store.GPUDrain, error)
}) (map[string]map[string]store.GPUDrain, error) {
	ds, err := st.ListGPUDrains(ctx, "")
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]store.GPUDrain{}
	for _, d := range ds {
		if out[d.Host] == nil {
			out[d.Host] = map[string]store.GPUDrain{}
		}
		out[d.Host][d.GPUAddress] = d
	}
	return out, nil
}

// undrained is the inventory as it would be if no GPU were drained, with
// the round's starts: where a request held back by drains would go.
func undrained(st *state, starts []scheduler.Start) *scheduler.Inventory {
	specs := slices.Clone(st.specs)
	for h := range specs {
		specs[h].Draining = false
		specs[h].GPUs = slices.Clone(specs[h].GPUs)
		for i := range specs[h].GPUs {
			specs[h].GPUs[i].Draining = false
		}
	}
	inv, _ := buildInventory(specs, st.allocs)
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
	drained := st.drained[p.Host]
	var addrs []string
	for _, d := range p.Devices {
		for _, g := range append([]string{d.GPU}, d.Group...) {
			if _, ok := drained[g]; ok && !slices.Contains(addrs, g) {
				addrs = append(addrs, g)
			}
		}
	}
	if len(addrs) == 0 {
		for _, h := range st.specs {
			if h.Name == p.Host && h.Draining {
				return fmt.Sprintf("node %s is drained (gpuvm admin undrain %s)", h.Name, h.Name)
			}
		}
	}
	return drainedText(addrs, drained)
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
