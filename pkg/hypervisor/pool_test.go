package hypervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
)

// poolState is what PoolInfo says of a pool.
func poolState(t *testing.T, c *Conn, name string) (dir string, active, autostart bool) {
	t.Helper()
	st, err := c.PoolInfo(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Dir, st.Active, st.Autostart
}

// PreparePool makes a missing pool (defined, active, autostarted) and says
// so; a pool that exists is used where it is: neither redefined nor moved
// nor marked autostart, only started when inactive.
func TestPreparePool(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "pool")

	t.Run("missing", func(t *testing.T) {
		name := uniqueName(t, "pool")
		t.Cleanup(func() { _ = c.DeletePool(context.Background(), name) })
		made, err := c.PreparePool(ctx, name, dir)
		if err != nil || !made {
			t.Fatalf("made %v, %v", made, err)
		}
		if got, active, auto := poolState(t, c, name); got != dir || !active || !auto {
			t.Errorf("pool at %q, active %v, autostart %v", got, active, auto)
		}
		if made, err := c.PreparePool(ctx, name, dir); err != nil || made {
			t.Errorf("second time: made %v, %v", made, err)
		}
	})

	t.Run("exists elsewhere and inactive", func(t *testing.T) {
		name := uniqueName(t, "pool")
		t.Cleanup(func() { _ = c.DeletePool(context.Background(), name) })
		elsewhere := t.TempDir()
		x := &libvirtxml.StoragePool{Type: "dir", Name: name, Target: &libvirtxml.StoragePoolTarget{Path: elsewhere}}
		doc, err := x.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.lv.StoragePoolDefineXML(doc, 0)
		if err != nil {
			t.Fatal(err)
		}
		_ = p.Free()
		for i := 0; i < 2; i++ {
			if made, err := c.PreparePool(ctx, name, dir); err != nil || made {
				t.Fatalf("made %v, %v", made, err)
			}
			if got, active, auto := poolState(t, c, name); got != elsewhere || !active || auto {
				t.Errorf("pool at %q, active %v, autostart %v; want at %q, active, autostart untouched", got, active, auto, elsewhere)
			}
		}
	})

	t.Run("bad name", func(t *testing.T) {
		if _, err := c.PreparePool(ctx, "bad/name", dir); err == nil {
			t.Error("bad pool name accepted")
		}
	})
}

// Where the driver cannot store a volume's contents (libvirt's test driver
// without this package's local files), CreateVM makes and checks the seed,
// then starts the VM without it and says why; the failed upload leaves no
// volume. A seed that does not check still fails, and so does any other
// upload error.
func TestCreateVMWithoutUpload(t *testing.T) {
	c := openTest(t)
	c.localUploads = false
	ctx := testCtx(t)
	pool, dir := uniqueName(t, "pool"), filepath.Join(t.TempDir(), "pool")
	if _, err := c.PreparePool(ctx, pool, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeletePool(context.Background(), pool) })
	request := func() VMRequest {
		s := gpuSpec(t, kindNone)
		s.Disks = nil
		return VMRequest{Spec: s, Pool: pool, Seed: &cloudinit.Config{InstanceID: s.UUID, Hostname: "vm-1", User: "alice"}}
	}

	if _, err := c.UploadVolume(ctx, pool, "seed.iso", []byte("x")); !errors.Is(err, ErrNoUpload) || !strings.Contains(err.Error(), pool) {
		t.Errorf("upload: %v; want ErrNoUpload naming the pool", err)
	}

	req := request()
	info, err := c.CreateVM(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteVM(context.Background(), req.Spec.UUID, time.Second) })
	if info.State != StateRunning || !strings.Contains(info.SeedSkipped, "cloud-init seed not attached") ||
		!strings.Contains(info.SeedSkipped, "not supported") {
		t.Errorf("created: state %s, seed skipped %q", info.State, info.SeedSkipped)
	}
	if ok, err := c.VolumeExists(ctx, pool, SeedName(req.Spec.Name)); ok || err != nil {
		t.Errorf("seed volume left: %v %v", ok, err)
	}
	if x, _ := c.XML(ctx, req.Spec.UUID, false); strings.Contains(x, "cdrom") {
		t.Errorf("domain has a CD-ROM:\n%s", x)
	}
	if len(info.Metadata.Volumes) != 0 {
		t.Errorf("metadata lists volumes %v", info.Metadata.Volumes)
	}

	t.Run("bad seed", func(t *testing.T) {
		req := request()
		req.Seed.Hostname = "bad_host"
		if _, err := c.CreateVM(ctx, req); err == nil || !strings.Contains(err.Error(), "hostname") {
			t.Fatalf("err = %v", err)
		}
		assertNothingLeft(t, c, pool, dir, req)
	})

	t.Run("other upload errors", func(t *testing.T) {
		for _, injected := range []error{
			libvirt.Error{Code: libvirt.ERR_OPERATION_DENIED, Message: "access denied"},
			errors.New("injected failure"),
		} {
			req := request()
			c.testHook = func(op string) error {
				if op == "upload volume" {
					return injected
				}
				return nil
			}
			_, err := c.CreateVM(ctx, req)
			c.testHook = nil
			var ve *VMError
			if !errors.As(err, &ve) || ve.Op != "upload cloud-init seed" || errors.Is(err, ErrNoUpload) {
				t.Errorf("%v: err = %v; want the upload's failure", injected, err)
			}
			assertNothingLeft(t, c, pool, dir, req)
		}
	})

	// The test driver's pool lives in memory: nothing is made on disk.
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pool directory: %v", err)
	}
}
