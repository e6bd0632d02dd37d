package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

// gpuvm home ls shows ann her home; gpuvm home rm needs --yes, refuses
// another person's home to her, and deletes her own.
func TestHomeLsAndRm(t *testing.T) {
	root := filepath.Join(t.TempDir(), "homes")
	if err := os.MkdirAll(filepath.Join(root, "ann", "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "admin"), 0o700); err != nil {
		t.Fatal(err)
	}
	env := clienttest.New(t, clienttest.Options{Profiles: clienttest.Profiles + `
server {
  storage {
    homes {
      root = "` + root + `"
    }
  }
}
`})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	if _, err := env.Store.RecordHomeHost(context.Background(), "ann", "gpu-01"); err != nil {
		t.Fatal(err)
	}
	out := ann.must("home", "ls")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !slices.Equal(strings.Fields(lines[0])[:3], []string{"USER", "EXISTS", "HOST"}) ||
		!slices.Equal(strings.Fields(lines[1])[:3], []string{"ann", "yes", "gpu-01"}) {
		t.Errorf("ann's ls:\n%s", out)
	}
	// admin's home has no host recorded.
	out = admin.must("home", "ls")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !slices.Equal(strings.Fields(lines[1])[:3], []string{"admin", "yes", "-"}) ||
		!slices.Equal(strings.Fields(lines[2])[:3], []string{"ann", "yes", "gpu-01"}) {
		t.Errorf("admin's ls:\n%s", out)
	}
	if out := admin.must("home", "ls", "-q"); out != "admin\nann\n" {
		t.Errorf("admin's ls -q: %q", out)
	}
	if _, errOut, code := ann.run("home", "rm", "ann"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Errorf("without --yes: exit %d %q", code, errOut)
	}
	if _, errOut, code := ann.run("home", "rm", "admin", "--yes"); code == 0 || !strings.Contains(errOut, "no home of admin") {
		t.Errorf("another's home: exit %d %q", code, errOut)
	}
	if out := ann.must("home", "rm", "ann", "--yes"); !strings.Contains(out, "deleted") {
		t.Errorf("rm: %q", out)
	}
	if _, err := os.Stat(filepath.Join(root, "ann")); !os.IsNotExist(err) {
		t.Fatalf("ann's home is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "admin")); err != nil {
		t.Fatalf("admin's home went: %v", err)
	}
}
