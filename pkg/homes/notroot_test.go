//go:build linux

package homes

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// gpuvmd not running as root (make run on a developer's machine) cannot
// give a home to the person's uid: the home is made anyway, stays its own
// user's, and it says so once. As root, the test runs itself as nobody;
// as another user, it is that case already.
func TestEnsureNotRoot(t *testing.T) {
	if dir := os.Getenv("GPUVM_HOMES_NOT_ROOT_DIR"); dir != "" {
		var log bytes.Buffer
		l := slog.New(slog.NewTextHandler(&log, nil))
		for _, who := range []string{"ann", "ann", "bob"} {
			if _, err := Ensure(context.Background(), filepath.Join(dir, "homes"), who, 20000, 0, l, nil); err != nil {
				t.Fatalf("as uid %d, Ensure(%s): %v", os.Geteuid(), who, err)
			}
		}
		if n := strings.Count(log.String(), "gpuvmd is not root"); n != 1 {
			t.Fatalf("said %d times that homes stay gpuvmd's user's, want once:\n%s", n, log.String())
		}
		return
	}
	// Not t.TempDir(): its parent is root's alone.
	dir, err := os.MkdirTemp("", "gpuvm-homes-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := os.Args[0]
	if os.Geteuid() == 0 {
		// The test binary, where nobody may run it.
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(dir, "homes.test")
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run=^TestEnsureNotRoot$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GPUVM_HOMES_NOT_ROOT_DIR="+dir)
	if os.Geteuid() == 0 {
		const nobody = 65534
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Ensure as a user who is not root: %v\n%s", err, out)
	}
	for _, who := range []string{"ann", "bob"} {
		fi, err := os.Stat(filepath.Join(dir, "homes", who))
		if err != nil || !fi.IsDir() {
			t.Fatalf("%s's home: %v", who, err)
		}
	}
}
