package hypervisor

import (
	"context"
	"fmt"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// ReplaceHostdevs gives the gpuvm domain with uuid the GPU devices hs in
// place of those it is defined with, keeping everything else of its
// definition (disks, display and its password, metadata): a VM that gave
// its GPU back when it stopped starts again on whatever device it is given
// next. The domain is redefined from its persistent XML with the new
// hostdevs (domain.ReplaceHostdevs), which takes effect at its next start.
// Nothing is redefined when it already has exactly these devices, so a
// retry is safe; a domain that runs with other devices is refused, as are
// devices that are not valid (a *domain.SpecError) and a domain that is
// not gpuvm's. A missing domain is IsNotFound.
func (c *Conn) ReplaceHostdevs(ctx context.Context, uuid string, hs []domain.Hostdev) error {
	return c.redefine(ctx, uuid, "replace host devices", "GPU devices", func(d *libvirtxml.Domain) (bool, error) {
		return domain.ReplaceHostdevs(d, hs)
	}, func(name string) {
		list := hostdevList(hs)
		if list == "" {
			list = "none"
		}
		c.log.Info("domain redefined with new GPU devices", "vm", name, "uuid", uuid, "hostdevs", list)
	})
}

// ResizeDomain gives the shut-off gpuvm domain with uuid vcpus virtual
// CPUs and memory bytes of memory, and no GPU devices (a resize to another
// profile: the VM's next start gives it the new profile's device, as
// ReplaceHostdevs does), keeping everything else of its definition (disks,
// display and its password, metadata). Like ReplaceHostdevs it redefines
// nothing when the domain already is so, refuses a running domain, and a
// missing one is IsNotFound. A definition libvirt refuses leaves the old
// one as it was.
func (c *Conn) ResizeDomain(ctx context.Context, uuid string, vcpus int, memory uint64) error {
	return c.redefine(ctx, uuid, "resize domain", "size and GPU devices", func(d *libvirtxml.Domain) (bool, error) {
		sized, err := domain.Resize(d, vcpus, memory)
		if err != nil {
			return false, err
		}
		bare, err := domain.ReplaceHostdevs(d, nil)
		return sized || bare, err
	}, func(name string) {
		c.log.Info("domain redefined with a new size", "vm", name, "uuid", uuid, "vcpus", vcpus, "memory", memory)
	})
}

// redefine edits the persistent definition of the shut-off domain with
// uuid (what names what it changes) and defines it again, when edit says it changed it; done is called
// once it is. A running domain is refused.
func (c *Conn) redefine(ctx context.Context, uuid, op, what string, edit func(*libvirtxml.Domain) (bool, error), done func(name string)) error {
	h, err := c.lookup(ctx, uuid, op)
	if err != nil {
		return err
	}
	defer h.Free()
	x, err := call(ctx, c, "domain XML", 0, func() (string, error) {
		// Inactive: the definition the next start uses; secure: with the
		// display password, which the redefinition must keep.
		return h.d.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE | libvirt.DOMAIN_XML_SECURE)
	}, nil)
	if err != nil {
		return vmError(h.name, op, err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return vmError(h.name, op, fmt.Errorf("read the domain's XML: %w", err))
	}
	changed, err := edit(&d)
	if err != nil {
		return vmError(h.name, op, err)
	}
	if !changed {
		return nil
	}
	info, err := c.info(ctx, h)
	if err != nil {
		return err
	}
	if info.Active() {
		return vmError(h.name, op, fmt.Errorf("the domain is %s: its %s change only while it is shut off", info.State, what))
	}
	out, err := d.Marshal()
	if err != nil {
		return vmError(h.name, op, fmt.Errorf("write the domain's XML: %w", err))
	}
	nd, err := call(ctx, c, "define domain", 0, func() (*libvirt.Domain, error) {
		nd, err := c.lv.DomainDefineXMLFlags(out, libvirt.DOMAIN_DEFINE_VALIDATE)
		if unsupportedFlags(err) {
			nd, err = c.lv.DomainDefineXML(out)
		}
		return nd, err
	}, func(d *libvirt.Domain) { _ = d.Free() })
	if err != nil {
		return vmError(h.name, op, err)
	}
	_ = nd.Free()
	done(h.name)
	return nil
}
