package hypervisor

import (
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// HostdevFromBackend is the domain hostdev of a device a GPU backend made
// (package domain keeps its own copy of the type to stay free of the
// backend's gRPC dependencies).
func HostdevFromBackend(h backend.Hostdev) domain.Hostdev {
	return domain.Hostdev{
		Type:      domain.HostdevType(h.Type),
		UUID:      h.UUID,
		Addresses: append([]string(nil), h.Addresses...),
		Managed:   h.Managed,
		Display:   h.Display,
	}
}
