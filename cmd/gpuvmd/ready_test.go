package main

import (
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/config"
)

func TestReadyHelp(t *testing.T) {
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
profile "zeta" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
profile "alpha" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, tc := range []struct {
		name string
		cfg  *config.Config
		want []string
		not  string
	}{
		{"profiles", cfg, []string{
			"gpuvmd is ready on http://127.0.0.1:8080\n",
			"admin token: /s/admin.token\n",
			`curl -s -H "Authorization: Bearer $(cat /s/admin.token)" http://127.0.0.1:8080/v1/gpus`,
			`-d '{"profile":"alpha"}' http://127.0.0.1:8080/v1/vms`,
			"gpuvm login http://127.0.0.1:8080 < /s/admin.token",
		}, ""},
		{"no profiles", &config.Config{}, []string{"/v1/gpus"}, "/v1/vms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readyHelp("/s/admin.token", "127.0.0.1:8080", tc.cfg, nil)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing %q in\n%s", w, got)
				}
			}
			if tc.not != "" && strings.Contains(got, tc.not) {
				t.Errorf("unexpected %q in\n%s", tc.not, got)
			}
		})
	}
}

// An unavailable profile (its image not built) is not the one the create
// line suggests; it is listed with why.
func TestReadyHelpSkipsUnavailable(t *testing.T) {
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
profile "alpha" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
profile "beta" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	why := func(p *config.Profile) string {
		if p.Name == "alpha" {
			return `its disk image "alpha" is not on this server (an admin has to build or import it)`
		}
		return ""
	}
	got := readyHelp("/s/admin.token", "127.0.0.1:8080", cfg, why)
	for _, w := range []string{`-d '{"profile":"beta"}'`, `unavailable: profile alpha: its disk image "alpha" is not on this server`} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in\n%s", w, got)
		}
	}
	if strings.Contains(got, `"profile":"alpha"`) {
		t.Errorf("the create line suggests the unavailable profile:\n%s", got)
	}
	all := readyHelp("/s/admin.token", "127.0.0.1:8080", cfg, func(*config.Profile) string { return "its boot kernel is not on this server" })
	if strings.Contains(all, "/v1/vms") || strings.Count(all, "unavailable: profile") != 2 {
		t.Errorf("with no profile available, no create line and both listed:\n%s", all)
	}
}
