package config

import (
	"fmt"
	"strings"
	"testing"
)

func TestImageGuestDriver(t *testing.T) {
	for _, c := range []struct {
		name, attr string
		want       string // the resolved guest driver
		err        string // a part of the error, with its place
	}{
		{"none", ``, "", ""},
		{"three parts", `guest_driver = "550.90.07"`, "550.90.07", ""},
		{"two parts", `guest_driver = "570.86"`, "570.86", ""},
		{"a word", `guest_driver = "latest"`, "", `images.hcl:3:18: Invalid guest driver version; "latest" is not an NVIDIA driver version`},
		{"a branch alone", `guest_driver = "550"`, "", `images.hcl:3:18: Invalid guest driver version; "550" is not`},
		{"empty", `guest_driver = ""`, "", `images.hcl:3:18: Invalid guest driver version`},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := "image \"u\" {\n  path         = \"u.qcow2\"\n  " + c.attr + "\n}\nprofile \"p\" {\n  disk { image = \"u\" }\n}\n"
			l := new(Loader)
			cfg, diags := l.Parse(Source{Name: "images.hcl", Data: []byte(src)})
			if c.err != "" {
				var got []string
				for _, d := range diags {
					if d.Subject != nil {
						got = append(got, fmt.Sprintf("%s:%d:%d: %s; %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, d.Summary, d.Detail))
					}
				}
				if !diags.HasErrors() || !strings.Contains(strings.Join(got, "\n"), c.err) {
					t.Fatalf("diagnostics:\n%s\nwant %q", strings.Join(got, "\n"), c.err)
				}
				if cfg != nil && cfg.Images["u"] != nil {
					t.Errorf("the image resolved despite the error: %+v", cfg.Images["u"])
				}
				return
			}
			if len(diags) > 0 {
				t.Fatalf("diagnostics:\n%s", render(t, l, diags))
			}
			if img := cfg.Images["u"]; img == nil || img.GuestDriver != c.want {
				t.Fatalf("image = %+v, want guest driver %q", img, c.want)
			}
		})
	}
}
