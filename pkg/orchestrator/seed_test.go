package orchestrator

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/licensing"
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
	c, err := lc.seed(ctx, set, cfg.Profiles["desk"], vm, "", nil, nil)
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
	if c, err := lc.seed(ctx, set, cfg.Profiles["bare"], vm, "", nil, nil); c != nil || err != nil {
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
	seed, err := lc.seed(ctx, set, cfg.Profiles["p"], vm, "", nil, nil)
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
	if seed, err = lc.seed(ctx, set, cfg.Profiles["p"], vm, "", nil, nil); err != nil || len(seed.SSHKeys) != 0 {
		t.Errorf("without keys: %+v, %v", seed, err)
	}
}

// The seeds of licensed profiles' guests carry exactly the right token
// path and FeatureType for what the VM holds — a vGPU and a MIG slice 1,
// a whole GPU with a desktop 2 and without one 4 — a Windows guest its
// PowerShell script instead of vendor-data, and a GPU-less VM or an
// unlicensed profile none. A missing token file fails the seed with the
// profile and the block's place named, and the token never reaches the
// error.
func TestSeedLicensing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const token = "eyJhbGciOiJSUzI1NiJ9.dGVzdC10b2tlbg.c2ln"
	tokPath := filepath.Join(dir, "client.tok")
	if err := os.WriteFile(tokPath, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	profile := func(name, gpuBlock, extra string) string {
		boot := "  boot { kernel = \"/k\" }\n"
		if strings.Contains(extra, "disk") {
			boot = ""
		}
		return fmt.Sprintf("profile %q {\n  vcpus = 1\n  memory = \"1GiB\"\n%s  cloud_init { template = \"ci\" }\n%s%s}\n", name, boot, gpuBlock, extra)
	}
	vgpu := "  gpu {\n    kind = \"vgpu\"\n    type = \"L40S-12Q\"\n  }\n"
	mig := "  gpu {\n    kind = \"mig\"\n    profile = \"1g.10gb\"\n  }\n"
	whole := "  gpu {\n    kind = \"passthrough\"\n    model = \"L40S\"\n  }\n"
	src := fmt.Sprintf("server {\n  licensing {\n    client_token_file = %q\n  }\n}\ntemplate \"ci\" {\n  content = \"#cloud-config\\n\"\n}\n", tokPath) +
		profile("vgpu", vgpu, "") + profile("mig", mig, "") +
		profile("ws", whole, "  desktop { protocol = \"rdp\" }\n") + profile("compute", whole, "") +
		"image \"win11\" {\n  path = \"/images/win11.qcow2\"\n  os = \"windows\"\n  firmware = \"uefi\"\n}\n" +
		profile("win", vgpu, "  disk { image = \"win11\" }\n") +
		profile("off", vgpu, "  licensing { enabled = false }\n") +
		profile("cpu", "", "") +
		profile("lost", vgpu, "  licensing { client_token_file = \"/nonexistent/t.tok\" }\n")
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(src)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	st := storetest.New(t)
	if err := st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	lc := &lifecycle{st: st}
	set := lifecycleSettings{RenderCloudInit: cfg.RenderCloudInit}
	for _, tc := range []struct {
		profile string
		kind    gpu.Kind
		feature int // the FeatureType its script sets; -1: no licensing in the seed
		windows bool
	}{
		{"vgpu", gpu.KindVGPU, licensing.VGPU, false},
		{"mig", gpu.KindMIG, licensing.VGPU, false},
		{"ws", gpu.KindPassthrough, licensing.Workstation, false},
		{"compute", gpu.KindPassthrough, licensing.Compute, false},
		{"win", gpu.KindVGPU, licensing.VGPU, true},
		{"off", gpu.KindVGPU, -1, false},
		{"cpu", "", -1, false},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			vm := &store.VM{Name: "vm-" + tc.profile, Owner: "ann", Profile: tc.profile, Hours: 1}
			if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
				t.Fatal(err)
			}
			c, err := lc.seed(ctx, set, cfg.Profiles[tc.profile], vm, tc.kind, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			got := c.VendorData
			if tc.windows {
				if got != "" || len(c.Extra) != 1 || c.Extra[0].Name != WindowsLicensingScript {
					t.Fatalf("windows seed: vendor-data %q, extra %v", got, c.Extra)
				}
				got = string(c.Extra[0].Data)
			} else if len(c.Extra) != 0 {
				t.Fatalf("extra files %v", c.Extra)
			}
			if tc.feature < 0 {
				if got != "" {
					t.Fatalf("licensing in the seed of %s:\n%s", tc.profile, got)
				}
				return
			}
			// The script's text is pkg/licensing's (its golden files): here,
			// that the seed has the one for this token and FeatureType.
			script := licensing.LinuxScript
			if tc.windows {
				script = licensing.WindowsScript
			}
			want, err := script(licensing.Guest{Token: []byte(token), FeatureType: tc.feature})
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("%s: the seed's licensing script is not the one for FeatureType %d:\n%s", tc.profile, tc.feature, got)
			}
			// The seed image itself carries it.
			iso, err := cloudinit.Seed(*c, nil, time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(iso, []byte(base64.StdEncoding.EncodeToString([]byte(token)))) {
				t.Error("the seed image does not carry the token")
			}
		})
	}
	vm := &store.VM{Name: "vm-lost", Owner: "ann", Profile: "lost", Hours: 1}
	if _, err := st.CreateVM(ctx, vm, store.CreateVMOptions{RequestedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	_, err := lc.seed(ctx, set, cfg.Profiles["lost"], vm, gpu.KindVGPU, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "profile lost") || !strings.Contains(err.Error(), "p.hcl:") || !strings.Contains(err.Error(), "/nonexistent/t.tok") {
		t.Errorf("a missing token file: %v", err)
	}
}
