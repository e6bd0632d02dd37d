package guest

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
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

	entries, err := readInitramfs(i)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{ // path: required permission bits
		"init":                   0o755,
		"bin/busybox":            0o755,
		"etc/inittab":            0o644,
		"etc/modules.load":       0o644,
		"etc/acpi/PWRF/00000080": 0o755,
		"lib/modules/isofs.ko":   0o644,
		"lib/modules/sr_mod.ko":  0o644,
		"lib/modules/button.ko":  0o644,
		"lib/modules/evdev.ko":   0o644,
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
	for _, link := range []string{"sbin/init", "sbin/acpid", "sbin/poweroff", "bin/sh", "sbin/findfs"} {
		e, ok := entries[link]
		if !ok || e.mode&0o170000 != 0o120000 {
			t.Errorf("initramfs lacks the busybox link %s", link)
		}
	}
}

type cpioEntry struct {
	mode, uid, gid uint32
}

// readInitramfs lists a gzip-compressed newc cpio archive.
func readInitramfs(path string) (map[string]cpioEntry, error) {
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
		out[n] = cpioEntry{mode: mode, uid: uid, gid: gid}
		if err := pad(); err != nil {
			return nil, err
		}
		if err := skip(int64(size)); err != nil {
			return nil, err
		}
		if err := pad(); err != nil {
			return nil, err
		}
	}
}
