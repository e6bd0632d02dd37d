//go:build cgo

package host

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML is reached only through an injected nvml.Interface (never go-nvml's
// package-level functions), so that tests and the simulated server can hand
// in go-nvml's mocks.

// NewNVML returns the real NVML library, not yet initialised.
func NewNVML() nvml.Interface { return nvml.New() }

// OpenNVML initialises lib. It returns lib and "" on success; otherwise nil
// and a one-line reason NVML cannot be used, for reports.
func OpenNVML(lib nvml.Interface) (nvml.Interface, string) {
	if lib == nil {
		return nil, "NVML unavailable: no library given"
	}
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return lib, ""
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, "NVML unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"
	default:
		// ret.Error is nvml.ErrorString, without needing a loaded library
		// or a mock that implements ErrorString.
		return nil, "NVML unavailable: " + ret.Error()
	}
}

// NVMLBusID turns a sysfs PCI address ("0000:41:00.0", or "41:00.0") into
// the form NVML prints and takes, with a 32-bit domain ("00000000:41:00.0").
// An address that does not parse is returned unchanged, for NVML to refuse.
func NVMLBusID(addr string) string {
	a, err := ValidateAddress(addr)
	if err != nil {
		return addr
	}
	return "0000" + a
}

// AddressFromNVML turns an NVML bus ID ("00000000:41:00.0", upper or lower
// case, maybe NUL-padded) into the sysfs form ("0000:41:00.0"): lower case,
// the domain cut to four digits unless it needs more.
func AddressFromNVML(busID string) string {
	s := strings.ToLower(strings.TrimSpace(strings.TrimRight(busID, "\x00")))
	domain, rest, ok := strings.Cut(s, ":")
	if !ok || !strings.Contains(rest, ":") { // "41:00.0": no domain
		if a, err := ValidateAddress(s); err == nil {
			return a
		}
		return s
	}
	for len(domain) > 4 && domain[0] == '0' {
		domain = domain[1:]
	}
	for len(domain) < 4 {
		domain = "0" + domain
	}
	return domain + ":" + rest
}

// MIGMode reports whether MIG mode is enabled now on dev (the current mode,
// not a pending one). A GPU without MIG reports false.
func MIGMode(dev nvml.Device) (enabled bool, err error) {
	if dev == nil {
		return false, fmt.Errorf("read MIG mode: no device")
	}
	current, _, ret := dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		return current == nvml.DEVICE_MIG_ENABLE, nil
	case nvml.ERROR_NOT_SUPPORTED:
		return false, nil
	default:
		return false, fmt.Errorf("read MIG mode: %w", ret)
	}
}
