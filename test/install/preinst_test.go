// Package install holds the install test (run.sh, make test-install) and
// the unit test of the package's preinst, which needs no root.
package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// preinst writes packaging/scripts/preinst as build.sh does, knowing schema
// versions up to known.
func preinst(t *testing.T, known string) string {
	t.Helper()
	b, err := os.ReadFile("../../packaging/scripts/preinst")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer("@SCHEMA_VERSION@", known, "@VERSION@", "1.2.0").Replace(string(b))
	path := filepath.Join(t.TempDir(), "preinst")
	if err := os.WriteFile(path, []byte(s), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// The preinst refuses to install over a database a newer gpuvm migrated,
// naming both schema versions, and lets everything else through.
func TestPreinstRefusesDowngradeOverNewerSchema(t *testing.T) {
	script := preinst(t, "8")
	tests := []struct {
		name   string
		file   *string // the recorded schema version; nil: no file
		args   []string
		fail   bool
		output []string
	}{
		{"first install, no database", nil, []string{"install"}, false, nil},
		{"upgrade over an older schema", ptr("7\n"), []string{"upgrade", "1.1.0"}, false, nil},
		{"same schema", ptr("8\n"), []string{"upgrade", "1.2.1"}, false, nil},
		{"downgrade over a newer schema", ptr("9\n"), []string{"upgrade", "1.3.0"}, true,
			[]string{"refusing to install gpuvm 1.2.0", "schema version 9", "(gpuvm 1.3.0 is installed)", "up to 8", "gpuvmd restore"}},
		{"reinstall after remove over a newer schema", ptr("12\n"), []string{"install"}, true,
			[]string{"schema version 12", "up to 8"}},
		{"a file that says nothing", ptr("\n"), []string{"upgrade", "1.3.0"}, false, nil},
		{"abort-upgrade is not refused", ptr("9\n"), []string{"abort-upgrade", "1.3.0"}, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != nil {
				dir := filepath.Join(root, "var/lib/gpuvm")
				if err := os.MkdirAll(dir, 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "schema-version"), []byte(*tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("sh", append([]string{script}, tc.args...)...)
			cmd.Env = append(os.Environ(), "DPKG_ROOT="+root)
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.fail {
				t.Fatalf("preinst %v: err %v, want failure %v; output:\n%s", tc.args, err, tc.fail, out)
			}
			for _, want := range tc.output {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if !tc.fail && len(out) > 0 {
				t.Errorf("output on success: %s", out)
			}
		})
	}
}

func ptr(s string) *string { return &s }
