package orchestrator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// A data disk whose row is lost, and another installation's, are orphans:
// the reconciler leaves both in the pool; an admin adopts this
// installation's as a person's volume and deletes the other explicitly. A
// disk with its row is no orphan.
func TestDataDiskOrphans(t *testing.T) {
	e, o := diskEnv(t)
	ctx := context.Background()
	keep := &store.Volume{Owner: "ann", Name: "keep", SizeBytes: 1 << 20, CreatedBy: "ann"}
	lost := &store.Volume{Owner: "ann", Name: "lost", SizeBytes: 2 << 20, CreatedBy: "ann"}
	for _, v := range []*store.Volume{keep, lost} {
		if err := o.CreateVolume(ctx, v, store.DiskQuota{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, id := range []string{keep.ID, lost.ID} {
			_ = o.DeleteVolume(context.Background(), id)
		}
	})
	// The database forgets one (an older backup restored).
	if err := e.st.RemoveVolume(ctx, lost.ID); err != nil {
		t.Fatal(err)
	}
	foreign := store.DiskVolumeName("other-installation", uuid.NewString())
	if _, err := e.hv.CreateDataDisk(ctx, "default-pool", foreign, 1<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.hv.DeleteVolume(context.Background(), "default-pool", foreign) })

	find := func() map[string]api.Orphan {
		out := map[string]api.Orphan{}
		items, _ := o.Orphans()
		for _, it := range items {
			out[it.Name] = it
		}
		return out
	}
	for range 2 {
		if _, err := o.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := find()
	l, f := got["default-pool/"+lost.Volume], got["default-pool/"+foreign]
	if l.Kind != api.OrphanVolume || !l.Adoptable || l.Installation != o.cfg.Installation || !strings.Contains(l.Reason, "no volume "+lost.ID) {
		t.Fatalf("lost disk: %+v", l)
	}
	if f.Kind != api.OrphanVolume || f.Adoptable || f.Installation != "other-installation" || !strings.Contains(f.Reason, "another gpuvm installation") {
		t.Fatalf("foreign disk: %+v", f)
	}
	if _, ok := got["default-pool/"+keep.Volume]; ok {
		t.Fatalf("a disk with its row is an orphan")
	}
	for _, name := range []string{lost.Volume, foreign} {
		if ok, err := e.hv.VolumeExists(ctx, "default-pool", name); err != nil || !ok {
			t.Fatalf("the reconciler removed %s: %v %v", name, ok, err)
		}
	}

	// Adoption: only this installation's, only to a user who exists.
	if _, err := o.AdoptVolume(ctx, api.AdoptVolumeRequest{File: foreign, Owner: "bob"}, "root"); !errors.Is(err, ErrNotAdoptable) {
		t.Fatalf("adopting another installation's = %v", err)
	}
	if _, err := o.AdoptVolume(ctx, api.AdoptVolumeRequest{File: lost.Volume, Owner: "nobody"}, "root"); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "owner") {
		t.Fatalf("adopting for nobody = %v", err)
	}
	if _, err := o.AdoptVolume(ctx, api.AdoptVolumeRequest{File: "default-pool/gpuvm-disk-x.qcow2", Owner: "bob"}, "root"); !errors.Is(err, ErrNoOrphan) {
		t.Fatalf("adopting what is not an orphan = %v", err)
	}
	v, err := o.AdoptVolume(ctx, api.AdoptVolumeRequest{File: "default-pool/" + lost.Volume, Owner: "bob", Name: "restored"}, "root")
	if err != nil {
		t.Fatal(err)
	}
	if row, err := e.st.GetVolume(ctx, lost.ID); err != nil || row.Owner != "bob" || row.Name != "restored" || row.State != store.VolReady ||
		row.Volume != lost.Volume || row.SizeBytes != 2<<20 || row.AttachedVM != nil || v.CreatedBy != "root" {
		t.Fatalf("adopted: %+v %v", row, err)
	}
	if _, ok := find()["default-pool/"+lost.Volume]; ok {
		t.Fatal("an adopted disk is still an orphan")
	}
	// The other installation's is deleted only when an admin says so.
	if _, err := o.DeleteOrphan(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.hv.VolumeExists(ctx, "default-pool", foreign); ok {
		t.Fatal("a deleted orphan is still in the pool")
	}
	if _, err := o.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for name := range find() {
		if strings.Contains(name, "gpuvm-disk-") && (strings.Contains(name, o.cfg.Installation) || strings.Contains(name, "other-installation")) {
			t.Errorf("orphan left: %s", name)
		}
	}
}

// A ready data disk whose file is gone from the pool (a backup restored
// without the pool's files) keeps its row, which says so in its error; a
// VM it is attached to does not start with it; once the file is back, the
// error goes.
func TestDataDiskMissingFile(t *testing.T) {
	e, o := diskEnv(t)
	ctx := context.Background()
	gone := &store.Volume{Owner: "ann", Name: "gone", SizeBytes: 1 << 20, CreatedBy: "ann"}
	here := &store.Volume{Owner: "ann", Name: "here", SizeBytes: 1 << 20, CreatedBy: "ann"}
	for _, v := range []*store.Volume{gone, here} {
		if err := o.CreateVolume(ctx, v, store.DiskQuota{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, id := range []string{gone.ID, here.ID} {
			_ = o.DeleteVolume(context.Background(), id)
		}
	})
	vmID := uuid.NewString()
	if _, err := e.st.AttachVolume(ctx, gone.ID, vmID); err != nil {
		t.Fatal(err)
	}
	if err := e.hv.DeleteVolume(ctx, "default-pool", gone.Volume); err != nil {
		t.Fatal(err)
	}
	rep, err := o.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.MissingDisks) != 1 || rep.MissingDisks[0] != "ann/gone" {
		t.Errorf("report's missing disks %q, want [ann/gone]", rep.MissingDisks)
	}
	row, err := e.st.GetVolume(ctx, gone.ID)
	if err != nil {
		t.Fatalf("the row of a disk whose file is missing: %v", err)
	}
	if row.State != store.VolReady || !strings.HasPrefix(row.Error, MissingDiskReason) || !strings.Contains(row.Error, gone.Volume) ||
		row.AttachedVM == nil || *row.AttachedVM != vmID {
		t.Fatalf("a disk whose file is missing: %+v", row)
	}
	if other, _ := e.st.GetVolume(ctx, here.ID); other == nil || other.Error != "" {
		t.Fatalf("a disk whose file is there: %+v", other)
	}
	if _, err := o.life.dataDisks(ctx, &store.VM{ID: vmID}); err == nil || !strings.Contains(err.Error(), `"gone"`) || !strings.Contains(err.Error(), MissingDiskReason) {
		t.Fatalf("a VM's start with a missing disk: %v", err)
	}
	if rep, err := o.Reconcile(ctx); err != nil || len(rep.MissingDisks) != 0 {
		t.Fatalf("a second reconcile reports %q again (%v)", rep.MissingDisks, err)
	}
	// The admin puts the file back.
	if _, err := e.hv.CreateDataDisk(ctx, "default-pool", gone.Volume, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if row, err := e.st.GetVolume(ctx, gone.ID); err != nil || row.Error != "" || row.State != store.VolReady {
		t.Fatalf("a disk whose file is back: %+v %v", row, err)
	}
	if disks, err := o.life.dataDisks(ctx, &store.VM{ID: vmID}); err != nil || len(disks) != 1 {
		t.Fatalf("a VM's disks once the file is back: %+v %v", disks, err)
	}
}

// diskEnv is an environment whose data disks go to the test driver's
// pool, and an orchestrator of it with this installation's ID.
func diskEnv(t *testing.T) (*env, *Orchestrator) {
	t.Helper()
	e := newEnv(t, "l40sx4")
	cfg := *e.cfg
	cfg.Server.Libvirt.StoragePool = "default-pool" // the test driver's pool
	e.cfg = &cfg
	inst, err := e.st.Installation(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o := New(Config{Store: e.st, Backends: e.l, Hypervisor: e.hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", Installation: inst.ID, DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second})
	return e, o
}
