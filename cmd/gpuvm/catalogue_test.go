package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func TestSummariseCapacity(t *testing.T) {
	// What an empty H100 in MIG mode and an L40S on vGPU offer: the line
	// `gpuvm hosts` once printed in full.
	h100 := map[string]int{"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}
	l40s := map[string]int{"L40S-1Q": 32, "L40S-2Q": 24, "L40S-3Q": 16, "L40S-4Q": 12, "L40S-6Q": 8, "L40S-8Q": 6, "L40S-12Q": 4,
		"L40S-16Q": 3, "L40S-24Q": 2, "L40S-48Q": 2, "L40S-1B": 32, "L40S-2B": 24, "L40S-48C": 2, "L40S-24A": 2}
	both := map[string]int{"A40-8Q": 6, "A40-48Q": 1}
	for k, v := range l40s {
		both[k] = v
	}
	tests := []struct {
		name string
		c    api.Capacity
		want string
	}{
		{"nothing", api.Capacity{}, "none"},
		{"idle only", api.Capacity{IdleGPUs: 3}, "3 idle GPUs"},
		{"one idle", api.Capacity{IdleGPUs: 1}, "1 idle GPU"},
		{"the long line", api.Capacity{IdleGPUs: 3, MIG: h100, VGPU: l40s}, "3 idle GPUs; largest free: MIG 7g.80gb ×1, L40S-48C ×2"},
		{"MIG only", api.Capacity{MIG: map[string]int{"1g.10gb": 3, "2g.20gb": 1, "1g.20gb": 2}}, "largest free: MIG 2g.20gb ×1"},
		{"plain before +me", api.Capacity{MIG: map[string]int{"1g.10gb+me": 1, "1g.10gb": 6}}, "largest free: MIG 1g.10gb ×6"},
		{"a vGPU board each", api.Capacity{VGPU: both}, "largest free: A40-48Q ×1, L40S-48C ×2"},
		{"zero counts are not free", api.Capacity{VGPU: map[string]int{"L40S-48Q": 0, "L40S-12Q": 2}, MIG: map[string]int{"7g.80gb": 0}}, "largest free: L40S-12Q ×2"},
		{"a name that is no vGPU type", api.Capacity{VGPU: map[string]int{"odd": 1}}, "largest free: odd ×1"},
		{"a nearly empty host of 8, 7 of them split", api.Capacity{IdleGPUs: 1, SplitGPUs: map[string]int{"mig": 4, "vgpu": 3},
			MIG: map[string]int{"7g.80gb": 4, "1g.10gb": 28}, VGPU: map[string]int{"H100-80C": 3, "H100-4C": 60}},
			"1 idle GPU, 7 split GPUs with room (4 MIG, 3 vGPU); largest free: MIG 7g.80gb ×4, H100-80C ×3"},
		{"split only", api.Capacity{SplitGPUs: map[string]int{"mig": 1}, MIG: map[string]int{"1g.10gb": 3}}, "1 split GPU with room (1 MIG); largest free: MIG 1g.10gb ×3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := summariseCapacity(tc.c); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
	if long := describeCapacity(api.Capacity{IdleGPUs: 3, MIG: h100, VGPU: l40s}); len(long) < 200 {
		t.Errorf("the wide form lost detail: %q", long)
	}
}

// gpuvm hosts sums up the free capacity; --wide and --json keep all of it.
func TestHostsSummaryAndWide(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	inv, _ := json.Marshal(api.HostInventory{Simulated: true, GPUs: []api.GPU{
		{Address: "0000:41:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: "idle", Backends: map[string]string{"passthrough": ""}},
		{Address: "0000:42:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: "mig", MIGEnabled: true, MIGCapable: true, Backends: map[string]string{"mig": ""},
			MIGProfiles: []api.MIGProfile{{Name: "1g.10gb", Size: 1, FreeStarts: []int{0, 1, 2, 3, 4, 5, 6}}, {Name: "7g.80gb", Size: 8, FreeStarts: []int{0}}}},
	}})
	if err := env.Store.RegisterHost(context.Background(), &store.Host{Name: "gpu-a", APIURL: "http://gpu-a:8080", Version: "1.0", Inventory: string(inv)}); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	out := c.must("hosts")
	if !strings.Contains(out, "1 idle GPU, 1 split GPU with room (1 MIG); largest free: MIG 7g.80gb ×1\n") || strings.Contains(out, "2g.20gb") {
		t.Errorf("hosts:\n%s", out)
	}
	wide := c.must("hosts", "--wide")
	if !strings.Contains(wide, "1 idle GPU, 1 split GPU with room (1 MIG), 1g.10gb×7, 1g.10gb+me×1, 1g.20gb×4, 2g.20gb×3, 3g.40gb×2, 4g.40gb×1, 7g.80gb×1") {
		t.Errorf("hosts --wide:\n%s", wide)
	}
	var hl api.HostList
	decodeStrict(t, c.must("hosts", "--json"), &hl)
	if len(hl.Items) != 1 || hl.Items[0].Free.MIG["2g.20gb"] != 3 || hl.Items[0].Free.IdleGPUs != 1 || hl.Items[0].Free.SplitGPUs["mig"] != 1 {
		t.Errorf("hosts --json: %+v", hl)
	}
}

// gpuvm profiles marks a profile no GPU of the hosts can ever give, and
// the server refuses a VM of it.
func TestProfilesUnservable(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Profiles: clienttest.Profiles + `
profile "h100-vgpu" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  gpu {
    kind = "vgpu"
    type = "H100-4C"
  }
}
`})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	// No host has reported: nothing is said.
	if out := c.must("profiles"); strings.Contains(out, "unservable") {
		t.Errorf("profiles with no host:\n%s", out)
	}
	inv, _ := json.Marshal(api.HostInventory{Simulated: true, GPUs: []api.GPU{
		{Address: "0000:42:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: "mig", MIGEnabled: true, MIGCapable: true, Backends: map[string]string{"mig": ""},
			MIGProfiles: []api.MIGProfile{{Name: "3g.40gb", Size: 4, FreeStarts: []int{0, 4}}}},
	}})
	if err := env.Store.RegisterHost(context.Background(), &store.Host{Name: "gpu-a", APIURL: "http://gpu-a:8080", Version: "1.0", Inventory: string(inv)}); err != nil {
		t.Fatal(err)
	}
	// gpuvmd sees the heartbeat at its next look (a second at most), and
	// computes what each profile has free then: until then the list is
	// the last computation's, marked stale.
	var out string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out = c.must("profiles")
		if strings.Contains(out, "unservable") || time.Now().After(deadline) {
			break
		}
	}
	lines := strings.Split(out, "\n")
	var h100, mig string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "h100-vgpu ") && h100 == "":
			h100 = l
		case strings.HasPrefix(l, "mig-seat "):
			mig = l
		}
	}
	// The free count, in the portal's words: the H100's two 3g.40gb places.
	if !strings.Contains(mig, "2 free of 2 ") {
		t.Errorf("profiles: mig-seat's free count: %q", mig)
	}
	if !strings.Contains(h100, "vGPU H100-4C (unservable)") || strings.Contains(mig, "unservable") ||
		!strings.Contains(out, "\nh100-vgpu is unservable here, and a VM of it is refused: no GPU here can ever give H100-4C") {
		t.Errorf("profiles:\n%s", out)
	}
	var ps []map[string]any
	decodeStrict(t, c.must("profiles", "--json"), &ps)
	for _, p := range ps {
		_, marked := p["unservable"]
		if marked != (p["name"] == "h100-vgpu") {
			t.Errorf("profiles --json: %s unservable %v", p["name"], p["unservable"])
		}
	}
	if _, errOut, code := c.run("create", "h100-vgpu"); code != 1 || !strings.Contains(errOut, "profile h100-vgpu can never be served here") {
		t.Errorf("create: exit %d %q", code, errOut)
	}
}

