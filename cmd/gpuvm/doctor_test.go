package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/doctor"
)

// gpuvm admin doctor's exit status: 2 for wrong usage, 1 when it finds a
// problem (an empty sysfs tree has no IOMMU groups), with --json parseable.
func TestAdminDoctorExitStatus(t *testing.T) {
	if _, _, code := runCLI(t, "admin", "doctor", "--simulate", "a40x2", "--sysfs-root", t.TempDir()); code != exitUsage {
		t.Errorf("--simulate with --sysfs-root: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := runCLI(t, "admin", "doctor", "extra"); code != exitUsage {
		t.Errorf("an argument: exit %d, want %d", code, exitUsage)
	}
	out, errOut, code := runCLI(t, "admin", "doctor", "--config", "../../pkg/doctor/testdata/config", "--sysfs-root", t.TempDir(), "--json")
	if code != exitFailure {
		t.Fatalf("empty tree: exit %d, want %d\n%s%s", code, exitFailure, out, errOut)
	}
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	found := false
	for _, f := range r.Findings {
		if f.Check == "iommu" && f.Severity == doctor.Error && strings.Contains(f.Fix, "intel_iommu=on") {
			found = true
		}
	}
	if !found {
		t.Errorf("no IOMMU error with its fix in %+v", r.Findings)
	}
}
