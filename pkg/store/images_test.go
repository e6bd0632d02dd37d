package store

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func testImage(name string) *Image {
	return &Image{Name: name, OS: "linux", Firmware: "uefi", Format: "qcow2", VirtualSize: 1 << 30, ActualSize: 1 << 20,
		SHA256: "ab", Pool: "gpuvm", Volume: name + ".qcow2", Path: "/p/" + name, Origin: ImageImported, CreatedBy: "root"}
}

func TestImages(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		a := testImage("ubuntu")
		if err := s.CreateImage(ctx, a, true); err != nil || a.Version != 1 || a.ID == 0 {
			t.Fatalf("import: %+v, %v", a, err)
		}
		// An import of a taken name is refused and writes nothing.
		again := testImage("ubuntu")
		again.Volume = "other.qcow2"
		if err := s.CreateImage(ctx, again, true); !errors.Is(err, ErrImageNameTaken) || !errors.Is(err, ErrConflict) {
			t.Fatalf("second import = %v, want ErrImageNameTaken", err)
		}
		// A publish adds the next version; two versions cannot share a volume.
		p := testImage("ubuntu")
		p.Volume, p.Origin, p.SourceVM = "ubuntu-2.qcow2", ImagePublished, "vm-1"
		if err := s.CreateImage(ctx, p, false); err != nil || p.Version != 2 {
			t.Fatalf("publish: %+v, %v", p, err)
		}
		dupVol := testImage("debian")
		dupVol.Volume = "ubuntu-2.qcow2"
		if err := s.CreateImage(ctx, dupVol, false); !errors.Is(err, ErrConflict) {
			t.Fatalf("same volume twice = %v, want ErrConflict", err)
		}
		if err := s.CreateImage(ctx, &Image{Name: "x"}, true); !errors.Is(err, ErrInvalid) {
			t.Fatalf("no volume = %v, want ErrInvalid", err)
		}
		newest, err := s.GetImage(ctx, "ubuntu", 0)
		if err != nil || newest.Version != 2 || newest.SourceVM != "vm-1" {
			t.Fatalf("newest = %+v, %v", newest, err)
		}
		if v1, err := s.GetImage(ctx, "ubuntu", 1); err != nil || v1.ID != a.ID {
			t.Fatalf("v1 = %+v, %v", v1, err)
		}
		for _, c := range []struct {
			name    string
			version int
		}{{"ubuntu", 3}, {"nope", 0}} {
			if _, err := s.GetImage(ctx, c.name, c.version); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetImage(%s, %d) = %v, want ErrNotFound", c.name, c.version, err)
			}
		}
		list, err := s.ListImages(ctx)
		if err != nil || len(list) != 2 || list[0].Version != 1 || list[1].Version != 2 {
			t.Fatalf("list = %+v, %v", list, err)
		}

		// A live VM on version 1 keeps it; deleting the VM lets it go.
		mustUser(t, s, "ann")
		vm := &VM{Name: "desk", Owner: "ann", Profile: "desktop", Hours: 1}
		if _, err := s.CreateVM(ctx, vm, CreateVMOptions{RequestedBy: "ann"}); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordImageUse(ctx, vm.ID, a.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordImageUse(ctx, "no-such-vm", a.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("use by a missing VM = %v, want ErrNotFound", err)
		}
		users, err := s.ImageUsers(ctx)
		if err != nil || !slices.Equal(users[a.ID], []string{"ann/desk (" + vm.ID + ")"}) || len(users[p.ID]) != 0 {
			t.Fatalf("users = %v, %v", users, err)
		}
		var inUse *ImageInUseError
		if err := s.DeleteImage(ctx, a.ID); !errors.As(err, &inUse) || !errors.Is(err, ErrConflict) || len(inUse.VMs) != 1 || inUse.Image != "ubuntu@1" {
			t.Fatalf("delete in use = %v", err)
		}
		if _, err := s.GetImage(ctx, "ubuntu", 1); err != nil {
			t.Fatalf("refused delete removed the image: %v", err)
		}
		// Recording again moves the VM to version 2.
		if err := s.RecordImageUse(ctx, vm.ID, p.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteImage(ctx, a.ID); err != nil {
			t.Fatalf("delete unused v1: %v", err)
		}
		got, _ := s.GetVM(ctx, vm.ID)
		if _, err := s.UpdateVMState(ctx, vm.ID, got.Version, VMUpdate{State: VMDeleted}); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteImage(ctx, p.ID); err != nil {
			t.Fatalf("delete v2 of a deleted VM: %v", err)
		}
		if err := s.DeleteImage(ctx, p.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("delete twice = %v, want ErrNotFound", err)
		}
		if ok, err := s.ImageExists(ctx, "ubuntu"); err != nil || ok {
			t.Fatalf("exists after deleting all = %v, %v", ok, err)
		}
		// The name is free again: an import starts at 1.
		if err := s.CreateImage(ctx, testImage("ubuntu"), true); err != nil {
			t.Fatal(err)
		}
	})
}
