package domain

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Limits a Spec is checked against.
const (
	MaxNameLength  = 64
	MaxVCPUs       = 512
	MinMemoryBytes = 32 << 20 // 32 MiB: the tiny guest needs less than 128 MiB
	MaxMemoryBytes = 16 << 40 // 16 TiB
	maxTextLength  = 256      // title and metadata values
	maxDisksPerBus = 26
)

// SpecError lists everything wrong with a Spec.
type SpecError struct {
	Name     string   // the VM's name, as given
	Problems []string // "field: what is wrong", one per problem
}

func (e *SpecError) Error() string {
	name := e.Name
	if name == "" {
		name = "(unnamed)"
	}
	return fmt.Sprintf("domain spec of VM %q: %s", name, strings.Join(e.Problems, "; "))
}

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	uuidRE    = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	machineRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	macRE     = regexp.MustCompile(`^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$`)
	pciRE     = regexp.MustCompile(`^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$`)
)

var videoModels = map[string]bool{"virtio": true, "vga": true, "bochs": true, "qxl": true, "cirrus": true, "none": true}
var nicModels = map[string]bool{"virtio": true, "e1000e": true, "e1000": true, "rtl8139": true}

// ValidName reports whether name can be a gpuvm domain name.
func ValidName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("is empty")
	case len(name) > MaxNameLength:
		return fmt.Errorf("is %d characters long, at most %d allowed", len(name), MaxNameLength)
	case !nameRE.MatchString(name):
		return fmt.Errorf("%q may hold only letters, digits, '.', '_' and '-', and must start with a letter or digit", name)
	}
	return nil
}

// ValidUUID reports whether s is a UUID in canonical form.
func ValidUUID(s string) error {
	if !uuidRE.MatchString(s) {
		return fmt.Errorf("%q is not a UUID (want 8-4-4-4-12 hexadecimal digits)", s)
	}
	return nil
}

// PCIAddress is a parsed PCI address.
type PCIAddress struct {
	Domain, Bus, Slot, Function uint
}

func (a PCIAddress) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Slot, a.Function)
}

// ParsePCIAddress reads "0000:41:00.4" (or "41:00.4", domain 0).
func ParsePCIAddress(s string) (PCIAddress, error) {
	m := pciRE.FindStringSubmatch(s)
	if m == nil {
		return PCIAddress{}, fmt.Errorf("%q is not a PCI address (want DDDD:BB:SS.F)", s)
	}
	hex := func(x string) uint {
		if x == "" {
			return 0
		}
		v, _ := strconv.ParseUint(x, 16, 32)
		return uint(v)
	}
	a := PCIAddress{Domain: hex(m[1]), Bus: hex(m[2]), Slot: hex(m[3]), Function: hex(m[4])}
	if a.Slot > 0x1f {
		return PCIAddress{}, fmt.Errorf("%q: slot %#x is above 0x1f", s, a.Slot)
	}
	return a, nil
}

// text checks a free-text value: printable, one line, bounded.
func text(v string) error {
	if len(v) > maxTextLength {
		return fmt.Errorf("is %d bytes long, at most %d allowed", len(v), maxTextLength)
	}
	for _, r := range v {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) && r != ' ' {
			return fmt.Errorf("holds a control or invalid character (%q)", r)
		}
	}
	return nil
}

func absPath(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%q is not an absolute path", p)
	}
	if strings.ContainsAny(p, "\x00\n\r") || filepath.Clean(p) != p {
		return fmt.Errorf("%q is not a clean path", p)
	}
	return nil
}

