package capability

import "strings"

// NVMLFacts are what NVML said of the host's GPUs, read once at start.
type NVMLFacts struct {
	// Known: NVML answered; otherwise Note says why not ("NVML
	// unavailable: libnvidia-ml.so.1 not found ...").
	Known bool
	Note  string
	// Simulated: the answers are the simulated host's (pkg/host/sim).
	Simulated bool
	// Migration says, by PCI address ("0000:41:00.0"), whether the vGPU
	// manager supports migration on the GPU.
	Migration map[string]bool
}

// For is the driver's answer for a VM holding the GPUs at addrs: it
// supports migration when it does on every one of them.
func (f NVMLFacts) For(addrs []string) Driver {
	d := Driver{Simulated: f.Simulated}
	switch {
	case !f.Known:
		d.Note = f.Note
		if d.Note == "" {
			d.Note = "NVML was not asked"
		}
		return d
	case len(addrs) == 0:
		d.Note = "the VM holds no GPU yet"
		return d
	}
	d.Answered, d.Migration = true, true
	for _, a := range addrs {
		ok, seen := f.Migration[a]
		if !seen {
			return Driver{Simulated: f.Simulated, Note: "NVML does not list GPU " + a}
		}
		d.Migration = d.Migration && ok
	}
	return d
}

// Host is what a gpuvmd reads of its host at start: libvirt's and QEMU's
// versions and NVML's answers.
type Host struct {
	Hypervisor Hypervisor
	NVML       NVMLFacts
}

// HypervisorOf makes a Hypervisor of the versions libvirt reports (in its
// encoding) on a connection of driver ("QEMU", "Test").
func HypervisorOf(driver string, libvirt, hypervisor uint32) Hypervisor {
	h := Hypervisor{Known: true, Driver: driver, Libvirt: FromLibvirt(libvirt), QEMU: FromLibvirt(hypervisor)}
	if strings.EqualFold(driver, "qemu") {
		h.Driver = "QEMU"
	}
	return h
}
