package hypervisor

import (
	"context"
	"errors"

	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// CreateEmptyVolume creates an empty qcow2 volume of size bytes (virtual)
// in pool, the disk a new system is installed to (an unattended Windows
// install). It returns the volume's path.
func (c *Conn) CreateEmptyVolume(ctx context.Context, pool, name string, size uint64) (string, error) {
	return c.createEmptyQcow2(ctx, pool, name, size, "create")
}

// createEmptyQcow2 creates an empty qcow2 volume of size bytes (virtual),
// readable by its owner only; verb names the work in errors.
func (c *Conn) createEmptyQcow2(ctx context.Context, pool, name string, size uint64, verb string) (string, error) {
	if err := volumeName(name); err != nil {
		return "", storageError(pool, name, verb, err)
	}
	if size == 0 {
		return "", storageError(pool, name, verb, errors.New("size 0"))
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
	return c.createVolume(ctx, pool, name, x, verb)
}

// DefineWindowsInstall defines the domain of an unattended Windows install
// (domain.WindowsInstallXML), persistently, without starting it; like
// Define it refuses to redefine a domain that is not gpuvm's, and one
// without a DomainType (take it from Accel).
func (c *Conn) DefineWindowsInstall(ctx context.Context, w domain.WindowsInstall) (Info, error) {
	xml, err := domain.WindowsInstallXML(w)
	if err != nil {
		return Info{}, vmError(w.Name, "build domain XML", err)
	}
	return c.defineXML(ctx, w.Spec(), xml)
}
