package gpu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// HostDriver is a host's NVIDIA driver as its backends read it through
// NVML: the version and, for the vGPU manager, the range of vGPU
// versions (guest drivers) it supports.
type HostDriver struct {
	Version string `json:"version"` // "550.54.16"; "simulated" on the simulator
	// VGPUMin and VGPUMax bound the vGPU versions the vGPU manager takes
	// ("17.0", "17.3"); empty when the driver is not the vGPU manager.
	VGPUMin string `json:"vgpu_min,omitempty"`
	VGPUMax string `json:"vgpu_max,omitempty"`
}

// vgpuReleases maps the driver branches of NVIDIA vGPU software to its
// major releases. Source: NVIDIA Virtual GPU Software release notes
// (docs.nvidia.com/vgpu, "Release Notes" of each release, "Software
// Versions"): a release's vGPU manager and its guest drivers are all of one
// branch — vGPU 13 is R470, 14 R510, 15 R525, 16 R535, 17 R550, 18 R570,
// 19 R580.
var vgpuReleases = map[int]int{470: 13, 510: 14, 525: 15, 535: 16, 550: 17, 570: 18, 580: 19}

// VGPURelease is the vGPU software release of a driver branch (17 for
// 550); false for a branch that is not one of vGPU software gpuvm knows.
func VGPURelease(branch int) (int, bool) {
	r, ok := vgpuReleases[branch]
	return r, ok
}

// KnownBranches lists the branches of vGPU software gpuvm knows, oldest
// first: "R470 (vGPU 13), R510 (vGPU 14), ...".
func KnownBranches() string {
	var out []string
	for _, b := range []int{470, 510, 525, 535, 550, 570, 580} {
		out = append(out, fmt.Sprintf("R%d (vGPU %d)", b, vgpuReleases[b]))
	}
	return strings.Join(out, ", ")
}

// DriverBranch is a driver version's branch: 550 of "550.54.16"; false
// when the version names none ("simulated", "").
func DriverBranch(version string) (int, bool) { return leadingNumber(version) }

// leadingNumber is the positive number before the first dot of v: 550 of
// "550.54.16", 17 of "17.3"; false when there is none.
func leadingNumber(v string) (int, bool) {
	major, _, _ := strings.Cut(strings.TrimSpace(v), ".")
	n, err := strconv.Atoi(major)
	return n, err == nil && n > 0
}

// driverVersion is the form of an NVIDIA driver version: "550.90.07",
// "535.183.01", "570.86" (branch, minor, optional patch).
var driverVersion = regexp.MustCompile(`^[1-9][0-9]{2,3}\.[0-9]{1,3}(\.[0-9]{1,3})?$`)

// ValidDriverVersion says whether s has the form of an NVIDIA driver
// version ("550.90.07").
func ValidDriverVersion(s string) bool { return driverVersion.MatchString(s) }

// GuestDriverMatch is what CheckGuestDriver found.
type GuestDriverMatch struct {
	// Checked is false when the host's driver says nothing to check
	// against: no driver read, the simulator's, or not the vGPU manager.
	Checked bool
	// Supported is true when the guest driver's vGPU release is within the
	// host's range. Release is that release (0 when its branch is not one
	// gpuvm knows).
	Supported bool
	Release   int
	// Reason explains an unsupported guest driver in a sentence.
	Reason string
}

// CheckGuestDriver says whether a guest driver (its version, "535.183.01")
// is supported by the host's vGPU manager: the guest driver's branch names
// a vGPU software release, whose major version must lie within the range
// the vGPU manager reports through NVML (nvmlGetVgpuVersion's supported
// range, "16.0" to "17.3"). Only the major release is compared: a
// branch does not say which minor release a guest driver is of.
func CheckGuestDriver(guest string, host *HostDriver) GuestDriverMatch {
	if host == nil || host.VGPUMin == "" || host.VGPUMax == "" {
		return GuestDriverMatch{}
	}
	if _, ok := DriverBranch(host.Version); !ok {
		return GuestDriverMatch{} // the simulator's "simulated": no branch to hold a guest to
	}
	lo, okLo := releaseMajor(host.VGPUMin)
	hi, okHi := releaseMajor(host.VGPUMax)
	if !okLo || !okHi || lo > hi {
		return GuestDriverMatch{} // the simulator's "simulated", or a range NVML garbled
	}
	m := GuestDriverMatch{Checked: true}
	hostSays := fmt.Sprintf("this host's vGPU manager %s (vGPU %s–%s)", hostBranch(host.Version), host.VGPUMin, host.VGPUMax)
	b, ok := DriverBranch(guest)
	if !ok {
		m.Reason = fmt.Sprintf("the image's NVIDIA guest driver %q names no branch, so it cannot be matched to %s", guest, hostSays)
		return m
	}
	rel, known := vgpuReleases[b]
	if !known {
		m.Reason = fmt.Sprintf("the image's NVIDIA guest driver %s is of branch R%d, not one of NVIDIA vGPU software gpuvm knows (%s), so it may not be supported by %s", guest, b, KnownBranches(), hostSays)
		return m
	}
	m.Release = rel
	if rel < lo || rel > hi {
		m.Reason = fmt.Sprintf("the image's NVIDIA guest driver %s (vGPU %d) is not supported by %s", guest, rel, hostSays)
		return m
	}
	m.Supported = true
	return m
}

// releaseMajor is the major release of a vGPU version: 17 of "17.3".
func releaseMajor(v string) (int, bool) { return leadingNumber(v) }

// hostBranch is a host driver version shortened to its branch, "550.x",
// or the version as it is when it names none.
func hostBranch(version string) string {
	if b, ok := DriverBranch(version); ok {
		return strconv.Itoa(b) + ".x"
	}
	return version
}
