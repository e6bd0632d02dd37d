package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCreateVM(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		vm := &VM{Name: "render1", Owner: "alice", Profile: "render-l40s", Hours: 8, Spec: `{"vcpus":8}`}
		op, err := s.CreateVM(ctx, vm, CreateVMOptions{RequestedBy: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if vm.ID == "" || vm.State != VMQueued || vm.Version != 1 || op.VMID != vm.ID || op.Kind != OpCreate || op.State != OpPending {
			t.Fatalf("vm %+v, op %+v", vm, op)
		}
		got, err := s.GetVM(ctx, vm.ID)
		if err != nil || got.Name != "render1" || got.Spec != vm.Spec || !got.CreatedAt.Equal(vm.CreatedAt) {
			t.Fatalf("GetVM = %+v, %v", got, err)
		}
		if got, err := s.GetVMByName(ctx, "alice", "render1"); err != nil || got.ID != vm.ID {
			t.Fatalf("GetVMByName = %+v, %v", got, err)
		}
		es, _ := s.ListEventsSince(ctx, 0, EventFilter{VMID: vm.ID})
		if len(es) != 1 || es[0].Type != "vm.created" || es[0].Owner != "alice" {
			t.Fatalf("events %+v", es)
		}

		vms := count(t, s, "vms")
		tests := []struct {
			name string
			vm   VM
			want error
		}{
			{"same name", VM{Name: "render1", Owner: "alice", Profile: "p"}, ErrNameTaken},
			{"unknown owner", VM{Name: "x", Owner: "nobody", Profile: "p"}, ErrNotFound},
			{"no profile", VM{Name: "x", Owner: "alice"}, ErrInvalid},
			{"same id", VM{ID: vm.ID, Name: "other", Owner: "alice", Profile: "p"}, ErrConflict},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := s.CreateVM(ctx, &tc.vm, CreateVMOptions{}); !errors.Is(err, tc.want) {
					t.Fatalf("error %v, want %v", err, tc.want)
				}
			})
		}
		if n := count(t, s, "vms"); n != vms {
			t.Fatalf("failed creates left %d vms", n-vms)
		}
		if n := count(t, s, "operations"); n != vms {
			t.Fatalf("failed creates left %d operations", n-vms)
		}

		// A deleted VM frees its name.
		if _, err := s.UpdateVMState(ctx, vm.ID, 1, VMUpdate{State: VMDeleted}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetVMByName(ctx, "alice", "render1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deleted VM found by name: %v", err)
		}
		again := &VM{Name: "render1", Owner: "alice", Profile: "render-l40s"}
		if _, err := s.CreateVM(ctx, again, CreateVMOptions{}); err != nil {
			t.Fatalf("reuse the name of a deleted VM: %v", err)
		}
	})
}

func TestCreateVMIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		key := &IdempotencyKey{User: "alice", Key: "k1", RequestHash: "h1"}
		vm := &VM{Name: "a", Owner: "alice", Profile: "p"}
		op, err := s.CreateVM(ctx, vm, CreateVMOptions{IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		// The same request again: refused, nothing written; the key says
		// what the first one made.
		_, err = s.CreateVM(ctx, &VM{Name: "b", Owner: "alice", Profile: "p"}, CreateVMOptions{
			IdempotencyKey: &IdempotencyKey{User: "alice", Key: "k1", RequestHash: "h1"},
		})
		if !errors.Is(err, ErrIdempotencyKeyUsed) || !errors.Is(err, ErrConflict) {
			t.Fatalf("second create: %v", err)
		}
		if n := count(t, s, "vms"); n != 1 {
			t.Fatalf("%d vms", n)
		}
		k, err := s.GetIdempotencyKey(ctx, "alice", "k1")
		if err != nil || k.VMID != vm.ID || k.OperationID != op.ID || k.RequestHash != "h1" {
			t.Fatalf("key %+v, %v", k, err)
		}
	})
}

