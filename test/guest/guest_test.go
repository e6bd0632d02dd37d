package guest

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
)

func TestParseResult(t *testing.T) {
	tests := []struct {
		name, out, kernel, initrd string
		wantErr                   bool
	}{
		{"plain", "kernel=/c/vmlinuz\ninitrd=/c/initrd.img\n", "/c/vmlinuz", "/c/initrd.img", false},
		{"spaces in path", "kernel=/my cache/vmlinuz\ninitrd=/my cache/initrd.img\n", "/my cache/vmlinuz", "/my cache/initrd.img", false},
		{"noise before", "Get:1 http://deb...\nkernel=/k\ninitrd=/i", "/k", "/i", false},
		{"missing initrd", "kernel=/k\n", "", "", true},
		{"empty", "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, i, err := parseResult(tt.out)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if k != tt.kernel || i != tt.initrd {
				t.Errorf("got %q %q, want %q %q", k, i, tt.kernel, tt.initrd)
			}
		})
	}
}

// TestEnsure builds the guest (or finds it cached) and checks the initramfs
// holds what /init needs. The first run downloads two Debian packages.
func TestEnsure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tiny guest from Debian packages; skipped with -short")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		if _, _, ok := cached(); !ok {
			t.Skip("apt-get is missing and no guest is cached: the guest is built from Debian packages")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k, i, err := Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s, initrd %s", k, i)

	// A second call is answered from memory.
	start := time.Now()
	k2, i2, err := Ensure(ctx)
	if err != nil || k2 != k || i2 != i {
		t.Fatalf("second Ensure = %q, %q, %v", k2, i2, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("second Ensure took %v", d)
	}

	entries, err := readInitramfs(i, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{ // path: required permission bits
		"init":                                      0o755,
		"bin/busybox":                               0o755,
		"etc/inittab":                               0o644,
		"etc/modules.load":                          0o644,
		"etc/acpi/PWRF/00000080":                    0o755,
		"lib/modules/isofs.ko":                      0o644,
		"lib/modules/sr_mod.ko":                     0o644,
		"lib/modules/button.ko":                     0o644,
		"lib/modules/evdev.ko":                      0o644,
		"lib/modules/virtio_net.ko":                 0o644,
		"sbin/gpuvm-net":                            0o755,
		"etc/udhcpc/default.script":                 0o755,
		"etc/gpuvm/users.awk":                       0o644,
		"etc/gpuvm/hostkey.awk":                     0o644,
		"etc/gpuvm/vendorpart.awk":                  0o644,
		"bin/mountpoint":                            0o755,
		"usr/bin/dropbearconvert":                   0o755,
		"etc/passwd":                                0o644,
		"etc/shells":                                0o644,
		"usr/sbin/dropbear":                         0o755,
		"usr/bin/dropbearkey":                       0o755,
		"lib/x86_64-linux-gnu/libc.so.6":            0o755,
		"usr/lib/x86_64-linux-gnu/libtomcrypt.so.1": 0o755,
	}
	for p, perm := range want {
		e, ok := entries[p]
		if !ok {
			t.Errorf("initramfs lacks %s", p)
			continue
		}
		if e.mode&0o777&perm != perm {
			t.Errorf("%s: mode %o, want at least %o", p, e.mode&0o777, perm)
		}
		if e.uid != 0 || e.gid != 0 {
			t.Errorf("%s: owned by %d:%d, want 0:0", p, e.uid, e.gid)
		}
	}
	if e, ok := entries["lib64/ld-linux-x86-64.so.2"]; !ok || e.mode&0o170000 != 0o120000 {
		t.Errorf("initramfs lacks the dynamic loader's link lib64/ld-linux-x86-64.so.2")
	}
	for _, link := range []string{"sbin/init", "sbin/acpid", "sbin/poweroff", "bin/sh", "sbin/findfs", "sbin/udhcpc", "sbin/ip", "usr/bin/awk"} {
		e, ok := entries[link]
		if !ok || e.mode&0o170000 != 0o120000 {
			t.Errorf("initramfs lacks the busybox link %s", link)
		}
	}
}

type cpioEntry struct {
	mode, uid, gid uint32
	data           []byte // only for the files asked for
}

// readInitramfs lists a gzip-compressed newc cpio archive, with the contents
// of the files named in keep.
func readInitramfs(path string, keep map[string]bool) (map[string]cpioEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := bufio.NewReader(zr)
	out := map[string]cpioEntry{}
	var off int64
	skip := func(n int64) error {
		_, err := io.CopyN(io.Discard, r, n)
		off += n
		return err
	}
	pad := func() error { return skip((4 - off%4) % 4) }
	for {
		hdr := make([]byte, 110)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return nil, fmt.Errorf("%s: header at %d: %w", path, off, err)
		}
		off += 110
		if string(hdr[:6]) != "070701" {
			return nil, fmt.Errorf("%s: bad magic %q at %d", path, hdr[:6], off-110)
		}
		field := func(i int) uint32 {
			v, _ := strconv.ParseUint(string(hdr[6+8*i:14+8*i]), 16, 32)
			return uint32(v)
		}
		mode, uid, gid, size, nameSize := field(1), field(2), field(3), field(6), field(11)
		name := make([]byte, nameSize)
		if _, err := io.ReadFull(r, name); err != nil {
			return nil, err
		}
		off += int64(nameSize)
		n := strings.TrimPrefix(strings.TrimRight(string(name), "\x00"), "./")
		if n == "TRAILER!!!" {
			return out, nil
		}
		e := cpioEntry{mode: mode, uid: uid, gid: gid}
		if err := pad(); err != nil {
			return nil, err
		}
		if keep[n] {
			e.data = make([]byte, size)
			if _, err := io.ReadFull(r, e.data); err != nil {
				return nil, err
			}
			off += int64(size)
		} else if err := skip(int64(size)); err != nil {
			return nil, err
		}
		out[n] = e
		if err := pad(); err != nil {
			return nil, err
		}
	}
}

