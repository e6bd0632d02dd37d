package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/gpu"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// SlotClaim is one device the scheduler chose for a VM: which GPU, and which
// part of it.
//
// The database keeps the invariant "no part of a GPU is given twice" by
// itself, with two tables:
//
//   - allocation_slots holds one row per occupied unit of a GPU, keyed by
//     (host, gpu_address, slot_key): "mig:<slice>" for each memory slice of a
//     MIG placement (3g at 4 holds mig:4..mig:7, 1g at 5 holds mig:5, so the
//     two collide on mig:5), "vf:<VF address>" for a vGPU on an SR-IOV VF
//     (Ampere and later), "vgpu:<index>" for a vGPU on a GPU without VFs,
//     "gpu" for a whole GPU. A second live claim of a unit violates the
//     primary key.
//   - gpu_modes holds the mode of each GPU that has live slots and how many it
//     has; a claim in another mode is refused unless the count is 0, so a GPU
//     never has a passthrough VM and MIG instances (or vGPUs) at once.
//
// Both are written in the claim's transaction, and cleared in the release's.
type SlotClaim struct {
	Host       string
	GPUAddress string // PCI address of the GPU (the PF)
	Backend    string // the backend plugin that makes the device
	Kind       gpu.Kind
	Profile    string // MIG profile ("3g.40gb") or vGPU type ("L40S-12Q")

	// MIG: the GPU instance placement, in memory slices.
	PlacementStart int
	PlacementSize  int

	// vGPU: the VF that carries it, or, on a GPU without SR-IOV, the index
	// of the instance below the type's maximum.
	VF    string
	Index int
}

// maxMIGSlices bounds a MIG placement (8 memory slices on every GPU so far).
const maxMIGSlices = 32

// keys returns the allocation's slot name and the units it occupies.
func (c SlotClaim) keys() (string, []string, error) {
	if c.Host == "" || c.GPUAddress == "" || c.Backend == "" {
		return "", nil, fmt.Errorf("%w: slot claim needs a host, a GPU and a backend", ErrInvalid)
	}
	switch c.Kind {
	case gpu.KindMIG:
		if c.PlacementStart < 0 || c.PlacementSize < 1 || c.PlacementStart+c.PlacementSize > maxMIGSlices {
			return "", nil, fmt.Errorf("%w: MIG placement %d+%d", ErrInvalid, c.PlacementStart, c.PlacementSize)
		}
		keys := make([]string, 0, c.PlacementSize)
		for i := c.PlacementStart; i < c.PlacementStart+c.PlacementSize; i++ {
			keys = append(keys, fmt.Sprintf("mig:%d", i))
		}
		return fmt.Sprintf("mig:%d+%d", c.PlacementStart, c.PlacementSize), keys, nil
	case gpu.KindVGPU:
		if c.VF != "" {
			k := "vf:" + c.VF
			return k, []string{k}, nil
		}
		if c.Index < 0 {
			return "", nil, fmt.Errorf("%w: vGPU claim needs a VF or an index", ErrInvalid)
		}
		k := fmt.Sprintf("vgpu:%d", c.Index)
		return k, []string{k}, nil
	case gpu.KindPassthrough:
		return "gpu", []string{"gpu"}, nil
	default:
		return "", nil, fmt.Errorf("%w: slot claim kind %q", ErrInvalid, c.Kind)
	}
}

type gpuKey struct{ host, gpu string }

