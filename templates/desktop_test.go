package templates_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// desktopConfig declares the desktop templates as an admin does (file =
// their path) with sample variables, and one profile per rendering.
const desktopConfig = `
template "rdp" {
  file = "%DIR%/rdp-debian.yaml"
  vars = {
    rdp_port = 3389
    session  = "xfce4-session"
  }
}
template "rdp-windows" {
  file = "%DIR%/rdp-windows.ps1"
  vars = {
    rdp_port = 3389
  }
}
template "sunshine" {
  file = "%DIR%/sunshine.yaml"
  vars = {
    sunshine_deb_url    = ""
    sunshine_deb_sha256 = ""
    sunshine_port       = 47989
    web_user            = "gpuvm"
    web_password        = ""
  }
}
profile "rdp" {
  boot { kernel = "/k" }
  desktop { protocol = "rdp" }
  cloud_init { template = "rdp" }
}
profile "rdp-port-password" {
  boot { kernel = "/k" }
  desktop {
    protocol = "rdp"
    port     = 13389
  }
  cloud_init {
    template = "rdp"
    vars = {
      rdp_port = 13389
    }
  }
}
profile "rdp-windows" {
  os = "windows"
  disk { image = "win" }
  desktop { protocol = "rdp" }
  cloud_init { template = "rdp-windows" }
}
profile "rdp-windows-port" {
  os = "windows"
  disk { image = "win" }
  desktop {
    protocol = "rdp"
    port     = 13389
  }
  cloud_init {
    template = "rdp-windows"
    vars = { rdp_port = 13389 }
  }
}
profile "sunshine-unset" {
  boot { kernel = "/k" }
  desktop { protocol = "sunshine" }
  cloud_init { template = "sunshine" }
}
profile "sunshine" {
  boot { kernel = "/k" }
  desktop {
    protocol = "sunshine"
    port     = 37989
  }
  cloud_init {
    template = "sunshine"
    vars = {
      sunshine_deb_url    = "https://mirror.example.com/sunshine/sunshine-debian-bookworm-amd64.deb"
      sunshine_deb_sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
      sunshine_port       = 37989
      web_password        = "it's secret"
    }
  }
}
image "win" {
  path = "/var/lib/gpuvm/images/win.qcow2"
  os   = "windows"
}
`

// TestDesktopTemplates renders each desktop template of templates/desktop
// with sample variables and compares it with testdata/desktop-NAME.golden
// (go test ./templates -update rewrites them).
func TestDesktopTemplates(t *testing.T) {
	abs, err := filepath.Abs("desktop")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "desktop.hcl"), []byte(strings.ReplaceAll(desktopConfig, "%DIR%", abs)), 0o644); err != nil {
		t.Fatal(err)
	}
	l := new(config.Loader)
	cfg, diags := l.LoadDir(dir)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	in := config.CloudInitInput{User: "ada", Hostname: "seat-1", VMID: "6b9a2f3e-0000-4000-8000-000000000001", VMName: "seat-1",
		SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample ada@laptop", "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABExample ada's key"}}
	for _, name := range cfg.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			in := in
			if name == "rdp-port-password" {
				// gpuvmd gives every template the one-time password's hash.
				in.PasswordHash = "$6$saltsalt$J3wJQzzC1p7xd2u8cA0bX7bGQ3Vxj8Qx0dQ"
			}
			got, err := cfg.RenderCloudInit(cfg.Profiles[name], in)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got, "#cloud-config\n") && !strings.HasPrefix(got, "#ps1_sysnative\n") {
				t.Errorf("%s does not start with a cloud-init header", name)
			}
			if strings.Contains(got, "\t") {
				t.Errorf("%s has a tab (YAML takes none)", name)
			}
			path := filepath.Join("testdata", "desktop-"+name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./templates -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s (run with -update if intended):\n%s", name, path, got)
			}
		})
	}
}
