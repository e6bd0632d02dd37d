package orchestrator

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// The seed carries the owner's login, SSH keys and the desktop password's
// hash, never the password; a profile without cloud_init gets none.
func TestSeed(t *testing.T) {
	ctx := context.Background()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
template "desk" {
  content = <<EOT
#cloud-config
users:
  - name: ${user}
    passwd: "${password_hash}"
EOT
}
profile "desk" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/k" }
  cloud_init { template = "desk" }
}
profile "bare" {
  vcpus  = 1
  memory = "512MiB"
  boot { kernel = "/k" }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st := storetest.New(t)
	if err := st.CreateUser(ctx, &store.User{Name: "Ann.S"}); err != nil {
		t.Fatal(err)
	}
	vm := &store.VM{Name: "desk-1", Owner: "Ann.S", Profile: "desk", Hours: 1, Spec: `{"hours":1,"ssh_keys":["ssh-ed25519 AAAA ann@laptop"]}`}
	if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "Ann.S",
		Credential: &store.VMCredential{Login: "ann_s", Password: "clear-text-pw", PasswordHash: "$6$saltsalt$abcdefgh"}}); err != nil {
		t.Fatal(err)
	}
	lc := &lifecycle{st: st}
	set := lifecycleSettings{RenderCloudInit: cfg.RenderCloudInit}
	c, err := lc.seed(ctx, set, cfg.Profiles["desk"], vm)
	if err != nil {
		t.Fatal(err)
	}
	if c.User != "ann_s" || c.PasswordHash != "$6$saltsalt$abcdefgh" || len(c.SSHKeys) != 1 || c.Hostname != "desk-1" || c.InstanceID != vm.ID {
		t.Errorf("seed %+v", c)
	}
	if !strings.Contains(c.UserData, `passwd: "$6$saltsalt$abcdefgh"`) || strings.Contains(c.UserData, "clear-text-pw") {
		t.Errorf("user-data:\n%s", c.UserData)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	if c, err := lc.seed(ctx, set, cfg.Profiles["bare"], vm); c != nil || err != nil {
		t.Errorf("profile without cloud_init: %+v, %v", c, err)
	}
}

// A VM made without a credential (before desktop passwords, or by a test)
// still gets the owner's account with the keys asked for, the VM's name as
// hostname and the profile's template as user-data, rendered to a valid
// NoCloud image; with no keys asked for, an account without keys.
func TestSeedWithoutCredential(t *testing.T) {
	ctx := context.Background()
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
template "seed" {
  content = <<EOT
#cloud-config
hostname: ${hostname}
users:
  - name: ${user}
    ssh_authorized_keys:
%{ for key in ssh_authorized_keys ~}
      - ${key}
%{ endfor ~}
EOT
}
profile "p" {
  vcpus  = 1
  memory = "256MiB"
  boot { kernel = "/k" }
  cloud_init { template = "seed" }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	lc := &lifecycle{st: storetest.New(t)}
	set := lifecycleSettings{RenderCloudInit: cfg.RenderCloudInit}
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG9mZmljaWFs ann@laptop"
	vm := &store.VM{ID: "0d3c8d0e-9c1a-4d5e-9f00-5b5c2a0e7a11", Name: "box-1", Owner: "ann", Spec: `{"hours":1,"ssh_keys":["` + key + `"]}`}
	seed, err := lc.seed(ctx, set, cfg.Profiles["p"], vm)
	if err != nil {
		t.Fatal(err)
	}
	if seed.User != "ann" || seed.Hostname != "box-1" || seed.InstanceID != vm.ID || len(seed.SSHKeys) != 1 || seed.SSHKeys[0] != key {
		t.Errorf("seed %+v", seed)
	}
	want := "#cloud-config\nhostname: box-1\nusers:\n  - name: ann\n    ssh_authorized_keys:\n      - " + key + "\n"
	if seed.UserData != want {
		t.Errorf("user-data:\n%s\nwant:\n%s", seed.UserData, want)
	}
	files, err := cloudinit.Render(*seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if md := string(files["meta-data"]); !strings.Contains(md, `local-hostname: "box-1"`) {
		t.Errorf("meta-data:\n%s", md)
	}
	vm.Spec = `{"hours":1}`
	if seed, err = lc.seed(ctx, set, cfg.Profiles["p"], vm); err != nil || len(seed.SSHKeys) != 0 {
		t.Errorf("without keys: %+v, %v", seed, err)
	}
}
