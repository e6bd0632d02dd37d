package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// gpuvm volume ls shows what each volume uses and its quota: a home's as
// last measured (with why its quota is not enforced), a data disk's size.
func TestPrintVolumesUsedAndQuota(t *testing.T) {
	u := func(n uint64) *uint64 { return &n }
	list := &api.VolumeList{Volumes: []api.Volume{
		{Name: "home", Kind: api.VolumeHome, State: api.VolumeReady, UsedBytes: u(3 << 30), QuotaBytes: u(10 << 30), Enforcement: "none",
			Note: "the homes' filesystem has no project quotas"},
		{ID: "vol-1", Name: "scratch", Kind: api.VolumeDisk, SizeBytes: 20 << 30, State: api.VolumeReady, UsedBytes: u(20 << 30), AttachedVMName: "box"},
	}, QuotaBytes: u(100 << 30), UsedBytes: 20 << 30, Rule: "defaults"}
	var buf bytes.Buffer
	if err := printVolumes(&buf, list, outputOpts{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	for i, want := range [][]string{
		{"NAME", "KIND", "SIZE", "USED", "QUOTA", "STATE"},
		{"home", "-", "3GiB", "10GiB", "ready"},
		{"scratch", "20GiB", "20GiB", "-", "box", "vol-1"},
		{"your home's quota is not enforced: the homes' filesystem has no project quotas"},
		{"20GiB of 100GiB used (defaults)"},
	} {
		for _, w := range want {
			if i >= len(lines) || !strings.Contains(lines[i], w) {
				t.Errorf("line %d lacks %q:\n%s", i, w, buf.String())
			}
		}
	}
	// An image home: enforced, its note said when it has one.
	list.Volumes[0].Enforcement, list.Volumes[0].Note = "image", "your home is a filesystem of 8GiB: it grows to its quota the next time none of your VMs runs"
	buf.Reset()
	if err := printVolumes(&buf, list, outputOpts{}); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); strings.Contains(out, "not enforced") || !strings.Contains(out, "\nyour home is a filesystem of 8GiB") {
		t.Errorf("an image home:\n%s", out)
	}
	// A home not measured yet: no figures, not "0".
	list.Volumes[0].UsedBytes, list.Volumes[0].QuotaBytes, list.Volumes[0].Enforcement = nil, nil, ""
	buf.Reset()
	if err := printVolumes(&buf, list, outputOpts{}); err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(strings.Split(buf.String(), "\n")[1]); len(f) < 5 || f[3] != "-" || f[4] != "-" {
		t.Errorf("an unmeasured home: %q", f)
	}
}

// 'gpuvm volume attach' and 'detach' of a running VM through a real server:
// the answer names the operation that plugs the disk in or out; --wait
// follows it to the end and prints the disk as it is then (the test's
// worker plugs at once; a real guest: test/e2e's TestHomeFollowsThePerson).
func TestVolumeAttachRunningVM(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Host: "test-host", Volumes: true})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	ctx := context.Background()
	env.Worker.Pause()
	vm := &store.VM{Name: "up", Owner: "ann", Profile: "plain", Hours: 8}
	if _, err := env.Store.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	host := "test-host"
	ops, _ := env.Store.ListOperations(ctx, vm.ID)
	for _, op := range ops {
		if err := env.Store.FinishOperation(ctx, op.ID, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Store.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMRunning, Host: &host}); err != nil {
		t.Fatal(err)
	}
	ann.must("volume", "create", "scratch", "--size", "1GiB")

	// Without --wait: the answer, naming the operation under way.
	out := ann.must("volume", "attach", "scratch", "up")
	if !strings.Contains(out, "Attached to:   up") || !regexp.MustCompile(`Operation:\s+\S+ \(plugging it into the running VM; --wait follows it\)`).MatchString(out) {
		t.Errorf("attach:\n%s", out)
	}
	var v api.Volume
	decodeStrict(t, ann.must("volume", "show", "scratch", "--json"), &v)
	if v.AttachedVMName != "up" || v.OperationID != "" {
		t.Errorf("shown: %+v", v)
	}
	// The operation is still pending: detaching now is busy, naming it.
	if _, errOut, code := ann.run("volume", "detach", "scratch"); code != 1 || !strings.Contains(errOut, "unfinished disks operation") {
		t.Errorf("detach while plugging: exit %d %q", code, errOut)
	}
	env.Worker.Paused.Store(false)
	env.Worker.Wake()

	// --wait: unplugged, then printed as it is at the end.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, errOut, code := ann.run("volume", "detach", "scratch", "--wait", "--json")
		if code == 0 {
			var w api.Volume
			decodeStrict(t, got, &w)
			if w.AttachedVM != "" || w.State != api.VolumeReady {
				t.Errorf("detach --wait printed %+v, want it detached, ready", w)
			}
			break
		}
		if !strings.Contains(errOut, "unfinished disks operation") || time.Now().After(deadline) {
			t.Fatalf("detach --wait: exit %d %q", code, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	v = api.Volume{}
	decodeStrict(t, ann.must("volume", "show", "scratch", "--json"), &v)
	if v.AttachedVM != "" || v.State != api.VolumeReady {
		t.Errorf("after detach --wait: %+v", v)
	}
	v = api.Volume{}
	decodeStrict(t, ann.must("volume", "attach", "scratch", "up", "--wait", "--json"), &v)
	if v.AttachedVMName != "up" || v.OperationID != "" || v.State != api.VolumeReady {
		t.Errorf("attach --wait: %+v", v)
	}
}
