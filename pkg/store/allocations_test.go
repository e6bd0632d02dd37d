package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

const (
	gpuA = "0000:17:00.0" // MIG
	gpuB = "0000:41:00.0" // vGPU on VFs
	gpuC = "0000:9a:00.0" // passthrough
)

func mig(addr string, start, size int) SlotClaim {
	return SlotClaim{Host: "gpu01", GPUAddress: addr, Backend: "mig", Kind: gpu.KindMIG, Profile: fmt.Sprintf("%dg", size), PlacementStart: start, PlacementSize: size}
}

func vgpuVF(addr, vf string) SlotClaim {
	return SlotClaim{Host: "gpu01", GPUAddress: addr, Backend: "vgpu", Kind: gpu.KindVGPU, Profile: "L40S-12Q", VF: vf}
}

func whole(addr string) SlotClaim {
	return SlotClaim{Host: "gpu01", GPUAddress: addr, Backend: "passthrough", Kind: gpu.KindPassthrough}
}

func TestSlotKeys(t *testing.T) {
	tests := []struct {
		claim SlotClaim
		keys  []string
		err   bool
	}{
		{mig(gpuA, 4, 4), []string{"mig:4", "mig:5", "mig:6", "mig:7"}, false},
		{mig(gpuA, 5, 1), []string{"mig:5"}, false},
		{mig(gpuA, 0, 0), nil, true},
		{mig(gpuA, -1, 2), nil, true},
		{vgpuVF(gpuB, "0000:41:00.4"), []string{"vf:0000:41:00.4"}, false},
		{SlotClaim{Host: "h", GPUAddress: gpuB, Backend: "vgpu", Kind: gpu.KindVGPU, Index: 3}, []string{"vgpu:3"}, false},
		{SlotClaim{Host: "h", GPUAddress: gpuB, Backend: "vgpu", Kind: gpu.KindVGPU, Index: -1}, nil, true},
		{whole(gpuC), []string{"gpu"}, false},
		{SlotClaim{Host: "h", GPUAddress: gpuC, Backend: "x", Kind: "sriov"}, nil, true},
		{SlotClaim{GPUAddress: gpuC, Backend: "x", Kind: gpu.KindPassthrough}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.claim.String(), func(t *testing.T) {
			keys, err := tc.claim.SlotKeys()
			if (err != nil) != tc.err || !slices.Equal(keys, tc.keys) {
				t.Fatalf("keys %v, %v", keys, err)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
		})
	}
}

func TestClaimAllocation(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		vm := func(name string) string { return mustVM(t, s, "alice", name).ID }
		held := vm("held")
		if _, err := s.ClaimAllocation(ctx, held, []SlotClaim{mig(gpuA, 4, 4), vgpuVF(gpuB, "0000:41:00.4")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimAllocation(ctx, held, []SlotClaim{whole(gpuC)}); err != nil {
			t.Fatal(err)
		}

		tests := []struct {
			name   string
			claims []SlotClaim
			want   error
		}{
			{"MIG overlap inside", []SlotClaim{mig(gpuA, 5, 1)}, ErrSlotTaken},
			{"MIG overlap edge", []SlotClaim{mig(gpuA, 2, 4)}, ErrSlotTaken},
			{"MIG whole GPU", []SlotClaim{mig(gpuA, 0, 8)}, ErrSlotTaken},
			{"MIG beside", []SlotClaim{mig(gpuA, 0, 4)}, nil},
			{"MIG in a freed range", []SlotClaim{mig(gpuA, 0, 1)}, ErrSlotTaken},
			{"same VF", []SlotClaim{vgpuVF(gpuB, "0000:41:00.4")}, ErrSlotTaken},
			{"other VF", []SlotClaim{vgpuVF(gpuB, "0000:41:00.5")}, nil},
			{"whole GPU twice", []SlotClaim{whole(gpuC)}, ErrSlotTaken},
			{"passthrough of a MIG GPU", []SlotClaim{whole(gpuA)}, ErrSlotTaken},
			{"vGPU on a MIG GPU", []SlotClaim{{Host: "gpu01", GPUAddress: gpuA, Backend: "vgpu", Kind: gpu.KindVGPU, Index: 0}}, ErrSlotTaken},
			{"MIG on a passthrough GPU", []SlotClaim{mig(gpuC, 0, 1)}, ErrSlotTaken},
			{"same slot on another host", []SlotClaim{{Host: "gpu02", GPUAddress: gpuC, Backend: "passthrough", Kind: gpu.KindPassthrough}}, nil},
			{"one of two taken", []SlotClaim{vgpuVF(gpuB, "0000:41:00.6"), vgpuVF(gpuB, "0000:41:00.4")}, ErrSlotTaken},
			{"overlap within the claim", []SlotClaim{{Host: "gpu03", GPUAddress: gpuA, Backend: "mig", Kind: gpu.KindMIG, PlacementStart: 0, PlacementSize: 2}, {Host: "gpu03", GPUAddress: gpuA, Backend: "mig", Kind: gpu.KindMIG, PlacementStart: 1, PlacementSize: 1}}, ErrSlotTaken},
			{"two modes within the claim", []SlotClaim{{Host: "gpu03", GPUAddress: gpuC, Backend: "mig", Kind: gpu.KindMIG, PlacementSize: 1}, {Host: "gpu03", GPUAddress: gpuC, Backend: "passthrough", Kind: gpu.KindPassthrough}}, ErrInvalid},
			{"no claims", nil, ErrInvalid},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				before := snapshotAllocations(t, s)
				id := vm(tc.name)
				allocs, err := s.ClaimAllocation(ctx, id, tc.claims)
				if !errors.Is(err, tc.want) {
					t.Fatalf("error %v, want %v", err, tc.want)
				}
				if err != nil {
					if after := snapshotAllocations(t, s); after != before {
						t.Fatalf("a refused claim wrote something:\n%s\n%s", before, after)
					}
					return
				}
				if len(allocs) != len(tc.claims) || allocs[0].ID == 0 || allocs[0].State != AllocReserved || allocs[0].VMID != id {
					t.Fatalf("allocations %+v", allocs)
				}
			})
		}
		if _, err := s.ClaimAllocation(ctx, "no-such-vm", []SlotClaim{whole("0000:01:00.0")}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("claim for a missing VM: %v", err)
		}
		checkSlotAccounting(t, s)

		// Release frees the slots and the GPU's mode.
		n, err := s.ReleaseAllocations(ctx, held)
		if err != nil || n != 3 {
			t.Fatalf("release: %d, %v", n, err)
		}
		if n, err := s.ReleaseAllocations(ctx, held); err != nil || n != 0 {
			t.Fatalf("release twice: %d, %v", n, err)
		}
		checkSlotAccounting(t, s)
		other := vm("after release")
		if _, err := s.ClaimAllocation(ctx, other, []SlotClaim{mig(gpuA, 4, 4), whole(gpuC)}); err != nil {
			t.Fatalf("claim released slots: %v", err)
		}
		// gpuB still has the "other VF" vGPU: no passthrough yet.
		if _, err := s.ClaimAllocation(ctx, other, []SlotClaim{whole(gpuB)}); !errors.Is(err, ErrSlotTaken) {
			t.Fatalf("passthrough of a GPU with a vGPU: %v", err)
		}
		live, err := s.ListLiveAllocations(ctx, "gpu01")
		if err != nil {
			t.Fatal(err)
		}
		var slots []string
		for _, a := range live {
			slots = append(slots, a.GPUAddress+" "+a.Slot)
		}
		want := []string{gpuA + " mig:0+4", gpuA + " mig:4+4", gpuB + " vf:0000:41:00.5", gpuC + " gpu"}
		if !slices.Equal(slots, want) {
			t.Fatalf("live allocations %q, want %q", slots, want)
		}
		hist, _ := s.ListAllocations(ctx, held)
		if len(hist) != 3 || hist[0].State != AllocReleased || hist[0].ReleasedAt == nil {
			t.Fatalf("history %+v", hist)
		}
		checkSlotAccounting(t, s)
	})
}

