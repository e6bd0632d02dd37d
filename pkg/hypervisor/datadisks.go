package hypervisor

import (
	"context"
	"errors"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// Data disks (docs/volumes.md) are empty qcow2 volumes in the VMs' pool,
// made and grown here; a VM's domain names them as virtio disks.

// CreateDataDisk creates an empty qcow2 volume of size bytes called name in
// pool and returns its path. A volume of that name already there is an
// error: the caller looks first (VolumeExists).
func (c *Conn) CreateDataDisk(ctx context.Context, pool, name string, size uint64) (string, error) {
	if err := volumeName(name); err != nil {
		return "", storageError(pool, name, "create data disk", err)
	}
	if size == 0 {
		return "", storageError(pool, name, "create data disk", errors.New("size 0"))
	}
	x := &libvirtxml.StorageVolume{
		Name:       name,
		Capacity:   &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: size},
		Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: 0},
		Target: &libvirtxml.StorageVolumeTarget{
			Format:      &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"},
			Permissions: &libvirtxml.StorageVolumeTargetPermissions{Mode: "0600"},
		},
	}
	return c.createVolume(ctx, pool, name, x, "create data disk")
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
