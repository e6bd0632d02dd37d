// Package hostmount makes and removes mounts in the host's mount
// namespace, where libvirtd, and the virtiofs daemons it starts for the
// VMs, see them.
//
// gpuvmd under its systemd unit (packaging/systemd/gpuvmd.service) runs in
// a mount namespace of its own: ProtectSystem= and ReadWritePaths= make
// the service's namespace a slave of the host's, so that the host's mounts
// reach gpuvmd but gpuvmd's do not reach the host. A share's read-only
// view or an image home mounted there by gpuvmd itself would be gpuvmd's
// alone, and a VM's virtiofs daemon would serve the empty directory under
// it. There (this process's mount namespace is not PID 1's, and PID 1 is
// systemd), each mount and unmount is run by systemd-run, as a transient
// service of PID 1, in the host's namespace, and reaches gpuvmd's by
// propagation. Elsewhere (make run, the tests, a gpuvmd started by hand
// as root) the mounts are made directly.
package hostmount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpuvm/gpuvm/pkg/quota"
)

// Where says how mounts are made here.
type Where struct {
	// ViaSystemd: through systemd-run, into the host's namespace.
	ViaSystemd bool
	// Unseen: made directly in a mount namespace of gpuvmd's own, which
	// libvirtd and the VMs' virtiofs daemons may not see (gpuvmd logs it).
	Unseen bool
	// Why says why, for the log.
	Why string
}

// probe is what Detect looks at (tests give fakes).
type probe struct {
	readlink func(string) (string, error)
	stat     func(string) (os.FileInfo, error)
	lookPath func(string) (string, error)
}

var realProbe = probe{readlink: os.Readlink, stat: os.Stat, lookPath: exec.LookPath}

// Detect says how mounts are made by this process (worked out once).
var Detect = sync.OnceValue(func() Where { return detect(realProbe) })

func detect(p probe) Where {
	self, err1 := p.readlink("/proc/self/ns/mnt")
	init, err2 := p.readlink("/proc/1/ns/mnt")
	switch {
	case err1 != nil || err2 != nil:
		return Where{Why: fmt.Sprintf("mounts are made directly: the mount namespaces cannot be compared (%v)", errors.Join(err1, err2))}
	case self == init:
		return Where{Why: "mounts are made directly: gpuvmd shares the host's mount namespace"}
	}
	if _, err := p.stat("/run/systemd/system"); err != nil {
		return Where{Unseen: true, Why: "mounts are made directly, in gpuvmd's own mount namespace (PID 1 is not systemd): " +
			"libvirtd and the VMs' virtiofs daemons may not see them"}
	}
	if _, err := p.lookPath("systemd-run"); err != nil {
		return Where{Unseen: true, Why: "mounts are made directly, in gpuvmd's own mount namespace (systemd-run is missing): " +
			"libvirtd and the VMs' virtiofs daemons do not see them"}
	}
	return Where{ViaSystemd: true, Why: "gpuvmd runs in a mount namespace of its own (its systemd unit's sandbox): " +
		"mounts are made in the host's through systemd-run"}
}

// Command is the command line that runs name with args where mounts are
// made: as it is, or through systemd-run, which waits for it, passes its
// output and exit status on, and removes its transient unit after.
func (w Where) Command(name string, args ...string) []string {
	cmd := append([]string{name}, args...)
	if !w.ViaSystemd {
		return cmd
	}
	return append([]string{"systemd-run", "--quiet", "--wait", "--pipe", "--collect", "--service-type=exec", "--setenv=LC_ALL=C",
		"--description=gpuvm: " + name + " " + strings.Join(args, " "), "--"}, cmd...)
}

// Run runs the mount program name (mount, umount) with args where mounts
// are made, in the C locale; its error names the program and carries what
// it said.
func Run(ctx context.Context, name string, args ...string) error {
	argv := Detect().Command(name, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if s := strings.TrimSpace(string(out)); s != "" {
			return fmt.Errorf("%s: %w: %s", name, err, s)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// ErrBusy: a filesystem could not be unmounted, something (a VM's virtiofs
// daemon, a shell on the host) having a file open in it.
var ErrBusy = errors.New("the filesystem is in use: something has a file open in it")

// Unmount unmounts what is mounted at dir, where mounts are made
// (umount(8); lazy: detached now, gone once nothing uses it). Nothing
// mounted there is no error; a busy filesystem is ErrBusy.
func Unmount(ctx context.Context, dir string, lazy bool) error {
	if mounted, err := Mounted(dir); err != nil || !mounted {
		return err
	}
	args := []string{dir}
	if lazy {
		args = []string{"--lazy", dir}
	}
	err := Run(ctx, "umount", args...)
	if err != nil && strings.Contains(err.Error(), "target is busy") {
		return fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return err
}

// Mounted says whether something is mounted at dir, as this process sees
// it (/proc/self/mountinfo; a mount made in the host's namespace is seen
// here once it has propagated).
func Mounted(dir string) (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("read the mounts: %w", err)
	}
	mounts, err := quota.ParseMountinfo(string(b))
	if err != nil {
		return false, err
	}
	dir = filepath.Clean(dir)
	for _, m := range mounts {
		if m.MountPoint == dir {
			return true, nil
		}
	}
	return false, nil
}
