package gpu

// Kind is how a VM gets a GPU device; it is also the name of the backend that
// makes it. The values are the words of the HCL profiles, the REST API, the
// database and the backend contract alike.
type Kind string

// Device kinds. KindAny is an abstract need (a profile's "memory = 20GiB")
// that the scheduler meets with the cheapest fitting slice of the kinds it
// allows; no device is of kind any.
const (
	KindVGPU        Kind = "vgpu"        // a time-sliced vGPU (mdev or SR-IOV VF)
	KindMIG         Kind = "mig"         // a MIG GPU instance
	KindPassthrough Kind = "passthrough" // a whole GPU bound to vfio-pci
	KindAny         Kind = "any"
)

// Mode is what a GPU is used for now (as the backends report it), or what it
// may be used for (as the configuration pins it). A GPU changes mode only when
// empty.
type Mode string

// GPU modes. ModeIdle is a current mode only; ModeAuto a configured one.
const (
	ModeIdle        Mode = "idle"        // nothing on it; any mode may start
	ModeVGPU        Mode = "vgpu"        // time-sliced vGPUs (or VFs enabled, MIG off)
	ModeMIG         Mode = "mig"         // MIG mode enabled
	ModePassthrough Mode = "passthrough" // bound to vfio-pci for a whole-GPU VM
	ModeAuto        Mode = "auto"        // the scheduler may switch it when empty
)

// ModeOf is the mode a GPU must be in to give a device of kind k ("" for
// KindAny, which is no device).
func ModeOf(k Kind) Mode {
	switch k {
	case KindVGPU:
		return ModeVGPU
	case KindMIG:
		return ModeMIG
	case KindPassthrough:
		return ModePassthrough
	}
	return ""
}

// Kinds converts kind names (as the wire and the database write them).
func Kinds(names []string) []Kind { return convertStrings[string, Kind](names) }

// KindNames is the inverse of Kinds.
func KindNames(kinds []Kind) []string { return convertStrings[Kind, string](kinds) }

func convertStrings[T, U ~string](xs []T) []U {
	if xs == nil {
		return nil
	}
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = U(x)
	}
	return out
}
