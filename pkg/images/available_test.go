package images

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// A profile whose disk image, kernel or initrd is not on this server, or
// whose imported image is not in the store, is unavailable, and the reason
// says so in words with no path; one whose files are all here is not.
func TestAvailability(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, f := range []string{"here.qcow2", "vmlinuz", "initrd.img", "pool/u.qcow2"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st := storetest.New(t, storetest.Quiet)
	for _, img := range []*store.Image{
		{Name: "ubuntu", Volume: "u.qcow2", Format: "qcow2", Path: filepath.Join(dir, "pool/u.qcow2")},
		{Name: "lost", Volume: "l.qcow2", Format: "qcow2", Path: filepath.Join(dir, "pool/l.qcow2")},
	} {
		img.OS, img.Firmware, img.SHA256, img.Pool, img.Origin, img.CreatedBy = "linux", "bios", "x", "gpuvm", store.ImageImported, "root"
		if err := st.CreateImage(ctx, img, true); err != nil {
			t.Fatal(err)
		}
	}
	src := strings.ReplaceAll(`
server {
  libvirt { images_dir = "DIR" }
}
image "here" { path = "here.qcow2" }
image "desktop" { path = "desktop.qcow2" }
image "imported" { imported = "ubuntu" }
image "gone" { imported = "debian" }
image "lost" { imported = "lost" }
profile "fine" {
  disk { image = "here" }
  boot {
    kernel = "DIR/vmlinuz"
    initrd = "DIR/initrd.img"
  }
}
profile "desktop" {
  disk { image = "desktop" }
  boot {
    kernel = "DIR/desktop/vmlinuz"
    initrd = "DIR/desktop/initrd.img"
  }
}
profile "kernel" {
  boot { kernel = "DIR/nope" }
}
profile "imported" {
  disk { image = "imported" }
}
profile "gone" {
  disk { image = "gone" }
}
profile "lost" {
  disk { image = "lost" }
}
`, "DIR", dir)
	cfg, diags := new(config.Loader).Parse(config.Source{Name: "p.hcl", Data: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	a := &Availability{Store: st, Stat: os.Stat}
	for _, tc := range []struct{ profile, want string }{
		{"fine", ""},
		{"imported", ""},
		{"desktop", `its disk image "desktop", its boot kernel and its boot initrd are not on this server (an admin has to build or import them)`},
		{"kernel", `its boot kernel is not on this server (an admin has to build or import it)`},
		{"gone", `its disk image "gone" names imported image debian (newest), which is not in the store`},
		{"lost", `its disk image "lost" (imported image lost@1) is not on this server (an admin has to build or import it)`},
	} {
		got := a.Unavailable(ctx, cfg, cfg.Profiles[tc.profile])
		if got != tc.want {
			t.Errorf("profile %s: unavailable %q, want %q", tc.profile, got, tc.want)
		}
		if strings.Contains(got, "/") || strings.Contains(got, dir) {
			t.Errorf("profile %s: the reason names a path: %q", tc.profile, got)
		}
	}
	// The admin's log gets the files.
	ms, err := a.Check(ctx, cfg, cfg.Profiles["desktop"])
	if err != nil || len(ms) != 3 || ms[0].Path != filepath.Join(dir, "desktop.qcow2") || ms[1].Path != filepath.Join(dir, "desktop/vmlinuz") {
		t.Errorf("Check(desktop) = %+v, %v; want the image, kernel and initrd with their paths", ms, err)
	}
	// Without Stat (libvirt's test driver) files are not checked; the
	// store still is. A nil Availability checks nothing.
	noFiles := &Availability{Store: st}
	if got := noFiles.Unavailable(ctx, cfg, cfg.Profiles["desktop"]); got != "" {
		t.Errorf("without Stat, desktop is unavailable: %q", got)
	}
	if got := noFiles.Unavailable(ctx, cfg, cfg.Profiles["gone"]); !strings.Contains(got, "not in the store") {
		t.Errorf("without Stat, gone: %q", got)
	}
	if got := (*Availability)(nil).Unavailable(ctx, cfg, cfg.Profiles["gone"]); got != "" {
		t.Errorf("a nil Availability says %q", got)
	}
}