// ClaimAllocation gives a VM the devices the scheduler chose: one allocation
// (state reserved) per claim and the rows of the units it occupies, all in
// one transaction. If any unit is held by a live allocation, or a GPU is in
// use in another mode, it returns ErrSlotTaken and writes nothing. A missing
// VM is ErrNotFound.
//
// Call it in the Tx that moves the VM to allocating (DESIGN.md, step 5).
func (s *Store) ClaimAllocation(ctx context.Context, vmID string, claims []SlotClaim) ([]Allocation, error) {
	if len(claims) == 0 {
		return nil, fmt.Errorf("claim slots for vm %s: %w: no claims", vmID, ErrInvalid)
	}
	type prepared struct {
		claim SlotClaim
		slot  string
		keys  []string
	}
	ps := make([]prepared, len(claims))
	modes := map[gpuKey]gpu.Kind{}
	units := map[gpuKey]int{}
	for i, c := range claims {
		slot, keys, err := c.keys()
		if err != nil {
			return nil, fmt.Errorf("claim slots for vm %s: %w", vmID, err)
		}
		g := gpuKey{c.Host, c.GPUAddress}
		if m, ok := modes[g]; ok && m != c.Kind {
			return nil, fmt.Errorf("claim slots for vm %s: %w: GPU %s/%s claimed as %s and %s", vmID, ErrInvalid, c.Host, c.GPUAddress, m, c.Kind)
		}
		modes[g] = c.Kind
		units[g] += len(keys)
		ps[i] = prepared{c, slot, keys}
	}
	// One order for every claimer: GPUs, then units, sorted. PostgreSQL then
	// never sees two claims wait on each other's locks.
	gpus := make([]gpuKey, 0, len(modes))
	for g := range modes {
		gpus = append(gpus, g)
	}
	slices.SortFunc(gpus, func(a, b gpuKey) int { return cmp.Or(cmp.Compare(a.host, b.host), cmp.Compare(a.gpu, b.gpu)) })
	slices.SortStableFunc(ps, func(a, b prepared) int {
		return cmp.Or(cmp.Compare(a.claim.Host, b.claim.Host), cmp.Compare(a.claim.GPUAddress, b.claim.GPUAddress), cmp.Compare(a.slot, b.slot))
	})

	var allocs []Allocation
	err := s.Tx(ctx, func(tx *Store) error {
		tx.touchQuota()
		for _, g := range gpus {
			res := tx.db.Exec(`INSERT INTO gpu_modes (host, gpu_address, mode, live_slots) VALUES (?, ?, ?, ?)
ON CONFLICT (host, gpu_address) DO UPDATE SET mode = excluded.mode, live_slots = gpu_modes.live_slots + excluded.live_slots
WHERE gpu_modes.mode = excluded.mode OR gpu_modes.live_slots = 0`, g.host, g.gpu, modes[g], units[g])
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				var m GPUMode
				if err := tx.db.Where("host = ? AND gpu_address = ?", g.host, g.gpu).Take(&m).Error; err != nil {
					return err
				}
				return fmt.Errorf("%w: GPU %s/%s is in use as %s (%d slots), not %s", ErrSlotTaken, g.host, g.gpu, m.Mode, m.LiveSlots, modes[g])
			}
		}
		now := tx.clock()
		for _, p := range ps {
			a := Allocation{
				VMID:       vmID,
				Host:       p.claim.Host,
				GPUAddress: p.claim.GPUAddress,
				Backend:    p.claim.Backend,
				Kind:       p.claim.Kind,
				Slot:       p.slot,
				Profile:    p.claim.Profile,
				State:      AllocReserved,
				CreatedAt:  now,
				UpdatedAt:  now,
			}
			if p.claim.Kind == gpu.KindMIG {
				a.PlacementStart, a.PlacementSize = p.claim.PlacementStart, p.claim.PlacementSize
			}
			if err := tx.db.Create(&a).Error; err != nil {
				return err
			}
			rows := make([]AllocationSlot, len(p.keys))
			for i, k := range p.keys {
				rows[i] = AllocationSlot{Host: a.Host, GPUAddress: a.GPUAddress, SlotKey: k, AllocationID: a.ID}
			}
			if err := tx.db.Create(&rows).Error; err != nil {
				if errors.Is(err, gorm.ErrDuplicatedKey) {
					return fmt.Errorf("%w: %s on GPU %s/%s overlaps a live allocation", ErrSlotTaken, p.slot, a.Host, a.GPUAddress)
				}
				return err
			}
			allocs = append(allocs, a)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(err, ErrSlotTaken, "claim slots for vm %s", vmID)
	}
	return allocs, nil
}

// MarkAllocationCreated records the device the backend made for an
// allocation (its ID, and the hostdev description as JSON) and moves it to
// created. Recording the same device again is a no-op; a released
// allocation, or one with another device, is ErrConflict.
func (s *Store) MarkAllocationCreated(ctx context.Context, id int64, deviceID, hostdev string) error {
	err := s.Tx(ctx, func(tx *Store) error {
		var a Allocation
		if err := tx.db.Where("id = ?", id).Take(&a).Error; err != nil {
			return err
		}
		switch {
		case a.State == AllocCreated && a.DeviceID == deviceID:
			return nil
		case a.State != AllocReserved:
			return fmt.Errorf("%w: allocation is %s (device %q)", ErrConflict, a.State, a.DeviceID)
		}
		return tx.db.Model(&Allocation{}).Where("id = ? AND state = ?", id, AllocReserved).Updates(map[string]any{
			"state":      AllocCreated,
			"device_id":  deviceID,
			"hostdev":    hostdev,
			"updated_at": tx.clock(),
		}).Error
	})
	return wrap(err, nil, "mark allocation %d created", id)
}

// ReleaseAllocations frees every live allocation of a VM: its units become
// free in the same transaction, the rows stay as history (released). It says
// how many it released; releasing twice is a no-op.
func (s *Store) ReleaseAllocations(ctx context.Context, vmID string) (int, error) {
	n := 0
	err := s.Tx(ctx, func(tx *Store) error {
		tx.touchQuota()
		var live []Allocation
		if err := tx.db.Where("vm_id = ? AND "+liveAllocation, vmID).
			Order("host, gpu_address, id").Find(&live).Error; err != nil {
			return err
		}
		now := tx.clock()
		for _, a := range live {
			res := tx.db.Where("allocation_id = ?", a.ID).Delete(&AllocationSlot{})
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected > 0 {
				if err := tx.db.Exec("UPDATE gpu_modes SET live_slots = live_slots - ? WHERE host = ? AND gpu_address = ?",
					res.RowsAffected, a.Host, a.GPUAddress).Error; err != nil {
					return err
				}
			}
			if err := tx.db.Model(&Allocation{}).Where("id = ?", a.ID).Updates(map[string]any{
				"state":       AllocReleased,
				"released_at": now,
				"updated_at":  now,
			}).Error; err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, wrap(err, nil, "release allocations of vm %s", vmID)
	}
	return n, nil
}

// ListLiveAllocations lists the allocations that hold slots on a host ("":
// every host), by GPU and slot: what the reconciler compares with what the
// backends report.
func (s *Store) ListLiveAllocations(ctx context.Context, host string) ([]Allocation, error) {
	q := s.db.WithContext(ctx).Where(liveAllocation)
	if host != "" {
		q = q.Where("host = ?", host)
	}
	var as []Allocation
	err := q.Order("host, gpu_address, slot, id").Find(&as).Error
	return as, wrap(err, nil, "list live allocations of host %q", host)
}

// ListAllocations lists every allocation of a VM, released ones too, oldest
// first.
func (s *Store) ListAllocations(ctx context.Context, vmID string) ([]Allocation, error) {
	var as []Allocation
	err := s.db.WithContext(ctx).Where("vm_id = ?", vmID).Order("id").Find(&as).Error
	return as, wrap(err, nil, "list allocations of vm %s", vmID)
}

// ListAllocationsForVMs lists every allocation of each of the VMs, released
// ones too, oldest first, keyed by VM ID: ListAllocations for a page of VMs in
// one query instead of one per VM. A VM without allocations has no key.
func (s *Store) ListAllocationsForVMs(ctx context.Context, vmIDs []string) (map[string][]Allocation, error) {
	out := make(map[string][]Allocation, len(vmIDs))
	// Bounded IN lists: SQLite allows at most 32,766 parameters, PostgreSQL
	// 65,535; a page has at most 1000 VMs.
	const chunk = 1000
	for lo := 0; lo < len(vmIDs); lo += chunk {
		ids := vmIDs[lo:min(lo+chunk, len(vmIDs))]
		var as []Allocation
		if err := s.db.WithContext(ctx).Where("vm_id IN ?", ids).Order("id").Find(&as).Error; err != nil {
			return nil, wrap(err, nil, "list allocations of %d vms", len(vmIDs))
		}
		for _, a := range as {
			out[a.VMID] = append(out[a.VMID], a)
		}
	}
	return out, nil
}

// SlotKeys returns the units of a GPU a claim would occupy, as stored in
// allocation_slots: for tests and for the scheduler's own checks.
func (c SlotClaim) SlotKeys() ([]string, error) {
	_, keys, err := c.keys()
	return keys, err
}

// String describes a claim for logs: "host/0000:41:00.0 mig:4+4 (3g.40gb)".
func (c SlotClaim) String() string {
	slot, _, err := c.keys()
	if err != nil {
		slot = "invalid"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s %s", c.Host, c.GPUAddress, slot)
	if c.Profile != "" {
		fmt.Fprintf(&b, " (%s)", c.Profile)
	}
	return b.String()
}

// LockLiveAllocations lists a VM's live allocations, oldest first, locking
// their rows until the transaction ends (FOR UPDATE on PostgreSQL; a SQLite
// transaction holds the database's write lock already). Call it in a Tx:
// the node that makes a VM's devices and the leader that queues the VM of a
// down node again both take it first, so that one of them sees what the
// other did — a node never makes a device for slots the leader gave away.
func (s *Store) LockLiveAllocations(ctx context.Context, vmID string) ([]Allocation, error) {
	if !s.inTx {
		return nil, fmt.Errorf("lock the allocations of vm %s: %w: outside a transaction", vmID, ErrInvalid)
	}
	q := s.db.WithContext(ctx)
	if s.driver == DriverPostgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	var as []Allocation
	err := q.Where("vm_id = ? AND "+liveAllocation, vmID).Order("id").Find(&as).Error
	return as, wrap(err, nil, "lock the allocations of vm %s", vmID)
}
