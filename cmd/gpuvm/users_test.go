package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
)

func TestAdminUsersAndTokens(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})

	// Users.
	out := admin.must("admin", "users", "create", "carl", "--group", "render", "--group", "artists")
	if out != "Created user carl in artists, render.\nGive them a token: gpuvm admin tokens create carl\n" {
		t.Errorf("create:\n%s", out)
	}
	var u api.User
	decodeStrict(t, admin.must("admin", "users", "create", "dora", "--admin", "--json"), &u)
	if u.Name != "dora" || !u.Admin {
		t.Errorf("create --json: %+v", u)
	}
	if out := admin.must("admin", "users", "--quiet"); out != "admin\nann\ncarl\ndora\n" {
		t.Errorf("users --quiet: %q", out)
	}
	out = admin.must("admin", "users", "list")
	if !strings.HasPrefix(out, "NAME ") || !strings.Contains(out, "artists,render") || !strings.Contains(out, "dora   yes") {
		t.Errorf("users list:\n%s", out)
	}
	var ul api.UserList
	decodeStrict(t, admin.must("admin", "users", "--json"), &ul)
	if len(ul.Items) != 4 || ul.Items[2].Name != "carl" {
		t.Errorf("users --json: %+v", ul)
	}
	if _, errOut, code := admin.run("admin", "users", "create", "Carl"); code != 1 || !strings.Contains(errOut, "lower-case") {
		t.Errorf("bad name: exit %d %q", code, errOut)
	}
	if _, errOut, code := admin.run("admin", "users", "create", "carl"); code != 1 || !strings.Contains(errOut, `already a user called "carl"`) {
		t.Errorf("taken name: exit %d %q", code, errOut)
	}
	if _, errOut, code := ann.run("admin", "users"); code != 1 || !strings.Contains(errOut, "this needs an admin") {
		t.Errorf("users as a user: exit %d %q", code, errOut)
	}

	// A token for carl: --quiet prints it alone, and it works.
	secret := strings.TrimSpace(admin.must("admin", "tokens", "create", "carl", "--name", "laptop", "--expires", "30d", "-q"))
	if !strings.HasPrefix(secret, store.TokenPrefix) || strings.ContainsAny(secret, " \n") {
		t.Fatalf("token: %q", secret)
	}
	carl := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": secret})
	if out := carl.must("whoami"); out != "carl, groups: artists (local), render (local) on "+env.URL+"\n" {
		t.Errorf("whoami: %q", out)
	}
	if out := admin.must("whoami"); !strings.HasPrefix(out, "admin (admin) on ") {
		t.Errorf("whoami admin: %q", out)
	}
	if out := ann.must("whoami", "-q"); out != "ann\n" {
		t.Errorf("whoami -q: %q", out)
	}
	// Without --quiet the token comes with how to use and revoke it.
	out = admin.must("admin", "tokens", "create", "carl", "--name", "ci")
	if !strings.Contains(out, "Token ") || !strings.Contains(out, "(ci) of carl, does not expire") || !strings.Contains(out, "  "+store.TokenPrefix) ||
		!strings.Contains(out, "shown only now") || !strings.Contains(out, "gpuvm admin tokens revoke carl ") {
		t.Errorf("tokens create:\n%s", out)
	}
	var created api.CreatedToken
	decodeStrict(t, admin.must("admin", "tokens", "create", "carl", "--json", "--expires", "48h"), &created)
	if !strings.HasPrefix(created.Name, "token-") || created.ExpiresAt == nil || created.Secret == "" {
		t.Errorf("tokens create --json: %+v", created)
	}

	// The list: newest first, no secrets.
	out = admin.must("admin", "tokens", "list", "carl")
	if !strings.HasPrefix(out, "ID ") || !strings.Contains(out, "laptop") || !strings.Contains(out, "active") || strings.Contains(out, secret) {
		t.Errorf("tokens list:\n%s", out)
	}
	var tl api.TokenList
	decodeStrict(t, admin.must("admin", "tokens", "list", "carl", "--json"), &tl)
	if len(tl.Items) != 3 || tl.Items[2].Name != "laptop" || tl.Items[2].ExpiresAt == nil {
		t.Fatalf("tokens list --json: %+v", tl)
	}
	laptop := tl.Items[2].ID
	// Carl's own list, without naming himself.
	if out := carl.must("admin", "tokens", "list", "--quiet"); out != fmt.Sprintf("%d\n%d\n%d\n", tl.Items[0].ID, tl.Items[1].ID, laptop) {
		t.Errorf("own tokens: %q", out)
	}
	if _, errOut, code := ann.run("admin", "tokens", "list", "carl"); code != 1 || !strings.Contains(errOut, `no user "carl"`) {
		t.Errorf("another's tokens: exit %d %q", code, errOut)
	}

	// Revoked, the token is refused.
	if out := admin.must("admin", "tokens", "revoke", "carl", fmt.Sprint(laptop)); out != fmt.Sprintf("Revoked token %d of carl.\n", laptop) {
		t.Errorf("revoke: %q", out)
	}
	if _, errOut, code := carl.run("whoami"); code != 3 || !strings.Contains(errOut, "refused the token") {
		t.Errorf("revoked token: exit %d %q", code, errOut)
	}

	usage := [][]string{
		{"admin", "tokens", "create", "carl", "--expires", "90m"},
		{"admin", "tokens", "create", "carl", "--expires", "soon"},
		{"admin", "tokens", "revoke", "carl", "abc"},
		{"admin", "tokens", "revoke", "carl"},
		{"admin", "tokens", "list", "a", "b"},
		{"admin", "users", "create"},
		{"whoami", "--json", "--quiet"},
	}
	for _, args := range usage {
		if _, errOut, code := admin.run(args...); code != 2 || errOut == "" {
			t.Errorf("gpuvm %s: exit %d %q, want a usage error", strings.Join(args, " "), code, errOut)
		}
	}
}

