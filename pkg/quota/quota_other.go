//go:build !(linux && (amd64 || arm64 || riscv64 || loong64 || s390x))

package quota

// Probe says there are no project quotas here: usage is measured.
func Probe(dir string) (Enforcement, error) {
	return Enforcement{Mode: None, Why: ErrUnsupported.Error()}, nil
}

// SetProject is not on this OS.
func SetProject(dir string, id uint32) error { return ErrUnsupported }

// SetLimit is not on this OS.
func SetLimit(dev string, id uint32, bytes uint64) error { return ErrUnsupported }

// Get is not on this OS.
func Get(dev string, id uint32) (Usage, error) { return Usage{}, ErrUnsupported }
