package system

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/test/guest"
)

// These tests drive a real libvirtd and QEMU. They run as root when
// qemu:///system answers, and skip (saying why) otherwise, with -short, or
// with GPUVM_SKIP_SYSTEM_TEST=1.
const (
	systemURI    = "qemu:///system"
	bootTimeout  = 120 * time.Second
	shutdownWait = 60 * time.Second
)

// env is what the tests share: one connection, the tiny guest, one pool in a
// temporary directory that QEMU (user libvirt-qemu) can reach.
type env struct {
	conn           *hypervisor.Conn
	dir            string // root of everything on disk, mode 0711
	pool, poolDir  string
	kernel, initrd string // copies QEMU may read
	accel          hypervisor.Accel
}

var (
	envOnce sync.Once
	shared  *env
	envSkip string
	envErr  error
)

func setup(t testing.TB) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("system test: boots a guest under QEMU; skipped with -short")
	}
	if os.Getenv("GPUVM_SKIP_SYSTEM_TEST") == "1" {
		t.Skip("system test: GPUVM_SKIP_SYSTEM_TEST=1")
	}
	envOnce.Do(func() { shared, envSkip, envErr = newEnv() })
	if envSkip != "" {
		t.Skip("system test: " + envSkip)
	}
	if envErr != nil {
		t.Fatal(envErr)
	}
	return shared
}

func logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

func newEnv() (*env, string, error) {
	if os.Geteuid() != 0 {
		return nil, "needs root (qemu:///system, files QEMU can read)", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Does libvirtd answer?
	probe, err := hypervisor.Open(ctx, systemURI, logger(), hypervisor.WithCallTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Sprintf("%s does not answer (run scripts/setup-host.sh): %v", systemURI, err), nil
	}
	_ = probe.Close()

	kernel, initrd, err := guest.Ensure(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("tiny guest: %w", err)
	}
	dir, err := os.MkdirTemp("", "gpuvm-system-")
	if err != nil {
		return nil, "", err
	}
	// QEMU runs as libvirt-qemu: it must be able to walk to its files.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, "", err
	}
	e := &env{dir: dir, pool: "gpuvm-systest-" + randHex(4), poolDir: filepath.Join(dir, "pool")}
	e.kernel, e.initrd = filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd.img")
	for src, dst := range map[string]string{kernel: e.kernel, initrd: e.initrd} {
		if err := copyFile(src, dst); err != nil {
			return nil, "", err
		}
	}
	conn, err := hypervisor.Open(ctx, systemURI, logger(),
		hypervisor.WithProbeKernel(e.kernel), hypervisor.WithProbeDir(dir),
		// The restart tests stop libvirtd for a few seconds only.
		hypervisor.WithReconnectBackoff(100*time.Millisecond, time.Second))
	if err != nil {
		return nil, "", err
	}
	e.conn = conn
	if e.accel, err = conn.Accel(ctx); err != nil {
		return nil, "", err
	}
	if err := conn.EnsurePool(ctx, e.pool, e.poolDir); err != nil {
		return nil, "", err
	}
	return e, "", nil
}

