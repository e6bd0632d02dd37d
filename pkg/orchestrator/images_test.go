package orchestrator

import (
	"context"
	"errors"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// TestImportedImage: an image block naming an imported image resolves, at
// each create, to the pinned or newest version's volume, and the VM is
// recorded on it, so that the version is not deleted under it.
func TestImportedImage(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t, storetest.Quiet)
	lc := &lifecycle{st: st}
	if err := st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	add := func(name, format string, newName bool) *store.Image {
		img := &store.Image{Name: name, OS: "linux", Firmware: "uefi", Format: format, SHA256: "x", Pool: "gpuvm",
			Volume: name + "." + format, Origin: store.ImageImported, CreatedBy: "root"}
		img.Path = "/pool/" + img.Volume
		if err := st.CreateImage(ctx, img, newName); err != nil {
			t.Fatal(err)
		}
		return img
	}
	v1 := add("ubuntu", "qcow2", true)
	v2 := &store.Image{Name: "ubuntu", OS: "linux", Firmware: "uefi", Format: "raw", SHA256: "y", Pool: "gpuvm",
		Volume: "ubuntu-2.raw", Path: "/pool/ubuntu-2.raw", Origin: store.ImagePublished, CreatedBy: "root"}
	if err := st.CreateImage(ctx, v2, false); err != nil {
		t.Fatal(err)
	}
	add("installer", "iso", true)
	vm := &store.VM{Name: "desk", Owner: "ann", Profile: "desktop", Hours: 1}
	if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name     string
		block    config.Image
		path     string
		format   string
		imageID  int64
		notFound bool
	}{
		{"newest", config.Image{Name: "u", Imported: "ubuntu"}, v2.Path, "raw", v2.ID, false},
		{"pinned", config.Image{Name: "u", Imported: "ubuntu", Version: 1}, v1.Path, "qcow2", v1.ID, false},
		{"missing version", config.Image{Name: "u", Imported: "ubuntu", Version: 7}, "", "", 0, true},
		{"missing image", config.Image{Name: "u", Imported: "nope"}, "", "", 0, true},
		{"an ISO", config.Image{Name: "u", Imported: "installer"}, "", "", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := lc.importedImage(ctx, vm.ID, &c.block)
			if c.path == "" {
				if err == nil || errors.Is(err, store.ErrNotFound) != c.notFound {
					t.Fatalf("importedImage = %+v, %v; want an error (not found: %v)", got, err, c.notFound)
				}
				return
			}
			if err != nil || got.Path != c.path || got.Format != c.format || c.block.Path != "" {
				t.Fatalf("importedImage = %+v, %v; want %s (%s), the block unchanged", got, err, c.path, c.format)
			}
			users, _ := st.ImageUsers(ctx)
			if len(users[c.imageID]) != 1 {
				t.Fatalf("the VM is not recorded on image %d: %v", c.imageID, users)
			}
		})
	}
	// The VM is on version 1 now (the last resolved): it cannot go.
	var inUse *store.ImageInUseError
	if err := st.DeleteImage(ctx, v1.ID); !errors.As(err, &inUse) {
		t.Fatalf("delete v1 = %v, want in use", err)
	}
	// A version deleted before the create records its use fails the create.
	if err := st.DeleteImage(ctx, v2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.importedImage(ctx, vm.ID, &config.Image{Name: "u", Imported: "ubuntu", Version: 2}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a deleted version = %v, want not found", err)
	}
}
