package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// cliOrphans is a reconciler's view for the CLI tests: an adoptable domain
// and another installation's device.
type cliOrphans struct {
	items []api.Orphan
	st    *store.Store
}

func (f *cliOrphans) Installation() string { return "0f6f1a52-9a40-4c3e-8d7e-2b1f3c4d5e6f" }

func (f *cliOrphans) CheckOrphans(context.Context) ([]api.Orphan, time.Time, error) {
	return f.items, time.Now(), nil
}

func (f *cliOrphans) take(id string) (api.Orphan, error) {
	for i, o := range f.items {
		if o.ID == id {
			f.items = append(f.items[:i], f.items[i+1:]...)
			return o, nil
		}
	}
	return api.Orphan{}, fmt.Errorf("orphan %s: %w", id, store.ErrNotFound)
}

func (f *cliOrphans) DeleteOrphan(_ context.Context, id string) (api.Orphan, error) {
	return f.take(id)
}

func (f *cliOrphans) AdoptOrphan(ctx context.Context, id string, req api.AdoptRequest, by string) (*store.VM, error) {
	o, err := f.take(id)
	if err != nil {
		return nil, err
	}
	vm := &store.VM{ID: o.VMID, Name: req.Name, Owner: req.Owner, Profile: "tiny-mig", State: store.VMStopped}
	return vm, f.st.AdoptVM(ctx, vm, nil, by)
}

func (f *cliOrphans) AdoptVolume(ctx context.Context, req api.AdoptVolumeRequest, by string) (*store.Volume, error) {
	for i, o := range f.items {
		if o.Kind == api.OrphanVolume && (o.Name == req.File || strings.HasSuffix(o.Name, "/"+req.File)) {
			f.items = append(f.items[:i], f.items[i+1:]...)
			v := &store.Volume{ID: o.VMID, Owner: req.Owner, Name: req.Name, SizeBytes: 1 << 30, Host: "h", Pool: "p",
				Volume: req.File, Installation: f.Installation(), CreatedBy: by}
			return v, f.st.AdoptVolume(ctx, v)
		}
	}
	return nil, fmt.Errorf("no orphaned data disk %q: %w", req.File, store.ErrNotFound)
}

// gpuvm volume adopt makes an orphaned data disk a person's volume; it
// needs --owner, and an unknown file is an error that says so.
func TestVolumeAdopt(t *testing.T) {
	id := "01a23326-de26-7342-b7c0-0123456789ab"
	file := "gpuvm-disk-0f6f1a52-9a40-4c3e-8d7e-2b1f3c4d5e6f-" + id + ".qcow2"
	f := &cliOrphans{items: []api.Orphan{{ID: "volume-aaaaaaaaaaaa", Kind: api.OrphanVolume, Name: "p/" + file, VMID: id, Adoptable: true, Reason: "no row"}}}
	env := clienttest.New(t, clienttest.Options{Orphans: f})
	f.st = env.Store
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	if _, errOut, code := admin.run("volume", "adopt", file); code != 2 || !strings.Contains(errOut, "--owner") {
		t.Errorf("without --owner: exit %d %q", code, errOut)
	}
	if _, errOut, code := ann.run("volume", "adopt", file, "--owner", "ann"); code == 0 || !strings.Contains(errOut, "admin") {
		t.Errorf("a user adopts: exit %d %q", code, errOut)
	}
	if _, errOut, code := admin.run("volume", "adopt", "nope.qcow2", "--owner", "ann"); code == 0 || !strings.Contains(errOut, "nope.qcow2") {
		t.Errorf("unknown file: exit %d %q", code, errOut)
	}
	out := admin.must("volume", "adopt", file, "--owner", "ann", "--name", "back")
	if !strings.Contains(out, "back") || !strings.Contains(out, id) {
		t.Errorf("adopted:\n%s", out)
	}
	if v, err := env.Store.GetVolume(context.Background(), id); err != nil || v.Owner != "ann" || v.Name != "back" {
		t.Fatalf("in the store: %+v %v", v, err)
	}
}

func TestAdminOrphans(t *testing.T) {
	f := &cliOrphans{items: []api.Orphan{
		{ID: "domain-aaaaaaaaaaaa", Kind: api.OrphanDomain, Name: "gpuvm-0123456789ab", VMID: "01a23326-de26-7342-b7c0-0123456789ab", Owner: "ann",
			Adoptable: true, Reason: "this installation's, but its database has no VM", FirstSeen: time.Now().Add(-90 * time.Minute)},
		{ID: "device-bbbbbbbbbbbb", Kind: api.OrphanDevice, Name: "mig/x", Installation: "7c1d2e3f-4a5b-4c6d-9e7f-8a9b0c1d2e3f",
			Reason: "made by another gpuvm installation", FirstSeen: time.Now()},
	}}
	env := clienttest.New(t, clienttest.Options{Orphans: f})
	f.st = env.Store
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})

	out := admin.must("admin", "orphans")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[1], "domain-aaaaaaaaaaaa") || !strings.Contains(lines[1], "yes") ||
		!strings.Contains(lines[1], "1h30m ago") || !strings.Contains(lines[2], "7c1d2e3f") || !strings.Contains(lines[3], f.Installation()) {
		t.Errorf("table:\n%s", out)
	}
	var l api.OrphanList
	decodeStrict(t, admin.must("admin", "orphans", "--json"), &l)
	if len(l.Items) != 2 || l.Installation != f.Installation() {
		t.Errorf("--json: %+v", l)
	}
	if out := admin.must("admin", "orphans", "-q"); out != "domain-aaaaaaaaaaaa\ndevice-bbbbbbbbbbbb\n" {
		t.Errorf("-q: %q", out)
	}
	if _, errOut, code := admin.run("admin", "orphans", "delete", "device-bbbbbbbbbbbb"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Errorf("delete without --yes: exit %d %q", code, errOut)
	}
	if _, errOut, code := admin.run("admin", "orphans", "adopt", "domain-aaaaaaaaaaaa"); code != 2 || !strings.Contains(errOut, "--owner") {
		t.Errorf("adopt without --owner: exit %d %q", code, errOut)
	}
	if _, errOut, code := ann.run("admin", "orphans"); code != 1 || !strings.Contains(errOut, "this needs an admin") {
		t.Errorf("as a user: exit %d %q", code, errOut)
	}
	if _, errOut, code := admin.run("admin", "orphans", "delete", "domain-000000000000", "--yes"); code != 1 || !strings.Contains(errOut, "domain-000000000000") {
		t.Errorf("delete an unknown orphan: exit %d %q", code, errOut)
	}
	if out := admin.must("admin", "orphans", "delete", "device-bbbbbbbbbbbb", "--yes"); !strings.Contains(out, "Deleted device mig/x") {
		t.Errorf("delete: %q", out)
	}
	if out := admin.must("admin", "orphans", "adopt", "domain-aaaaaaaaaaaa", "--owner", "ann", "--name", "back"); !strings.Contains(out, "VM back") || !strings.Contains(out, "of ann") {
		t.Errorf("adopt: %q", out)
	}
	if out := admin.must("admin", "orphans"); !strings.Contains(out, "No orphans") {
		t.Errorf("after: %q", out)
	}
}
