package server

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/capability"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// DomainXML reads a gpuvm domain's XML (the hypervisor). When Consoles is
// one, GET /v1/vms/{id} of a running VM looks in it for virtiofs
// filesystems, which rule out RAM snapshots, suspend and live migration.
type DomainXML interface {
	XML(ctx context.Context, uuid string, secure bool) (string, error)
}

// vmCapabilities says what can be done to vm's state (pkg/capability):
// the rules over its profile, its GPU devices (allocs) and its host's
// facts, which gpuvmd read once at start (Deps.Capabilities). Never nil: a
// VM whose profile is gone is answered too.
func (s *Server) vmCapabilities(c *gin.Context, vm *store.VM, allocs []store.Allocation) *api.VMCapabilities {
	in := capability.Input{Profile: vm.Profile}
	p := s.vmProfile(vm) // desktop.go
	if p == nil {
		in.ProfileMissing = true
	}
	in.GPU, in.DiskFormat, in.GuestAgent = vmGPUKind(p, allocs), vmDiskFormat(p), p != nil
	var addrs []string
	for _, a := range allocs {
		if a.State != store.AllocReleased {
			addrs = append(addrs, a.GPUAddress)
		}
	}
	in.Hypervisor, in.Driver = s.hostFacts(vm, addrs)
	in.Virtiofs = s.vmVirtiofs(c.Request.Context(), vm)
	set := capability.Of(in)
	answer := func(a capability.Answer) api.Capability { return api.Capability{Can: a.Can, Reason: say(c, a.Reason)} }
	return &api.VMCapabilities{DiskSnapshot: answer(set.DiskSnapshot), MemorySnapshot: answer(set.MemorySnapshot),
		Suspend: answer(set.Suspend), LiveMigration: answer(set.LiveMigration), Basis: say(c, set.Basis)}
}

// hostFacts are the facts of the host vm runs on, as far as this gpuvmd
// knows them: its own host's (read at start), not another node's.
func (s *Server) hostFacts(vm *store.VM, addrs []string) (capability.Hypervisor, capability.Driver) {
	if vm.Host != "" && vm.Host != s.Host {
		note := "the VM is on node " + vm.Host + ", whose versions this server did not read"
		return capability.Hypervisor{Note: note}, capability.Driver{Note: note}
	}
	if s.Capabilities == nil {
		note := "this server did not read its host's versions"
		return capability.Hypervisor{Note: note}, capability.Driver{Note: note}
	}
	return s.Capabilities.Hypervisor, s.Capabilities.NVML.For(addrs)
}

// vmGPUKind is the kind of vm's GPU devices: those it holds, else its
// profile's need ("" for none; gpu.KindAny until an abstract need is met).
func vmGPUKind(p *config.Profile, allocs []store.Allocation) gpu.Kind {
	var kind gpu.Kind
	for _, a := range allocs {
		// The kind that allows least wins: passthrough, then MIG.
		if a.State == store.AllocReleased || kind == gpu.KindPassthrough {
			continue
		}
		if a.Kind == gpu.KindPassthrough || kind == "" || a.Kind == gpu.KindMIG {
			kind = a.Kind
		}
	}
	if kind == "" && p != nil && p.GPU != nil {
		kind = p.GPU.Kind
	}
	return kind
}

// vmDiskFormat: a profile with a disk gives its VMs a qcow2 overlay on its
// image (hypervisor.CreateOverlay); one without boots a kernel directly.
func vmDiskFormat(p *config.Profile) string {
	if p == nil || p.Disk == nil {
		return ""
	}
	return "qcow2"
}

// vmVirtiofs reports whether vm's domain has a virtiofs filesystem: read
// from the running domain on this host, under the live-info deadline;
// false otherwise (gpuvm's profiles make none yet).
func (s *Server) vmVirtiofs(ctx context.Context, vm *store.VM) bool {
	dx, ok := s.Consoles.(DomainXML)
	if !ok || vm.State != store.VMRunning || (vm.Host != "" && vm.Host != s.Host) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.Console.withDefaults().LiveTimeout)
	defer cancel()
	xml, err := dx.XML(ctx, vm.ID, false)
	if err != nil {
		return false
	}
	has, err := domain.HasVirtiofs(xml)
	if err != nil {
		s.log.Warn("GET vm: the domain's XML does not parse", "vm", vm.ID, "err", err)
	}
	return has
}