// The scheduler's step 5: the claim and the VM's move to allocating commit
// together, or neither does.
func TestClaimInTransaction(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		a := mustVM(t, s, "alice", "a")
		b := mustVM(t, s, "alice", "b")
		step5 := func(vm *VM, claims []SlotClaim) error {
			return s.Tx(ctx, func(tx *Store) error {
				if _, err := tx.ClaimAllocation(ctx, vm.ID, claims); err != nil {
					return err
				}
				_, err := tx.UpdateVMState(ctx, vm.ID, vm.Version, VMUpdate{State: VMAllocating})
				return err
			})
		}
		if err := step5(a, []SlotClaim{whole(gpuC)}); err != nil {
			t.Fatal(err)
		}
		if err := step5(b, []SlotClaim{whole(gpuC)}); !errors.Is(err, ErrSlotTaken) {
			t.Fatalf("second claim: %v", err)
		}
		// A stale VM version rolls the claim back too.
		if err := step5(b, []SlotClaim{whole(gpuB)}); err != nil {
			t.Fatal(err)
		}
		if err := step5(b, []SlotClaim{whole(gpuA)}); !errors.Is(err, ErrConflict) {
			t.Fatalf("stale version: %v", err)
		}
		if n := count(t, s, "allocations", "gpu_address = ?", gpuA); n != 0 {
			t.Fatalf("rolled back claim left %d allocations", n)
		}
		// A failed claim inside a transaction undoes only itself: the
		// scheduler may try another slot in the same transaction.
		c := mustVM(t, s, "alice", "c")
		err := s.Tx(ctx, func(tx *Store) error {
			if _, err := tx.ClaimAllocation(ctx, c.ID, []SlotClaim{whole(gpuC)}); !errors.Is(err, ErrSlotTaken) {
				return fmt.Errorf("first try: %v", err)
			}
			if _, err := tx.ClaimAllocation(ctx, c.ID, []SlotClaim{mig(gpuA, 0, 2)}); err != nil {
				return err
			}
			_, err := tx.UpdateVMState(ctx, c.ID, c.Version, VMUpdate{State: VMAllocating})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		checkSlotAccounting(t, s)
	})
}

