package monitor

import (
	"github.com/gpuvm/gpuvm/pkg/host"
	"github.com/gpuvm/gpuvm/pkg/host/sim"
)

// SourceOptions say which host gpuvmd samples, as its backends see it
// (gpuvmd's --simulate, --state-dir, --sysfs-root and --nvml).
type SourceOptions struct {
	Simulate  string // a simulator preset; "" for the real host
	StateDir  string
	SysFSRoot string // a captured sysfs tree: nothing to sample
	NoNVML    bool   // --nvml none
}

// OpenSource opens what gpuvmd samples: the simulated server, or NVML. When
// there is nothing to sample it returns nil and why, in one line ("NVML
// unavailable: libnvidia-ml.so.1 not found …"). close releases the source.
func OpenSource(o SourceOptions) (src Source, why string, close func()) {
	nop := func() {}
	switch {
	case o.Simulate != "":
		dir := sim.StateDir(o.StateDir, o.Simulate)
		h, err := sim.Open(dir, o.Simulate)
		if err != nil {
			return nil, "the simulated server cannot be opened: " + err.Error(), nop
		}
		s := NewSimSource(h, dir)
		return s, "", s.nvml.Close
	case o.NoNVML:
		return nil, "NVML disabled by configuration (--nvml none)", nop
	case o.SysFSRoot != "":
		return nil, "NVML not used with a captured sysfs tree (" + o.SysFSRoot + ")", nop
	}
	lib, why := host.OpenNVML(host.NewNVML())
	if lib == nil {
		return nil, why, nop
	}
	s := NewNVMLSource(lib)
	return s, "", func() {
		s.Close()
		_ = lib.Shutdown()
	}
}
