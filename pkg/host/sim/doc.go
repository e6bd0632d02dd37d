// Package sim is a simulated NVIDIA GPU server for machines without GPUs.
//
// A preset ("a100x4", "a40x2", "l40sx4", "h100x8", "mixed") describes the PCI
// functions of a server. The simulator serves them as a sysfs tree (host.SysFS)
// and as NVML (nvml.Interface), and applies the kernel's and the driver's rules
// to every write: a UUID written to an mdev type's `create` makes a device
// appear and `available_instances` fall; a second vGPU type on a GPU in
// equal-size mode is refused; a MIG GPU instance at an overlapping placement is
// refused; a GPU instance in use cannot be destroyed; a GPU holding vGPUs
// cannot be unbound from nvidia.
//
// State lives in a directory (state.json, guarded by a file lock), so gpuvmd
// and every backend process that opens the same directory see one host. The
// MIG tables are the real ones (pkg/gpu), not go-nvml's mock tables. Everything
// that describes a simulated host says that it is simulated.
package sim

import "path/filepath"

// StateDir is where the simulated server of a preset keeps its state under a
// gpuvm state directory. gpuvmd and every backend use it, so they all open the
// same simulated host.
func StateDir(stateDir, preset string) string {
	return filepath.Join(stateDir, "sim-"+preset)
}
