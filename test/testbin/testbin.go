// Package testbin builds gpuvm's binaries for tests that run them as
// processes, as gpuvmd and the CLI do.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

// Root is the repository root.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build builds the package pkg ("./cmd/gpuvm") into dir/name.
func Build(dir, name, pkg string) error {
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
	cmd.Dir = Root()
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	return nil
}

// Plugins returns a directory holding the three backend binaries: the one
// named by $GPUVM_PLUGIN_DIR, or a new temporary one they are built into
// (cleanup removes it).
func Plugins() (dir string, cleanup func(), err error) {
	if d := os.Getenv("GPUVM_PLUGIN_DIR"); d != "" {
		return d, func() {}, nil
	}
	dir, err = os.MkdirTemp("", "gpuvm-plugins-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	for _, name := range backend.Names {
		if err := Build(dir, backend.BinaryPrefix+name, "./plugins/"+name); err != nil {
			cleanup()
			return "", nil, err
		}
	}
	return dir, cleanup, nil
}
