package store

import (
	"context"
	"errors"
	"testing"
)

// TestQuotaGeneration checks that what the quotas count moves the
// generation when it commits, and that what a queue of creates writes
// (a queued VM, its rank and reason) does not: an admission keeps what it
// read across a burst of creates and reads again after a placement.
func TestQuotaGeneration(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		step := func(name string, moves bool, fn func() error) {
			t.Helper()
			before := s.QuotaGeneration()
			if err := fn(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := s.QuotaGeneration() != before; got != moves {
				t.Errorf("%s: generation moved %v, want %v", name, got, moves)
			}
		}
		var vm *VM
		step("a queued VM", false, func() error { vm = mustVM(t, s, "alice", "a"); return nil })
		step("its rank and reason", false, func() error {
			_, err := s.SetQueue(ctx, map[string]QueueEntry{vm.ID: {Position: 1, Phase: "waiting", Reason: "no room"}})
			return err
		})
		step("slots claimed", true, func() error { _, err := s.ClaimAllocation(ctx, vm.ID, []SlotClaim{whole(gpuC)}); return err })
		step("a state", true, func() error {
			cur, err := s.GetVM(ctx, vm.ID)
			if err != nil {
				return err
			}
			_, err = s.UpdateVMState(ctx, vm.ID, cur.Version, VMUpdate{State: VMRunning})
			return err
		})
		step("a claim that fails", false, func() error {
			other := mustVM(t, s, "alice", "b")
			if _, err := s.ClaimAllocation(ctx, other.ID, []SlotClaim{whole(gpuC)}); err == nil {
				t.Error("the same GPU claimed twice")
			}
			return nil
		})
		step("slots released", true, func() error { _, err := s.ReleaseAllocations(ctx, vm.ID); return err })
		step("groups", true, func() error { return s.SetUserGroups(ctx, "alice", []string{"lab"}) })
		step("inside a transaction, at its commit", true, func() error {
			return s.Tx(ctx, func(tx *Store) error {
				before := s.QuotaGeneration()
				if _, err := tx.ClaimAllocation(ctx, vm.ID, []SlotClaim{whole(gpuC)}); err != nil {
					return err
				}
				if s.QuotaGeneration() != before {
					t.Error("the generation moved before the transaction committed")
				}
				return nil
			})
		})
	})
}

// A create's audit entry is written with the VM, in its transaction, and
// not at all when the create writes nothing.
func TestCreateVMWritesItsAudit(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		e := &AuditEntry{Action: "vm.create", User: "alice", Outcome: AuditOK, Status: 202, Target: "vm/alice/a"}
		vm := &VM{Name: "a", Owner: "alice", Profile: "p", Hours: 1}
		if _, err := s.CreateVM(ctx, vm, CreateVMOptions{RequestedBy: "alice", Audit: e}); err != nil {
			t.Fatal(err)
		}
		got, _, err := s.ListAudit(ctx, AuditFilter{VMID: vm.ID})
		if err != nil || len(got) != 1 || got[0].Action != "vm.create" || got[0].Status != 202 {
			t.Fatalf("audit of the create: %+v %v", got, err)
		}
		again := &AuditEntry{Action: "vm.create", User: "alice", Outcome: AuditOK, Status: 202}
		if _, err := s.CreateVM(ctx, &VM{Name: "a", Owner: "alice", Profile: "p", Hours: 1}, CreateVMOptions{Audit: again}); !errors.Is(err, ErrNameTaken) {
			t.Fatalf("the same name again: %v", err)
		}
		if n := count(t, s, "audit_log"); n != 1 {
			t.Errorf("%d audit entries after a create that wrote nothing, want 1", n)
		}
	})
}

// HostsGeneration moves once a host or drain write commits, not for one
// that failed, and inside a transaction only at its commit.
func TestHostsGeneration(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		g := s.HostsGeneration()
		if err := s.Heartbeat(ctx, "nobody", "{}"); err == nil {
			t.Fatal("heartbeat of an unknown host")
		}
		if s.HostsGeneration() != g {
			t.Error("a heartbeat that failed moved the hosts' generation")
		}
		if err := s.RegisterHost(ctx, &Host{Name: "n1", APIURL: "http://n1"}); err != nil {
			t.Fatal(err)
		}
		if s.HostsGeneration() == g {
			t.Error("a registration did not move the hosts' generation")
		}
		g = s.HostsGeneration()
		err := s.Tx(ctx, func(tx *Store) error {
			if err := tx.Heartbeat(ctx, "n1", "{}"); err != nil {
				return err
			}
			if s.HostsGeneration() != g {
				t.Error("moved before the commit")
			}
			return nil
		})
		if err != nil || s.HostsGeneration() == g {
			t.Errorf("after the commit: %v, generation %d (was %d)", err, s.HostsGeneration(), g)
		}
		g = s.HostsGeneration()
		if err := s.DrainGPU(ctx, &GPUDrain{Host: "n1", GPUAddress: "0000:01:00.0", DrainedBy: "admin"}); err != nil || s.HostsGeneration() == g {
			t.Errorf("drain: %v, generation unmoved %v", err, s.HostsGeneration() == g)
		}
	})
}
