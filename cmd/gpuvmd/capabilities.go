package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/capability"
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
)

// hostFacts reads, once at start, what GET /v1/vms/{id} judges a VM's
// capabilities by (pkg/capability): libvirt's and QEMU's versions, and
// whether the NVIDIA driver supports vGPU migration on each GPU — the
// simulated host's answer under --simulate, which then says so.
func hostFacts(ctx context.Context, o options, hv *hypervisor.Conn, log *slog.Logger) *capability.Host {
	f := &capability.Host{}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if v, err := hv.Versions(vctx); err != nil {
		log.Warn("capabilities: libvirt's versions are not known", "err", err)
		f.Hypervisor = capability.Hypervisor{Note: "libvirt did not say its versions: " + err.Error()}
	} else {
		f.Hypervisor = capability.HypervisorOf(v.Driver, v.Library, v.Hypervisor)
	}
	f.NVML = nvmlFacts(o)
	log.Info("capabilities: host", "hypervisor", f.Hypervisor.String(), "nvml_known", f.NVML.Known,
		"nvml_simulated", f.NVML.Simulated, "nvml_note", f.NVML.Note)
	return f
}

// nvmlFacts asks NVML (the simulated host's under --simulate) about vGPU
// migration, as pkg/monitor opens it.
func nvmlFacts(o options) capability.NVMLFacts {
	switch {
	case o.simulate != "":
		h, err := sim.Open(sim.StateDir(o.stateDir, o.simulate), o.simulate)
		if err != nil {
			return capability.NVMLFacts{Simulated: true, Note: "the simulated host cannot be opened: " + err.Error()}
		}
		lib := h.NVML()
		defer lib.Shutdown()
		return capability.ProbeNVML(lib, true)
	case o.nvml == string(backend.NVMLNone):
		return capability.NVMLFacts{Note: "NVML disabled by configuration (--nvml none)"}
	case o.sysfsRoot != "":
		return capability.NVMLFacts{Note: "NVML not used with a captured sysfs tree"}
	}
	lib, why := host.OpenNVML(host.NewNVML())
	if lib == nil {
		return capability.NVMLFacts{Note: why}
	}
	defer lib.Shutdown()
	return capability.ProbeNVML(lib, false)
}