// 50 claimers, 8 candidate devices on three GPUs, several of which overlap:
// the database lets through exactly one of each overlapping group.
func TestClaimAllocationConcurrent(t *testing.T) {
	ctx := context.Background()
	candidates := []SlotClaim{
		mig(gpuA, 0, 4), // A: overlaps D
		mig(gpuA, 4, 4), // B: overlaps C
		mig(gpuA, 5, 1), // C
		mig(gpuA, 3, 1), // D
		vgpuVF(gpuB, "0000:41:00.4"),
		vgpuVF(gpuB, "0000:41:00.5"),
		whole(gpuC), // G
		whole(gpuC), // H: the same GPU as G
	}
	// Groups of candidates of which exactly one wins.
	groups := [][]int{{0, 3}, {1, 2}, {4}, {5}, {6, 7}}
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		const claimers = 50
		vms := make([]string, claimers)
		for i := range vms {
			vms[i] = mustVM(t, s, "alice", fmt.Sprint("vm", i)).ID
		}
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			wins   = map[int][]int{} // candidate → claimers that got it
			start  = make(chan struct{})
			failed []error
		)
		for i := range claimers {
			wg.Go(func() {
				<-start
				c := i % len(candidates)
				_, err := s.ClaimAllocation(ctx, vms[i], []SlotClaim{candidates[c]})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins[c] = append(wins[c], i)
				case !errors.Is(err, ErrSlotTaken):
					failed = append(failed, err)
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range failed {
			t.Errorf("claim failed with something else than ErrSlotTaken: %v", err)
		}
		total := 0
		for _, g := range groups {
			n := 0
			for _, c := range g {
				n += len(wins[c])
			}
			if n != 1 {
				t.Errorf("candidates %v: %d winners, want 1 (%v)", g, n, wins)
			}
			total += n
		}
		live, _ := s.ListLiveAllocations(ctx, "")
		if len(live) != total || total != len(groups) {
			t.Fatalf("%d live allocations, %d winners, want %d", len(live), total, len(groups))
		}
		checkSlotAccounting(t, s)
	})
}

// snapshotAllocations describes the allocation tables, to compare before and
// after a refused claim.
func snapshotAllocations(t *testing.T, s *Store) string {
	t.Helper()
	var modes []GPUMode
	s.db.Order("host, gpu_address").Find(&modes)
	return fmt.Sprintf("allocations=%d slots=%d modes=%+v",
		count(t, s, "allocations"), count(t, s, "allocation_slots"), modes)
}

