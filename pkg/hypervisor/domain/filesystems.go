package domain

import (
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// HasVirtiofs reports whether a domain's XML has a <filesystem> whose
// driver is virtiofs (a vhost-user-fs device: it blocks migration, RAM
// snapshots and suspend; pkg/capability). gpuvm's own domains have none
// yet.
func HasVirtiofs(domainXML string) (bool, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domainXML); err != nil {
		return false, fmt.Errorf("parse domain XML: %w", err)
	}
	if d.Devices == nil {
		return false, nil
	}
	for _, fs := range d.Devices.Filesystems {
		if fs.Driver != nil && fs.Driver.Type == "virtiofs" {
			return true, nil
		}
	}
	return false, nil
}
