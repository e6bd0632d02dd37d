package orchestrator

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// In a fleet the leader places a VM that mounts its owner's home on the
// host the home lives on; a person without a home yet is placed as before;
// when the home's host cannot serve the VM, it goes elsewhere, its reason
// untouched (what it is told of its home is worked out when it is read:
// pkg/server's TestVMHomeHost), and the home stays recorded where it was.
func TestFleetPrefersHomeHost(t *testing.T) {
	ctx := context.Background()
	// n1 leads and has no L40S: the seats go on n2 or n3, which make
	// nothing here (they do not run rounds), so what the leader chose stays.
	n1 := newFleetNode(t, "n1", "h100x8", nil)
	n2 := newFleetNode(t, "n2", "l40sx4", n1.st)
	n3 := newFleetNode(t, "n3", "l40sx4", n1.st)
	n1.fleet.leader.Store(true)
	for _, n := range []*fleetNode{n1, n2, n3} {
		n.beat(t)
	}
	cfg := homesConfig(t, `
profile "home-seat" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  gpu {
    kind = "vgpu"
    type = "L40S-12Q"
  }
  home = true
}
`)
	if !cfg.Profiles["home-seat"].Home {
		t.Fatal("home-seat does not mount its owner's home")
	}
	n1.cfg = cfg
	if err := n1.st.CreateUser(ctx, &store.User{Name: "cem"}); err != nil {
		t.Fatal(err)
	}

	// bob has no home yet: placed as before, on the host pack chooses.
	first, _ := n1.submit("bob", "home-seat", "no-home")
	n1.o.Drain(ctx)
	vm := n1.wantVM(first.ID, store.VMAllocating, "")
	packed := vm.Host
	other := map[string]string{"n2": "n3", "n3": "n2"}[packed]
	if other == "" || vm.StateReason != "" {
		t.Fatalf("bob's VM on %q, reason %q; want on n2 or n3, no reason", vm.Host, vm.StateReason)
	}

	// ann's home is on the other host: her VM goes there, though pack
	// would put it beside bob's.
	if _, err := n1.st.RecordHomeHost(ctx, "ann", other); err != nil {
		t.Fatal(err)
	}
	home, _ := n1.submit("ann", "home-seat", "at-home")
	n1.o.Drain(ctx)
	if vm := n1.wantVM(home.ID, store.VMAllocating, ""); vm.Host != other || vm.StateReason != "" {
		t.Fatalf("ann's VM on %q, reason %q; want on %s, her home's host, no reason", vm.Host, vm.StateReason, other)
	}

	// cem's home is on the other host too, which is drained now: placed
	// elsewhere.
	if _, err := n1.st.RecordHomeHost(ctx, "cem", other); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.st.SetHostDraining(ctx, other, true); err != nil {
		t.Fatal(err)
	}
	away, _ := n1.submit("cem", "home-seat", "away")
	n1.o.Drain(ctx)
	vm = n1.wantVM(away.ID, store.VMAllocating, "")
	if vm.Host != packed || vm.StateReason != "" {
		t.Fatalf("cem's VM on %q, reason %q; want on %s, no reason", vm.Host, vm.StateReason, packed)
	}
	// The node makes it, and cem's home stays recorded where it was.
	n := map[string]*fleetNode{"n2": n2, "n3": n3}[packed]
	n.cfg = cfg
	n.o.life.virtiofsd = func() (string, error) { return "/usr/libexec/virtiofsd", nil }
	n.o.Drain(ctx)
	if vm := n1.wantVM(away.ID, store.VMRunning, ""); vm.Host != packed || vm.StateReason != "" {
		t.Errorf("cem's VM runs on %q, reason %q; want on %s, no reason", vm.Host, vm.StateReason, packed)
	}
	if hosts, err := n1.st.HomeHosts(ctx, []string{"bob", "cem"}); err != nil || hosts["cem"] != other || hosts["bob"] != packed {
		t.Errorf("home hosts %v, %v; want cem's kept on %s, bob's made on %s", hosts, err, other, packed)
	}
}

