package main

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func TestIsGPUAddress(t *testing.T) {
	for arg, want := range map[string]bool{
		"0000:41:00.0": true, "41:00.0": true, "0000:C1:00.7": true,
		"gpu-03": false, "41:00.8": false, "node.lab": false, "0000:41:00": false, "": false,
	} {
		if got := isGPUAddress(arg); got != want {
			t.Errorf("isGPUAddress(%q) = %v, want %v", arg, got, want)
		}
	}
}

// 'gpuvm admin drain NODE' drains a node of the fleet and names the VMs
// that stay on it; undrain ends it; mistakes are said.
func TestAdminDrainNode(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	ctx := context.Background()
	if err := env.Store.RegisterHost(ctx, &store.Host{Name: "gpu-03", APIURL: "http://gpu-03:8080"}); err != nil {
		t.Fatal(err)
	}
	vm := &store.VM{Name: "long-job", Owner: "ann", Profile: "p", State: store.VMRunning, Host: "gpu-03", Hours: 1}
	if _, err := env.Store.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	out := admin.must("admin", "drain", "gpu-03")
	if !strings.Contains(out, "Node gpu-03 is drained") || !strings.Contains(out, "cannot move them") || !strings.Contains(out, "VMs on gpu-03: ann/long-job") {
		t.Errorf("drain gpu-03:\n%s", out)
	}
	if out := admin.must("hosts"); !strings.Contains(out, "draining") {
		t.Errorf("hosts after the drain:\n%s", out)
	}
	var st api.HostDrainState
	decodeStrict(t, admin.must("admin", "drain", "gpu-03", "--json"), &st)
	if st.Host != "gpu-03" || st.State != "draining" || len(st.VMs) != 1 {
		t.Errorf("drain --json: %+v", st)
	}
	if out := admin.must("admin", "undrain", "gpu-03"); out != "Node gpu-03 takes VMs again.\n" {
		t.Errorf("undrain: %q", out)
	}
	for _, tc := range []struct {
		cli   *cli
		args  []string
		code  int
		error string
	}{
		{admin, []string{"admin", "undrain", "gpu-03"}, 1, "node gpu-03 is not drained"},
		{admin, []string{"admin", "drain", "gpu-99"}, 1, `no node is named "gpu-99"`},
		{admin, []string{"admin", "drain", "gpu-03", "--reason", "fan"}, 2, "--reason is for GPUs"},
		{ann, []string{"admin", "drain", "gpu-03"}, 1, "this needs an admin"},
	} {
		if _, errOut, code := tc.cli.run(tc.args...); code != tc.code || !strings.Contains(errOut, tc.error) {
			t.Errorf("gpuvm %s: exit %d %q; want %d with %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.error)
		}
	}
}
