package store

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestSnapshots(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "alice")
		vm := mustVM(t, s, "alice", "a")
		inst, err := s.Installation(ctx)
		if err != nil {
			t.Fatal(err)
		}
		limit := SnapshotLimit{Keep: 2, Rule: "policy user alice"}
		first := &Snapshot{VMID: vm.ID, Owner: "alice", Label: "before upgrade"}
		op, err := s.CreateSnapshot(ctx, first, "alice", limit)
		if err != nil || op.Kind != OpSnapshot || op.State != OpPending || first.OperationID != op.ID {
			t.Fatalf("create: %+v %+v %v", first, op, err)
		}
		if first.State != SnapCreating || first.Installation != inst.ID || first.Tag != "gpuvm-"+inst.ID+"-"+first.ID {
			t.Fatalf("row = %+v", first)
		}
		got, err := s.SnapshotOfOperation(ctx, op.ID)
		if err != nil || got.ID != first.ID || got.Label != "before upgrade" {
			t.Fatalf("of operation = %+v, %v", got, err)
		}
		// Restore and delete need a ready snapshot.
		if _, _, err := s.BeginSnapshotOperation(ctx, first.ID, OpRestore, "alice"); !errors.Is(err, ErrConflict) {
			t.Fatalf("restore of a creating snapshot = %v, want ErrConflict", err)
		}
		if err := s.SetSnapshotState(ctx, first.ID, SnapReady, []string{SnapCreating}, SnapshotUpdate{Consistency: SnapQuiesced}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetSnapshotState(ctx, first.ID, SnapReady, []string{SnapCreating}, SnapshotUpdate{}); !errors.Is(err, ErrConflict) {
			t.Fatalf("second move from creating = %v, want ErrConflict", err)
		}
		if err := s.SetSnapshotState(ctx, "nope", SnapReady, nil, SnapshotUpdate{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing = %v, want ErrNotFound", err)
		}
		snap, rop, err := s.BeginSnapshotOperation(ctx, first.ID, OpRestore, "alice")
		if err != nil || snap.State != SnapRestoring || snap.OperationID != rop.ID || rop.Kind != OpRestore {
			t.Fatalf("begin restore: %+v %+v %v", snap, rop, err)
		}
		// A failed snapshot does not count against the limit; the third
		// live one is refused, naming the rule, and writes nothing.
		second := &Snapshot{VMID: vm.ID, Owner: "alice"}
		if _, err := s.CreateSnapshot(ctx, second, "alice", limit); err != nil {
			t.Fatal(err)
		}
		if err := s.SetSnapshotState(ctx, second.ID, SnapFailed, nil, SnapshotUpdate{Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		// A failed snapshot is not restored, but may be deleted (its
		// tag may be on the disk all the same).
		if _, _, err := s.BeginSnapshotOperation(ctx, second.ID, OpRestore, "alice"); !errors.Is(err, ErrConflict) {
			t.Fatalf("restore of a failed snapshot = %v", err)
		}
		if got, dop, err := s.BeginSnapshotOperation(ctx, second.ID, OpSnapshotDelete, "alice"); err != nil || got.State != SnapDeleting || dop.Kind != OpSnapshotDelete {
			t.Fatalf("delete of a failed snapshot = %+v, %+v, %v", got, dop, err)
		}
		if err := s.SetSnapshotState(ctx, second.ID, SnapFailed, []string{SnapDeleting}, SnapshotUpdate{}); err != nil {
			t.Fatal(err)
		}
		third := &Snapshot{VMID: vm.ID, Owner: "alice"}
		if _, err := s.CreateSnapshot(ctx, third, "alice", limit); err != nil {
			t.Fatal(err)
		}
		ops := count(t, s, "operations")
		_, err = s.CreateSnapshot(ctx, &Snapshot{VMID: vm.ID, Owner: "alice"}, "alice", limit)
		var le *SnapshotLimitError
		if !errors.As(err, &le) || !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "policy user alice") || le.Have != 2 {
			t.Fatalf("over the limit = %v", err)
		}
		if n := count(t, s, "operations"); n != ops {
			t.Fatalf("a refused snapshot wrote an operation: %d → %d", ops, n)
		}
		list, err := s.ListSnapshots(ctx, vm.ID)
		if err != nil || len(list) != 3 || list[0].ID != first.ID || list[0].Consistency != SnapQuiesced {
			t.Fatalf("list = %+v, %v", list, err)
		}
		if err := s.RemoveSnapshot(ctx, first.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSnapshot(ctx, first.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("removed = %v", err)
		}
		all, err := s.ListAllSnapshots(ctx)
		if err != nil || len(all) != 2 {
			t.Fatalf("all = %d, %v", len(all), err)
		}
	})
}