func TestParseExpiry(t *testing.T) {
	tests := []struct {
		in    string
		hours int
		ok    bool
	}{
		{"", 0, true}, {"never", 0, true}, {"720h", 720, true}, {"30d", 720, true}, {"1d12h", 36, true}, {"2h0m", 2, true},
		{"90m", 0, false}, {"0h", 0, false}, {"-1h", 0, false}, {"xd", 0, false}, {"1y", 0, false}, {"-2d", 0, false},
		{"3650d", 87600, true}, {"3651d", 0, false}, {"87601h", 0, false},
		// time.Duration(n)*24*time.Hour wraps for these.
		{"106751992d", 0, false}, {"9223372036854775807d", 0, false}, {"3650d9223372036854775807h", 0, false},
	}
	for _, tc := range tests {
		h, err := parseExpiry(tc.in)
		if h != tc.hours || (err == nil) != tc.ok {
			t.Errorf("%q: %d %v, want %d ok=%v", tc.in, h, err, tc.hours, tc.ok)
		}
	}
}

func TestAdminDrainAndHosts(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	host, _ := os.Hostname() // the server's host name, as clienttest leaves it

	out := admin.must("admin", "drain", "41:00.0", "--reason", "fan")
	if out != "Drained GPU 0000:41:00.0 of "+host+" (fan): it takes no new VMs; the ones on it keep running.\n" {
		t.Errorf("drain: %q", out)
	}
	var hi api.HostInventory
	decodeStrict(t, admin.must("admin", "gpus", "--json"), &hi)
	if len(hi.GPUs) != 1 || hi.GPUs[0].Drained == nil || hi.GPUs[0].Drained.Reason != "fan" || hi.GPUs[0].Drained.By != "admin" {
		t.Errorf("gpus --json: %+v", hi.GPUs)
	}
	var st api.GPUDrainState
	decodeStrict(t, admin.must("admin", "drain", "0000:41:00.0", "--json"), &st)
	if st.Drained == nil || st.Drained.Reason != "" || st.Address != "0000:41:00.0" {
		t.Errorf("drain --json: %+v", st)
	}
	if _, errOut, code := admin.run("admin", "drain", "0000:99:00.0"); code != 1 || !strings.Contains(errOut, "has no GPU 0000:99:00.0: its GPUs are 0000:41:00.0") {
		t.Errorf("unknown GPU: exit %d %q", code, errOut)
	}
	if _, errOut, code := ann.run("admin", "drain", "0000:41:00.0"); code != 1 || !strings.Contains(errOut, "this needs an admin") {
		t.Errorf("drain as a user: exit %d %q", code, errOut)
	}
	if out := admin.must("admin", "undrain", "0000:41:00.0"); out != "GPU 0000:41:00.0 of "+host+" takes VMs again.\n" {
		t.Errorf("undrain: %q", out)
	}
	if _, errOut, code := admin.run("admin", "undrain", "0000:41:00.0"); code != 1 || !strings.Contains(errOut, "is not drained") {
		t.Errorf("undrain twice: exit %d %q", code, errOut)
	}
	if _, _, code := admin.run("admin", "drain"); code != 2 {
		t.Errorf("drain without a GPU: exit %d", code)
	}

	// Hosts.
	if out := ann.must("hosts"); !strings.Contains(out, "No hosts") {
		t.Errorf("no hosts: %q", out)
	}
	ctx := context.Background()
	// As a gpuvmd's heartbeat stores it: the inventory, and the scheduler's
	// view of the GPUs under that node's configuration (the second GPU's
	// MIG layout is two 3g.40gb).
	inv, _ := json.Marshal(struct {
		api.HostInventory
		Spec scheduler.HostSpec `json:"spec"`
	}{api.HostInventory{Simulated: true, GPUs: []api.GPU{
		{Address: "0000:41:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: "idle", Backends: map[string]string{"passthrough": ""}},
		{Address: "0000:42:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: "mig", MIGEnabled: true, Backends: map[string]string{"mig": ""},
			MIGProfiles: []api.MIGProfile{{Name: "3g.40gb", Size: 4, FreeStarts: []int{0, 4}}}},
	}}, scheduler.HostSpec{GPUs: []scheduler.GPUSpec{
		{Address: "0000:41:00.0", Model: "10de:2331", Allow: gpu.ModePassthrough},
		{Address: "0000:42:00.0", Model: "10de:2331", Mode: gpu.ModeMIG, Allow: gpu.ModeMIG, MIGLayout: []string{"3g.40gb", "3g.40gb"}},
	}}})
	for _, name := range []string{"gpu-b", "gpu-a"} {
		if err := env.Store.RegisterHost(ctx, &store.Host{Name: name, APIURL: "http://" + name + ":8080", Version: "1.0", Inventory: string(inv)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Store.DrainGPU(ctx, &store.GPUDrain{Host: "gpu-b", GPUAddress: "0000:41:00.0"}); err != nil {
		t.Fatal(err)
	}
	out = admin.must("hosts")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasSuffix(lines[0], "URL") ||
		!strings.HasPrefix(lines[1], "gpu-a (simulated)") || !strings.Contains(lines[1], "1 idle GPU, 1 split GPU with room (1 MIG); largest free: MIG 3g.40gb ×2") || !strings.Contains(lines[1], "http://gpu-a:8080") ||
		!strings.Contains(lines[2], "2 (1 drained)") || !strings.Contains(lines[2], " up ") || !strings.Contains(lines[2], "s ago") {
		t.Errorf("hosts as admin:\n%s", out)
	}
	if out := ann.must("hosts"); strings.Contains(out, "URL") || strings.Contains(out, "http://") {
		t.Errorf("hosts as a user show URLs:\n%s", out)
	}
	var hl api.HostList
	decodeStrict(t, ann.must("hosts", "--json"), &hl)
	if len(hl.Items) != 2 || hl.Items[0].Name != "gpu-a" || hl.Items[0].GPUs != 2 || hl.Items[0].Free.MIG["3g.40gb"] != 2 {
		t.Errorf("hosts --json: %+v", hl)
	}
	if out := ann.must("hosts", "-q"); out != "gpu-a\ngpu-b\n" {
		t.Errorf("hosts -q: %q", out)
	}
}

func TestDescribeCapacityAndAgo(t *testing.T) {
	tests := []struct {
		c    api.Capacity
		want string
	}{
		{api.Capacity{}, "none"},
		{api.Capacity{IdleGPUs: 2}, "2 idle GPUs"},
		{api.Capacity{IdleGPUs: 1, MIG: map[string]int{"3g.40gb": 2, "1g.10gb": 7}, VGPU: map[string]int{"L40S-12Q": 3}}, "1 idle GPU, 1g.10gb×7, 3g.40gb×2, L40S-12Q×3"},
	}
	for _, tc := range tests {
		if got := describeCapacity(tc.c); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s ago", 12400 * time.Millisecond: "12s ago", 3 * time.Minute: "3m ago", 125 * time.Minute: "2h5m ago"} {
		if got := agoText(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}
