package orchestrator

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// seedCatcher keeps the seed of every VM it creates, then creates the VM
// without its disks (the libvirt test driver has no pool for them).
type seedCatcher struct {
	Hypervisor
	mu    sync.Mutex
	seeds map[string]*cloudinit.Config
}

func (h *seedCatcher) CreateVM(ctx context.Context, req hypervisor.VMRequest) (hypervisor.Info, error) {
	h.mu.Lock()
	h.seeds[req.Spec.UUID] = req.Seed
	h.mu.Unlock()
	req.BaseImage, req.Seed, req.Spec.Disks = "", nil, nil
	return h.Hypervisor.CreateVM(ctx, req)
}

// A VM whose Linux guest gets a seed gets an SSH host key made for it:
// the seed installs the pair, the VM's spec keeps the public half (what
// the API shows), and the private half is nowhere in the database. A VM
// without a seed, and a Windows guest, get none.
func TestCreateMakesHostKey(t *testing.T) {
	e := newEnv(t, "h100x8")
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
template "t" {
  content = "#cloud-config\nhostname: ${hostname}\n"
}
profile "seeded" {
  vcpus  = 1
  memory = "256MiB"
  network { type = "none" }
  boot { kernel = "/k" }
  cloud_init { template = "t" }
}
profile "bare" {
  vcpus  = 1
  memory = "256MiB"
  network { type = "none" }
  boot { kernel = "/k" }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	e.cfg = cfg
	ctx := context.Background()
	hv := &seedCatcher{Hypervisor: e.hv, seeds: map[string]*cloudinit.Config{}}
	o := New(Config{
		Store: e.st, Backends: e.l, Hypervisor: hv, Profiles: func() *config.Config { return e.cfg },
		Host: "test-host", DomainPrefix: e.prefix, DomainType: "qemu", Log: e.log,
		Tick: 50 * time.Millisecond, ShutdownTimeout: time.Second,
	})
	seeded, _ := e.submit("ann", "seeded", "seeded-1")
	bare, _ := e.submit("ann", "bare", "bare-1")
	o.Drain(ctx)

	got := e.vm(seeded.ID)
	if got.State != store.VMRunning {
		t.Fatalf("seeded VM: %s %q", got.State, got.StateReason)
	}
	var spec struct {
		HostKeys []string `json:"ssh_host_keys"`
	}
	if err := json.Unmarshal([]byte(got.Spec), &spec); err != nil {
		t.Fatal(err)
	}
	seed := hv.seeds[seeded.ID]
	if seed == nil || seed.HostKey == nil {
		t.Fatalf("the seed has no host key: %+v", seed)
	}
	if len(spec.HostKeys) != 1 || spec.HostKeys[0] != seed.HostKey.Public || !strings.HasPrefix(spec.HostKeys[0], "ssh-ed25519 ") {
		t.Errorf("spec %s: want ssh_host_keys [%q]", got.Spec, seed.HostKey.Public)
	}
	if err := seed.Validate(); err != nil {
		t.Errorf("the seed: %v", err)
	}
	// The private key: in the seed only.
	evs, err := e.st.ListEventsSince(ctx, 0, store.EventFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	all := got.Spec + " " + e.logs.String()
	for _, ev := range evs {
		all += " " + string(ev.Payload)
	}
	if strings.Contains(all, "PRIVATE KEY") || strings.Contains(all, strings.Split(seed.HostKey.Private, "\n")[2]) {
		t.Error("the host key's private half is in the database or the log")
	}

	if b := e.vm(bare.ID); b.State != store.VMRunning || strings.Contains(b.Spec, "ssh_host_keys") || hv.seeds[bare.ID] != nil {
		t.Errorf("VM without a seed: %s spec %s seed %+v", b.State, b.Spec, hv.seeds[bare.ID])
	}
}

// The host key joins what the VM's spec holds, which stays as it was; a
// spec that is not JSON fails, naming the VM.
func TestNewHostKeySpec(t *testing.T) {
	p := &config.Profile{Name: "p", CloudInit: &config.CloudInit{}}
	vm := &store.VM{ID: "v1", Spec: `{"hours":3,"ssh_keys":["ssh-ed25519 AAAA ann"],"ssh_host_keys":["ssh-ed25519 OLD"]}`}
	k, spec, err := newHostKey(p, vm)
	if err != nil || k == nil || spec == nil {
		t.Fatalf("%v %v %v", k, spec, err)
	}
	want := `{"hours":3,"ssh_host_keys":["` + k.Public + `"],"ssh_keys":["ssh-ed25519 AAAA ann"]}`
	if *spec != want || !strings.HasSuffix(k.Public, " gpuvm-v1") {
		t.Errorf("spec %s\nwant %s", *spec, want)
	}
	if _, _, err := newHostKey(p, &store.VM{ID: "v2", Spec: "{"}); err == nil || !strings.Contains(err.Error(), "vm v2") {
		t.Errorf("a bad spec: %v", err)
	}
	for name, q := range map[string]*config.Profile{"no seed": {Name: "q"}, "windows": {Name: "w", OS: "windows", CloudInit: &config.CloudInit{}}, "no profile": nil} {
		if k, spec, err := newHostKey(q, vm); k != nil || spec != nil || err != nil {
			t.Errorf("%s: %v %v %v, want no key", name, k, spec, err)
		}
	}
}