// gpuvm profiles marks a profile whose image is not on the server, says why
// with no server path, and the server refuses a VM of it.
func TestProfilesUnavailable(t *testing.T) {
	dir := t.TempDir()
	env := clienttest.New(t, clienttest.Options{Profiles: clienttest.Profiles + `
image "desktop" {
  path   = "` + dir + `/desktop.qcow2"
  format = "qcow2"
}
profile "desktop" {
  vcpus  = 1
  memory = "1GiB"
  disk { image = "desktop" }
  boot { kernel = "` + dir + `/vmlinuz" }
}
`, Availability: &images.Availability{Stat: func(p string) (fs.FileInfo, error) {
		// The other profiles' kernels are made up: only dir's files count.
		if !strings.HasPrefix(p, dir) {
			p = os.Args[0]
		}
		return os.Stat(p)
	}}})
	c := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	out := c.must("profiles")
	why := `its disk image "desktop" and its boot kernel are not on this server (an admin has to build or import them)`
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "desktop ") && row == "" {
			row = l
		}
	}
	if !strings.Contains(row, "- (unavailable)") || strings.Count(out, "(unavailable)") != 1 ||
		!strings.Contains(out, "\ndesktop is unavailable here now, and a VM of it is refused: "+why+".") || strings.Contains(out, dir) {
		t.Errorf("profiles:\n%s", out)
	}
	var ps []map[string]any
	decodeStrict(t, c.must("profiles", "--json"), &ps)
	for _, p := range ps {
		u, marked := p["unavailable"]
		if marked != (p["name"] == "desktop") || marked && u != why {
			t.Errorf("profiles --json: %s unavailable %v", p["name"], u)
		}
	}
	_, errOut, code := c.run("create", "desktop")
	if code != 1 || !strings.Contains(errOut, "profile desktop cannot be made on this server now: "+why) || strings.Contains(errOut, dir) {
		t.Errorf("create: exit %d %q", code, errOut)
	}
}