// Validate checks a Spec and returns a *SpecError listing every problem, or
// nil.
func Validate(s Spec) error {
	var p problems
	p.machine(s)
	p.firmware(s.Firmware)
	p.boot(s)
	p.disks(s.Disks)
	p.network(s.Network)
	p.graphics(s.Graphics)
	if s.Video != "" && !videoModels[s.Video] {
		p.addf("video", "%q is not one of virtio, vga, bochs, qxl, cirrus, none", s.Video)
	}
	if s.SerialLog != "" {
		p.add("serial log", absPath(s.SerialLog))
	}
	p = append(p, hostdevProblems(s.Hostdevs, s.Graphics != nil)...)
	p.filesystems(s.Filesystems) // filesystems.go
	p.metadata(s.Metadata)
	if len(p) > 0 {
		return &SpecError{Name: s.Name, Problems: p}
	}
	return nil
}

// problems are what Validate finds, each "field: what is wrong".
type problems []string

// add notes err about field, when there is one.
func (p *problems) add(field string, err error) {
	if err != nil {
		*p = append(*p, field+": "+err.Error())
	}
}

func (p *problems) addf(field, format string, args ...any) {
	*p = append(*p, field+": "+fmt.Sprintf(format, args...))
}

// machine checks the name, size and kind of machine.
func (p *problems) machine(s Spec) {
	p.add("name", ValidName(s.Name))
	p.add("uuid", ValidUUID(s.UUID))
	p.add("title", text(s.Title))
	if s.VCPUs < 1 || s.VCPUs > MaxVCPUs {
		p.addf("vcpus", "%d is not between 1 and %d", s.VCPUs, MaxVCPUs)
	}
	if s.MemoryBytes < MinMemoryBytes || s.MemoryBytes > MaxMemoryBytes {
		p.addf("memory", "%d bytes is not between %d MiB and %d TiB", s.MemoryBytes, MinMemoryBytes>>20, MaxMemoryBytes>>40)
	}
	switch s.DomainType {
	case "", TypeKVM, TypeQEMU:
	default:
		p.addf("domain type", "%q is neither %q nor %q", s.DomainType, TypeKVM, TypeQEMU)
	}
	if s.Machine != "" && !machineRE.MatchString(s.Machine) {
		p.addf("machine", "%q is not a machine type", s.Machine)
	}
	switch s.OSFamily {
	case "", OSLinux, OSWindows:
	default:
		p.addf("os family", "%q is neither %q nor %q", s.OSFamily, OSLinux, OSWindows)
	}
}

// firmware checks BIOS or UEFI and what needs UEFI.
func (p *problems) firmware(fw Firmware) {
	switch fw.Type {
	case "", FirmwareBIOS:
		if fw.SecureBoot {
			p.addf("firmware.secure boot", "needs UEFI firmware")
		}
		if fw.NVRAM != "" {
			p.addf("firmware.nvram", "needs UEFI firmware")
		}
	case FirmwareUEFI:
		if fw.NVRAM != "" {
			p.add("firmware.nvram", absPath(fw.NVRAM))
		}
	default:
		p.addf("firmware", "%q is neither %q nor %q", fw.Type, FirmwareBIOS, FirmwareUEFI)
	}
}

// boot checks a direct kernel boot.
func (p *problems) boot(s Spec) {
	if s.Kernel != "" {
		p.add("kernel", absPath(s.Kernel))
		if s.Initrd != "" {
			p.add("initrd", absPath(s.Initrd))
		}
		if len(s.Cmdline) > 4096 {
			p.addf("cmdline", "is %d bytes long, at most 4096 allowed", len(s.Cmdline))
		}
		for _, r := range s.Cmdline {
			if r < ' ' || r == 0x7f {
				p.addf("cmdline", "holds a control character (%q)", r)
				break
			}
		}
	} else if s.Initrd != "" || s.Cmdline != "" {
		p.addf("kernel", "initrd and cmdline need a kernel")
	}
}

