package hypervisor

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// testURI is libvirt's built-in fake hypervisor: real XML parsing and
// lifecycle, no QEMU, shared by every connection of the process.
const testURI = "test:///default"

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// openTest opens the test driver with localUploads: volume uploads write
// files in the pools' directories (see UploadVolume).
func openTest(t testing.TB, opts ...Option) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts = append([]Option{func(c *Conn) { c.localUploads = true }}, opts...)
	c, err := Open(ctx, testURI, testLogger(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// uniqueName is a domain name no other test uses (the test driver's state
// is shared by the whole process).
func uniqueName(t testing.TB, tag string) string {
	n := strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name())
	if len(n) > 30 {
		n = n[len(n)-30:]
	}
	n = strings.Trim(n, "-.")
	return "t-" + n + "-" + tag + "-" + randomUUID()[:6]
}

// GPU kinds a test domain can have.
const (
	kindNone        = "none"
	kindMdev        = "mdev"
	kindVendorVFIO  = "vendor-vfio"
	kindPassthrough = "passthrough"
	kindWindows     = "windows"
)

var gpuKinds = []string{kindNone, kindMdev, kindVendorVFIO, kindPassthrough, kindWindows}

// gpuSpec is a VM of the given kind, with the same XML shapes as the golden
// files of package domain.
func gpuSpec(t testing.TB, kind string) domain.Spec {
	name := uniqueName(t, kind)
	s := domain.Spec{
		Name: name, UUID: randomUUID(), VCPUs: 2, MemoryBytes: 1 << 30,
		DomainType: domain.TypeQEMU,
		Graphics:   &domain.Graphics{Type: domain.GraphicsVNC, Password: "pw123456", WebSocket: -1},
		GuestAgent: true,
		Disks:      []domain.Disk{{Path: "/var/lib/gpuvm/images/" + name + ".qcow2"}},
		Metadata:   domain.Metadata{VMID: "vm-" + name, Owner: "alice <a&b>", Profile: kind},
	}
	switch kind {
	case kindMdev:
		s.Hostdevs = []domain.Hostdev{{Type: domain.HostdevMdev, UUID: randomUUID(), Display: true}}
	case kindVendorVFIO:
		s.Hostdevs = []domain.Hostdev{{Type: domain.HostdevPCI, Addresses: []string{"0000:41:00.4"}}}
	case kindPassthrough:
		s.Hostdevs = []domain.Hostdev{{Type: domain.HostdevPCI, Managed: true, Addresses: []string{"0000:c1:00.0", "0000:c1:00.1"}}}
	case kindWindows:
		s.OSFamily = domain.OSWindows
		s.Firmware = domain.Firmware{Type: domain.FirmwareUEFI, SecureBoot: true, TPM: true}
		s.Hostdevs = []domain.Hostdev{{Type: domain.HostdevMdev, UUID: randomUUID(), Display: true}}
	}
	return s
}
