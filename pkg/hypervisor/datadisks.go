package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// Data disks (docs/volumes.md) are empty qcow2 volumes in the VMs' pool,
// made and grown here; a VM's domain names them as virtio disks.

// CreateDataDisk creates an empty qcow2 volume of size bytes called name in
// pool and returns its path. A volume of that name already there is an
// error: the caller looks first (VolumeExists).
func (c *Conn) CreateDataDisk(ctx context.Context, pool, name string, size uint64) (string, error) {
	return c.createEmptyQcow2(ctx, pool, name, size, "create data disk")
}

// ResizeVolume grows a volume to size bytes (never shrinks: libvirt refuses
// a smaller capacity without the shrink flag, which is not given).
func (c *Conn) ResizeVolume(ctx context.Context, pool, name string, size uint64) error {
	v, err := c.volume(ctx, pool, name)
	if err != nil {
		return err
	}
	defer v.Free()
	if err := c.do(ctx, "resize volume", func() error { return v.Resize(size, libvirt.StorageVolResizeFlags(0)) }); err != nil {
		return storageError(pool, name, "resize", err)
	}
	c.log.Info("volume resized", "pool", pool, "volume", name, "bytes", size)
	return nil
}

// VolumeCapacity is the size a volume gives its guest, in bytes.
func (c *Conn) VolumeCapacity(ctx context.Context, pool, name string) (uint64, error) {
	v, err := c.volume(ctx, pool, name)
	if err != nil {
		return 0, err
	}
	defer v.Free()
	info, err := call(ctx, c, "volume info", 0, v.GetInfo, nil)
	if err != nil {
		return 0, storageError(pool, name, "info", err)
	}
	return info.Capacity, nil
}

// ReplaceDataDisks gives the shut-off gpuvm domain with uuid the data disks
// disks (domain.ReplaceDataDisks) in place of those it is defined with,
// keeping everything else: a disk attached to or detached from a stopped VM
// is there, or gone, at its next start; a q35 domain without empty PCIe
// root ports (defined before it kept them) gets them. Nothing is redefined when it
// already has exactly these; a running domain is refused, as are disks
// that are no data disks (a *domain.SpecError). A missing domain is
// IsNotFound.
func (c *Conn) ReplaceDataDisks(ctx context.Context, uuid string, disks []domain.Disk) error {
	return c.redefine(ctx, uuid, "replace data disks", "data disks", func(d *libvirtxml.Domain) (bool, error) {
		changed, err := domain.ReplaceDataDisks(d, disks)
		if err != nil {
			return false, err
		}
		// A domain defined before it kept empty ports gets them here.
		ported, err := domain.EnsureHotplugPorts(d)
		return changed || ported, err
	}, func(name string) {
		c.log.Info("domain redefined with its data disks", "vm", name, "uuid", uuid, "disks", len(disks))
	})
}