// serialPattern is what a disk's serial may be (a volume's id).
var serialPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,36}$`)

// disks checks each disk's source, format and bus, and the disks per bus.
func (p *problems) disks(disks []Disk) {
	perBus := map[string]int{}
	for i, d := range disks {
		f := fmt.Sprintf("disks[%d]", i)
		switch {
		case d.Path != "" && (d.Pool != "" || d.Volume != ""):
			p.addf(f, "give either a path or a pool and volume, not both")
		case d.Path != "":
			p.add(f+".path", absPath(d.Path))
		case d.Pool != "" && d.Volume != "":
			p.add(f+".pool", ValidName(d.Pool))
			if d.Volume == "." || d.Volume == ".." || strings.ContainsAny(d.Volume, "/\x00\n") {
				p.addf(f+".volume", "%q is not a volume name", d.Volume)
			}
		default:
			p.addf(f, "needs a path, or a pool and a volume")
		}
		if d.Serial != "" && !serialPattern.MatchString(d.Serial) {
			p.addf(f+".serial", "%q is not a disk serial: 1-36 of [A-Za-z0-9._-]", d.Serial)
		}
		switch d.Format {
		case "", FormatQCOW2, FormatRaw:
		default:
			p.addf(f+".format", "%q is neither %q nor %q", d.Format, FormatQCOW2, FormatRaw)
		}
		bus := diskBus(d)
		switch bus {
		case BusVirtIO:
			if d.CDROM {
				p.addf(f+".bus", "a CD-ROM cannot be on virtio (use sata or scsi)")
			}
		case BusSATA, BusSCSI:
		default:
			p.addf(f+".bus", "%q is not one of virtio, sata, scsi", d.Bus)
		}
		perBus[targetPrefix(bus)]++
	}
	for prefix, n := range perBus {
		if n > maxDisksPerBus {
			p.addf("disks", "%d disks named %s*, at most %d", n, prefix, maxDisksPerBus)
		}
	}
}

// network checks the network or bridge of the NIC.
func (p *problems) network(n Network) {
	if n.Name != "" || n.Bridge != "" {
		if n.Name != "" && n.Bridge != "" {
			p.addf("network", "a network (%q) or a bridge (%q), not both", n.Name, n.Bridge)
		}
		if n.Name != "" {
			p.add("network.name", ValidName(n.Name))
		}
		if n.Bridge != "" && !bridgeRE.MatchString(n.Bridge) {
			p.addf("network.bridge", "%q is not a Linux interface name", n.Bridge)
		}
		if n.MAC != "" && !macRE.MatchString(n.MAC) {
			p.addf("network.mac", "%q is not a MAC address", n.MAC)
		}
		if n.Model != "" && !nicModels[n.Model] {
			p.addf("network.model", "%q is not a NIC model gpuvm knows", n.Model)
		}
	} else if n.MAC != "" || n.Model != "" {
		p.addf("network", "a MAC or model needs a network name or a bridge")
	}
}

// graphics checks the display: its type, password, listen address and
// ports.
func (p *problems) graphics(g *Graphics) {
	if g == nil {
		return
	}
	switch g.Type {
	case GraphicsVNC:
		if len(g.Password) > MaxVNCPassword {
			p.addf("graphics.password", "VNC passwords are at most %d characters (got %d)", MaxVNCPassword, len(g.Password))
		}
	case GraphicsSpice:
		if len(g.Password) > 60 {
			p.addf("graphics.password", "at most 60 characters (got %d)", len(g.Password))
		}
		if g.WebSocket != 0 {
			p.addf("graphics.websocket", "only VNC has a websocket")
		}
	default:
		p.addf("graphics.type", "%q is neither %q nor %q", g.Type, GraphicsVNC, GraphicsSpice)
	}
	for _, r := range g.Password {
		if r < 0x21 || r > 0x7e {
			p.addf("graphics.password", "may hold printable ASCII characters only, without spaces")
			break
		}
	}
	if g.Listen != "" && net.ParseIP(g.Listen) == nil {
		p.addf("graphics.listen", "%q is not an IP address", g.Listen)
	}
	if g.Port != 0 && (g.Port < 5900 || g.Port > 65535) {
		p.addf("graphics.port", "%d is not between 5900 and 65535 (0 lets libvirt choose)", g.Port)
	}
	if g.WebSocket != 0 && g.WebSocket != -1 && (g.WebSocket < 1024 || g.WebSocket > 65535) {
		p.addf("graphics.websocket", "%d is not a port between 1024 and 65535 (-1 lets libvirt choose, 0 is off)", g.WebSocket)
	}
	if g.WebSocket > 0 && g.WebSocket == g.Port {
		p.addf("graphics.websocket", "port %d is also the display port", g.WebSocket)
	}
}

// metadata checks what the domain records of its VM.
func (p *problems) metadata(m Metadata) {
	if m.VMID == "" {
		p.addf("metadata.vm id", "is empty: every gpuvm domain names its VM")
	}
	p.add("metadata.vm id", text(m.VMID))
	p.add("metadata.owner", text(m.Owner))
	p.add("metadata.profile", text(m.Profile))
	for i, v := range m.Volumes {
		f := fmt.Sprintf("metadata.volumes[%d]", i)
		p.add(f+".pool", ValidName(v.Pool))
		if v.Name == "" || v.Name == "." || v.Name == ".." || strings.ContainsAny(v.Name, "/\x00\n") {
			p.addf(f+".name", "%q is not a volume name", v.Name)
		}
	}
}

// hostdevProblems lists what is wrong with a domain's GPU hostdevs, as
// "field: what is wrong"; graphics says whether the domain has a display.
func hostdevProblems(hs []Hostdev, graphics bool) []string {
	var probs []string
	add := func(field string, err error) {
		if err != nil {
			probs = append(probs, field+": "+err.Error())
		}
	}
	addf := func(field, format string, args ...any) {
		probs = append(probs, field+": "+fmt.Sprintf(format, args...))
	}
	seenPCI := map[PCIAddress]string{}
	seenMdev := map[string]bool{}
	for i, h := range hs {
		f := fmt.Sprintf("hostdevs[%d]", i)
		switch h.Type {
		case HostdevMdev:
			if err := ValidUUID(h.UUID); err != nil {
				add(f+".uuid", err)
			} else if seenMdev[strings.ToLower(h.UUID)] {
				addf(f+".uuid", "mdev %s is given twice", h.UUID)
			}
			seenMdev[strings.ToLower(h.UUID)] = true
			if len(h.Addresses) > 0 {
				addf(f+".addresses", "an mdev is named by its UUID, not by PCI addresses")
			}
			if h.Display && !graphics {
				addf(f+".display", "an mdev display needs VNC or SPICE graphics")
			}
		case HostdevPCI:
			if h.UUID != "" {
				addf(f+".uuid", "a PCI hostdev is named by its addresses, not by a UUID")
			}
			if len(h.Addresses) == 0 {
				addf(f+".addresses", "a PCI hostdev needs at least one address")
			}
			if h.Display {
				addf(f+".display", "only an mdev vGPU can drive the display through libvirt")
			}
			for j, a := range h.Addresses {
				pa, err := ParsePCIAddress(a)
				if err != nil {
					add(fmt.Sprintf("%s.addresses[%d]", f, j), err)
					continue
				}
				if prev, ok := seenPCI[pa]; ok {
					addf(fmt.Sprintf("%s.addresses[%d]", f, j), "%s is already given as %s", pa, prev)
				}
				seenPCI[pa] = fmt.Sprintf("%s.addresses[%d]", f, j)
			}
		default:
			addf(f+".type", "%q is neither %q nor %q", h.Type, HostdevMdev, HostdevPCI)
		}
	}
	return probs
}

func diskBus(d Disk) DiskBus {
	if d.Bus != "" {
		return d.Bus
	}
	if d.CDROM {
		return BusSATA
	}
	return BusVirtIO
}

func targetPrefix(b DiskBus) string {
	if b == BusVirtIO {
		return "vd"
	}
	return "sd"
}

// bridgeRE is a Linux interface name: 1-15 characters, no '/' or space.
var bridgeRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,15}$`)
