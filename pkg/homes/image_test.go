package homes

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/hostmount"
	"github.com/gpuvm/gpuvm/pkg/logtest"
)

// An image home, for real (as root, with loop devices and e2fsprogs;
// skips saying why without): made at its quota's size, mounted, its
// person's, with writes past it refused; mounted again after an unmount
// (a reboot) and grown then to a raised quota; grown while mounted where
// the kernel lets it (else at the next mount); kept whole while something
// has it open; removed with its image. An image cut short is made again,
// and a person without a quota gets a directory.
func TestImageHome(t *testing.T) {
	root := t.TempDir()
	if err := ImageSupport(root); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	const uid = 20001
	dir, err := Ensure(ctx, root, "ann", uid, 16<<20, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hostmount.Unmount(ctx, dir, false) })
	if m, err := hostmount.Mounted(dir); err != nil || !m {
		t.Fatalf("after Ensure, mounted %v %v", m, err)
	}
	im := mustImage(t, root, "ann", 0)
	if im.Size != 16<<20 || im.Capacity < 8<<20 || im.Capacity > 16<<20 {
		t.Fatalf("after Ensure: %+v, want a mounted 16MiB image", im)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if owner, group, _ := ownerOf(fi); owner != uid || group != uid || fi.Mode().Perm() != 0o700 {
		t.Errorf("home's root: %d:%d %v, want %d:%d 0700", owner, group, fi.Mode().Perm(), uid, uid)
	}
	if _, err := os.Stat(filepath.Join(dir, "lost+found")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lost+found in the home: %v", err)
	}
	keep := bytes.Repeat([]byte("ann's work "), 100_000) // 1.1 MB
	if err := os.WriteFile(filepath.Join(dir, "keep"), keep, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 20<<20), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 20MiB into a 16MiB home: %v, want ENOSPC", err)
	}
	_ = os.Remove(filepath.Join(dir, "big"))

	// Unmounted, as after a reboot: the next Ensure mounts it again,
	// grown to the raised quota first.
	if err := hostmount.Unmount(ctx, dir, false); err != nil {
		t.Fatal(err)
	}
	growLog, grew := logtest.New() // a growth that fails says why there
	if _, err := Ensure(ctx, root, "ann", uid, 32<<20, growLog, nil); err != nil {
		t.Fatal(err)
	}
	if im := mustImage(t, root, "ann", 0); im.Size != 32<<20 || im.Capacity < 24<<20 {
		t.Fatalf("after an Ensure at 32MiB: %+v; its log:\n%s", im, grew)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || !bytes.Equal(b, keep) {
		t.Fatalf("the home's file after the growth: %d bytes, %v", len(b), err)
	}

	// Mounted: grown in place where the kernel allows (CAP_SYS_RESOURCE),
	// else at the next mount.
	im = mustImage(t, root, "ann", 48<<20)
	switch {
	case im.Size == 48<<20 && im.Capacity > 40<<20:
		t.Log("grown while mounted")
	case im.Size == 32<<20 && im.Capacity < 32<<20:
		t.Log("not grown while mounted (no CAP_SYS_RESOURCE here?); grown at the next mount")
		if err := hostmount.Unmount(ctx, dir, false); err != nil {
			t.Fatal(err)
		}
		if im := mustImage(t, root, "ann", 48<<20); im.Size != 48<<20 || im.Capacity < 40<<20 {
			t.Fatalf("after the remount at 48MiB: %+v", im)
		}
	default:
		t.Fatalf("asked to grow to 48MiB while mounted: %+v", im)
	}

	// A growth cut short after the file grew (killed before resize2fs):
	// the next mount compares the filesystem's size, and finishes it.
	if err := hostmount.Unmount(ctx, dir, false); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(imageFile(root, "ann"), 64<<20); err != nil {
		t.Fatal(err)
	}
	if im := mustImage(t, root, "ann", 64<<20); im.Capacity < 56<<20 {
		t.Fatalf("after a growth cut short, remounted at 64MiB: %+v", im)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || !bytes.Equal(b, keep) {
		t.Fatalf("the home's file after the growths: %d bytes, %v", len(b), err)
	}

	// Busy: a file open in it keeps it whole; closed, the home goes.
	f, err := os.Open(filepath.Join(dir, "keep"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Remove(root, "ann", "ann", nil, nil); !errors.Is(err, ErrBusy) {
		t.Errorf("Remove of a busy image home: %v, want ErrBusy", err)
	}
	if m, err := hostmount.Mounted(dir); err != nil || !m {
		t.Errorf("after a refused Remove, mounted %v %v", m, err)
	}
	f.Close()
	if err := Remove(root, "ann", "ann", nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, imageFile(root, "ann")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Remove, %s: %v", p, err)
		}
	}
	if m, err := hostmount.Mounted(dir); err != nil || m {
		t.Errorf("after Remove, mounted %v %v", m, err)
	}

	// An image cut short (killed inside mkfs) is made again.
	if err := os.WriteFile(imageFile(root, "bob")+".making", []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	bobDir, err := Ensure(ctx, root, "bob", uid+1, 16<<20, quiet, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hostmount.Unmount(ctx, bobDir, false) })
	if im := mustImage(t, root, "bob", 0); im.Size != 16<<20 {
		t.Errorf("bob's image: %+v", im)
	}
	if _, err := os.Lstat(imageFile(root, "bob") + ".making"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cut-short image is left: %v", err)
	}
	// Without a quota: a directory.
	if _, err := Ensure(ctx, root, "cy", uid+2, 0, quiet, nil); err != nil {
		t.Fatal(err)
	}
	if _, isImage, err := ImageOf(ctx, root, "cy", 0, quiet); isImage || err != nil {
		t.Errorf("cy's home is an image (%v)", err)
	}
}

func mustImage(t *testing.T, root, login string, want uint64) Image {
	t.Helper()
	im, isImage, err := ImageOf(context.Background(), root, login, want, quiet)
	if err != nil || !isImage {
		t.Fatalf("ImageOf(%s): image %v, %v", login, isImage, err)
	}
	return im
}

func TestImageSize(t *testing.T) {
	for q, want := range map[uint64]uint64{1 << 10: MinImage, MinImage: MinImage, 1<<30 + 1: 1 << 30, 1<<30 + 4096: 1<<30 + 4096} {
		if got := ImageSize(q); got != want {
			t.Errorf("ImageSize(%d) = %d, want %d", q, got, want)
		}
	}
}
