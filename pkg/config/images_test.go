package config

import (
	"testing"
)

func TestImportedImage(t *testing.T) {
	for _, c := range []struct {
		name, hcl string
		imported  string
		version   int
	}{
		{"newest", `image "u" { imported = "ubuntu-desk" }`, "ubuntu-desk", 0},
		{"pinned", `image "u" {
  imported = "ubuntu-desk"
  version  = 3
  firmware = "bios"
}`, "ubuntu-desk", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := new(Loader)
			cfg, diags := l.Parse(Source{Name: "images.hcl", Data: []byte(c.hcl + "\nprofile \"p\" {\n  disk { image = \"u\" }\n}\n")})
			if len(diags) > 0 {
				t.Fatalf("diagnostics:\n%s", render(t, l, diags))
			}
			img := cfg.Images["u"]
			if img == nil || img.Imported != c.imported || img.Version != c.version || img.Path != "" || img.Volume != "" || img.Format != "" {
				t.Fatalf("image = %+v", img)
			}
			if p := cfg.Profiles["p"]; p == nil || p.Disk == nil || p.Disk.Image != "u" {
				t.Fatalf("profile = %+v", p)
			}
		})
	}
}
