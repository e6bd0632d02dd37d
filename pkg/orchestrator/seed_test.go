package orchestrator

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
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
	o := &Orchestrator{st: st}
	c, err := o.seed(ctx, cfg, cfg.Profiles["desk"], vm)
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
	if c, err := o.seed(ctx, cfg, cfg.Profiles["bare"], vm); c != nil || err != nil {
		t.Errorf("profile without cloud_init: %+v, %v", c, err)
	}
}