func TestUpdateVMState(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		vm := mustVM(t, s, "alice", "a")
		host := "gpu01"
		lease := time.Date(2026, 3, 1, 17, 0, 0, 123456789, time.UTC)
		got, err := s.UpdateVMState(ctx, vm.ID, 1, VMUpdate{State: VMAllocating, Phase: "scheduling", Host: &host, LeaseEnd: &lease})
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != 2 || got.State != VMAllocating || got.Host != "gpu01" || !got.LeaseEnd.Equal(lease.Truncate(time.Microsecond)) || got.Profile != vm.Profile {
			t.Fatalf("updated %+v", got)
		}
		got, err = s.UpdateVMState(ctx, vm.ID, 2, VMUpdate{State: VMRunning})
		if err != nil || got.Host != "gpu01" || got.Phase != "" || got.Version != 3 {
			t.Fatalf("second update %+v, %v", got, err)
		}
		tests := []struct {
			name    string
			id      string
			version int64
			u       VMUpdate
			want    error
		}{
			{"stale version", vm.ID, 2, VMUpdate{State: VMStopping}, ErrConflict},
			{"future version", vm.ID, 9, VMUpdate{State: VMStopping}, ErrConflict},
			{"missing vm", "nope", 1, VMUpdate{State: VMStopping}, ErrNotFound},
			{"no state", vm.ID, 3, VMUpdate{}, ErrInvalid},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := s.UpdateVMState(ctx, tc.id, tc.version, tc.u); !errors.Is(err, tc.want) {
					t.Fatalf("error %v, want %v", err, tc.want)
				}
			})
		}
		es, _ := s.ListEventsSince(ctx, 0, EventFilter{VMID: vm.ID})
		if len(es) != 3 || es[2].Type != "vm.state" || string(es[2].Payload) == "" {
			t.Fatalf("events %+v", es)
		}
	})
}

// Two writers read version 1; exactly one may write.
func TestUpdateVMStateRace(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		vm := mustVM(t, s, "alice", "a")
		errs := make(chan error, 20)
		for i := range 20 {
			go func() {
				_, err := s.UpdateVMState(ctx, vm.ID, 1, VMUpdate{State: VMAllocating, Phase: fmt.Sprint(i)})
				errs <- err
			}()
		}
		wins := 0
		for range 20 {
			err := <-errs
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, ErrConflict):
				t.Errorf("unexpected error: %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d writers won", wins)
		}
	})
}

func TestListVMsPagination(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		owners := []string{"alice", "bob", "carol"}
		for _, o := range owners {
			mustUser(t, s, o)
		}
		// Ten VMs share each creation time: the ID breaks the tie.
		d.clock.SetStep(0)
		var all []string
		byOwner := map[string][]string{}
		for i := range 1000 {
			if i%10 == 0 {
				d.clock.Advance(time.Second)
			}
			o := owners[i%3]
			vm := mustVM(t, s, o, fmt.Sprintf("vm%04d", i))
			all = append(all, vm.ID)
			byOwner[o] = append(byOwner[o], vm.ID)
		}
		d.clock.SetStep(time.Millisecond)
		// Some VMs are deleted, some running.
		for i, id := range all {
			switch i % 7 {
			case 3:
				if _, err := s.UpdateVMState(ctx, id, 1, VMUpdate{State: VMRunning}); err != nil {
					t.Fatal(err)
				}
			}
		}

		walk := func(t *testing.T, f VMFilter) []string {
			var ids []string
			pages := 0
			for {
				page, err := s.ListVMs(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				pages++
				for _, vm := range page.VMs {
					ids = append(ids, vm.ID)
				}
				if page.Next == "" {
					break
				}
				if len(page.VMs) != f.Limit {
					t.Fatalf("page %d has %d VMs and a next page", pages, len(page.VMs))
				}
				f.After = page.Next
				if pages > 2000 {
					t.Fatal("pagination does not end")
				}
			}
			return ids
		}
		tests := []struct {
			name string
			f    VMFilter
			want []string
		}{
			{"all", VMFilter{Limit: 37}, all},
			{"exact pages", VMFilter{Limit: 100}, all},
			{"one page", VMFilter{Limit: 1000}, all},
			{"owner", VMFilter{Owner: "bob", Limit: 50}, byOwner["bob"]},
			{"running", VMFilter{States: []string{VMRunning}, Limit: 13}, everyNth(all, 7, 3)},
			{"queued or running", VMFilter{States: []string{VMQueued, VMRunning}, Limit: 64}, all},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				got := walk(t, tc.f)
				if len(got) != len(tc.want) {
					t.Fatalf("%d VMs, want %d", len(got), len(tc.want))
				}
				// The same VMs in the same order: creation time, then ID.
				want := orderByCreation(t, s, tc.want)
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("VM %d is %s, want %s", i, got[i], want[i])
					}
				}
			})
		}
		if _, err := s.ListVMs(ctx, VMFilter{After: "not a cursor!"}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("bad cursor: %v", err)
		}
	})
}

