package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/test/guest"
)

// tinyProfiles is configs/dev's tiny-mig with the guest's files where QEMU
// can read them, and a disk overlay on a small raw image (the guest boots
// from its initrd and leaves the disk alone).
const tinyProfiles = `
image "blank" {
  path     = %q
  format   = "raw"
  firmware = "bios"
}

profile "tiny-mig" {
  description = "The tiny guest with the smallest MIG instance of an H100"
  vcpus       = 1
  memory      = "512MiB"
  boot {
    kernel  = %q
    initrd  = %q
    cmdline = %q
  }
  network { type = "none" }
  display { type = "vnc" }
  disk { image = "blank" }
  gpu {
    kind    = "mig"
    profile = "1g.10gb"
  }
}
`

// The tiny guest under a real libvirtd and QEMU, asked for over the API of
// a gpuvmd on a simulated h100x8 host: the MIG device is made on the
// simulated host and left out of the domain (a real QEMU cannot open a
// simulated device), the guest boots to its ready line on the serial
// console, and deleting the VM shuts it down and leaves the simulated host
// and libvirt exactly as before. As root, when qemu:///system answers; not
// with -short or GPUVM_SKIP_SYSTEM_TEST=1 (as test/system).
func TestRealLibvirtTinyGuest(t *testing.T) {
	hv := needSystemLibvirt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tiny := setUpTinyGuest(t, hv)
	files, pool := tiny.files, tiny.pool
	kernel, initrd := tiny.kernel, tiny.initrd

	w := newWorld(t, worldConfig{preset: "h100x8", uri: systemURI, pool: pool, profiles: tiny.profiles})
	w.start()
	hostBefore, lvBefore := w.simHost(), w.libvirtState(hv)

	begin := time.Now()
	vm := w.create("tiny-mig", "tiny")
	running := w.waitState(vm.ID, client.StateRunning, 3*time.Minute)
	toRunning := time.Since(begin)
	if len(running.GPUs) != 1 || running.GPUs[0].Type != "1g.10gb" || running.GPUs[0].Device == "" {
		t.Errorf("the VM holds %+v, want one 1g.10gb MIG device", running.GPUs)
	}
	// The device exists on the simulated host; the domain runs without it.
	w.checkHost(hv, map[string]api.VM{vm.ID: running}, false)
	if allocs := w.checkSlots(); len(allocs) != 1 {
		t.Errorf("%d live allocations, want 1", len(allocs))
	}
	dom := w.domainOf(hv, vm.ID)
	doc, err := hv.XML(ctx, dom.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	var x libvirtxml.Domain
	if err := x.Unmarshal(doc); err != nil {
		t.Fatal(err)
	}
	checkTinyDomain(t, &x, files[kernel], files[initrd], pool)

	// The guest boots: its serial console (a pty QEMU made) shows the
	// ready line.
	booted, err := waitSerial(ctx, &x, guest.ReadyMarker, 3*time.Minute)
	if err != nil {
		t.Errorf("the guest did not boot: %v", err)
	}
	toBooted := time.Since(begin)

	delBegin := time.Now()
	w.deleteVM(vm.ID)
	deleted := time.Since(delBegin)
	w.sameHost(hostBefore, w.simHost())
	w.sameLibvirt(lvBefore, w.libvirtState(hv))
	if _, err := hv.Lookup(ctx, dom.UUID); !hypervisor.IsNotFound(err) {
		t.Errorf("the domain %s is still there: %v", dom.Name, err)
	}
	if allocs := w.checkSlots(); len(allocs) != 0 {
		t.Errorf("%d live allocations once the VM is deleted", len(allocs))
	}
	w.noErrors()
	t.Logf("running %v after the create, booted (%s) %v after it; deleted in %v",
		toRunning.Round(time.Millisecond), strings.TrimSpace(booted), toBooted.Round(time.Millisecond), deleted.Round(time.Millisecond))
}

// tinyGuest is what a gpuvmd needs to boot the tiny guest under a real
// QEMU: its files where QEMU (libvirt-qemu) may read them, a storage pool
// of its own (deleted at the end of the test), and the profiles.
type tinyGuest struct {
	kernel, initrd string            // the cached files
	files          map[string]string // cached file → the copy QEMU reads
	pool           string
	blank          string // a raw image of 1 MiB of zeros, for system disks
	profiles       string
}

func setUpTinyGuest(t *testing.T, hv *hypervisor.Conn) tinyGuest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kernel, initrd, err := guest.Ensure(ctx)
	if err != nil {
		t.Fatalf("tiny guest: %v", err)
	}
	// QEMU runs as libvirt-qemu: it must be able to walk to its files.
	dir, err := os.MkdirTemp("", "gpuvm-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{kernel: filepath.Join(dir, "vmlinuz"), initrd: filepath.Join(dir, "initrd.img")}
	for src, dst := range files {
		if err := copyFile(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	blank := filepath.Join(dir, "blank.raw")
	if err := os.WriteFile(blank, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	pool := "gpuvm-e2e-" + randHex(4)
	if err := hv.EnsurePool(ctx, pool, filepath.Join(dir, "pool")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := hv.DeletePool(ctx, pool); err != nil {
			t.Errorf("delete pool %s: %v", pool, err)
		}
	})
	return tinyGuest{kernel: kernel, initrd: initrd, files: files, pool: pool, blank: blank,
		profiles: fmt.Sprintf(tinyProfiles, blank, files[kernel], files[initrd], guest.Cmdline)}
}

// domainOf is the domain libvirt holds for a VM of this world.
func (w *world) domainOf(hv *hypervisor.Conn, vmID string) hypervisor.Info {
	w.t.Helper()
	for _, d := range w.libvirtState(hv).domains {
		if d.Metadata.VMID == vmID {
			return d
		}
	}
	w.t.Fatalf("libvirt has no domain for VM %s", vmID)
	return hypervisor.Info{}
}

// checkTinyDomain checks what a real libvirtd made of the tiny-mig profile
// on a simulated host: direct kernel boot from the given files, 512 MiB, a
// VNC display, the disk overlay from the pool, no hostdev, and a title that
// says the GPU is simulated and not attached.
func checkTinyDomain(t *testing.T, x *libvirtxml.Domain, kernel, initrd, pool string) {
	t.Helper()
	if x.OS == nil || x.OS.Kernel != kernel || x.OS.Initrd != initrd || x.OS.Cmdline != guest.Cmdline {
		t.Errorf("domain OS %+v; want kernel %s, initrd %s, cmdline %q", x.OS, kernel, initrd, guest.Cmdline)
	}
	if x.Memory == nil || x.Memory.Value<<kibShift(x.Memory.Unit) != 512<<20 {
		t.Errorf("domain memory %+v, want 512 MiB", x.Memory)
	}
	if !strings.Contains(x.Title, "[simulated GPU, not attached]") {
		t.Errorf("domain title %q does not say the GPU is simulated and not attached", x.Title)
	}
	if x.Devices == nil {
		t.Fatal("domain has no devices")
	}
	if len(x.Devices.Hostdevs) != 0 {
		t.Errorf("domain has %d hostdevs; a simulated GPU cannot be attached to a real QEMU", len(x.Devices.Hostdevs))
	}
	if len(x.Devices.Graphics) != 1 || x.Devices.Graphics[0].VNC == nil {
		t.Errorf("domain graphics %+v, want one VNC display", x.Devices.Graphics)
	}
	overlay := false
	for _, d := range x.Devices.Disks {
		if d.Source != nil && d.Source.Volume != nil && d.Source.Volume.Pool == pool {
			overlay = true
		}
	}
	if !overlay {
		t.Errorf("domain disks %+v: no disk from pool %s", x.Devices.Disks, pool)
	}
}

// kibShift is the shift from a libvirt memory unit to bytes.
func kibShift(unit string) uint {
	switch strings.ToLower(unit) {
	case "b", "bytes":
		return 0
	case "m", "mib":
		return 20
	case "g", "gib":
		return 30
	default: // KiB, libvirt's default
		return 10
	}
}

// waitSerial reads the guest's serial console, the pty QEMU made for it
// (the live domain XML names it), until a line holds want.
func waitSerial(ctx context.Context, x *libvirtxml.Domain, want string, within time.Duration) (string, error) {
	var pty string
	for _, s := range x.Devices.Serials {
		if s.Source != nil && s.Source.Pty != nil {
			pty = s.Source.Pty.Path
		}
	}
	if pty == "" {
		return "", fmt.Errorf("the domain has no serial pty: %+v", x.Devices.Serials)
	}
	f, err := os.Open(pty)
	if err != nil {
		return "", fmt.Errorf("open the serial console: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	go func() { <-ctx.Done(); f.Close() }()
	var seen strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		seen.WriteString(line + "\n")
		if strings.Contains(line, want) {
			return line, nil
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.EOF
	}
	out := seen.String()
	if len(out) > 2000 {
		out = "…" + out[len(out)-2000:]
	}
	return "", fmt.Errorf("no %q on the serial console (%v; ctx %v):\n%s", want, err, ctx.Err(), out)
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
