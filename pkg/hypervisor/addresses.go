package hypervisor

import (
	"context"
	"errors"
	"net/netip"
	"sort"
	"strings"
	"time"

	"libvirt.org/go/libvirt"
)

// AddressSource says where a guest address was learnt.
type AddressSource string

// Address sources.
const (
	// SourceLease: the DHCP leases of a libvirt network (dnsmasq).
	SourceLease AddressSource = "lease"
	// SourceAgent: the QEMU guest agent, from inside the guest.
	SourceAgent AddressSource = "agent"
)

// agentTimeout caps the guest-agent query, shorter than the call timeout: a
// guest whose agent hangs must not hold a page up.
const agentTimeout = 10 * time.Second

// Address is an IP address of a guest.
type Address struct {
	// Interface is the interface's name: the host's tap device ("vnet3")
	// for a lease, the guest's own name ("eth0", "Ethernet") for the agent.
	Interface string
	MAC       string // lower case, "52:54:00:…"; empty when not known
	IP        netip.Addr
	Prefix    int // length of the network prefix
	Source    AddressSource
}

// String is the address with its network prefix, "192.168.122.5/24".
func (a Address) String() string { return netip.PrefixFrom(a.IP, a.Prefix).String() }

// Addresses lists the IP addresses of the running gpuvm domain with uuid:
// from the DHCP leases of its libvirt network first and, when they give
// none (a bridge, a static address), from the QEMU guest agent. Loopback
// and link-local addresses are left out. A guest without an agent, or whose
// agent does not answer, has no addresses (nil, nil), nor has a stopped
// domain; a missing domain is IsNotFound.
func (c *Conn) Addresses(ctx context.Context, uuid string) ([]Address, error) {
	h, err := c.lookup(ctx, uuid, "addresses")
	if err != nil {
		return nil, err
	}
	defer h.Free()
	info, err := c.info(ctx, h)
	if err != nil {
		return nil, err
	}
	if !info.Active() {
		return nil, nil
	}
	query := func(src libvirt.DomainInterfaceAddressesSource, name AddressSource, timeout time.Duration) ([]libvirt.DomainInterface, error) {
		return call(ctx, c, "interface addresses ("+string(name)+")", timeout, func() ([]libvirt.DomainInterface, error) {
			return h.d.ListAllInterfaceAddresses(src)
		}, nil)
	}
	ifaces, err := query(libvirt.DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE, SourceLease, 0)
	switch {
	case isCode(err, libvirt.ERR_OPERATION_INVALID):
		return nil, nil // stopped meanwhile
	case err != nil:
		return nil, vmError(h.name, "addresses (DHCP leases)", err)
	}
	if addrs := convertAddresses(ifaces, SourceLease); len(addrs) > 0 {
		return addrs, nil
	}
	ifaces, err = query(libvirt.DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT, SourceAgent, min(agentTimeout, c.callTimeout))
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, vmError(h.name, "addresses (guest agent)", err)
	case agentUnavailable(err):
		c.log.Debug("guest agent gives no addresses", "vm", h.name, "uuid", h.uuid, "err", clean(err))
		return nil, nil
	case err != nil:
		return nil, vmError(h.name, "addresses (guest agent)", err)
	}
	return convertAddresses(ifaces, SourceAgent), nil
}

// agentUnavailable reports whether an agent query failed only because there
// is no agent to ask: not configured, not running in the guest, not
// answering, or not supported by the driver. A deadline is one too: the
// agent did not answer in time.
func agentUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if IsDisconnected(err) || IsNotFound(err) {
		return false
	}
	return isCode(err,
		libvirt.ERR_AGENT_UNRESPONSIVE, libvirt.ERR_AGENT_UNSYNCED,
		libvirt.ERR_AGENT_COMMAND_TIMEOUT, libvirt.ERR_AGENT_COMMAND_FAILED,
		libvirt.ERR_ARGUMENT_UNSUPPORTED, libvirt.ERR_OPERATION_UNSUPPORTED,
		libvirt.ERR_NO_SUPPORT, libvirt.ERR_OPERATION_INVALID) ||
		errors.Is(err, context.DeadlineExceeded)
}

// convertAddresses turns libvirt's interfaces into addresses, skipping
// loopback, link-local and unparsable ones, sorted by interface then
// address (IPv4 first).
func convertAddresses(ifaces []libvirt.DomainInterface, src AddressSource) []Address {
	var out []Address
	for _, i := range ifaces {
		for _, a := range i.Addrs {
			ip, err := netip.ParseAddr(a.Addr)
			if err != nil {
				continue
			}
			ip = ip.WithZone("").Unmap()
			if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() {
				continue
			}
			prefix := int(a.Prefix)
			if prefix > ip.BitLen() {
				prefix = ip.BitLen()
			}
			out = append(out, Address{Interface: i.Name, MAC: strings.ToLower(i.Hwaddr), IP: ip, Prefix: prefix, Source: src})
		}
	}
	sort.SliceStable(out, func(x, y int) bool {
		if out[x].Interface != out[y].Interface {
			return out[x].Interface < out[y].Interface
		}
		return out[x].IP.Less(out[y].IP)
	})
	return out
}
