package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigValidateExamples(t *testing.T) {
	var dirs []string
	all, _ := filepath.Glob("../../configs/*")
	for _, d := range all {
		if files, _ := filepath.Glob(filepath.Join(d, "*.hcl")); len(files) > 0 { // not configs/grafana
			dirs = append(dirs, d)
		}
	}
	if len(dirs) < 4 {
		t.Fatalf("configs: %v", dirs)
	}
	out, errOut, code := runCLI(t, append([]string{"config", "validate"}, dirs...)...)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, d := range dirs {
		if !strings.Contains(out, d+": valid (") {
			t.Errorf("no verdict for %s in:\n%s", d, out)
		}
	}
	if !strings.Contains(out, "[simulated h100x8 server]") {
		t.Errorf("the dev configuration does not say it is simulated:\n%s", out)
	}
	// Files given together are one configuration.
	files, _ := filepath.Glob("../../configs/dev/*.hcl")
	if out, errOut, code := runCLI(t, append([]string{"config", "validate"}, files...)...); code != 0 {
		t.Errorf("files of configs/dev: exit %d\n%s%s", code, out, errOut)
	}
}

func TestConfigValidateErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"../../pkg/config/testdata/errors/unknown.hcl"}, 1, []string{
			"Error: Unsupported argument",
			"on ../../pkg/config/testdata/errors/unknown.hcl:2:3, in profile \"web\":",
			"   2:   vcpu   = 4\n        ^^^^\n",
			`Did you mean "vcpus"?`,
			"Did you mean \"gpu\"?",
			"4 errors, 0 warnings",
		}},
		{[]string{"../../pkg/config/testdata/dirs/duplicates"}, 1, []string{
			"Duplicate profile", `Profile "dev" is defined twice`, "duplicates/a.hcl:5",
			"on ../../pkg/config/testdata/dirs/duplicates/b.hcl:13:9",
		}},
		{[]string{"../../pkg/config/testdata/errors/unsatisfiable.hcl"}, 0, []string{
			"Warning: No GPU can give this profile", "valid (1 file: 5 profiles, 1 image, 0 templates), 4 warnings",
		}},
		{[]string{"--strict", "../../pkg/config/testdata/errors/unsatisfiable.hcl"}, 1, []string{"4 warnings"}},
		{[]string{"/nonexistent/gpuvm"}, 2, []string{"no such file or directory"}},
		{[]string{"--bogus"}, 2, []string{"unknown flag"}},
		{[]string{t.TempDir()}, 1, []string{"No configuration files"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := runCLI(t, append([]string{"config", "validate"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out+errOut, w) {
					t.Errorf("output lacks %q:\n%s%s", w, out, errOut)
				}
			}
		})
	}
}

// TestConfigDefaultDir: without arguments, $GPUVM_CONFIG, else /etc/gpuvm.
func TestConfigDefaultDir(t *testing.T) {
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "GPUVM_CONFIG" {
			return "../../configs/lab"
		}
		return ""
	}
	err := run(context.Background(), []string{"config", "validate"}, getenv, &out, &errb)
	if code := exitCode(err, &errb); code != 0 || !strings.Contains(out.String(), "../../configs/lab: valid") {
		t.Errorf("exit %d: %s%s", code, out.String(), errb.String())
	}
	out.Reset()
	err = run(context.Background(), []string{"profile", "list"}, getenv, &out, &errb)
	if code := exitCode(err, &errb); code != 0 || !strings.Contains(out.String(), "ml101-lab") {
		t.Errorf("profile list: exit %d: %s%s", code, out.String(), errb.String())
	}
}

func TestProfileList(t *testing.T) {
	out, errOut, code := runCLI(t, "profile", "list", "--config", "../../configs/startup")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden(t, "profile-list-startup.txt", out)

	js, errOut, code := runCLI(t, "profile", "list", "--config", "../../configs/startup", "--json")
	if code != 0 {
		t.Fatalf("--json exit %d: %s", code, errOut)
	}
	var ps []map[string]any
	if err := json.Unmarshal([]byte(js), &ps); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 6 || ps[0]["name"] != "dev" {
		t.Fatalf("profiles: %v", ps)
	}
	dev := ps[0]
	if dev["memory"] != float64(32<<30) || dev["disk"].(map[string]any)["size"] != float64(200<<30) {
		t.Errorf("sizes are not bytes: memory %v, disk %v", dev["memory"], dev["disk"])
	}
	lease := dev["lease"].(map[string]any)
	if lease["default"] != float64(10*3600) || lease["max"] != float64(12*3600) || lease["idle_stop"] != float64(2*3600) {
		t.Errorf("durations are not seconds: %v", lease)
	}
	gpu := dev["gpu"].(map[string]any)
	if gpu["kind"] != "mig" || gpu["profile"] != "2g.20gb" || gpu["memory"] != float64(20<<30) || gpu["count"] != float64(1) {
		t.Errorf("gpu: %v", gpu)
	}
}

func TestProfileShow(t *testing.T) {
	out, errOut, code := runCLI(t, "profile", "show", "tiny", "--config", "../../configs/dev")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Profile tiny (../../configs/dev/profiles.hcl:", "1 vCPU,", "256MiB memory", "test/guest/cache/vmlinuz",
		"test/guest/cache/initrd.img", `cmdline "console=ttyS0`, "GPU:", "none", "Who:", "everyone"} {
		if !strings.Contains(out, want) {
			t.Errorf("show tiny lacks %q:\n%s", want, out)
		}
	}
	out, _, code = runCLI(t, "profile", "show", "artist", "--config", "../../configs/studio")
	for _, want := range []string{"vGPU L40S-12Q (12GiB each)", "spice, showing the vGPU's display", "TPM 2.0", "groups artists, leads", "stopped after 1h30m idle"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("show artist lacks %q:\n%s", want, out)
		}
	}
	js, _, code := runCLI(t, "profile", "show", "tiny-vgpu", "--config", "../../configs/dev", "--json")
	var p map[string]any
	if err := json.Unmarshal([]byte(js), &p); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, js)
	}
	if g := p["gpu"].(map[string]any); g["type"] != "H100-4C" || g["memory"] != float64(4<<30) {
		t.Errorf("gpu: %v", g)
	}
}

func TestProfileErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"profile", "show", "nope", "--config", "../../configs/dev"}, 1, `no profile "nope" in ../../configs/dev (profiles: desktop, tiny`},
		{[]string{"profile", "show", "--config", "../../configs/dev"}, 2, "takes one profile name"},
		{[]string{"profile", "show", "a", "b"}, 2, "takes one profile name"},
		{[]string{"profile", "list", "extra"}, 2, "takes no arguments"},
		{[]string{"profile", "list", "--config", "../../pkg/config/testdata/dirs/duplicates"}, 1, "has 4 errors (gpuvm config validate"},
		{[]string{"profile", "list", "--config", "/nonexistent/gpuvm"}, 1, "Cannot read the configuration directory"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("exit %d, output %q %q; want exit %d containing %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}
