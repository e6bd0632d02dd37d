package system

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/test/guest"
)

// TestNoKVM proves the two hosts gpuvm must not assume KVM on, whatever this
// machine has: a host without /dev/kvm, and one whose /dev/kvm exists but
// cannot run a guest (nested virtualisation turned off, a broken module; here
// /dev/null in its place, which has no KVM ioctls). Each case gets a private
// libvirtd in a mount namespace of its own (see startPrivateLibvirtd): /dev
// is a copy of this host's without kvm (plus the fake one), and libvirt's
// /etc, /run, /var/lib, /var/cache (the capabilities cache) and /var/log
// directories are temporary, so the host's libvirtd and its guests are never
// touched. In each case the accelerator check must choose software emulation
// and say why, libvirt must refuse a kvm domain (the CI failure this test
// was written for), and the tiny guest, defined with the check's type, must
// start (and, without /dev/kvm, boot to its ready marker).
func TestNoKVM(t *testing.T) {
	if testing.Short() {
		t.Skip("system test: boots a guest under QEMU; skipped with -short")
	}
	if os.Getenv("GPUVM_SKIP_SYSTEM_TEST") == "1" {
		t.Skip("system test: GPUVM_SKIP_SYSTEM_TEST=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("system test: needs root (a mount namespace, a private libvirtd)")
	}
	for _, bin := range []string{"libvirtd", "qemu-system-x86_64"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("system test: %s is not installed (run scripts/setup-host.sh)", bin)
		}
	}
	kernel, initrd, err := guest.Ensure(context.Background())
	if err != nil {
		t.Fatalf("tiny guest: %v", err)
	}
	for _, tc := range []struct {
		name string
		dev  string // devNone or devUnusable
	}{
		{"no-dev-kvm", devNone},
		{"dev-kvm-unusable", devUnusable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			testNoKVM(t, tc.dev, kernel, initrd)
			t.Logf("took %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

func testNoKVM(t *testing.T, dev, kernel, initrd string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := startPrivateLibvirtd(t, dev)
	for src, dst := range map[string]string{kernel: p.path("vmlinuz"), initrd: p.path("initrd.img")} {
		if err := copyFile(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := hypervisor.Open(ctx, p.uri(), logger(),
		hypervisor.WithProbeKernel(p.path("vmlinuz")), hypervisor.WithProbeDir(p.dir))
	if err != nil {
		t.Fatalf("%v\n%s", err, p.logTail())
	}
	defer conn.Close()

	a, err := conn.Accel(ctx)
	if err != nil {
		t.Fatalf("accelerator check: %v\n%s", err, p.logTail())
	}
	t.Logf("accelerator: %+v", a)
	if a.Type != domain.TypeQEMU || !a.Emulated || !strings.Contains(a.Reason, "libvirt offers no KVM") || !strings.Contains(a.Reason, "'kvm' is not supported") {
		t.Errorf("accelerator check = %+v, want software emulation because libvirt offers no KVM", a)
	}

	spec := domain.Spec{
		Name: "gpuvm-nokvm-" + randHex(3), UUID: newUUID(), Title: "gpuvm system test: no usable KVM",
		VCPUs: 1, MemoryBytes: 256 << 20, DomainType: domain.TypeKVM,
		Kernel: p.path("vmlinuz"), Initrd: p.path("initrd.img"), Cmdline: guest.Cmdline,
		SerialLog: p.path("serial.log"),
		Metadata:  domain.Metadata{VMID: "vm-nokvm", Owner: "system-test", Profile: "tiny"},
	}
	// What CI saw with an assumed kvm: libvirt refuses the domain.
	if _, err := conn.Define(ctx, spec); err == nil || !strings.Contains(err.Error(), "'kvm'") {
		_ = conn.Undefine(context.Background(), spec.UUID)
		t.Fatalf("defining a kvm domain: %v, want libvirt's refusal (this libvirtd must have no KVM)", err)
	}
	spec.DomainType = a.Type
	if _, err := conn.Define(ctx, spec); err != nil {
		t.Fatalf("%v\n%s", err, p.logTail())
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		_ = conn.Destroy(cctx, spec.UUID)
		if err := conn.Undefine(cctx, spec.UUID); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}()
	if err := conn.Start(ctx, spec.UUID); err != nil {
		t.Fatalf("%v\n%s", err, p.logTail())
	}
	x, err := conn.XML(ctx, spec.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x, "<domain type='qemu'") {
		t.Errorf("running domain is not type qemu:\n%s", tail(x, 500))
	}
	if dev == devUnusable {
		// The boot itself is the same as without /dev/kvm (proven by that
		// case); here libvirt re-probes QEMU at every capabilities lookup,
		// and a boot adds a minute of emulated CPU to make test for nothing.
		return
	}
	bctx, bcancel := context.WithTimeout(ctx, bootTimeout)
	defer bcancel()
	if log, err := waitForLines(bctx, spec.SerialLog, []string{guest.ReadyMarker}, "Kernel panic"); err != nil {
		t.Fatalf("%v\nserial console:\n%s", err, tail(log, 3000))
	}
}

// What /dev/kvm is in a private libvirtd's namespace.
const (
	devNone     = "none"     // absent
	devUnusable = "unusable" // /dev/null in its place: there, but no KVM
)

// With devUnusable libvirt finds a /dev/kvm QEMU's user may open, probes
// QEMU with KVM, which fails, and so probes again at every capabilities
// lookup (KVM "should be usable now"): a few seconds more per define or
// start, as on such a host.

// Environment of the namespace helper (the test binary run again, see
// TestMain): the private root and what /dev/kvm is.
const (
	nsRootEnv = "GPUVM_NOKVM_NAMESPACE_ROOT"
	nsDevEnv  = "GPUVM_NOKVM_NAMESPACE_DEV"
)

// libvirt's directories a private libvirtd gets its own of, under its
// root: /etc/libvirt (no host domain, network or hook), /run/libvirt (its
// sockets), /var/lib/libvirt, /var/cache/libvirt (the capabilities cache,
// probed afresh) and /var/log/libvirt.
var privateDirs = map[string]string{
	"etc": "/etc/libvirt", "run": "/run/libvirt", "lib": "/var/lib/libvirt",
	"cache": "/var/cache/libvirt", "log": "/var/log/libvirt",
}

// daemonName is the private libvirtd's process name (a symlink to
// libvirtd): never the host's "libvirtd", which tests and scripts find and
// stop by name (pkill -x libvirtd).
const daemonName = "libvirtd-nokvm"

type privateLibvirtd struct {
	dir string // its root, mode 0711: QEMU (libvirt-qemu) reaches its files
	cmd *exec.Cmd
}

func (p *privateLibvirtd) path(name string) string { return filepath.Join(p.dir, name) }

// uri reaches the private libvirtd through its socket, which the bind
// mount of <root>/run onto /run/libvirt puts here too.
func (p *privateLibvirtd) uri() string {
	return "qemu:///system?socket=" + p.path("run/libvirt-sock")
}

func (p *privateLibvirtd) logTail() string {
	b, _ := os.ReadFile(p.path("log/libvirtd.log"))
	out, _ := os.ReadFile(p.path("daemon.out"))
	return "private libvirtd's log:\n" + tail(string(b), 3000) + "\nits output:\n" + tail(string(out), 1000)
}

// startPrivateLibvirtd starts a libvirtd in a mount namespace of its own
// with /dev/kvm as dev says, and waits until its socket answers. A cleanup
// kills it and every process of its namespace (QEMU), which takes the
// namespace and its mounts with them, and removes its root.
func startPrivateLibvirtd(t *testing.T, dev string) *privateLibvirtd {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpuvm-nokvm-")
	if err != nil {
		t.Fatal(err)
	}
	p := &privateLibvirtd{dir: dir}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("stopping the private libvirtd: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	for d := range privateDirs {
		if err := os.Mkdir(p.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		// Root only, and no polkit: the test is root.
		"etc/libvirtd.conf": "unix_sock_rw_perms = \"0700\"\nunix_sock_ro_perms = \"0700\"\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n" +
			"log_outputs = \"3:file:/var/log/libvirt/libvirtd.log\"\n",
		// QEMU's output to files (no virtlogd in here), no AppArmor or
		// SELinux profiles written for it, and no namespace of its own: it
		// stays in this one, where the cleanup finds it.
		"etc/qemu.conf": "stdio_handler = \"file\"\nsecurity_driver = \"none\"\nnamespaces = [ ]\n",
	}
	for name, data := range files {
		if err := os.WriteFile(p.path(name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := exec.LookPath("libvirtd")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, p.path(daemonName)); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(p.path("daemon.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(self)
	p.cmd.Env = append(os.Environ(), nsRootEnv+"="+dir, nsDevEnv+"="+dev)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// A mount namespace of its own (Go makes its mounts private, so none
	// reaches the host), and killed with this process should it die first.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting the private libvirtd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	p.waitSocket(t, exited)
	return p
}

// waitSocket waits until the private libvirtd answers on its socket.
func (p *privateLibvirtd) waitSocket(t *testing.T, exited <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(p.path("run/libvirt-sock")); err == nil {
			return
		}
		select {
		case err := <-exited:
			p.cmd = nil
			t.Fatalf("the private libvirtd exited: %v\n%s", err, p.logTail())
		case <-ctx.Done():
			t.Fatalf("the private libvirtd made no socket in a minute\n%s", p.logTail())
		case <-tick.C:
		}
	}
}

// stop kills the private libvirtd's namespace: every process in it (QEMU
// left running by a failed test) and the daemon, and waits until they are
// gone, which frees the namespace and its mounts.
func (p *privateLibvirtd) stop() error {
	if p.cmd == nil || p.cmd.Process == nil {
		return nil
	}
	pid := p.cmd.Process.Pid
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return nil // it is gone already
	}
	members := func() []int {
		var pids []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n)); err == nil && l == ns {
				pids = append(pids, n)
			}
		}
		return pids
	}
	for _, n := range members() {
		if n != pid {
			_ = syscall.Kill(n, syscall.SIGKILL) // a QEMU a failed test left
		}
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := members()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, n := range left {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			return fmt.Errorf("processes %v of its namespace outlive SIGKILL", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// namespaceHelper runs in the private libvirtd's new mount namespace (the
// test binary started again by startPrivateLibvirtd): it makes /dev a copy
// of the host's with /dev/kvm as asked, mounts the private directories over
// libvirt's, and becomes libvirtd.
func namespaceHelper(root, dev string) error {
	if err := privateDev(root, dev); err != nil {
		return err
	}
	for d, target := range privateDirs {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(filepath.Join(root, d), target, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", d, target, err)
		}
	}
	bin := filepath.Join(root, daemonName)
	return syscall.Exec(bin, []string{bin, "-f", "/etc/libvirt/libvirtd.conf", "-p", "/run/libvirt/libvirtd.pid"}, os.Environ())
}

// privateDev mounts a tmpfs on /dev holding bind mounts of every entry of
// the host's /dev (symlinks copied) but kvm; with devUnusable, /dev/null is
// bound on a /dev/kvm.
func privateDev(root, dev string) error {
	old, fresh := filepath.Join(root, "olddev"), filepath.Join(root, "newdev")
	for _, d := range []string{old, fresh} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount("/dev", old, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind /dev: %w", err)
	}
	if err := syscall.Mount("tmpfs", fresh, "tmpfs", syscall.MS_NOSUID, "mode=0755"); err != nil {
		return fmt.Errorf("tmpfs for /dev: %w", err)
	}
	entries, err := os.ReadDir(old)
	if err != nil {
		return err
	}
	bind := func(src, dst string, dir bool) error {
		var err error
		if dir {
			err = os.Mkdir(dst, 0o755)
		} else {
			err = os.WriteFile(dst, nil, 0o600)
		}
		if err != nil {
			return err
		}
		if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", src, err)
		}
		return nil
	}
	for _, e := range entries {
		src, dst := filepath.Join(old, e.Name()), filepath.Join(fresh, e.Name())
		switch {
		case e.Name() == "kvm":
		case e.Name() == "ptmx" && e.Type()&os.ModeCharDevice != 0:
			// A node of its own: the kernel finds the devpts instance of
			// a /dev/ptmx in the "pts" beside it, which a bind-mounted
			// file has not (QEMU's serial pty fails with ENOENT).
			if err := mknodLike(src, dst); err != nil {
				return err
			}
		case e.Type()&os.ModeSymlink != 0:
			l, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(l, dst); err != nil {
				return err
			}
		default:
			if err := bind(src, dst, e.IsDir()); err != nil {
				return err
			}
		}
	}
	if dev == devUnusable {
		if err := bind(filepath.Join(old, "null"), filepath.Join(fresh, "kvm"), false); err != nil {
			return err
		}
	}
	if err := syscall.Mount(fresh, "/dev", "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind the new /dev: %w", err)
	}
	if err := syscall.Unmount(old, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the old /dev: %w", err)
	}
	if _, err := os.Stat("/dev/kvm"); (dev == devNone) != errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("/dev/kvm in the namespace: %v, want %s", err, dev)
	}
	return nil
}

// mknodLike makes dst a device node like src: type, mode, owner, number.
func mknodLike(src, dst string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(src, &st); err != nil {
		return fmt.Errorf("stat %s: %w", src, err)
	}
	if err := syscall.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
		return fmt.Errorf("mknod %s: %w", dst, err)
	}
	if err := os.Chown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	return os.Chmod(dst, os.FileMode(st.Mode&0o777))
}
