package hostmount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	ns := func(self, init string) func(string) (string, error) {
		return func(p string) (string, error) {
			switch p {
			case "/proc/self/ns/mnt":
				return self, nil
			case "/proc/1/ns/mnt":
				if init == "" {
					return "", os.ErrPermission
				}
				return init, nil
			}
			return "", os.ErrNotExist
		}
	}
	yes := func(string) (os.FileInfo, error) { return nil, nil }
	no := func(string) (os.FileInfo, error) { return nil, os.ErrNotExist }
	found := func(string) (string, error) { return "/usr/bin/systemd-run", nil }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	for _, tc := range []struct {
		name       string
		p          probe
		viaSystemd bool
		why        string
	}{
		{"the host's namespace", probe{ns("mnt:[4026531841]", "mnt:[4026531841]"), yes, found}, false, "shares the host's mount namespace"},
		{"a unit's sandbox", probe{ns("mnt:[4026532210]", "mnt:[4026531841]"), yes, found}, true, "through systemd-run"},
		{"no systemd", probe{ns("mnt:[4026532210]", "mnt:[4026531841]"), no, found}, false, "PID 1 is not systemd"},
		{"no systemd-run", probe{ns("mnt:[4026532210]", "mnt:[4026531841]"), yes, missing}, false, "systemd-run is missing"},
		{"PID 1 hidden", probe{ns("mnt:[4026532210]", ""), yes, found}, false, "cannot be compared"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := detect(tc.p)
			unseen := strings.Contains(tc.name, "no systemd")
			if w.ViaSystemd != tc.viaSystemd || w.Unseen != unseen || !strings.Contains(w.Why, tc.why) {
				t.Errorf("%+v, want via systemd %v and %q", w, tc.viaSystemd, tc.why)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	args := []string{"-t", "ext4", "-o", "loop,nosuid,nodev", "/srv/homes/.images/ann.ext4", "/srv/homes/ann"}
	if got := (Where{}).Command("mount", args...); !reflect.DeepEqual(got, append([]string{"mount"}, args...)) {
		t.Errorf("directly: %q", got)
	}
	got := Where{ViaSystemd: true}.Command("mount", args...)
	want := append([]string{"systemd-run", "--quiet", "--wait", "--pipe", "--collect", "--service-type=exec", "--setenv=LC_ALL=C",
		"--description=gpuvm: mount -t ext4 -o loop,nosuid,nodev /srv/homes/.images/ann.ext4 /srv/homes/ann", "--", "mount"}, args...)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("through systemd:\n%q\nwant\n%q", got, want)
	}
}

// On this machine: whatever Detect says, Run runs the program (the tests
// run in the host's namespace, or in a container's whose PID 1 is not
// systemd): mount's --version answers.
func TestRun(t *testing.T) {
	if Detect().ViaSystemd {
		t.Skip("this test runs under a systemd unit's sandbox: it would start a transient unit")
	}
	if err := Run(t.Context(), "mount", "--version"); err != nil {
		t.Fatal(err)
	}
	err := Run(t.Context(), "mount", "--no-such-option")
	if err == nil || !strings.HasPrefix(err.Error(), "mount: exit status") {
		t.Errorf("a refused mount: %v", err)
	}
}

// Mounted tells a mount point from a directory that is not one.
func TestMounted(t *testing.T) {
	for dir, want := range map[string]bool{"/proc": true, "/proc/self": false} {
		if got, err := Mounted(dir); err != nil || got != want {
			t.Errorf("Mounted(%s) = %v, %v; want %v", dir, got, err, want)
		}
	}
}

// Unmount, for real (as root): a busy filesystem is ErrBusy and stays;
// closed, it goes; nothing mounted is no error.
func TestUnmount(t *testing.T) {
	if os.Geteuid() != 0 || Detect().ViaSystemd {
		t.Skip("mounts need root (and, under a systemd unit, would start transient units)")
	}
	dir := t.TempDir()
	ctx := t.Context()
	if err := Run(ctx, "mount", "-t", "tmpfs", "-o", "size=1m", "gpuvm-test", dir); err != nil {
		t.Skipf("no tmpfs mount here: %v", err)
	}
	t.Cleanup(func() { _ = Unmount(context.Background(), dir, true) })
	f, err := os.Create(filepath.Join(dir, "open"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Unmount(ctx, dir, false); !errors.Is(err, ErrBusy) {
		t.Errorf("a busy filesystem: %v, want ErrBusy", err)
	}
	if m, err := Mounted(dir); err != nil || !m {
		t.Errorf("after a refused unmount, mounted %v %v", m, err)
	}
	f.Close()
	if err := Unmount(ctx, dir, false); err != nil {
		t.Fatal(err)
	}
	if m, err := Mounted(dir); err != nil || m {
		t.Errorf("after the unmount, mounted %v %v", m, err)
	}
	if err := Unmount(ctx, dir, false); err != nil {
		t.Errorf("nothing mounted: %v", err)
	}
}
