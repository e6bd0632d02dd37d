package kit

import (
	"path/filepath"
	"testing"
)

// A type ID one backend learned (the mig backend, when it made a MIG-backed
// vGPU: the VF listed the type only then) is known by name to the other
// backends of the host, which see the VF hold it; one no backend learned
// stays unknown.
func TestTypeNamesFromAnotherBackend(t *testing.T) {
	dir := t.TempDir()
	mig := openTypeNames(filepath.Join(dir, "mig"+typeNamesSuffix))
	vgpu := openTypeNames(filepath.Join(dir, "vgpu"+typeNamesSuffix))
	if _, ok := vgpu.Name(2316); ok {
		t.Fatal("a name no backend learned is known")
	}
	mig.Learn(map[int]string{2316: "H100-3-40C"})
	if n, ok := vgpu.Name(2316); !ok || n != "H100-3-40C" {
		t.Errorf("vgpu backend reads type 2316 as %q, %v; want H100-3-40C", n, ok)
	}
	// Learned, it is the vgpu backend's too, after a restart.
	if n, ok := openTypeNames(filepath.Join(dir, "vgpu"+typeNamesSuffix)).m[2316]; !ok || n != "H100-3-40C" {
		t.Errorf("after a restart the vgpu backend reads %q, %v", n, ok)
	}
	if _, ok := vgpu.Name(1); ok {
		t.Error("an unknown ID has a name")
	}
}
