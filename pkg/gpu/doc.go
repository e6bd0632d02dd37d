// Package gpu holds what gpuvm knows about NVIDIA GPU models without asking any
// host: PCI device IDs and the names people use for them, memory sizes, the MIG
// placement tables (REFERENCE.md §3) and the vGPU type-name grammar (§2); the
// GPU vocabulary (Kind, Mode); and the model of one host's GPUs as its
// backends report them together (HostInventory).
//
// It is pure: no I/O, no cgo. The host layer, the simulated server, the backends,
// the profile checker and the scheduler all read the same tables from here.
package gpu
