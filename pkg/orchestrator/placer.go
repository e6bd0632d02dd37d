package orchestrator

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/profile"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// ErrNoCapacity says no GPU can meet a need now: the VM stays queued.
var ErrNoCapacity = errors.New("no capacity")

// NoCapacityError says why a need cannot be met now; it matches
// ErrNoCapacity, and its text is what the VM's state reason shows.
type NoCapacityError struct{ Reason string }

func (e *NoCapacityError) Error() string        { return e.Reason }
func (e *NoCapacityError) Is(target error) bool { return target == ErrNoCapacity }

// Placement is what a placer chose for one VM: the slots to claim and, for
// each, the device to ask its backend for (same order).
type Placement struct {
	Claims   []store.SlotClaim
	Requests []backend.CreateRequest
}

// Placer chooses where a GPU need goes, from the backends' inventories (by
// backend name) and the allocations that hold slots now. It does no I/O. A
// need that cannot be met now is a *NoCapacityError. The scheduler package
// will provide a better one; FirstFit is the stand-in.
type Placer interface {
	Place(host string, need *profile.GPUNeed, invs map[string]backend.Inventory, live []store.Allocation) (Placement, error)
}

// FirstFit places a concrete need on the first GPU (by address) that can
// take it, MIG instances at the lowest free start; an abstract need (kind
// any) gets the cheapest fitting option (smallest memory) of its kinds.
type FirstFit struct{}

type option struct {
	claim  store.SlotClaim
	req    backend.CreateRequest
	memory uint64
}

// Place implements Placer.
func (FirstFit) Place(host string, need *profile.GPUNeed, invs map[string]backend.Inventory, live []store.Allocation) (Placement, error) {
	var pl Placement
	held := append([]store.Allocation(nil), live...)
	for range max(need.Count, 1) {
		opts := options(host, need, invs, held)
		if len(opts) == 0 {
			return Placement{}, &NoCapacityError{Reason: NoCapacityReason(need)}
		}
		if need.Kind == profile.KindAny {
			slices.SortStableFunc(opts, func(a, b option) int {
				switch {
				case a.memory < b.memory:
					return -1
				case a.memory > b.memory:
					return 1
				}
				return 0
			})
		}
		o := opts[0]
		pl.Claims = append(pl.Claims, o.claim)
		pl.Requests = append(pl.Requests, o.req)
		held = append(held, allocationOf(o.claim))
	}
	return pl, nil
}

// NoCapacityReason is why a VM of need is queued.
func NoCapacityReason(need *profile.GPUNeed) string {
	kind := need.Kind
	if kind == profile.KindAny {
		kind = strings.Join(need.Kinds, "/")
	}
	return fmt.Sprintf("no free %s capacity for %s", kind, DescribeNeed(need))
}

// DescribeNeed names a need for people: "L40S-12Q", "3g.40gb", "a whole H100".
func DescribeNeed(need *profile.GPUNeed) string {
	var s string
	switch need.Kind {
	case profile.KindVGPU:
		s = need.Type
	case profile.KindMIG:
		s = need.Profile
	case profile.KindPassthrough:
		s = "a whole GPU"
		if need.Model != "" {
			s = "a whole " + need.Model
		}
	default:
		s = fmt.Sprintf("%d MiB of GPU memory", need.Memory>>20)
		if need.Model != "" {
			s += " on " + need.Model
		}
	}
	if need.Count > 1 {
		s = fmt.Sprintf("%d× %s", need.Count, s)
	}
	return s
}

func allocationOf(c store.SlotClaim) store.Allocation {
	a := store.Allocation{Host: c.Host, GPUAddress: c.GPUAddress, Backend: c.Backend, Kind: c.Kind, Profile: c.Profile, State: store.AllocReserved}
	switch c.Kind {
	case store.KindMIG:
		a.PlacementStart, a.PlacementSize = c.PlacementStart, c.PlacementSize
		a.Slot = fmt.Sprintf("mig:%d+%d", c.PlacementStart, c.PlacementSize)
	case store.KindVGPU:
		a.Slot = fmt.Sprintf("vgpu:%d", c.Index)
		if c.VF != "" {
			a.Slot = "vf:" + c.VF
		}
	default:
		a.Slot = "gpu"
	}
	return a
}

