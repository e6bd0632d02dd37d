package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/test/testbin"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var pluginDir string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(func() int {
		dir, cleanup, err := testbin.Plugins()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer cleanup()
		pluginDir = dir
		return m.Run()
	}())
}

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "GPUVM_PLUGIN_DIR" {
			return pluginDir
		}
		return ""
	}
	err := run(context.Background(), args, getenv, &out, &errb)
	code = exitCode(err, &errb)
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/gpuvm -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update if the change is intended)\n--- got ---\n%s", path, got)
	}
}

func TestHostInventoryGolden(t *testing.T) {
	for _, preset := range []string{"mixed", "a100x4", "l40sx4"} {
		t.Run(preset, func(t *testing.T) {
			out, errOut, code := runCLI(t, "host", "inventory", "--simulate", preset)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.Contains(strings.SplitN(out, "\n", 2)[0], "SIMULATED") {
				t.Errorf("first line does not say simulated: %q", strings.SplitN(out, "\n", 2)[0])
			}
			golden(t, "inventory-"+preset+".txt", out)
			js, errOut, code := runCLI(t, "host", "inventory", "--simulate", preset, "--json")
			if code != 0 {
				t.Fatalf("--json exit %d: %s", code, errOut)
			}
			var hi api.HostInventory
			dec := json.NewDecoder(strings.NewReader(js))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&hi); err != nil {
				t.Fatalf("JSON does not decode into api.HostInventory: %v", err)
			}
			if !hi.Simulated || len(hi.GPUs) == 0 || len(hi.Backends) != 3 {
				t.Errorf("inventory: simulated=%v gpus=%d backends=%v", hi.Simulated, len(hi.GPUs), hi.Backends)
			}
			golden(t, "inventory-"+preset+".json", js)
		})
	}
}

func TestHostInventoryUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"host", "inventory", "--nvml", "maybe"}, 2, "--nvml must be auto or none"},
		{[]string{"host", "inventory", "--simulate", "a40x2", "--sysfs-root", "/tmp"}, 2, "exclude each other"},
		{[]string{"host", "inventory", "--backends", "gpu"}, 2, `unknown backend "gpu"`},
		{[]string{"host", "inventory", "extra"}, 2, "takes no arguments"},
		{[]string{"host", "inventory", "--bogus"}, 2, "unknown flag"},
		{[]string{"host", "inventory", "--simulate", "z80"}, 1, `unknown simulator preset "z80"`},
		{[]string{"host", "inventory", "--plugin-dir", "/nonexistent"}, 1, "no backend"},
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

// A captured sysfs tree is inspected without NVML, and says where it came from.
func TestHostInventoryCapturedTree(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"bus/pci/devices", "kernel/iommu_groups"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := runCLI(t, "host", "inventory", "--sysfs-root", dir, "--nvml", "none")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "sysfs tree at "+dir) || !strings.Contains(out, "No NVIDIA GPU found") {
		t.Errorf("output: %s", out)
	}
}