// TestMain removes the pool and the directory once every test has run.
// Started by TestNoKVM in a new mount namespace, the binary is its helper
// that becomes a private libvirtd instead.
func TestMain(m *testing.M) {
	if root := os.Getenv(nsRootEnv); root != "" {
		err := namespaceHelper(root, os.Getenv(nsDevEnv))
		fmt.Fprintln(os.Stderr, "private libvirtd's namespace:", err)
		os.Exit(1)
	}
	code := m.Run()
	if shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := shared.conn.DeletePool(ctx, shared.pool); err != nil {
			fmt.Fprintln(os.Stderr, "system test cleanup:", err)
		}
		cancel()
		_ = shared.conn.Close()
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// request is a tiny-guest VM: direct kernel boot, serial console logged to
// a file, VNC with a password and a websocket, a seed, no network. Its
// domain type is the connection's accelerator check's, never an assumed kvm
// (Define needs one; a host may lack KVM or be unable to use it).
func (e *env) request(tag string) (hypervisor.VMRequest, string) {
	name := "gpuvm-sys-" + tag + "-" + randHex(3)
	uuid := newUUID()
	serial := filepath.Join(e.dir, name+".serial.log")
	spec := domain.Spec{
		Name: name, UUID: uuid, Title: "gpuvm system test",
		VCPUs: 1, MemoryBytes: 256 << 20, DomainType: e.accel.Type,
		Kernel: e.kernel, Initrd: e.initrd, Cmdline: guest.Cmdline,
		Graphics:  &domain.Graphics{Type: domain.GraphicsVNC, Password: randHex(4), WebSocket: -1},
		SerialLog: serial,
		Metadata:  domain.Metadata{VMID: "vm-" + tag, Owner: "system-test", Profile: "tiny"},
	}
	return hypervisor.VMRequest{
		Spec: spec, Pool: e.pool,
		Seed: &cloudinit.Config{InstanceID: uuid, Hostname: "host-" + randHex(3), User: "tester", VMID: "vm-" + tag, Owner: "system-test"},
	}, serial
}

// waitForLines waits until the serial log holds every line in want, or any
// line starting with one of failOn.
func waitForLines(ctx context.Context, path string, want []string, failOn ...string) (string, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		b, _ := os.ReadFile(path)
		for _, f := range failOn {
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, f) {
					return string(b), fmt.Errorf("serial console showed %q", strings.TrimSpace(line))
				}
			}
		}
		missing := []string{}
		for _, w := range want {
			if !hasLine(b, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			return string(b), nil
		}
		select {
		case <-ctx.Done():
			return string(b), fmt.Errorf("serial console never showed %q: %w", missing, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitForCount waits until the serial log holds line at least n times.
func waitForCount(ctx context.Context, path, line string, n int) (string, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		b, _ := os.ReadFile(path)
		count := countLines(b, line)
		if count >= n {
			return string(b), nil
		}
		select {
		case <-ctx.Done():
			return string(b), fmt.Errorf("serial console showed %q %d times, want %d: %w", line, count, n, ctx.Err())
		case <-tick.C:
		}
	}
}

func countLines(log []byte, line string) int {
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		if strings.TrimRight(sc.Text(), "\r") == line {
			n++
		}
	}
	return n
}

func hasLine(log []byte, line string) bool {
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		if strings.TrimRight(sc.Text(), "\r") == line {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// assertGone proves a VM left nothing: no domain, no volume, no seed file.
func (e *env) assertGone(t *testing.T, req hypervisor.VMRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.conn.Lookup(ctx, req.Spec.UUID); !hypervisor.IsNotFound(err) {
		t.Errorf("domain %s still there: %v", req.Spec.Name, err)
	}
	if _, err := e.conn.LookupByName(ctx, req.Spec.Name); !hypervisor.IsNotFound(err) {
		t.Errorf("a domain called %s is still there: %v", req.Spec.Name, err)
	}
	for _, v := range []string{hypervisor.OverlayName(req.Spec.Name), hypervisor.SeedName(req.Spec.Name)} {
		if ok, err := e.conn.VolumeExists(ctx, e.pool, v); ok || err != nil {
			t.Errorf("volume %s still there: %v", v, err)
		}
		if _, err := os.Stat(filepath.Join(e.poolDir, v)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("file %s still there: %v", v, err)
		}
	}
}

// TestBootTinyGuest is the whole way of a VM on a real host: seed, define,
// start, boot to the marker, read the seed, VNC console, ACPI shutdown,
// delete, and nothing left.
func TestBootTinyGuest(t *testing.T) {
	e := setup(t)
	t.Logf("accelerator: %s (emulated=%v, probed=%v) %s", e.accel.Type, e.accel.Emulated, e.accel.Probed, e.accel.Reason)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	req, serial := e.request("boot")
	req.Spec.GuestAgent = true // a channel, and no agent in the guest
	// A system disk as profiles with an image get: a qcow2 overlay on a
	// base image, grown to 64 MiB (the tiny guest boots from its initrd and
	// leaves the disk alone).
	base := filepath.Join(e.dir, req.Spec.Name+"-base.raw")
	if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(base)
	req.BaseImage, req.BaseFormat, req.DiskBytes = base, domain.FormatRaw, 64<<20
	events, err := e.conn.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	info, err := e.conn.CreateVM(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Since(start)
	defer func() {
		if err := e.conn.DeleteVM(context.Background(), req.Spec.UUID, 5*time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}()
	if info.State != hypervisor.StateRunning {
		t.Fatalf("state after create: %s (%s)", info.State, info.Reason)
	}
	x, err := e.conn.XML(ctx, req.Spec.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x, "type='"+string(e.accel.Type)+"'") {
		t.Errorf("domain does not use the accelerator %s", e.accel.Type)
	}

	bctx, bcancel := context.WithTimeout(ctx, bootTimeout)
	log, err := waitForLines(bctx, serial, []string{guest.ReadyMarker, guest.HostnamePrefix + req.Seed.Hostname, guest.InstancePrefix + req.Seed.InstanceID},
		guest.NoSeedMarker, "GPUVM-SEED-ERROR", "Kernel panic")
	bcancel()
	boot := time.Since(start) - created
	if err != nil {
		t.Fatalf("%v\nserial console:\n%s", err, tail(log, 3000))
	}
	t.Logf("create (seed, define, start) took %v; boot to %s took %v", created.Round(time.Millisecond), guest.ReadyMarker, boot.Round(time.Millisecond))
	t.Logf("BenchmarkSystemBootToMarker/%s \t1\t%d ns/op", e.accel.Type, boot.Nanoseconds())

	// The console: VNC with the VM's password, and QEMU's websocket.
	con, err := e.conn.Console(ctx, req.Spec.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if con.Protocol != domain.GraphicsVNC || con.Host != "127.0.0.1" || con.Port < 5900 || con.Password != req.Spec.Graphics.Password || con.WebSocketPort <= 0 {
		t.Errorf("console %+v", con)
	}
	addr := net.JoinHostPort(con.Host, strconv.Itoa(con.Port))
	fi, err := VNCFrame(ctx, addr, con.Password)
	if err != nil {
		t.Fatalf("VNC %s: %v", addr, err)
	}
	if fi.Rects < 1 || fi.PixelBytes == 0 || fi.Width < 320 {
		t.Errorf("VNC frame %+v", fi)
	}
	t.Logf("VNC %s: %s, %dx%d at %d bpp, %q, first update %d rectangle(s), %d bytes", addr, fi.Version, fi.Width, fi.Height, fi.BitsPerPixel, fi.Name, fi.Rects, fi.PixelBytes)
	if _, err := VNCFrame(ctx, addr, "wrong"); !errors.Is(err, ErrAuthFailed) {
		t.Errorf("VNC with a wrong password: %v", err)
	}
	if err := websocketUpgrade(ctx, net.JoinHostPort(con.Host, strconv.Itoa(con.WebSocketPort))); err != nil {
		t.Errorf("VNC websocket: %v", err)
	}

	// No network and no guest agent: no addresses, and no error.
	if addrs, err := e.conn.Addresses(ctx, req.Spec.UUID); len(addrs) != 0 || err != nil {
		t.Errorf("addresses of a guest without network or agent: %v, %v", addrs, err)
	}

	// ACPI reboot: the guest powers off on the button and libvirt starts
	// it again, so it boots a second time.
	rebootStart := time.Now()
	if err := e.conn.Reboot(ctx, req.Spec.UUID); err != nil {
		t.Fatal(err)
	}
	bctx, bcancel = context.WithTimeout(ctx, bootTimeout)
	log, err = waitForCount(bctx, serial, guest.ReadyMarker, 2)
	bcancel()
	if err != nil {
		t.Fatalf("reboot: %v\nserial console:\n%s", err, tail(log, 3000))
	}
	if !hasLine([]byte(log), guest.PowerButton) {
		t.Errorf("reboot did not go through the ACPI power button")
	}
	if st, err := e.conn.State(ctx, req.Spec.UUID); err != nil || st != hypervisor.StateRunning {
		t.Errorf("after reboot: %v, %v", st, err)
	}
	t.Logf("ACPI reboot to %s took %v", guest.ReadyMarker, time.Since(rebootStart).Round(time.Millisecond))

	// ACPI shutdown: the guest powers off by itself.
	graceful, err := e.conn.Shutdown(ctx, req.Spec.UUID, shutdownWait)
	if err != nil {
		t.Fatal(err)
	}
	log, _ = waitForLines(ctx, serial, nil)
	if !graceful || countLines([]byte(log), guest.PowerButton) < 2 { // the reboot's, then the shutdown's
		t.Errorf("ACPI shutdown: graceful=%v; serial console:\n%s", graceful, tail(log, 1500))
	}

	if err := e.conn.DeleteVM(ctx, req.Spec.UUID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	e.assertGone(t, req)
	names, err := e.conn.Volumes(ctx, e.pool)
	if err != nil || len(names) != 0 {
		t.Errorf("pool holds %v, %v", names, err)
	}

	// The lifecycle events arrived, in order.
	want := []hypervisor.EventType{hypervisor.EventDefined, hypervisor.EventStarted, hypervisor.EventShutdown, hypervisor.EventStopped, hypervisor.EventUndefined}
	var got []hypervisor.EventType
	deadline := time.After(10 * time.Second)
collect:
	for {
		select {
		case ev := <-events:
			if ev.UUID == req.Spec.UUID {
				got = append(got, ev.Type)
				if ev.Type == hypervisor.EventUndefined {
					break collect
				}
			}
		case <-deadline:
			break collect
		}
	}
	if !containsInOrder(got, want) {
		t.Errorf("events %v, want %v in that order", got, want)
	}
}

func containsInOrder(got, want []hypervisor.EventType) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// websocketUpgrade checks QEMU's VNC websocket answers a websocket handshake.
func websocketUpgrade(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\nOrigin: http://%s\r\n\r\n",
		addr, base64.StdEncoding.EncodeToString(key), addr)
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("no answer to the upgrade: %w", err)
	}
	if !strings.Contains(status, " 101 ") {
		return fmt.Errorf("upgrade answered %q", strings.TrimSpace(status))
	}
	return nil
}

// TestFaults: bad input and failures on the real daemon give errors that
// name the VM and the cause, and leave no domain, volume or seed.
func TestFaults(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("missing image", func(t *testing.T) {
		req, _ := e.request("noimg")
		req.BaseImage = "/nonexistent/gpuvm-base.qcow2"
		_, err := e.conn.CreateVM(ctx, req)
		if err == nil || !strings.Contains(err.Error(), req.Spec.Name) || !strings.Contains(err.Error(), req.BaseImage) {
			t.Fatalf("err = %v", err)
		}
		t.Log(err)
		e.assertGone(t, req)
	})

	t.Run("name libvirt refuses", func(t *testing.T) {
		first, _ := e.request("taken")
		if _, err := e.conn.Define(ctx, first.Spec); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = e.conn.Undefine(context.Background(), first.Spec.UUID) }()
		second, _ := e.request("taken")
		second.Spec.Name = first.Spec.Name
		_, err := e.conn.Define(ctx, second.Spec)
		var ve *hypervisor.VMError
		if !errors.As(err, &ve) || ve.VM != first.Spec.Name || !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("err = %v", err)
		}
		t.Log(err)
		_, err = e.conn.CreateVM(ctx, second)
		if err == nil || !strings.Contains(err.Error(), "taken by another domain") {
			t.Fatalf("CreateVM with a taken name: %v", err)
		}
		if _, err := e.conn.Lookup(ctx, first.Spec.UUID); err != nil {
			t.Errorf("the first domain suffered: %v", err)
		}
		if _, err := e.conn.Lookup(ctx, second.Spec.UUID); !hypervisor.IsNotFound(err) {
			t.Errorf("the second domain exists: %v", err)
		}
		for _, v := range []string{hypervisor.SeedName(second.Spec.Name), hypervisor.OverlayName(second.Spec.Name)} {
			if ok, _ := e.conn.VolumeExists(ctx, e.pool, v); ok {
				t.Errorf("volume %s made for a refused VM", v)
			}
		}
	})

	// Domains that libvirt defines but cannot start: GPU devices this host
	// does not have.
	mdev := newUUID()
	starts := []struct {
		name    string
		hostdev domain.Hostdev
		named   string // how the error names the device
	}{
		{"passthrough of a missing PCI device", domain.Hostdev{Type: domain.HostdevPCI, Managed: true, Addresses: []string{"0000:7f:1f.7"}}, "PCI 0000:7f:1f.7"},
		{"vendor VFIO VF that is missing", domain.Hostdev{Type: domain.HostdevPCI, Managed: false, Addresses: []string{"0000:7e:00.4"}}, "PCI 0000:7e:00.4"},
		{"missing mdev", domain.Hostdev{Type: domain.HostdevMdev, UUID: mdev, Display: true}, "mdev " + mdev},
	}
	for _, tt := range starts {
		t.Run(tt.name, func(t *testing.T) {
			req, serial := e.request("nostart")
			base := filepath.Join(e.dir, req.Spec.Name+"-base.raw")
			if err := os.WriteFile(base, make([]byte, 1<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(base)
			req.BaseImage = base
			req.Spec.Hostdevs = []domain.Hostdev{tt.hostdev}
			_, err := e.conn.CreateVM(ctx, req)
			var ve *hypervisor.VMError
			if !errors.As(err, &ve) || ve.VM != req.Spec.Name || ve.Op != "start" || !strings.Contains(err.Error(), "rolled back") {
				t.Fatalf("err = %v; want a start error naming %s and telling of the rollback", err, req.Spec.Name)
			}
			// The cause: libvirt's words about the device, and which device.
			msg := strings.ToLower(err.Error())
			if !strings.Contains(err.Error(), "host devices: "+tt.named) || !(strings.Contains(msg, "pci") || strings.Contains(msg, "vfio") || strings.Contains(msg, "device")) {
				t.Errorf("err = %v; want the cause, naming %s", err, tt.named)
			}
			t.Log(err)
			e.assertGone(t, req)
			_ = os.Remove(serial)
		})
	}
}

// BenchmarkBootToMarker boots the tiny guest b.N times (create, boot to the
// ready marker, delete); run it with -benchtime 1x.
func BenchmarkBootToMarker(b *testing.B) {
	e := setup(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		req, serial := e.request("bench")
		req.Seed = nil
		b.StartTimer()
		if _, err := e.conn.CreateVM(ctx, req); err != nil {
			b.Fatal(err)
		}
		bctx, cancel := context.WithTimeout(ctx, bootTimeout)
		_, err := waitForLines(bctx, serial, []string{guest.ReadyMarker}, "Kernel panic")
		cancel()
		b.StopTimer()
		if derr := e.conn.DeleteVM(ctx, req.Spec.UUID, time.Second); derr != nil {
			b.Error(derr)
		}
		_ = os.Remove(serial)
		if err != nil {
			b.Fatal(err)
		}
	}
}