func everyNth(ids []string, n, r int) []string {
	var out []string
	for i, id := range ids {
		if i%n == r {
			out = append(out, id)
		}
	}
	return out
}

// orderByCreation sorts IDs the way ListVMs must: created_at, then id.
func orderByCreation(t *testing.T, s *Store, ids []string) []string {
	t.Helper()
	var out []string
	if err := s.db.Model(&VM{}).Where("id IN ?", ids).Order("created_at, id").Pluck("id", &out).Error; err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOperations(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice")
		vm := mustVM(t, s, "alice", "a")
		ops, err := s.ListOperations(ctx, vm.ID)
		if err != nil || len(ops) != 1 {
			t.Fatalf("ops %+v, %v", ops, err)
		}
		create := ops[0]
		if err := s.SetOperationStep(ctx, create.ID, "allocate"); err != nil {
			t.Fatal(err)
		}
		if err := s.SetOperationStep(ctx, create.ID, "define-domain"); err != nil {
			t.Fatal(err)
		}
		op, _ := s.GetOperation(ctx, create.ID)
		if op.State != OpRunning || op.Step != "define-domain" || op.StartedAt == nil {
			t.Fatalf("op %+v", op)
		}
		started := *op.StartedAt
		stop := &Operation{VMID: vm.ID, Kind: OpStop, RequestedBy: "alice"}
		if err := s.CreateOperation(ctx, stop); err != nil {
			t.Fatal(err)
		}
		un, _ := s.ListUnfinishedOperations(ctx)
		if len(un) != 2 || un[0].ID != create.ID || un[1].ID != stop.ID {
			t.Fatalf("unfinished %+v", un)
		}
		if err := s.FinishOperation(ctx, create.ID, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishOperation(ctx, stop.ID, errors.New("domain is gone")); err != nil {
			t.Fatal(err)
		}
		op, _ = s.GetOperation(ctx, create.ID)
		if op.State != OpDone || !op.StartedAt.Equal(started) || op.FinishedAt == nil || !op.Finished() {
			t.Fatalf("finished op %+v", op)
		}
		op, _ = s.GetOperation(ctx, stop.ID)
		if op.State != OpFailed || op.Error != "domain is gone" || op.StartedAt == nil {
			t.Fatalf("failed op %+v", op)
		}
		tests := []struct {
			name string
			do   func() error
			want error
		}{
			{"step of finished", func() error { return s.SetOperationStep(ctx, create.ID, "x") }, ErrConflict},
			{"finish twice", func() error { return s.FinishOperation(ctx, stop.ID, nil) }, ErrConflict},
			{"step of missing", func() error { return s.SetOperationStep(ctx, "nope", "x") }, ErrNotFound},
			{"get missing", func() error { _, err := s.GetOperation(ctx, "nope"); return err }, ErrNotFound},
			{"op of missing vm", func() error { return s.CreateOperation(ctx, &Operation{VMID: "nope", Kind: OpStart}) }, ErrNotFound},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if err := tc.do(); !errors.Is(err, tc.want) {
					t.Fatalf("error %v, want %v", err, tc.want)
				}
			})
		}
		if un, _ := s.ListUnfinishedOperations(ctx); len(un) != 0 {
			t.Fatalf("unfinished %+v", un)
		}
	})
}