// TestUsersFromUserData runs the guest's own user-data reader
// (rootfs/etc/gpuvm/users.awk) with the guest's busybox awk, taken from the
// built initramfs, on the user-data gpuvm's templates write: plain and
// quoted scalars, keys indented under their key or level with it, other
// fields between, a uid (plain, quoted, before the name; not a number: no
// uid), CRLF line ends, an item without a name (its keys go nowhere), and a
// top-level ssh_authorized_keys list (the first user's).
func TestUsersFromUserData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bb := guestBusybox(ctx, t)
	dir := t.TempDir()
	userData := `#cloud-config
hostname: box-1
users:
  - name: ann
    uid: 20001
    ssh_authorized_keys:
      - ssh-ed25519 AAAAC3Nza ann@laptop
      - ssh-rsa BBBB other # a comment
  - name: "bob"
    gecos: "gpuvm user bob"
    groups: [adm, sudo]
    ssh_authorized_keys:
    - "ssh-ed25519 CCCC quoted \"x\""
    lock_passwd: true
  - uid: "20002"
    name: cy
  - name: dee
    uid: ${uid}
  - default
  - gecos: nameless
    ssh_authorized_keys:
      - ssh-ed25519 DDDD
ssh_authorized_keys:
  - 'ssh-ed25519 TOP it''s'
disable_root: true
`
	ud := filepath.Join(dir, "user-data")
	if err := os.WriteFile(ud, []byte(strings.ReplaceAll(userData, "\n", "\r\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bb, "awk", "-f", filepath.Join(Dir(), "rootfs/etc/gpuvm/users.awk"), ud).CombinedOutput()
	if err != nil {
		t.Fatalf("users.awk: %v\n%s", err, out)
	}
	want := `user ann 20001
key ann ssh-ed25519 AAAAC3Nza ann@laptop
key ann ssh-rsa BBBB other
user bob
key bob ssh-ed25519 CCCC quoted "x"
user cy 20002
user dee
key ann ssh-ed25519 TOP it's
`
	if string(out) != want {
		t.Errorf("users.awk read:\n%s\nwant:\n%s", out, want)
	}
}

// guestBusybox is the busybox of the built guest's initramfs, in a
// temporary directory; it skips the test where the guest cannot be built.
func guestBusybox(ctx context.Context, t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the tiny guest from Debian packages; skipped with -short")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		if _, _, ok := cached(); !ok {
			t.Skip("apt-get is missing and no guest is cached: the guest is built from Debian packages")
		}
	}
	_, i, err := Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := readInitramfs(i, map[string]bool{"bin/busybox": true})
	if err != nil {
		t.Fatal(err)
	}
	bb := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(bb, entries["bin/busybox"].data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bb
}

// TestHostKeyFromVendorData runs the guest's own host key reader
// (rootfs/etc/gpuvm/hostkey.awk) with the guest's busybox awk on the
// vendor-data gpuvm writes: the host key's cloud-config alone, and beside
// the licensing script in a MIME multipart message, with LF and CRLF line
// ends. It reads back the private key gpuvm made, whole; a vendor-data
// without one gives nothing. Where dropbearconvert is installed, the key
// converts to dropbear's format, as the guest's sbin/gpuvm-net does.
func TestHostKeyFromVendorData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bb := guestBusybox(ctx, t)
	k, err := cloudinit.NewHostKey("gpuvm-test")
	if err != nil {
		t.Fatal(err)
	}
	base := cloudinit.Config{InstanceID: "i-1", Hostname: "box-1", User: "ann", VMID: "v1", Owner: "ann"}
	dir := t.TempDir()
	read := func(name, vendorData string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(vendorData), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(ctx, bb, "awk", "-f", filepath.Join(Dir(), "rootfs/etc/gpuvm/hostkey.awk"), path).CombinedOutput()
		if err != nil {
			t.Fatalf("hostkey.awk: %v\n%s", err, out)
		}
		return string(out)
	}
	for _, vendor := range []string{"", "#!/bin/sh\necho licensing\n"} {
		c := base
		c.HostKey, c.VendorData = k, vendor
		files, err := cloudinit.Render(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		vd := string(files[cloudinit.VendorDataFile])
		for _, crlf := range []bool{false, true} {
			in := vd
			if crlf {
				in = strings.ReplaceAll(vd, "\n", "\r\n")
			}
			if got := read("vendor-data", in); got != k.Private {
				t.Errorf("with vendor data %q (CRLF %v): hostkey.awk read\n%s\nwant\n%s", vendor, crlf, got, k.Private)
			}
		}
	}
	if got := read("none", "#!/bin/sh\necho ssh_keys:\n"); got != "" {
		t.Errorf("a vendor-data without a host key: hostkey.awk read %q", got)
	}
	conv, err := exec.LookPath("dropbearconvert")
	if err != nil {
		t.Log("no dropbearconvert here: the conversion is not tried")
		return
	}
	priv := filepath.Join(dir, "key")
	if err := os.WriteFile(priv, []byte(k.Private), 0o600); err != nil { // what hostkey.awk read, as checked above
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, conv, "openssh", "dropbear", priv, priv+".db").CombinedOutput(); err != nil {
		t.Fatalf("dropbearconvert: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(filepath.Dir(conv), "dropbearkey"), "-y", "-f", priv+".db").CombinedOutput()
	if err != nil || !strings.Contains(string(out), strings.Join(strings.Fields(k.Public)[:2], " ")) {
		t.Errorf("dropbearkey -y: %v\n%s\nwant the public key %s", err, out, k.Public)
	}
}

// TestHomeScriptFromVendorData runs the guest's own vendor-data reader
// (rootfs/etc/gpuvm/vendorpart.awk, as /init calls it) with the guest's
// busybox awk on the vendor-data gpuvm writes for a VM with a home: the
// home's script alone, beside the host key, and beside the host key and
// the licensing script (MIME multipart), with LF and CRLF line ends. It
// reads back the script of the home alone, byte for byte; a vendor-data
// without a home gives nothing.
func TestHomeScriptFromVendorData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bb := guestBusybox(ctx, t)
	k, err := cloudinit.NewHostKey("gpuvm-test")
	if err != nil {
		t.Fatal(err)
	}
	home := &cloudinit.Home{Tag: "gpuvm-home", Mount: "/gpuvm/home", UID: 20001}
	render := func(key *cloudinit.HostKey, h *cloudinit.Home, vendor string) string {
		t.Helper()
		c := cloudinit.Config{InstanceID: "i-1", Hostname: "box-1", User: "ann", VMID: "v1", Owner: "ann",
			HostKey: key, Home: h, VendorData: vendor}
		files, err := cloudinit.Render(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(files[cloudinit.VendorDataFile])
	}
	dir := t.TempDir()
	read := func(vendorData string) string {
		t.Helper()
		path := filepath.Join(dir, "vendor-data")
		if err := os.WriteFile(path, []byte(vendorData), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(ctx, bb, "awk", "-v", "want=gpuvm-home.sh", "-v", "single=# gpuvm: the owner's home",
			"-f", filepath.Join(Dir(), "rootfs/etc/gpuvm/vendorpart.awk"), path).CombinedOutput()
		if err != nil {
			t.Fatalf("vendorpart.awk: %v\n%s", err, out)
		}
		return string(out)
	}
	script := render(nil, home, "") // the home's script is the whole vendor-data
	if !strings.HasPrefix(script, "#!/bin/sh\n# gpuvm: the owner's home") || !strings.Contains(script, "mount /gpuvm/home") {
		t.Fatalf("the vendor-data of a home alone is not the script /init looks for:\n%s", script)
	}
	for name, vd := range map[string]string{
		"home alone":                script,
		"host key and home":         render(k, home, ""),
		"host key, home, licensing": render(k, home, "#!/bin/sh\necho licensing\n"),
		"host key, home, cloud-cfg": render(k, home, "#cloud-config\nruncmd: [true]\n"),
	} {
		for _, crlf := range []bool{false, true} {
			in := vd
			if crlf {
				in = strings.ReplaceAll(vd, "\n", "\r\n")
			}
			if got := read(in); got != script {
				t.Errorf("%s (CRLF %v): vendorpart.awk read\n%q\nwant\n%q", name, crlf, got, script)
			}
		}
	}
	for name, vd := range map[string]string{
		"host key alone":      render(k, nil, ""),
		"host key, licensing": render(k, nil, "#!/bin/sh\necho licensing\n"),
		"licensing alone":     render(nil, nil, "#!/bin/sh\necho licensing\n"),
	} {
		if got := read(vd); got != "" {
			t.Errorf("%s (no home): vendorpart.awk read %q, want nothing", name, got)
		}
	}
}
