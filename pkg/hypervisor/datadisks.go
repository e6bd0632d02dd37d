package hypervisor

import (
	"context"

	"libvirt.org/go/libvirt"
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
