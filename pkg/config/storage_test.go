package config

import (
	"strings"
	"testing"
)

func TestStorageBlock(t *testing.T) {
	def := Homes{Root: "/srv/gpuvm/homes", Mount: DefaultHomeMount, UIDMin: 20000, UIDMax: 59999}
	on := def
	on.Enabled = true
	for _, tc := range []struct {
		name, body string
		want       Homes
		err        string // a diagnostic's summary; "" for none
		line       int    // the line it points at (the server block starts at 1)
	}{
		{"no block", "", def, "", 0},
		{"empty storage", "storage {}", def, "", 0},
		{"homes defaults", "storage {\n homes {}\n}", on, "", 0},
		{"all set", "storage {\n homes {\n  root = \"/tank/homes\"\n  mount = \"/home/work\"\n  uid_min = 70000\n  uid_max = 79999\n }\n}",
			Homes{Enabled: true, Root: "/tank/homes", Mount: "/home/work", UIDMin: 70000, UIDMax: 79999}, "", 0},
		{"off", "storage {\n homes {\n  enabled = false\n }\n}", def, "", 0},
		{"empty root", "storage {\n homes {\n  root = \"\"\n }\n}", Homes{}, "Invalid root", 5},
		{"root slash", "storage {\n homes {\n  root = \"/\"\n }\n}", Homes{}, "Invalid root", 5},
		{"relative mount", "storage {\n homes {\n  mount = \"home\"\n }\n}", Homes{}, "Invalid mount", 5},
		{"mount with space", "storage {\n homes {\n  mount = \"/my home\"\n }\n}", Homes{}, "Invalid mount", 5},
		{"mount unclean", "storage {\n homes {\n  mount = \"/a/../b\"\n }\n}", Homes{}, "Invalid mount", 5},
		{"mount trailing slash", "storage {\n homes {\n  mount = \"/data/\"\n }\n}", Homes{}, "Invalid mount", 5},
		{"mount /home", "storage {\n homes {\n  mount = \"/home\"\n }\n}", Homes{}, "Invalid mount", 5},
		{"mount in /etc", "storage {\n homes {\n\n  mount = \"/etc/home\"\n }\n}", Homes{}, "Invalid mount", 6},
		{"mount /", "storage {\n homes {\n  mount = \"/\"\n }\n}", Homes{}, "Invalid mount", 5},
		{"uid_min system", "storage {\n homes {\n  uid_min = 500\n }\n}", Homes{}, "Invalid uid_min", 5},
		{"uid_max below min", "storage {\n homes {\n  uid_min = 30000\n  uid_max = 29999\n }\n}", Homes{}, "Invalid uid_max", 6},
		{"range holds nobody", "storage {\n homes {\n  uid_max = 70000\n }\n}", Homes{}, "Invalid uid range", 5},
		{"unknown attribute", "storage {\n homes {\n  quota = \"10GiB\"\n }\n}", Homes{}, "Unsupported argument", 5},
		{"unknown block", "storage {\n shares {}\n}", Homes{}, "Unsupported block type", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "server {\n state_dir = \"/srv/gpuvm\"\n" + tc.body + "\n}\n"
			cfg, diags := Parse(Source{Name: "server.hcl", Data: []byte(src)})
			if tc.err == "" {
				if diags.HasErrors() {
					t.Fatal(diags)
				}
				if got := cfg.Server.Storage.Homes; got != tc.want {
					t.Errorf("homes = %+v, want %+v", got, tc.want)
				}
				return
			}
			var sums []string
			for _, d := range diags {
				sums = append(sums, d.Summary)
				if d.Summary != tc.err {
					continue
				}
				if d.Subject == nil || d.Subject.Filename != "server.hcl" || d.Subject.Start.Line != tc.line {
					t.Errorf("diagnostic %q points at %v, want server.hcl:%d", d.Summary, d.Subject, tc.line)
				}
				if f := strings.TrimPrefix(tc.err, "Invalid "); f != tc.err && f != "uid range" && !strings.Contains(d.Detail, f) {
					t.Errorf("detail %q does not name the field", d.Detail)
				}
				return
			}
			t.Errorf("diagnostics %s; want %q", strings.Join(sums, "; "), tc.err)
		})
	}
}

func TestProfileHome(t *testing.T) {
	const profile = "profile \"p\" {\n boot {\n  kernel = \"/k\"\n }\n%s\n}\n"
	for _, tc := range []struct {
		name, server, body string
		want               bool
		err, warn          string // summaries; "" for none
		line               int    // the line the diagnostic points at (in profiles.hcl)
	}{
		{"homes off, default", "", "", false, "", "", 0},
		{"homes on, default", "storage {\n homes {}\n}", " cloud_init {\n  template = \"t\"\n }", true, "", "", 0},
		// Nothing in the guest would mount it: not attached unasked.
		{"homes on, default, no cloud-init", "storage {\n homes {}\n}", "", false, "", "", 0},
		{"homes on, off in profile", "storage {\n homes {}\n}", " home = false", false, "", "", 0},
		{"homes on, windows default", "storage {\n homes {}\n}", " os = \"windows\"\n disk {\n  image = \"w\"\n }", false, "", "", 0},
		{"homes on, no cloud-init", "storage {\n homes {}\n}", " home = true", true, "", "Nothing mounts the home", 5},
		{"homes off, asked", "", " home = true", false, "Homes are off", "", 5},
		{"homes disabled, asked", "storage {\n homes {\n  enabled = false\n }\n}", "\n home = true", false, "Homes are off", "", 6},
		// A Windows image mounts it when built with WinFsp: asked for, it
		// is attached; the seed tells the image's task what to mount.
		{"windows, asked", "storage {\n homes {}\n}", " os = \"windows\"\n disk {\n  image = \"w\"\n }\n cloud_init {\n  template = \"t\"\n }\n home = true", true, "", "", 0},
		{"windows, asked, no cloud-init", "storage {\n homes {}\n}", " os = \"windows\"\n disk {\n  image = \"w\"\n }\n home = true", true, "", "Nothing tells Windows where the home is", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := "server {\n" + tc.server + "\n}\ntemplate \"t\" {\n content = \"#cloud-config\\n\"\n}\nimage \"w\" {\n path = \"/w.qcow2\"\n os = \"windows\"\n firmware = \"uefi\"\n}\n"
			cfg, diags := Parse(Source{Name: "server.hcl", Data: []byte(srv)},
				Source{Name: "profiles.hcl", Data: []byte(strings.Replace(profile, "%s", tc.body, 1))})
			want := tc.err + tc.warn
			if want == "" {
				if len(diags) > 0 {
					t.Fatal(diags)
				}
				if got := cfg.Profiles["p"].Home; got != tc.want {
					t.Errorf("home = %v, want %v", got, tc.want)
				}
				return
			}
			if tc.warn != "" && diags.HasErrors() {
				t.Fatal(diags)
			}
			for _, d := range diags {
				if d.Summary == want {
					if d.Subject == nil || d.Subject.Filename != "profiles.hcl" || d.Subject.Start.Line != tc.line {
						t.Errorf("diagnostic %q points at %v, want profiles.hcl:%d", d.Summary, d.Subject, tc.line)
					}
					return
				}
			}
			t.Errorf("diagnostics %v; want %q", diags, want)
		})
	}
}
