package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

func TestSetQueue(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		var vms []*VM
		for i := range 4 {
			vms = append(vms, mustVM(t, s, "ann", fmt.Sprintf("vm%d", i)))
		}
		get := func(vm *VM) *VM {
			t.Helper()
			got, err := s.GetVM(ctx, vm.ID)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		events := func(vm *VM) int {
			t.Helper()
			evs, err := s.ListEventsSince(ctx, 0, EventFilter{VMID: vm.ID, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			return len(evs)
		}
		const why = "no GPU has room for MIG 3g.40gb now"
		entries := map[string]QueueEntry{}
		for i, vm := range vms[:3] {
			entries[vm.ID] = QueueEntry{Position: i + 1, Phase: "waiting for a GPU", Reason: why}
		}
		before := events(vms[0])
		n, err := s.SetQueue(ctx, entries)
		if err != nil || n != 3 {
			t.Fatalf("first ranking: %d %v", n, err)
		}
		for i, vm := range vms[:3] {
			got := get(vm)
			if got.QueuePosition != i+1 || got.StateReason != why || got.Version != vm.Version+1 {
				t.Errorf("%s: at %d %q version %d", got.Name, got.QueuePosition, got.StateReason, got.Version)
			}
		}
		if got := get(vms[3]); got.QueuePosition != 0 || got.StateReason != "" {
			t.Errorf("unranked VM: at %d %q", got.QueuePosition, got.StateReason)
		}
		if events(vms[0]) != before+1 {
			t.Error("a new reason appended no event")
		}
		// The same queue again changes nothing.
		if n, err := s.SetQueue(ctx, entries); err != nil || n != 0 {
			t.Fatalf("same queue: %d %v", n, err)
		}
		// The head leaves the queue; the others move up: only the head's
		// rank is cleared, the others keep theirs, and read one place on
		// (no version, no event).
		head := get(vms[0])
		if _, err := s.UpdateVMState(ctx, head.ID, head.Version, VMUpdate{State: VMAllocating}); err != nil {
			t.Fatal(err)
		}
		evBefore := events(vms[1])
		n, err = s.SetQueue(ctx, map[string]QueueEntry{
			vms[1].ID: {Position: 1, Phase: "waiting for a GPU", Reason: why},
			vms[2].ID: {Position: 2, Phase: "waiting for a GPU", Reason: why},
		})
		if err != nil || n != 1 {
			t.Fatalf("after a start: %d %v", n, err)
		}
		if got := get(vms[0]); got.QueuePosition != 0 || got.State != VMAllocating {
			t.Errorf("left the queue: %s at %d", got.State, got.QueuePosition)
		}
		for i, vm := range vms[1:3] {
			if got := get(vm); got.QueuePosition != i+1 || got.Version != vm.Version+1 {
				t.Errorf("%s: at %d version %d", got.Name, got.QueuePosition, got.Version)
			}
		}
		if events(vms[1]) != evBefore {
			t.Error("a position change appended an event")
		}
		// An entry for a VM that is no longer queued is ignored.
		if n, err := s.SetQueue(ctx, map[string]QueueEntry{vms[0].ID: {Position: 1, Reason: "x"}}); err != nil || n != 2 {
			t.Fatalf("not queued: %d %v", n, err)
		}
		if got := get(vms[0]); got.QueuePosition != 0 || got.StateReason == "x" {
			t.Errorf("not queued: at %d %q", got.QueuePosition, got.StateReason)
		}
		if _, err := s.SetQueue(ctx, map[string]QueueEntry{vms[3].ID: {Position: -1}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("negative position: %v", err)
		}
		// Many ranks at once (more than one statement's worth): the queue
		// reversed.
		var many []*VM
		entries = map[string]QueueEntry{}
		for i := range 700 {
			vm := mustVM(t, s, "ann", fmt.Sprintf("m%d", i))
			many = append(many, vm)
			entries[vm.ID] = QueueEntry{Position: i + 1, Phase: "waiting for a GPU", Reason: why}
		}
		if _, err := s.SetQueue(ctx, entries); err != nil {
			t.Fatal(err)
		}
		for id, e := range entries {
			entries[id] = QueueEntry{Position: 701 - e.Position, Phase: e.Phase, Reason: e.Reason}
		}
		if n, err := s.SetQueue(ctx, entries); err != nil || n != 699 {
			t.Fatalf("700 reversed: %d %v", n, err)
		}
		if got := get(many[699]); got.QueuePosition != 1 {
			t.Errorf("last of 700 at %d", got.QueuePosition)
		}
		if got := get(many[0]); got.QueuePosition != 700 {
			t.Errorf("first of 700 at %d", got.QueuePosition)
		}
	})
}

func TestGetVMsAndEndedUsage(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		a, b := mustVM(t, s, "ann", "a"), mustVM(t, s, "ann", "b")
		got, err := s.GetVMs(ctx, []string{a.ID, "nope", b.ID})
		if err != nil || len(got) != 2 || got[a.ID].Name != "a" || got[b.ID].Name != "b" {
			t.Fatalf("GetVMs: %v %v", got, err)
		}
		start := d.clock.Now()
		end := start.Add(2 * time.Hour)
		recs := []UsageRecord{
			{VMID: a.ID, User: "ann", GPUAddress: "g", Kind: gpu.KindMIG, Share: 0.5, StartedAt: start, EndedAt: &end},
			{VMID: b.ID, User: "ann", GPUAddress: "g", Kind: gpu.KindMIG, Share: 0.25, StartedAt: start}, // still open
		}
		for i := range recs {
			if err := s.InsertUsageRecord(ctx, &recs[i]); err != nil {
				t.Fatal(err)
			}
		}
		ended, err := s.ListEndedUsage(ctx, start)
		if err != nil || len(ended) != 1 || ended[0].VMID != a.ID || ended[0].GPUSeconds != 3600 {
			t.Fatalf("ended since the start: %+v %v", ended, err)
		}
		if ended, err := s.ListEndedUsage(ctx, end); err != nil || len(ended) != 0 {
			t.Fatalf("ended since the end: %+v %v", ended, err)
		}
	})
}

