package hypervisor

import (
	"slices"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// A q35 domain is defined with empty PCIe root ports for data disks; its
// data disks in the definition follow ReplaceDataDisks (refused while it
// runs); a running domain's are read from libvirt, and the test driver's
// refusal to plug a device is said in libvirt's words, naming the VM.
func TestDataDisksInTheDomain(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	spec := gpuSpec(t, kindNone)
	if _, err := c.Define(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.ForceOff(ctx, spec.UUID)
		_ = c.Undefine(ctx, spec.UUID)
	})
	definition := func() *libvirtxml.Domain {
		t.Helper()
		x, err := c.XML(ctx, spec.UUID, false)
		if err != nil {
			t.Fatal(err)
		}
		var d libvirtxml.Domain
		if err := d.Unmarshal(x); err != nil {
			t.Fatal(err)
		}
		return &d
	}
	ports := 0
	for _, ctl := range definition().Devices.Controllers {
		if ctl.Model == "pcie-root-port" {
			ports++
		}
	}
	if ports < domain.HotplugPorts {
		t.Errorf("defined with %d PCIe root ports, want at least %d", ports, domain.HotplugPorts)
	}
	disk := domain.Disk{Pool: "default-pool", Volume: domain.DataDiskPrefix + "inst-vol1.qcow2", Bus: domain.BusVirtIO, Serial: "vol1"}
	if err := c.ReplaceDataDisks(ctx, spec.UUID, []domain.Disk{disk}); err != nil {
		t.Fatal(err)
	}
	if got := domain.DataDiskVolumes(definition()); !slices.Equal(got, []string{disk.Volume}) {
		t.Fatalf("after ReplaceDataDisks: %v", got)
	}
	if err := c.ReplaceDataDisks(ctx, spec.UUID, nil); err != nil {
		t.Fatal(err)
	}
	if got := domain.DataDiskVolumes(definition()); len(got) != 0 {
		t.Fatalf("after ReplaceDataDisks(nil): %v", got)
	}
	if vols, running, err := c.LiveDataDisks(ctx, spec.UUID); err != nil || running || len(vols) != 0 {
		t.Errorf("LiveDataDisks of a shut-off domain: %v %v %v", vols, running, err)
	}
	if err := c.Start(ctx, spec.UUID); err != nil {
		t.Fatal(err)
	}
	if err := c.ReplaceDataDisks(ctx, spec.UUID, []domain.Disk{disk}); err == nil || !strings.Contains(err.Error(), "shut off") {
		t.Errorf("ReplaceDataDisks of a running domain: %v", err)
	}
	if vols, running, err := c.LiveDataDisks(ctx, spec.UUID); err != nil || !running || len(vols) != 0 {
		t.Errorf("LiveDataDisks of the running domain: %v %v %v", vols, running, err)
	}
	err := c.PlugDataDisk(ctx, spec.UUID, disk)
	if err == nil || !strings.Contains(err.Error(), spec.Name) || !strings.Contains(err.Error(), "virDomainAttachDeviceFlags") {
		t.Errorf("a plug on the test driver: %v; want libvirt's refusal naming the VM", err)
	}
	if err := c.UnplugDataDisk(ctx, spec.UUID, disk.Volume, 0); err != nil {
		t.Errorf("unplug of a disk the domain does not have: %v", err)
	}
	if err := c.PlugDataDisk(ctx, randomUUID(), disk); !IsNotFound(err) {
		t.Errorf("plug into a missing domain: %v", err)
	}
}