// liveDomain is the running domain's definition as libvirt describes it
// now; nil, with no error, when it does not run.
func (c *Conn) liveDomain(ctx context.Context, h *handle, op string) (*libvirtxml.Domain, error) {
	active, err := call(ctx, c, "domain active", 0, h.d.IsActive, nil)
	if err != nil || !active {
		return nil, vmError(h.name, op, err)
	}
	x, err := call(ctx, c, "domain XML", 0, func() (string, error) { return h.d.GetXMLDesc(0) }, nil)
	if err != nil {
		return nil, vmError(h.name, op, err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return nil, vmError(h.name, op, fmt.Errorf("read the domain's XML: %w", err))
	}
	return &d, nil
}

// LiveDataDisks are the volumes of the data disks the running domain with
// uuid has now; running reports whether it runs (no disks when not).
func (c *Conn) LiveDataDisks(ctx context.Context, uuid string) (volumes []string, running bool, err error) {
	h, err := c.lookup(ctx, uuid, "list data disks")
	if err != nil {
		return nil, false, err
	}
	defer h.Free()
	d, err := c.liveDomain(ctx, h, "list data disks")
	if err != nil || d == nil {
		return nil, false, err
	}
	return domain.DataDiskVolumes(d), true, nil
}

// PlugDataDisk plugs the data disk disk into the running domain with uuid
// and into its definition, on the first free virtio target: the guest sees
// a new virtio disk with the volume's id as serial. One it has already is
// no error. A domain that does not run, or whose machine has no free slot
// for it, is refused with libvirt's words.
func (c *Conn) PlugDataDisk(ctx context.Context, uuid string, disk domain.Disk) error {
	const op = "plug data disk"
	h, err := c.lookup(ctx, uuid, op)
	if err != nil {
		return err
	}
	defer h.Free()
	d, err := c.liveDomain(ctx, h, op)
	if err != nil {
		return err
	}
	if d == nil {
		return vmError(h.name, op, errors.New("the domain does not run"))
	}
	if slices.Contains(domain.DataDiskVolumes(d), disk.Volume) {
		return nil
	}
	dev, err := domain.DataDiskDevice(d, disk)
	if err != nil {
		return vmError(h.name, op, err)
	}
	x, err := dev.Marshal()
	if err != nil {
		return vmError(h.name, op, err)
	}
	err = c.do(ctx, op, func() error {
		return h.d.AttachDeviceFlags(x, libvirt.DOMAIN_DEVICE_MODIFY_LIVE|libvirt.DOMAIN_DEVICE_MODIFY_CONFIG)
	})
	if err != nil {
		return vmError(h.name, op, err)
	}
	c.log.Info("data disk plugged into a running domain", "vm", h.name, "uuid", uuid, "volume", disk.Volume, "target", dev.Target.Dev)
	return nil
}

// UnplugDataDisk takes the data disk whose volume is volume out of the
// running domain with uuid and out of its definition, and waits up to wait
// for the guest to let it go (QEMU asks the guest: through ACPI on q35
// since QEMU 6.1, which Linux answers at once for a disk it does not use;
// native PCIe hot-plug takes it about five seconds); one it does not have
// is no error. A guest that has
// not let it go by then is an error saying so, the disk still the guest's:
// asked again, the request goes on.
func (c *Conn) UnplugDataDisk(ctx context.Context, uuid, volume string, wait time.Duration) error {
	const op = "unplug data disk"
	h, err := c.lookup(ctx, uuid, op)
	if err != nil {
		return err
	}
	defer h.Free()
	if err := c.unplugConfig(ctx, h, volume); err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	asked := false
	for {
		d, err := c.liveDomain(ctx, h, op)
		if err != nil {
			return err
		}
		dev, ok := dataDiskOf(d, volume)
		if !ok {
			if asked {
				c.log.Info("data disk unplugged from a running domain", "vm", h.name, "uuid", uuid, "volume", volume)
			}
			return nil
		}
		if !asked {
			x, err := dev.Marshal()
			if err != nil {
				return vmError(h.name, op, err)
			}
			err = c.do(ctx, op, func() error { return h.d.DetachDeviceFlags(x, libvirt.DOMAIN_DEVICE_MODIFY_LIVE) })
			// A request already under way (asked before gpuvmd restarted) is
			// waited for like this one.
			if err != nil && !strings.Contains(errMessage(err), "already in progress") {
				return vmError(h.name, op, err)
			}
			asked = true
		}
		if time.Now().After(deadline) {
			return vmError(h.name, op, fmt.Errorf("the guest has not let disk %s go within %s: it may be in use there (unmount it), or the guest ignores the request", dev.Target.Dev, wait))
		}
		select {
		case <-ctx.Done():
			return vmError(h.name, op, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// unplugConfig takes volume's data disk out of the domain's definition,
// when it is there.
func (c *Conn) unplugConfig(ctx context.Context, h *handle, volume string) error {
	const op = "unplug data disk"
	x, err := call(ctx, c, "domain XML", 0, func() (string, error) { return h.d.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE) }, nil)
	if err != nil {
		return vmError(h.name, op, err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return vmError(h.name, op, fmt.Errorf("read the domain's XML: %w", err))
	}
	dev, ok := dataDiskOf(&d, volume)
	if !ok {
		return nil
	}
	dx, err := dev.Marshal()
	if err != nil {
		return vmError(h.name, op, err)
	}
	if err := c.do(ctx, op, func() error { return h.d.DetachDeviceFlags(dx, libvirt.DOMAIN_DEVICE_MODIFY_CONFIG) }); err != nil {
		return vmError(h.name, op, err)
	}
	return nil
}

// dataDiskOf is the data disk of d whose volume is volume.
func dataDiskOf(d *libvirtxml.Domain, volume string) (libvirtxml.DomainDisk, bool) {
	if d == nil || d.Devices == nil {
		return libvirtxml.DomainDisk{}, false
	}
	for _, x := range d.Devices.Disks {
		if domain.IsDataDisk(x) && x.Source.Volume.Volume == volume {
			return x, true
		}
	}
	return libvirtxml.DomainDisk{}, false
}
