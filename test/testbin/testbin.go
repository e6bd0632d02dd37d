// Package testbin builds gpuvm's binaries for tests that run them as
// processes, as gpuvmd and the CLI do.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

// Root is the repository root: found from this source file's path, or, in
// a binary built with -trimpath (make test's: its compiles are then the same
// in every checkout, and cached), where that path is the module's rather
// than the disk's, from the working directory up to this module's go.mod
// (go test runs a package's tests in the package's directory).
func Root() string {
	_, file, _, ok := runtime.Caller(0)
	if ok && filepath.IsAbs(file) {
		return filepath.Join(filepath.Dir(file), "..", "..")
	}
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module "+module+"\n") {
			return dir
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}

// module is this repository's Go module.
const module = "github.com/gpuvm/gpuvm"

// EnvPrebuilt names a directory of binaries built once for a whole test
// run (make test's test-bin: gpuvmd, gpuvm, oidcop and plugins/): tests
// that run a binary take it from there rather than each building their own.
const EnvPrebuilt = "GPUVM_TEST_BIN"

// Prebuilt is the path of the binary name (a path under $GPUVM_TEST_BIN,
// "gpuvmd" or "plugins") when $GPUVM_TEST_BIN holds it; "" otherwise.
func Prebuilt(name string) string {
	dir := os.Getenv(EnvPrebuilt)
	if dir == "" {
		return ""
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
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
// named by $GPUVM_PLUGIN_DIR, one of this process's own linked to the
// prebuilt ones, or a new temporary one they are built into (cleanup
// removes the last two).
func Plugins() (dir string, cleanup func(), err error) {
	if d := os.Getenv("GPUVM_PLUGIN_DIR"); d != "" {
		return d, func() {}, nil
	}
	if d := Prebuilt("plugins"); d != "" {
		return linked(d)
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

// linked returns a directory of this process's own holding the backend
// binaries of the prebuilt directory src, hard-linked (copied where links
// cannot be made): a test that finds its backend's process by its path
// (pgrep -f) must not find another test package's, run from the same
// binaries at the same time.
func linked(src string) (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp(filepath.Dir(src), "plugins-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	for _, name := range backend.Names {
		from, to := filepath.Join(src, backend.BinaryPrefix+name), filepath.Join(dir, backend.BinaryPrefix+name)
		if err := os.Link(from, to); err != nil {
			err = copyFile(from, to)
			if err != nil {
				cleanup()
				return "", nil, fmt.Errorf("the prebuilt backend %s: %w", name, err)
			}
		}
	}
	return dir, cleanup, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
