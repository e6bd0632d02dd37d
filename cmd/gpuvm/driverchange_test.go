package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// 'gpuvm admin driver-change': announce, list, withdraw through a real
// server; refusals name the field, leave nothing announced, and a user may
// not announce.
func TestAdminDriverChange(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken, "TZ": "UTC"})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	at := time.Now().UTC().Add(72 * time.Hour).Truncate(time.Minute)
	for _, tc := range []struct {
		cli   *cli
		args  []string
		code  int
		error string
	}{
		{admin, []string{"admin", "driver-change", "announce", "--driver", "550.90.07"}, 2, "--at is required"},
		{admin, []string{"admin", "driver-change", "announce", "--driver", "550.90.07", "--at", "Saturday"}, 2, `--at "Saturday"`},
		{admin, []string{"admin", "driver-change", "announce", "--driver", "latest", "--at", at.Format(time.RFC3339)}, 1, `"latest" is not an NVIDIA driver version`},
		{admin, []string{"admin", "driver-change", "announce", "--driver", "550.90.07", "--at", "2020-01-01T00:00:00Z"}, 1, "2020-01-01T00:00:00Z is not ahead: an announcement tells people before the change\n  (field at)"},
		{admin, []string{"admin", "driver-change", "announce", "--driver", "550.90.07", "--at", at.AddDate(2, 0, 0).Format(time.RFC3339)}, 1, "more than a year ahead\n  (field at)"},
		{admin, []string{"admin", "driver-change", "announce", "--driver", "550.90.07", "--at", at.Format(time.RFC3339), "--note", "two\nlines"}, 1, "one line of at most 200 characters, without control characters\n  (field note)"},
		{ann, []string{"admin", "driver-change", "announce", "--driver", "550.90.07", "--at", at.Format(time.RFC3339)}, 1, "this needs an admin"},
		{admin, []string{"admin", "driver-change", "rm", "no-such-id"}, 1, `no announced driver change "no-such-id"`},
	} {
		if _, errOut, code := tc.cli.run(tc.args...); code != tc.code || !strings.Contains(errOut, tc.error) {
			t.Errorf("gpuvm %s: exit %d %q; want %d with %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.error)
		}
	}
	if out := admin.must("admin", "driver-change", "ls"); out != "No driver change announced.\n" {
		t.Fatalf("after the refusals: %q", out)
	}
	var dc api.DriverChange
	decodeStrict(t, admin.must("admin", "driver-change", "announce", "--driver", "550.90.07", "--at", at.Format("2006-01-02 15:04"),
		"--note", "vGPU 17.4, Saturday's maintenance", "--json"), &dc)
	if dc.ID == "" || dc.Driver != "550.90.07" || !dc.At.Equal(at) || dc.By != "admin" || dc.Note != "vGPU 17.4, Saturday's maintenance" {
		t.Fatalf("announced %+v, want 550.90.07 at %v", dc, at)
	}
	out := admin.must("admin", "driver-change", "ls")
	if !strings.Contains(out, dc.ID) || !strings.Contains(out, "550.90.07") || !strings.Contains(out, "announced") || !strings.Contains(out, at.Format("2006-01-02 15:04")) {
		t.Errorf("ls:\n%s", out)
	}
	if out := admin.must("admin", "driver-change", "rm", dc.ID); !strings.Contains(out, "Withdrew "+dc.ID+" (550.90.07") {
		t.Errorf("rm: %q", out)
	}
	if out := admin.must("admin", "driver-change", "ls"); !strings.Contains(out, "withdrawn by admin") {
		t.Errorf("ls after rm:\n%s", out)
	}
	if _, errOut, code := admin.run("admin", "driver-change", "rm", dc.ID); code != 1 || !strings.Contains(errOut, "no announced driver change") {
		t.Errorf("rm again: exit %d %q", code, errOut)
	}
}

// gpuvm show of a vGPU VM names the driver change announced ahead, and
// what to do first.
func TestShowDriverChange(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Host: "test-host", Profiles: `
profile "render" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
}
`})
	env.Worker.Pause()
	ctx := context.Background()
	vm := &store.VM{Name: "box", Owner: "ann", Profile: "render", Hours: 8}
	if _, err := env.Store.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	host := "test-host"
	if _, err := env.Store.UpdateVMState(ctx, vm.ID, vm.Version, store.VMUpdate{State: store.VMStopped, Host: &host}); err != nil {
		t.Fatal(err)
	}
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken, "TZ": "UTC"})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken, "TZ": "UTC"})
	if out := ann.must("show", "box"); strings.Contains(out, "Driver change") {
		t.Fatalf("before any announcement:\n%s", out)
	}
	at := time.Now().UTC().Add(72 * time.Hour).Truncate(time.Minute)
	admin.must("admin", "driver-change", "announce", "--driver", "550.90.07", "--at", at.Format(time.RFC3339), "--note", "vGPU 17.4")
	out := ann.must("show", "box")
	want := "Driver change:  the hosts' NVIDIA vGPU manager moves to 550.90.07 at " + at.Format("Mon 2 Jan 2006 15:04 MST") +
		" (vGPU 17.4): the NVIDIA driver inside must then be one it supports; its disk cannot be snapshotted (it boots a kernel directly)"
	if !strings.Contains(out, want) {
		t.Errorf("show:\n%s\nwant the line %q", out, want)
	}
}
