package orchestrator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/logtest"
	"github.com/gpuvm/gpuvm/pkg/shares"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// sharesConfig declares "team" (read-write for ann, read-only for group
// ml) and "lab" (read-only for ann); profile "p" mounts team always.
func sharesConfig(t *testing.T, team, lab string) *config.Config {
	t.Helper()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
server {
  storage {
    share "team" {
      path       = "` + team + `"
      read_write = ["user:ann"]
      read_only  = ["group:ml"]
    }
    share "lab" {
      path      = "` + lab + `"
      mount     = "/data/lab"
      read_only = ["user:ann"]
    }
  }
}
policy {
  group "ml" {}
}
template "t" {
  content = "#cloud-config\n"
}
profile "p" {
  boot { kernel = "/k" }
  cloud_init { template = "t" }
  users  = ["ann"]
  groups = ["ml"]
  shares = ["team"]
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return cfg
}

// The orchestrator puts a VM's shares in its domain and seed: the
// profile's and those asked for, with the owner's mode, checked again at
// each start; a read-only share is served from a read-only view that
// refuses a write; one whose access went is left out with a vm.warning.
func TestVMShares(t *testing.T) {
	ctx := context.Background()
	team, lab, state := t.TempDir(), t.TempDir(), t.TempDir()
	cfg := sharesConfig(t, team, lab)
	st := storetest.New(t)
	for _, u := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: u}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetUserGroups(ctx, "bob", []string{"ml"}); err != nil {
		t.Fatal(err)
	}
	log, _ := logtest.New()
	lc := &lifecycle{st: st, log: log, names: "gpuvm-", virtiofsd: func() (string, error) { return "/usr/lib/qemu/virtiofsd", nil }}
	set := lifecycleSettings{RenderCloudInit: cfg.RenderCloudInit, Profiles: cfg.Profiles, Shares: cfg.Server.Storage.Shares, StateDir: state, Config: cfg}
	lc.settings = func() lifecycleSettings { return set }
	p := cfg.Profiles["p"]
	root := os.Geteuid() == 0 && shares.CanEnforceReadOnly() == nil

	// ann: team read-write (the profile's), lab asked for, read-only.
	ann := &store.VM{ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Name: "ann-1", Owner: "ann", Profile: "p", Spec: `{"hours":1,"shares":["lab","team"]}`}
	got, err := lc.shares(ctx, set, p, ann)
	if !root {
		if err == nil || !errors.Is(err, shares.ErrNotEnforceable) || !strings.Contains(err.Error(), "share lab") {
			t.Fatalf("as non-root, a read-only share: %v, want refused naming lab", err)
		}
		t.Skip("read-only views need root")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shares.Release(state, nil) })
	if len(got) != 2 || got[0].fs.Tag != "gpuvm-share-team" || got[0].fs.Source != team || got[0].mount.ReadOnly ||
		got[0].mount.Mount != "/gpuvm/shares/team" || got[1].fs.Tag != "gpuvm-share-lab" || got[1].fs.Source != filepath.Join(state, "shares", "lab") ||
		!got[1].mount.ReadOnly || got[1].mount.Mount != "/data/lab" {
		t.Fatalf("ann's shares %+v", got)
	}
	if err := os.WriteFile(filepath.Join(got[1].fs.Source, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a write to lab's view: %v, want EROFS", err)
	}

	// The domain and the seed have them.
	req, err := lc.vmRequest(ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	if fss := req.Spec.Filesystems; len(fss) != 2 || fss[0].Tag != "gpuvm-share-team" || fss[1].Tag != "gpuvm-share-lab" || fss[1].ReadOnly {
		t.Errorf("domain filesystems %+v", fss)
	}
	if s := req.Seed.Shares; len(s) != 2 || s[1].Tag != "gpuvm-share-lab" || !s[1].ReadOnly {
		t.Errorf("seed shares %+v", s)
	}

	// bob (group ml): team read-only; lab never reaches his VM.
	bob := &store.VM{ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c", Name: "bob-1", Owner: "bob", Profile: "p", Spec: `{"hours":1}`}
	got, err = lc.shares(ctx, set, p, bob)
	if err != nil || len(got) != 1 || got[0].fs.Tag != "gpuvm-share-team" || !got[0].mount.ReadOnly || got[0].fs.Source != filepath.Join(state, "shares", "team") {
		t.Fatalf("bob's shares %+v, %v", got, err)
	}

	// A reload takes bob's access away: the next start leaves team out
	// and says so in his VM's events.
	revoked := *set.Shares["team"]
	revoked.ReadOnly = nil
	set.Shares = map[string]*config.Share{"team": &revoked, "lab": set.Shares["lab"]}
	got, err = lc.shares(ctx, set, p, bob)
	if err != nil || len(got) != 0 {
		t.Fatalf("bob's shares after the reload %+v, %v", got, err)
	}
	evs, err := st.ListEventsSince(ctx, 0, store.EventFilter{VMID: bob.ID, Type: api.EventVMWarning, Limit: 10})
	if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Payload), "share team is left out: bob may no longer mount it") {
		t.Errorf("bob's warnings %+v, %v", evs, err)
	}

	// A share whose directory is gone fails the start, naming it.
	if err := os.Remove(lab); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.shares(ctx, set, p, ann); err == nil || !strings.Contains(err.Error(), "share lab is unavailable") {
		t.Errorf("lab gone: %v", err)
	}
}

func TestVMShareNames(t *testing.T) {
	p := &config.Profile{Shares: []string{"a", "b"}}
	got, err := VMShareNames(p, `{"shares":["b","c"]}`)
	if err != nil || strings.Join(got, ",") != "a,b,c" {
		t.Errorf("VMShareNames = %v, %v", got, err)
	}
	if _, err := VMShareNames(p, `{`); err == nil {
		t.Error("a broken spec: no error")
	}
}
