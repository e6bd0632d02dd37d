package orchestrator

import (
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// A profile with a cloud_init block gives its VMs a seed: the owner's
// account with the keys asked for, the VM's name as hostname, and the
// profile's template as user-data; the seed renders to a valid NoCloud
// image.
func TestSeedOf(t *testing.T) {
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
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG9mZmljaWFs ann@laptop"
	vm := &store.VM{ID: "0d3c8d0e-9c1a-4d5e-9f00-5b5c2a0e7a11", Name: "box-1", Owner: "ann", Spec: `{"hours":1,"ssh_keys":["` + key + `"]}`}
	seed, err := seedOf(cfg.RenderCloudInit, cfg.Profiles["p"], vm)
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

	// No keys asked for: an account without keys.
	vm.Spec = `{"hours":1}`
	if seed, err = seedOf(cfg.RenderCloudInit, cfg.Profiles["p"], vm); err != nil || len(seed.SSHKeys) != 0 {
		t.Errorf("without keys: %+v, %v", seed, err)
	}
}
