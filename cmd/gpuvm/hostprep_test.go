package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gpuvm admin host-prep on a simulated server: the dry run changes nothing,
// the run binds the passthrough GPU, and a second run has nothing to do.
func TestAdminHostPrepSimulator(t *testing.T) {
	cfg := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg, "server.hcl"), []byte(`server {
  host {
    simulate = "mixed"
    gpu "0000:c1:00.0" {
      mode = "passthrough"
    }
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	args := []string{"admin", "host-prep", "--config", cfg, "--state-dir", state}
	for i, want := range []string{"Dry run: 6 step(s) to take", "6 step(s) taken, 0 failed", "Dry run: 0 step(s) to take"} {
		a := args
		if i != 1 {
			a = append(a, "--dry-run")
		}
		out, errOut, code := runCLI(t, a...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("run %d: exit %d, want %q in:\n%s%s", i, code, want, out, errOut)
		}
	}
	if _, _, code := runCLI(t, "admin", "host-prep", "--simulate", "mixed", "--sysfs-root", state); code != exitUsage {
		t.Errorf("--simulate with --sysfs-root: exit %d, want %d", code, exitUsage)
	}
}
