package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// What a VM's owner reads names no file of the server: paths are cut to
// their base names; URLs, routes and PCI addresses stay.
func TestHidePaths(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"create disk overlay: base image: open /root/gpuvm/test/guest/desktop/cache/desktop.qcow2: no such file or directory",
			"create disk overlay: base image: open desktop.qcow2: no such file or directory"},
		{"Cannot access storage file '/var/lib/gpuvm/images/u.qcow2' (as uid:64055, gid:64055): No such file or directory",
			"Cannot access storage file 'u.qcow2' (as uid:64055, gid:64055): No such file or directory"},
		{`kernel "/srv/k/vmlinuz" missing`, `kernel "vmlinuz" missing`},
		{"/var/lib/x.img.", "x.img."},
		{"see http://host:8080/v1/vms and /v1/vms/abc", "see http://host:8080/v1/vms and /v1/vms/abc"},
		{"GPU 0000:41:00.0 busy; MIG 1g.10gb; profile H100-4C", "GPU 0000:41:00.0 busy; MIG 1g.10gb; profile H100-4C"},
		{"a/b relative stays", "a/b relative stays"},
	} {
		if got := hidePaths(tc.in); got != tc.want {
			t.Errorf("hidePaths(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
	cause := fmt.Errorf("create: %w", &fs.PathError{Op: "open", Path: "/a/b/c.qcow2", Err: fs.ErrNotExist})
	err := withoutPaths(cause)
	if err.Error() != "create: open c.qcow2: file does not exist" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("withoutPaths = %q (is ErrNotExist: %v)", err, errors.Is(err, fs.ErrNotExist))
	}
	if withoutPaths(nil) != nil {
		t.Error("withoutPaths(nil) is not nil")
	}
}

// imageProfiles is a profile whose disk image and kernel are files under
// DIR, which the test does not make; its pool is named POOL.
const imageProfiles = `
server {
  libvirt {
    storage_pool = "POOL"
    images_dir   = "DIR"
  }
}
image "desktop" {
  path   = "desktop.qcow2"
  format = "qcow2"
}
profile "desktop" {
  vcpus  = 1
  memory = "256MiB"
  disk { image = "desktop" }
  boot { kernel = "DIR/vmlinuz" }
  network { type = "none" }
}
`

// A VM whose image file is missing fails with a reason its owner can read:
// what is missing in words, no server path; the log has the paths. Without
// the check (libvirt says what is missing), the reason still names no
// path: it is cut to the file's base name.
func TestMissingImageReasonNamesNoPath(t *testing.T) {
	ctx := context.Background()
	for _, checked := range []bool{true, false} {
		t.Run(fmt.Sprintf("checked=%v", checked), func(t *testing.T) {
			e := newEnv(t, "l40sx4")
			dir, pool := t.TempDir(), e.prefix+"pool"
			src := strings.NewReplacer("DIR", dir, "POOL", pool).Replace(imageProfiles)
			cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(src)})
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			e.cfg = cfg
			if _, err := e.hv.PreparePool(ctx, pool, filepath.Join(t.TempDir(), "pool")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.hv.DeletePool(context.Background(), pool) })
			o := New(Config{
				Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
				Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
				Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
			})
			if checked {
				o.life.avail = &images.Availability{Store: e.st, Stat: os.Stat}
			}
			vm, op := e.submit("ann", "desktop", "box")
			o.Drain(ctx)
			got := e.vm(vm.ID)
			if got.State != store.VMFailed {
				t.Fatalf("VM %s: %q", got.State, got.StateReason)
			}
			opErr := e.op(op.ID).Error
			for what, s := range map[string]string{"reason": got.StateReason, "operation error": opErr} {
				if strings.Contains(s, dir) || strings.Contains(s, "/") {
					t.Errorf("the %s names a server path: %q", what, s)
				}
			}
			want := "desktop.qcow2"
			if checked {
				want = `profile desktop cannot be made on this server now: its disk image "desktop" and its boot kernel are not on this server (an admin has to build or import them)`
			}
			if !strings.Contains(got.StateReason, want) {
				t.Errorf("reason %q, want it to say %q", got.StateReason, want)
			}
			if !strings.Contains(e.logs.String(), filepath.Join(dir, "desktop.qcow2")) {
				t.Error("the log does not name the missing file")
			}
		})
	}
}
