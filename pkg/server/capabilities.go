package server

import (
	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/capability"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
)

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
	// A profile with a home has the home's virtiofs filesystem, queued,
	// stopped or running: the answer does not flip when the VM boots, and
	// no request reads the domain.
	in.Virtiofs = p != nil && (p.Home || len(vmShareNames(p, vm)) > 0)
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