func modelMatches(want, model string) bool {
	return want == "" || strings.Contains(strings.ToLower(model), strings.ToLower(want))
}

// options lists where one device of need fits, GPUs in address order.
func options(host string, need *profile.GPUNeed, invs map[string]backend.Inventory, held []store.Allocation) []option {
	kinds := []string{need.Kind}
	if need.Kind == profile.KindAny {
		kinds = need.Kinds
	}
	abstract := need.Kind == profile.KindAny
	var out []option
	for _, kind := range kinds {
		inv, ok := invs[kind]
		if !ok {
			continue
		}
		gpus := slices.Clone(inv.GPUs)
		slices.SortFunc(gpus, func(a, b backend.GPU) int { return strings.Compare(a.Address, b.Address) })
		for _, g := range gpus {
			if g.Unavailable != "" || !modelMatches(need.Model, g.Model) {
				continue
			}
			var onGPU []store.Allocation
			otherMode := false
			for _, a := range held {
				if a.Host == host && a.GPUAddress == g.Address {
					onGPU = append(onGPU, a)
					otherMode = otherMode || a.Kind != kind
				}
			}
			if otherMode {
				continue
			}
			base := store.SlotClaim{Host: host, GPUAddress: g.Address, Backend: kind, Kind: kind}
			switch kind {
			case profile.KindPassthrough:
				if len(onGPU) == 0 && (!abstract || g.Memory >= need.Memory) {
					out = append(out, option{base, backend.CreateRequest{GPU: g.Address}, g.Memory})
				}
			case profile.KindMIG:
				if !g.MIGEnabled {
					continue
				}
				for _, mp := range g.MIGProfiles {
					match := mp.Name == need.Profile
					if abstract {
						match = !strings.Contains(mp.Name, "+") && mp.Memory >= need.Memory
					}
					if !match {
						continue
					}
					starts := slices.Sorted(slices.Values(mp.FreeStarts))
					for _, s := range starts {
						if overlapsMIG(onGPU, s, mp.Size) {
							continue
						}
						c := base
						c.Profile, c.PlacementStart, c.PlacementSize = mp.Name, s, mp.Size
						out = append(out, option{c, backend.CreateRequest{GPU: g.Address, Profile: mp.Name, Placement: s}, mp.Memory})
						break
					}
				}
			case profile.KindVGPU:
				for _, t := range g.VGPUTypes {
					match := t.Name == need.Type
					if abstract {
						match = t.MIGProfile == "" && t.Memory >= need.Memory && (need.Series == "" || strings.HasSuffix(t.Name, need.Series))
					}
					if !match || t.MIGProfile != "" {
						continue
					}
					reserved, clash := 0, false
					for _, a := range onGPU {
						if a.Profile == t.Name && a.State == store.AllocReserved {
							reserved++
						}
						clash = clash || (!g.MixedSize && a.Profile != t.Name)
					}
					if clash || t.Available-reserved <= 0 {
						continue
					}
					limit := t.MaxInstances
					if g.MixedSize || limit <= 0 {
						limit = 64
					}
					idx := freeIndex(onGPU, limit)
					if idx < 0 {
						continue
					}
					c := base
					c.Profile, c.Index = t.Name, idx
					out = append(out, option{c, backend.CreateRequest{GPU: g.Address, Type: t.Name}, t.Memory})
				}
			}
		}
	}
	return out
}

func overlapsMIG(allocs []store.Allocation, start, size int) bool {
	for _, a := range allocs {
		if a.Kind == store.KindMIG && start < a.PlacementStart+a.PlacementSize && a.PlacementStart < start+size {
			return true
		}
	}
	return false
}

// freeIndex is the lowest vGPU index below limit that no allocation holds.
func freeIndex(allocs []store.Allocation, limit int) int {
	used := map[string]bool{}
	for _, a := range allocs {
		used[a.Slot] = true
	}
	for i := range limit {
		if !used[fmt.Sprintf("vgpu:%d", i)] {
			return i
		}
	}
	return -1
}