// A lease warning is recorded once per lease end, with its event, without
// touching the VM's version; a new lease end clears it, and a warning for
// an end that is no longer the VM's writes nothing. The events are found
// by type and time.
func TestWarnLease(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		mustUser(t, s, "alice")
		vm := mustVM(t, s, "alice", "a")
		end := time.Date(2026, 3, 1, 17, 0, 0, 123456789, time.UTC)
		vm, err := s.UpdateVMState(ctx, vm.ID, vm.Version, VMUpdate{State: VMRunning, LeaseEnd: &end})
		if err != nil {
			t.Fatal(err)
		}
		warn := func(at time.Time) bool {
			t.Helper()
			ok, err := s.WarnLease(ctx, vm.ID, at, &Event{VMID: vm.ID, Owner: "alice", Type: "vm.warning", Payload: JSON(`{"kind":"lease_end"}`)})
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		from := d.clock.Now()
		if !warn(end) || warn(end) {
			t.Fatal("warned not exactly once")
		}
		got, _ := s.GetVM(ctx, vm.ID)
		if got.LeaseWarnedAt == nil || got.Version != vm.Version {
			t.Fatalf("after the warning: warned at %v, version %d (was %d)", got.LeaseWarnedAt, got.Version, vm.Version)
		}
		later := end.Add(time.Hour)
		if _, err := s.UpdateVMState(ctx, vm.ID, got.Version, VMUpdate{State: VMRunning, LeaseEnd: &later}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetVM(ctx, vm.ID); got.LeaseWarnedAt != nil {
			t.Fatalf("a new lease end kept the warning of %v", got.LeaseWarnedAt)
		}
		if warn(end) {
			t.Fatal("warned of a lease end that is no longer the VM's")
		}
		if !warn(later) {
			t.Fatal("the new lease end was not warned of")
		}
		es, err := s.ListEventsSince(ctx, 0, EventFilter{Type: "vm.warning", From: from})
		if err != nil || len(es) != 2 {
			t.Fatalf("warning events since %v: %d, %v", from, len(es), err)
		}
		if es, _ := s.ListEventsSince(ctx, 0, EventFilter{Type: "vm.warning", From: d.clock.Now().Add(time.Hour)}); len(es) != 0 {
			t.Fatalf("warning events from the future: %+v", es)
		}
	})
}

func TestListVMRefs(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		mustUser(t, s, "alice")
		a, b, c := mustVM(t, s, "alice", "a"), mustVM(t, s, "alice", "b"), mustVM(t, s, "alice", "c")
		end := d.clock.Now().Add(time.Hour).UTC().Truncate(time.Second)
		host := "gpu-01"
		if _, err := s.UpdateVMState(ctx, b.ID, 1, VMUpdate{State: VMRunning, Host: &host, LeaseEnd: &end}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UpdateVMState(ctx, c.ID, 1, VMUpdate{State: VMDeleted}); err != nil {
			t.Fatal(err)
		}
		refs, err := s.ListVMRefs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]VMRef{}
		for _, r := range refs {
			got[r.ID] = r
		}
		if len(got) != 2 || got[a.ID].State != VMQueued || got[a.ID].LeaseEnd != nil {
			t.Fatalf("refs %+v: want a (queued, never ran) and b, not the deleted c", refs)
		}
		if r := got[b.ID]; r.State != VMRunning || r.Host != "gpu-01" || r.LeaseEnd == nil || !r.LeaseEnd.Equal(end) {
			t.Errorf("b: %+v, want running on gpu-01 until %v", r, end)
		}
	})
}

// AllVMs reads every VM a filter selects across pages, oldest first, none
// twice.
func TestAllVMs(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		mustUser(t, s, "bob")
		var want []string
		for i := range 5 {
			want = append(want, mustVM(t, s, "ann", fmt.Sprintf("a%d", i)).ID)
			mustVM(t, s, "bob", fmt.Sprintf("b%d", i))
		}
		got, err := AllVMs(ctx, s, VMFilter{Owner: "ann", Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, vm := range got {
			ids = append(ids, vm.ID)
		}
		if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("AllVMs = %q, want %q", ids, want)
		}
		if all, err := AllVMs(ctx, s, VMFilter{}); err != nil || len(all) != 10 {
			t.Errorf("AllVMs of everyone: %d VMs, %v; want 10", len(all), err)
		}
	})
}