// checkSlotAccounting verifies that slot rows, live allocations and GPU modes
// agree: every live allocation holds exactly its units, no released one
// holds any, and each GPU's count is the number of its slot rows.
func checkSlotAccounting(t *testing.T, s *Store) {
	t.Helper()
	var allocs []Allocation
	s.db.Find(&allocs)
	var slots []AllocationSlot
	s.db.Find(&slots)
	held := map[int64][]string{}
	perGPU := map[gpuKey]int{}
	for _, sl := range slots {
		held[sl.AllocationID] = append(held[sl.AllocationID], sl.SlotKey)
		perGPU[gpuKey{sl.Host, sl.GPUAddress}]++
	}
	kinds := map[gpuKey]gpu.Kind{}
	for _, a := range allocs {
		got := held[a.ID]
		slices.Sort(got)
		if a.State == AllocReleased {
			if len(got) != 0 {
				t.Errorf("released allocation %d holds %v", a.ID, got)
			}
			continue
		}
		claim := SlotClaim{Host: a.Host, GPUAddress: a.GPUAddress, Backend: a.Backend, Kind: a.Kind,
			PlacementStart: a.PlacementStart, PlacementSize: a.PlacementSize}
		switch a.Kind {
		case gpu.KindVGPU:
			if _, err := fmt.Sscanf(a.Slot, "vgpu:%d", &claim.Index); err != nil {
				claim.VF = a.Slot[len("vf:"):]
			}
		}
		want, _ := claim.SlotKeys()
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("allocation %d (%s) holds %v, want %v", a.ID, a.Slot, got, want)
		}
		g := gpuKey{a.Host, a.GPUAddress}
		if k, ok := kinds[g]; ok && k != a.Kind {
			t.Errorf("GPU %v has live %s and %s allocations", g, k, a.Kind)
		}
		kinds[g] = a.Kind
	}
	var modes []GPUMode
	s.db.Find(&modes)
	for _, m := range modes {
		g := gpuKey{m.Host, m.GPUAddress}
		if m.LiveSlots != perGPU[g] {
			t.Errorf("gpu_modes %v counts %d slots, %d are held", g, m.LiveSlots, perGPU[g])
		}
		if m.LiveSlots > 0 && kinds[g] != gpu.Kind(m.Mode) {
			t.Errorf("gpu_modes %v says %s, allocations are %s", g, m.Mode, kinds[g])
		}
		delete(perGPU, g)
	}
	for g, n := range perGPU {
		t.Errorf("GPU %v holds %d slots and has no gpu_modes row", g, n)
	}
}

// Two gpuvmd processes on one SQLite file (two Stores, two connections):
// busy_timeout and IMMEDIATE transactions make them wait for each other
// instead of failing with "database is locked".
func TestSQLiteTwoWritersNoLockedErrors(t *testing.T) {
	ctx := context.Background()
	d := newTestDB(t, DriverSQLite)
	s1, s2 := d.open(t), d.open(t)
	mustUser(t, s1, "alice")
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 50 {
		s := s1
		if i%2 == 1 {
			s = s2
		}
		wg.Go(func() {
			vm := &VM{Name: fmt.Sprint("vm", i), Owner: "alice", Profile: "p"}
			if _, err := s.CreateVM(ctx, vm, CreateVMOptions{}); err != nil {
				errs <- err
				return
			}
			if _, err := s.ClaimAllocation(ctx, vm.ID, []SlotClaim{vgpuVF(gpuB, fmt.Sprintf("0000:41:%02x.%d", i/8, i%8))}); err != nil {
				errs <- err
				return
			}
			if _, err := s.UpdateVMState(ctx, vm.ID, vm.Version, VMUpdate{State: VMAllocating}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := count(t, s1, "allocation_slots"); n != 50 {
		t.Fatalf("%d slots held, want 50", n)
	}
	checkSlotAccounting(t, s1)
}

// ListAllocationsForVMs answers, for each VM, what ListAllocations does.
func TestListAllocationsForVMs(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		a, b, none := mustVM(t, s, "alice", "a").ID, mustVM(t, s, "alice", "b").ID, mustVM(t, s, "alice", "none").ID
		if _, err := s.ClaimAllocation(ctx, a, []SlotClaim{mig(gpuA, 0, 4), mig(gpuA, 4, 4)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimAllocation(ctx, b, []SlotClaim{whole(gpuC)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReleaseAllocations(ctx, b); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimAllocation(ctx, b, []SlotClaim{vgpuVF(gpuB, "0000:41:00.4")}); err != nil {
			t.Fatal(err)
		}
		got, err := s.ListAllocationsForVMs(ctx, []string{a, b, none, "no-such-vm"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Errorf("%d VMs in the answer, want 2 (a and b)", len(got))
		}
		for _, id := range []string{a, b, none} {
			want, err := s.ListAllocations(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got[id]) != fmt.Sprint(want) {
				t.Errorf("vm %s:\n got  %+v\n want %+v", id, got[id], want)
			}
		}
		if got, err := s.ListAllocationsForVMs(ctx, nil); err != nil || len(got) != 0 {
			t.Errorf("no VMs: %v, %v", got, err)
		}
	})
}