// gpuvm profiles says what is free as the portal's catalogue does
// (freeWords in pkg/portal/assets/i18n.js).
func TestProfilesFreeText(t *testing.T) {
	g := &client.ProfileGPU{Kind: "mig", Profile: "1g.10gb", Count: 1}
	for _, c := range []struct {
		name string
		gpu  *client.ProfileGPU
		free *api.ProfileFree
		want string
	}{
		{"not counted", g, nil, "-"},
		{"no GPU", nil, &api.ProfileFree{VMs: 1}, "-"},
		{"none", g, &api.ProfileFree{VMs: 0, Total: 28, ByKind: map[string]int{}}, "none free"},
		{"one kind", g, &api.ProfileFree{VMs: 3, Total: 28, ByKind: map[string]int{"mig": 3}}, "3 free of 28"},
		{"whole GPUs", &client.ProfileGPU{Kind: "passthrough", Count: 1}, &api.ProfileFree{VMs: 2, Total: 6, ByKind: map[string]int{"passthrough": 2}}, "2 free of 6 GPUs"},
		{"several kinds", &client.ProfileGPU{Kind: "any", Count: 1}, &api.ProfileFree{VMs: 23, Total: 60, ByKind: map[string]int{"vgpu": 3, "mig": 20}},
			"23 free of 60: 20 as MIG slices, 3 as vGPUs"},
		{"no total", g, &api.ProfileFree{VMs: 4}, "4 free"},
	} {
		if got := freeText(client.Profile{GPU: c.gpu, Free: c.free}); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	var b strings.Builder
	ps := []client.Profile{
		{Name: "any-small", VCPUs: 2, Memory: 4 << 30, GPU: &client.ProfileGPU{Kind: "any", Count: 1, Memory: 10 << 30, Kinds: []string{"mig", "vgpu"}},
			Free: &api.ProfileFree{VMs: 23, Total: 60, ByKind: map[string]int{"mig": 20, "vgpu": 3}}},
		{Name: "cpu-only", VCPUs: 1, Memory: 1 << 30},
	}
	if err := printRemoteProfiles(&b, ps); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], " FREE ") || !strings.Contains(lines[1], "23 free of 60: 20 as MIG slices, 3 as vGPUs") ||
		!strings.HasPrefix(strings.Fields(lines[2])[2], "-") {
		t.Errorf("the table:\n%s", b.String())
	}
}
