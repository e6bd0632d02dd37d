package hypervisor

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

func TestCreateEmptyVolume(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	pool := uniqueName(t, "pool")
	if err := c.EnsurePool(ctx, pool, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeletePool(context.Background(), pool) })
	path, err := c.CreateEmptyVolume(ctx, pool, "sys.qcow2", 64<<30)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(path, "/sys.qcow2") {
		t.Errorf("path %s", path)
	}
	if ok, err := c.VolumeExists(ctx, pool, "sys.qcow2"); !ok || err != nil {
		t.Errorf("exists: %v %v", ok, err)
	}
	for _, tc := range []struct {
		name string
		size uint64
		want string
	}{
		{"sys.qcow2", 1 << 30, "sys.qcow2"}, // taken
		{"none.qcow2", 0, "size 0"},
		{"a/b", 1 << 30, "not a volume name"},
	} {
		if _, err := c.CreateEmptyVolume(ctx, pool, tc.name, tc.size); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CreateEmptyVolume(%q, %d) = %v, want an error naming %q", tc.name, tc.size, err, tc.want)
		}
	}
	if err := c.DeleteVolume(ctx, pool, "sys.qcow2"); err != nil {
		t.Fatal(err)
	}
}

func TestDefineWindowsInstall(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	name := uniqueName(t, "win")
	// kvm, which the test driver accepts: KVM's hidden hypervisor and
	// Hyper-V vendor ID are what is checked.
	w := domain.WindowsInstall{Name: name, UUID: uuid.NewString(), VCPUs: 2, MemoryBytes: 4 << 30, HideHypervisor: true, DomainType: domain.TypeKVM,
		Disk: domain.Disk{Path: "/var/lib/libvirt/images/" + name + ".qcow2"}, Installer: domain.Disk{Path: "/srv/win.iso"},
		VirtIO: domain.Disk{Path: "/srv/virtio-win.iso"}, Media: domain.Disk{Path: "/srv/media.iso"},
		Network: domain.Network{Name: "default"}, Metadata: domain.Metadata{VMID: "windows-install-" + name, Profile: "windows-install"}}
	info, err := c.DefineWindowsInstall(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Undefine(context.Background(), w.UUID) })
	if info.Name != name || info.State != StateShutoff || info.Metadata.VMID != w.Metadata.VMID {
		t.Errorf("info %+v", info)
	}
	x, err := c.XML(ctx, w.UUID, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<hidden state='on'/>", "<vendor_id state='on' value='" + domain.DefaultVendorID + "'/>", "tpm-crb", "/srv/media.iso"} {
		if !strings.Contains(x, want) {
			t.Errorf("defined XML lacks %q", want)
		}
	}
	bad := w
	bad.UUID, bad.Media = uuid.NewString(), domain.Disk{}
	if _, err := c.DefineWindowsInstall(ctx, bad); err == nil || !strings.Contains(err.Error(), "install medium") {
		t.Errorf("no medium: %v", err)
	}
	// No domain type: refused, never an assumed kvm.
	untyped := w
	untyped.UUID, untyped.DomainType = uuid.NewString(), ""
	if _, err := c.DefineWindowsInstall(ctx, untyped); err == nil || !strings.Contains(err.Error(), "domain type: not set") {
		t.Errorf("no domain type: %v", err)
	}
}