// TestListedQueuePositions: a page of VMs spread over a long queue (a
// user's, a page of the admin's) reads each queued VM's place in the whole
// queue: after VMs ahead of it left (the ranks kept, with gaps), with VMs
// not ranked beside them, across pages.
func TestListedQueuePositions(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		mustUser(t, s, "bob")
		var vms []*VM
		for i := range 60 {
			vms = append(vms, mustVM(t, s, []string{"ann", "bob", "bob"}[i%3], fmt.Sprintf("q%d", i)))
		}
		// The queue: every VM but each seventh (not ranked), in an order
		// of its own (a stride through them).
		var order []*VM
		for i := range vms {
			if vm := vms[(i*17)%len(vms)]; (i*17)%len(vms)%7 != 3 {
				order = append(order, vm)
			}
		}
		entries := map[string]QueueEntry{}
		for i, vm := range order {
			entries[vm.ID] = QueueEntry{Position: i + 1, Phase: "waiting for a GPU", Reason: "full"}
		}
		if _, err := s.SetQueue(ctx, entries); err != nil {
			t.Fatal(err)
		}
		// Every fifth of the queue starts: gaps in the ranks, no round yet.
		left := map[string]bool{}
		for i := 0; i < len(order); i += 5 {
			vm, err := s.GetVM(ctx, order[i].ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.UpdateVMState(ctx, vm.ID, vm.Version, VMUpdate{State: VMAllocating}); err != nil {
				t.Fatal(err)
			}
			left[vm.ID] = true
		}
		want := map[string]int{}
		for _, vm := range order {
			if !left[vm.ID] {
				want[vm.ID] = len(want) + 1
			}
		}
		for _, f := range []VMFilter{{Owner: "ann", Limit: 1000}, {Owner: "bob", Limit: 1000}, {Limit: 7}, {States: []string{VMQueued}, Limit: 11}} {
			listed := 0
			for {
				page, err := s.ListVMs(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				for _, vm := range page.VMs {
					listed++
					if vm.QueuePosition != want[vm.ID] {
						t.Errorf("%+v: %s (%s) at %d, want %d", f, vm.Name, vm.State, vm.QueuePosition, want[vm.ID])
					}
				}
				if page.Next == "" {
					break
				}
				f.After = page.Next
			}
			if listed == 0 {
				t.Errorf("%+v listed nothing", f)
			}
		}
	})
}
