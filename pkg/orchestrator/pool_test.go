package orchestrator

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// seededProfiles is a profile with a cloud-init seed, its pool named %s.
const seededProfiles = `
server {
  libvirt { storage_pool = "%s" }
}
template "seed" {
  content = "#cloud-config\nhostname: ${hostname}\n"
}
profile "seeded" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  cloud_init { template = "seed" }
}
`

// seededEnv is an env whose configuration is seededProfiles on a pool of
// its own (which it does not make).
func seededEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t, "l40sx4")
	pool := e.prefix + "pool"
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(strings.ReplaceAll(seededProfiles, "%s", pool))})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e.cfg = cfg
	return e, pool
}

// On libvirt's test driver, which cannot store a volume's contents, a VM
// with a cloud-init seed runs without it, and says so in its reason (which
// gpuvm show prints), also once its guest is up.
func TestSeedNotAttachedOnTestDriver(t *testing.T) {
	ctx := context.Background()
	e, pool := seededEnv(t)
	if _, err := e.hv.PreparePool(ctx, pool, filepath.Join(t.TempDir(), "pool")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.hv.DeletePool(context.Background(), pool) })
	g := newFakeGuests(e.hv)
	o := e.orchGuests(g, time.Hour)
	vm, _ := e.submit("ann", "seeded", "box")
	o.Drain(ctx)
	got := e.vm(vm.ID)
	if got.State != store.VMRunning || got.Phase != api.PhaseBooting ||
		!strings.HasPrefix(got.StateReason, "cloud-init seed not attached: libvirt's test driver cannot store volume contents") {
		t.Fatalf("VM %s (phase %q) %q", got.State, got.Phase, got.StateReason)
	}
	if !strings.Contains(e.logs.String(), "VM created without its cloud-init seed") {
		t.Error("the log does not say the seed is not attached")
	}
	if ok, err := e.hv.VolumeExists(ctx, pool, hypervisor.SeedName(o.DomainName(vm.ID))); ok || err != nil {
		t.Errorf("seed volume: %v %v", ok, err)
	}
	g.give(vm.ID, "192.168.122.9")
	o.life.checkBoots(ctx)
	e.wantPhase(vm.ID, store.VMRunning, api.PhaseReady, got.StateReason)
}

// A VM that needs the pool, when libvirt has none of that name, fails with
// a reason that names the pool and where it should have come from.
func TestMissingPoolNamed(t *testing.T) {
	ctx := context.Background()
	e, pool := seededEnv(t)
	o := e.orch(nil)
	vm, _ := e.submit("ann", "seeded", "box")
	o.Drain(ctx)
	got := e.vm(vm.ID)
	if got.State != store.VMFailed || !strings.Contains(got.StateReason, `storage pool "`+pool+`"`) ||
		!strings.Contains(got.StateReason, "gpuvmd makes storage pool "+pool) {
		t.Errorf("VM %s: %q", got.State, got.StateReason)
	}
}