// A round reads where homes live with its users, in its one read of them
// (readGroups: no query of its own), and a queued VM prefers its home's
// host when its profile mounts the home, unless it is a start on the node
// that keeps its disk. An admission, which names the users it reads,
// reads no homes.
func TestPreferHomeHosts(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t, storetest.Quiet)
	for _, n := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.RecordHomeHost(ctx, "ann", "n2"); err != nil {
		t.Fatal(err)
	}
	dp := &dispatcher{st: st}
	round := &state{}
	if err := dp.readGroups(ctx, round, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"ann": "n2"}; !maps.Equal(round.homeHosts, want) {
		t.Fatalf("a round's home hosts %v, want %v", round.homeHosts, want)
	}
	admission := &state{}
	if err := dp.readGroups(ctx, admission, []string{"ann"}, nil, nil); err != nil || admission.homeHosts != nil {
		t.Fatalf("an admission's home hosts %v, %v; want none read", admission.homeHosts, err)
	}

	cfg := &config.Config{Profiles: map[string]*config.Profile{"homed": {Name: "homed", Home: true}, "plain": {Name: "plain"}}}
	cases := []struct {
		name, owner, profile, op, host string
		want                           string
	}{
		{"a create that mounts the home", "ann", "homed", store.OpCreate, "", "n2"},
		{"a profile without a home", "ann", "plain", store.OpCreate, "", ""},
		{"a profile gone", "ann", "gone", store.OpCreate, "", ""},
		{"an owner without a home yet", "bob", "homed", store.OpCreate, "", ""},
		{"a start on the node of its disk", "ann", "homed", store.OpStart, "n3", ""},
		{"a start of a VM on no node", "ann", "homed", store.OpStart, "", "n2"},
	}
	queue := make([]queued, len(cases))
	for i, c := range cases {
		queue[i] = queued{vm: &store.VM{Owner: c.owner, Profile: c.profile, Host: c.host}, op: &store.Operation{Kind: c.op}}
	}
	reqs := make([]scheduler.Request, len(queue))
	preferHomeHosts(cfg, queue, reqs, round.homeHosts)
	for i, c := range cases {
		if reqs[i].PreferHost != c.want {
			t.Errorf("%s: prefers %q, want %q", c.name, reqs[i].PreferHost, c.want)
		}
	}
}

// In a fleet a VM that needs no GPU and mounts its owner's home is made on
// the node the home lives on, as a GPU VM is placed there: the leader
// gives it that host and wakes the node, which makes it. Without a home
// yet, or with the home's node drained or silent, it is made on the
// leader (which made every VM without a GPU before).
func TestFleetWithoutGPUOnHomeHost(t *testing.T) {
	ctx := context.Background()
	n1, n2 := newTwoNodeFleet(t, "h100x8")
	n3 := newFleetNode(t, "n3", "l40sx4", n1.st)
	n3.beat(t)
	cfg := homesConfig(t, `
profile "home-plain" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  home = true
}
`)
	for _, n := range []*fleetNode{n1, n2, n3} {
		n.cfg = cfg
		n.o.life.virtiofsd = func() (string, error) { return "/usr/libexec/virtiofsd", nil }
	}
	if err := n1.st.CreateUser(ctx, &store.User{Name: "cem"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.st.RecordHomeHost(ctx, "ann", "n2"); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.st.RecordHomeHost(ctx, "cem", "n3"); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.st.SetHostDraining(ctx, "n3", true); err != nil {
		t.Fatal(err)
	}
	atHome, _ := n1.submit("ann", "home-plain", "at-home")
	noHome, _ := n1.submit("bob", "home-plain", "no-home")
	drained, _ := n1.submit("cem", "home-plain", "home-drained")
	// Beats now: the set-up above (a third node's plugins) can take longer
	// than HostTimeout on a busy machine, and a node silent since its first
	// beat would be passed over.
	n1.beat(t)
	n2.beat(t)
	n1.o.Drain(ctx)
	if vm := n1.vm(atHome.ID); vm.Host != "n2" || vm.State != store.VMCreating {
		t.Fatalf("ann's VM: %s on %q; want creating on n2, her home's node", vm.State, vm.Host)
	}
	if !slices.Contains(n1.fleet.notified(), "n2") {
		t.Errorf("the leader woke %v, not n2", n1.fleet.notified())
	}
	for _, id := range []string{noHome.ID, drained.ID} {
		if vm := n1.wantVM(id, store.VMRunning, ""); vm.Host != "n1" {
			t.Errorf("%s runs on %q; want on n1, the leader", vm.Name, vm.Host)
		}
	}
	n2.o.Drain(ctx)
	if vm := n1.wantVM(atHome.ID, store.VMRunning, ""); vm.Host != "n2" {
		t.Errorf("ann's VM runs on %q, want n2", vm.Host)
	}
	if len(n2.domains()) != 1 || len(n1.domains()) != 2 {
		t.Errorf("domains: n1 %v, n2 %v", n1.domains(), n2.domains())
	}

	// n2 stops beating: past the timeout a new VM of ann's is made here.
	time.Sleep(2500 * time.Millisecond)
	n1.beat(t)
	late, _ := n1.submit("ann", "home-plain", "home-silent")
	n1.o.Drain(ctx)
	if vm := n1.wantVM(late.ID, store.VMRunning, ""); vm.Host != "n1" {
		t.Errorf("with n2 silent, ann's VM runs on %q; want n1", vm.Host)
	}
}

// homesConfig is the test profiles and more, with homes under a temporary
// root.
func homesConfig(t *testing.T, more string) *config.Config {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(testProfiles + `
server {
  storage {
    homes {
      root = "` + t.TempDir() + `"
    }
  }
}
` + more)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return cfg
}
