package orchestrator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/homes"
	"github.com/gpuvm/gpuvm/pkg/logtest"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
	"github.com/gpuvm/gpuvm/pkg/windows"
)

// A VM whose profile has a home gets its owner's, made at the first VM
// with the owner's stable uid, the same for the next VM; its seed mounts
// it and its template gets the uid. No virtiofs daemon refuses the VM.
func TestVMHome(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("making a home owned by another uid needs root")
	}
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "homes")
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
server {
  storage {
    homes {
      root = "` + root + `"
    }
  }
}
template "t" {
  content = <<EOT
#cloud-config
users:
  - name: ${user}
%{ if uid > 0 ~}
    uid: ${uid}
%{ endif ~}
EOT
}
profile "p" {
  boot { kernel = "/k" }
  cloud_init { template = "t" }
}
profile "nohome" {
  boot { kernel = "/k" }
  cloud_init { template = "t" }
  home = false
}
image "w" {
  path     = "/images/win11.qcow2"
  os       = "windows"
  firmware = "uefi"
}
profile "win" {
  disk { image = "w" }
  cloud_init { template = "t" }
  home = true
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st := storetest.New(t)
	for _, u := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: u}); err != nil {
			t.Fatal(err)
		}
	}
	log, _ := logtest.New()
	lc := &lifecycle{st: st, log: log, host: "gpu-01", virtiofsd: func() (string, error) { return "/usr/lib/qemu/virtiofsd", nil }}
	set := lifecycleSettings{RenderCloudInit: cfg.RenderCloudInit, Homes: cfg.Server.Storage.Homes}
	vm := &store.VM{ID: "vm-1", Name: "p-1", Owner: "bob", Profile: "p"}
	h, err := lc.home(ctx, set, cfg.Profiles["p"], vm)
	if err != nil {
		t.Fatal(err)
	}
	if h.uid != 20000 || h.fs.Source != filepath.Join(root, "bob") || h.fs.Tag != "gpuvm-home" || h.fs.Binary != "" || h.mount != "/gpuvm/home" {
		t.Fatalf("home %+v", h)
	}
	if fi, err := os.Stat(h.fs.Source); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("home dir: %v, %v", fi, err)
	}
	seed, err := lc.seed(ctx, set, cfg.Profiles["p"], vm, "", h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if seed.Home == nil || seed.Home.UID != 20000 || !strings.Contains(seed.UserData, "uid: 20000") {
		t.Errorf("seed home %+v, user-data:\n%s", seed.Home, seed.UserData)
	}
	// A Windows guest: no vendor-data mounts it; the seed lists it for the
	// image's mount task (pkg/windows), on H:.
	wseed, err := lc.seed(ctx, set, cfg.Profiles["win"], vm, "", h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if wseed.Home != nil || len(wseed.Extra) != 1 || wseed.Extra[0].Name != windows.MountsFile ||
		string(wseed.Extra[0].Data) != "[\n  {\n    \"tag\": \"gpuvm-home\",\n    \"drive\": \"H:\",\n    \"name\": \"bob's home\"\n  }\n]" {
		t.Errorf("windows seed: home %+v, extra %+v", wseed.Home, wseed.Extra)
	}
	// The next VM of the same person: the same home and uid; another
	// person's: theirs.
	if h2, err := lc.home(ctx, set, cfg.Profiles["p"], &store.VM{ID: "vm-2", Owner: "bob"}); err != nil || h2.fs.Source != h.fs.Source || h2.uid != h.uid {
		t.Errorf("second VM's home %+v, %v", h2, err)
	}
	if h3, err := lc.home(ctx, set, cfg.Profiles["p"], &store.VM{ID: "vm-3", Owner: "ann"}); err != nil || h3.fs.Source != filepath.Join(root, "ann") || h3.uid != 20001 {
		t.Errorf("ann's home %+v, %v", h3, err)
	}
	// Where each home was first made is recorded; a VM of the same person
	// on another host does not move it.
	lc.host = "gpu-02"
	if _, err := lc.home(ctx, set, cfg.Profiles["p"], &store.VM{ID: "vm-4", Owner: "bob"}); err != nil {
		t.Fatal(err)
	}
	if hosts, err := st.HomeHosts(ctx, []string{"ann", "bob"}); err != nil || hosts["ann"] != "gpu-01" || hosts["bob"] != "gpu-01" {
		t.Errorf("home hosts %v, %v; want both on gpu-01, where they were made", hosts, err)
	}
	lc.host = "gpu-01"
	if h, err := lc.home(ctx, set, cfg.Profiles["nohome"], vm); h != nil || err != nil {
		t.Errorf("profile without a home: %+v, %v", h, err)
	}
	if seed, err := lc.seed(ctx, set, cfg.Profiles["nohome"], vm, "", nil, nil); err != nil || strings.Contains(seed.UserData, "uid:") {
		t.Errorf("seed without a home: %v\n%s", err, seed.UserData)
	}
	lc.virtiofsd = func() (string, error) { return "", homes.ErrNoVirtiofsd }
	if _, err := lc.home(ctx, set, cfg.Profiles["p"], vm); !errors.Is(err, homes.ErrNoVirtiofsd) || !strings.Contains(err.Error(), "qemu-system-common") {
		t.Errorf("no virtiofsd: %v", err)
	}
}

// A person deleted their home (DELETE /v1/homes) while their GPU-less VM
// was stopped: its next start makes the home again, empty, as a start of
// a VM with devices does, instead of starting a domain whose virtiofs
// points at nothing.
func TestStartMakesADeletedHomeAgain(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("making a home owned by another uid needs root")
	}
	if _, err := homes.FindVirtiofsd(nil); err != nil {
		t.Skip(err)
	}
	root := filepath.Join(t.TempDir(), "homes")
	e := newEnv(t, "l40sx4")
	e.withPolicy(`
server {
  storage {
    homes {
      root = "` + root + `"
    }
  }
}
template "t" {
  content = "#cloud-config\n"
}
profile "plain-home" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/boot/vmlinuz" }
  network { type = "none" }
  cloud_init { template = "t" }
}
`)
	e.cfg.Server.Libvirt.StoragePool = "default-pool" // the test driver's pool
	o := e.orch(nil)
	vm := e.stoppedVM(o, "ann", "plain-home", "desk")
	home := filepath.Join(root, "ann")
	if _, err := os.Stat(home); err != nil {
		t.Fatalf("the create made no home: %v", err)
	}
	if err := os.RemoveAll(home); err != nil {
		t.Fatal(err)
	}
	e.action(e.vm(vm.ID), store.OpStart)
	o.Drain(context.Background())
	e.wantVM(vm.ID, store.VMRunning, "")
	if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
		t.Errorf("the start did not make the home again: %v", err)
	}
}
