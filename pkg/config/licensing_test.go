package config

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// The licensing blocks: the server's, a profile's over it, and what each
// gets wrong said at its line.
func TestLicensing(t *testing.T) {
	const tmpl = "template \"t\" {\n content = \"#cloud-config\\n\"\n}\n" // lines 1-3
	gpuProfile := func(extra string) string {
		return "profile \"p\" {\n vcpus = 1\n memory = \"1GiB\"\n boot { kernel = \"/k\" }\n gpu {\n  kind = \"vgpu\"\n  type = \"L40S-12Q\"\n }\n" + extra + "}\n"
	}
	withCI := " cloud_init { template = \"t\" }\n"
	server := func(body string) string { return "server {\n state_dir = \"/srv/gpuvm\"\n" + body + "\n}\n" }
	srvLic := "licensing {\n client_token_file = \"/etc/gpuvm/token.tok\"\n}"
	for _, tc := range []struct {
		name    string
		src     string
		server  *Licensing // want cfg.Server.Licensing
		profile *Licensing // want cfg.Profiles["p"].Licensing
		diag    string     // a diagnostic's summary ("" none)
		warning bool       // diag is a warning
	}{
		{name: "none", src: server("") + tmpl + gpuProfile(withCI)},
		{name: "server's, inherited", src: server(srvLic) + tmpl + gpuProfile(withCI),
			server:  &Licensing{TokenFile: "/etc/gpuvm/token.tok", FeatureType: FeatureAuto, Enabled: true, Source: "f.hcl:3"},
			profile: &Licensing{TokenFile: "/etc/gpuvm/token.tok", FeatureType: FeatureAuto, Enabled: true, Source: "f.hcl:3"}},
		{name: "profile overrides the feature type", src: server(srvLic) + tmpl + gpuProfile(withCI+" licensing {\n  feature_type = \"compute\"\n }\n"),
			server:  &Licensing{TokenFile: "/etc/gpuvm/token.tok", FeatureType: FeatureAuto, Enabled: true, Source: "f.hcl:3"},
			profile: &Licensing{TokenFile: "/etc/gpuvm/token.tok", FeatureType: FeatureCompute, Enabled: true, Source: "f.hcl:19"}},
		{name: "profile turns it off", src: server(srvLic) + tmpl + gpuProfile(" licensing {\n  enabled = false\n }\n"),
			server:  &Licensing{TokenFile: "/etc/gpuvm/token.tok", FeatureType: FeatureAuto, Enabled: true, Source: "f.hcl:3"},
			profile: &Licensing{TokenFile: "/etc/gpuvm/token.tok", FeatureType: FeatureAuto, Enabled: false, Source: "f.hcl:18"}},
		{name: "profile's own token", src: server("") + tmpl + gpuProfile(withCI+" licensing {\n  client_token_file = \"/t/other.tok\"\n  feature_type = \"vgpu\"\n }\n"),
			profile: &Licensing{TokenFile: "/t/other.tok", FeatureType: FeatureVGPU, Enabled: true, Source: "f.hcl:17"}},
		{name: "bad feature type", src: server("licensing {\n client_token_file = \"/t.tok\"\n feature_type = \"vws\"\n}"), diag: "Invalid feature_type"},
		{name: "no token", src: server("licensing {\n feature_type = \"vgpu\"\n}"), diag: "Missing client_token_file"},
		{name: "empty token path", src: server("licensing {\n client_token_file = \"\"\n}"), diag: "Invalid client_token_file"},
		{name: "unknown attribute", src: server("licensing {\n client_token_file = \"/t.tok\"\n server_address = \"dls\"\n}"), diag: "Unsupported argument"},
		{name: "licensed without cloud_init", src: server(srvLic) + tmpl + gpuProfile(""),
			server:  &Licensing{TokenFile: "/etc/gpuvm/token.tok", FeatureType: FeatureAuto, Enabled: true, Source: "f.hcl:3"},
			profile: &Licensing{TokenFile: "/etc/gpuvm/token.tok", FeatureType: FeatureAuto, Enabled: true, Source: "f.hcl:3"},
			diag:    "Licensed profile without cloud_init", warning: true},
		{name: "licensing without a GPU", src: server(srvLic) + tmpl +
			"profile \"p\" {\n vcpus = 1\n memory = \"1GiB\"\n boot { kernel = \"/k\" }\n licensing { enabled = false }\n}\n",
			server: &Licensing{TokenFile: "/etc/gpuvm/token.tok", FeatureType: FeatureAuto, Enabled: true, Source: "f.hcl:3"},
			diag:   "Licensing without a GPU", warning: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse(Source{Name: "f.hcl", Data: []byte(tc.src)})
			var found *hcl.Diagnostic
			for _, d := range diags {
				if d.Summary == tc.diag {
					found = d
				} else if d.Severity == hcl.DiagError || tc.diag == "" {
					t.Errorf("unexpected diagnostic: %s: %s", d.Summary, d.Detail)
				}
			}
			if tc.diag != "" {
				if found == nil {
					t.Fatalf("no %q among %v", tc.diag, diags)
				}
				if (found.Severity == hcl.DiagWarning) != tc.warning {
					t.Errorf("%q: severity %v", tc.diag, found.Severity)
				}
				if found.Subject == nil || found.Subject.Filename != "f.hcl" {
					t.Errorf("%q points at %v", tc.diag, found.Subject)
				}
				if !tc.warning {
					return
				}
			}
			if !eqLicensing(cfg.Server.Licensing, tc.server) {
				t.Errorf("server licensing = %+v, want %+v", cfg.Server.Licensing, tc.server)
			}
			if p := cfg.Profiles["p"]; p != nil && !eqLicensing(p.Licensing, tc.profile) {
				t.Errorf("profile licensing = %+v, want %+v", p.Licensing, tc.profile)
			}
			if tc.warning && !strings.Contains(found.Detail, "\"p\"") {
				t.Errorf("the warning does not name the profile: %s", found.Detail)
			}
		})
	}
}

func eqLicensing(a, b *Licensing) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
