package plugins_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/test/testbin"
)

// The backend binaries run on hosts that have only the NVIDIA driver: they
// must not link libvirt, nor reach into gpuvmd's packages. The CLI must build
// without cgo.
func TestBackendDependencies(t *testing.T) {
	for _, pkg := range []string{"./plugins/vgpu", "./plugins/mig", "./plugins/passthrough"} {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Dir = testbin.Root()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			switch {
			case strings.HasPrefix(dep, "libvirt.org/"):
				t.Errorf("%s links %s", pkg, dep)
			case strings.HasPrefix(dep, "github.com/gpuvm/gpuvm/") &&
				!strings.HasPrefix(dep, "github.com/gpuvm/gpuvm/pkg/backend") &&
				!strings.HasPrefix(dep, "github.com/gpuvm/gpuvm/pkg/host") &&
				!strings.HasPrefix(dep, "github.com/gpuvm/gpuvm/pkg/gpu") &&
				!strings.HasPrefix(dep, "github.com/gpuvm/gpuvm/pkg/api") &&
				dep != "github.com/gpuvm/gpuvm/pkg/revert" && // pure: the undo steps of a host change
				!strings.HasPrefix(dep, "github.com/gpuvm/gpuvm/plugins/"):
				t.Errorf("%s imports %s: backends import only pkg/backend and pkg/host", pkg, dep)
			}
		}
	}
	cmd := exec.Command("go", "build", "-o", t.TempDir()+"/gpuvm", "./cmd/gpuvm")
	cmd.Dir = testbin.Root()
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("CGO_ENABLED=0 go build ./cmd/gpuvm: %v\n%s", err, out)
	}
}
