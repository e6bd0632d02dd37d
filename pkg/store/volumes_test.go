package store

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestVolumes(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		mustUser(t, s, "bob")
		inst, err := s.Installation(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gib := int64(1 << 30)
		quota := uint64(30 << 30)
		q := DiskQuota{Bytes: &quota, Rule: "policy user ann"}
		v := &Volume{Owner: "ann", Name: "scratch", SizeBytes: 20 * gib, Host: "h1", Pool: "gpuvm", CreatedBy: "ann"}
		if err := s.CreateVolume(ctx, v, q); err != nil {
			t.Fatal(err)
		}
		if v.State != VolCreating || v.Kind != VolumeDisk || v.Installation != inst.ID || v.Volume != "gpuvm-disk-"+inst.ID+"-"+v.ID+".qcow2" {
			t.Fatalf("row = %+v", v)
		}
		// The same name again, and past the quota: refused, nothing written.
		if err := s.CreateVolume(ctx, &Volume{Owner: "ann", Name: "scratch", SizeBytes: gib, Host: "h1", Pool: "gpuvm"}, q); !errors.Is(err, ErrNameTaken) {
			t.Fatalf("same name = %v, want ErrNameTaken", err)
		}
		var qe *DiskQuotaError
		err = s.CreateVolume(ctx, &Volume{Owner: "ann", Name: "big", SizeBytes: 11 * gib, Host: "h1", Pool: "gpuvm"}, q)
		if !errors.As(err, &qe) || !errors.Is(err, ErrConflict) || qe.Have != uint64(20*gib) || !strings.Contains(err.Error(), "policy user ann") {
			t.Fatalf("past quota = %v", err)
		}
		if n := count(t, s, "volumes"); n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
		// Bob's name space is his own.
		if err := s.CreateVolume(ctx, &Volume{Owner: "bob", Name: "scratch", SizeBytes: gib, Host: "h1", Pool: "gpuvm"}, DiskQuota{}); err != nil {
			t.Fatal(err)
		}
		// Not ready: no attach.
		vm1 := mustVM(t, s, "ann", "ann-1")
		vm2 := mustVM(t, s, "ann", "ann-2")
		if _, err := s.AttachVolume(ctx, v.ID, vm1.ID); !errors.Is(err, ErrConflict) {
			t.Fatalf("attach creating = %v", err)
		}
		if err := s.SetVolumeState(ctx, v.ID, VolReady, []string{VolCreating}, ""); err != nil {
			t.Fatal(err)
		}
		if err := s.SetVolumeState(ctx, v.ID, VolReady, []string{VolCreating}, ""); !errors.Is(err, ErrConflict) {
			t.Fatalf("second move = %v", err)
		}
		got, err := s.AttachVolume(ctx, v.ID, vm1.ID)
		if err != nil || got.AttachedVM == nil || *got.AttachedVM != vm1.ID || got.AttachedAt == nil {
			t.Fatalf("attach = %+v, %v", got, err)
		}
		if _, err := s.AttachVolume(ctx, v.ID, vm1.ID); err != nil {
			t.Fatalf("attach again to the same VM = %v", err)
		}
		var inUse *VolumeInUseError
		if _, err := s.AttachVolume(ctx, v.ID, vm2.ID); !errors.As(err, &inUse) || inUse.VMName != "ann-1" {
			t.Fatalf("attach to a second VM = %v", err)
		}
		if _, err := s.BeginDeleteVolume(ctx, v.ID); !errors.As(err, &inUse) {
			t.Fatalf("delete attached = %v", err)
		}
		list, err := s.ListVolumes(ctx, VolumeFilter{AttachedVM: vm1.ID})
		if err != nil || len(list) != 1 || list[0].ID != v.ID {
			t.Fatalf("attached to vm1 = %+v, %v", list, err)
		}
		// Growing within the quota; shrinking and past the quota refused.
		if _, err := s.ResizeVolume(ctx, v.ID, 10*gib, q); !errors.Is(err, ErrInvalid) {
			t.Fatalf("shrink = %v", err)
		}
		if _, err := s.ResizeVolume(ctx, v.ID, 31*gib, q); !errors.As(err, &qe) {
			t.Fatalf("grow past quota = %v", err)
		}
		if got, err := s.ResizeVolume(ctx, v.ID, 30*gib, q); err != nil || got.SizeBytes != 30*gib {
			t.Fatalf("grow = %+v, %v", got, err)
		}
		// A growth the host could not follow goes back, only from that size.
		if err := s.RevertVolumeSize(ctx, v.ID, 29*gib, 20*gib); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetVolume(ctx, v.ID); got.SizeBytes != 30*gib {
			t.Fatalf("reverted from a size it was not at: %d", got.SizeBytes)
		}
		if err := s.RevertVolumeSize(ctx, v.ID, 30*gib, 20*gib); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetVolume(ctx, v.ID); got.SizeBytes != 20*gib {
			t.Fatalf("after the revert: %d", got.SizeBytes)
		}
		if _, err := s.ResizeVolume(ctx, v.ID, 30*gib, q); err != nil {
			t.Fatal(err)
		}
		// Deleting the VM detaches the disk and keeps it.
		if _, err := s.UpdateVMState(ctx, vm1.ID, vm1.Version, VMUpdate{State: VMDeleted}); err != nil {
			t.Fatal(err)
		}
		got, err = s.GetVolume(ctx, v.ID)
		if err != nil || got.AttachedVM != nil || got.State != VolReady {
			t.Fatalf("after the VM's deletion = %+v, %v", got, err)
		}
		if _, err := s.AttachVolume(ctx, v.ID, vm2.ID); err != nil {
			t.Fatalf("attach to vm2 = %v", err)
		}
		if err := s.DetachVolume(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
		del, err := s.BeginDeleteVolume(ctx, v.ID)
		if err != nil || del.State != VolDeleting {
			t.Fatalf("begin delete = %+v, %v", del, err)
		}
		if _, err := s.AttachVolume(ctx, v.ID, vm2.ID); !errors.Is(err, ErrConflict) {
			t.Fatalf("attach deleting = %v", err)
		}
		if err := s.RemoveVolume(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetVolume(ctx, v.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("removed = %v", err)
		}
		if got, err := s.GetVolumeByName(ctx, "bob", "scratch"); err != nil || got.Owner != "bob" {
			t.Fatalf("bob's = %+v, %v", got, err)
		}
	})
}

// Adopting a disk for a person who does not exist is ErrInvalid naming
// owner (the store reads the owner, in the transaction that writes the
// row), and writes nothing; for one who does, the row is written ready.
func TestAdoptVolumeOwner(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		id := "0190a0b0-0000-7000-8000-000000000001"
		v := func(owner string) *Volume {
			return &Volume{ID: id, Owner: owner, Name: "found", SizeBytes: 1 << 20, Host: "h1", Pool: "gpuvm",
				Volume: DiskVolumeName("inst", id), Installation: "inst"}
		}
		err := s.AdoptVolume(ctx, v("nobody"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `owner: no user "nobody"`) {
			t.Fatalf("adopt for nobody = %v, want ErrInvalid naming owner", err)
		}
		if n := count(t, s, "volumes"); n != 0 {
			t.Fatalf("%d rows after a refused adoption", n)
		}
		if err := s.AdoptVolume(ctx, v("ann")); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetVolume(ctx, id); err != nil || got.Owner != "ann" || got.State != VolReady {
			t.Fatalf("adopted: %+v %v", got, err)
		}
	})
}
