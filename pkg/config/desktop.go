package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Desktop protocols (profile.desktop.protocol). vnc and spice are the VM's
// display console (libvirt's, the boot console); rdp, sunshine and dcv are
// servers in the guest, reached through gpuvmd's tunnels to the guest's
// address.
const (
	DesktopVNC      = "vnc"
	DesktopSPICE    = "spice"
	DesktopRDP      = "rdp"
	DesktopSunshine = "sunshine"
	DesktopDCV      = "dcv"
	// DesktopNone is the resolved protocol of a profile with no desktop
	// block and display { type = "none" }: no way in but the guest's own
	// network (SSH, tunnels).
	DesktopNone = "none"
)

// Default guest ports of the desktop servers.
const (
	DefaultRDPPort      = 3389
	DefaultDCVPort      = 8443
	DefaultSunshinePort = 47989 // Sunshine's base port: its HTTP port
	DefaultDCVSession   = "console"
)

// Where the CLI takes Sunshine's web UI credentials from
// (profile.desktop.credentials).
const (
	// CredentialsAsk: the person gives them (gpuvm desktop --user, the
	// password from $GPUVM_DESKTOP_PASSWORD or typed in).
	CredentialsAsk = "ask"
	// CredentialsVM: the VM's one-time desktop credentials, which
	// cloud-init set in the guest (POST /v1/vms/{id}/credentials).
	CredentialsVM = "vm"
)

var (
	desktopProtocols   = []string{DesktopRDP, DesktopVNC, DesktopSPICE, DesktopSunshine, DesktopDCV}
	desktopCredentials = []string{CredentialsAsk, CredentialsVM}
	dcvSessionPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
)

// Desktop is how people work on a profile's VMs (profile.desktop): the
// display console (Protocol vnc or spice, the display's type), or a
// remote-desktop server in the guest (rdp, sunshine, dcv) on Port.
type Desktop struct {
	Protocol string `json:"protocol"`
	// Port is the guest's port of the server: RDP's, DCV's, or Sunshine's
	// base port (its HTTP port; the others are fixed offsets from it). 0
	// for the display console, whose port is QEMU's.
	Port int `json:"port,omitempty"`
	// WebPort is Sunshine's web UI and API (pairing with a PIN).
	WebPort int `json:"web_port,omitempty"`
	// Credentials is where the CLI takes Sunshine's web UI credentials
	// from: CredentialsAsk or CredentialsVM.
	Credentials string `json:"credentials,omitempty"`
	// Session is the DCV session to open.
	Session string `json:"session,omitempty"`
	// Declared: the profile has a desktop block. Without one, Protocol is
	// only the display's type (the boot console), not a desktop people
	// were promised.
	Declared bool `json:"-"`
}

// Tunneled reports whether the desktop is a server in the guest, reached
// through gpuvmd's tunnels, rather than the display console.
func (d Desktop) Tunneled() bool {
	return d.Protocol == DesktopRDP || d.Protocol == DesktopSunshine || d.Protocol == DesktopDCV
}

// DesktopPort is one port a desktop server listens on in the guest.
type DesktopPort struct {
	Port      int    `json:"port"`
	Transport string `json:"transport"` // "tcp" or "udp"
	// Use says what the port carries: "rdp", "https", "http", "web",
	// "rtsp", "video", "control", "audio", "dcv".
	Use string `json:"use"`
}

// Sunshine's ports as offsets from its base port (Sunshine's own "port"
// setting; the defaults are 47984, 47989, 47990, 48010 over TCP and
// 47998–48000 over UDP).
var sunshineOffsets = []struct {
	offset         int
	transport, use string
}{
	{-5, "tcp", "https"}, {0, "tcp", "http"}, {1, "tcp", "web"}, {21, "tcp", "rtsp"},
	{9, "udp", "video"}, {10, "udp", "control"}, {11, "udp", "audio"},
}

// Ports are the guest ports the desktop server listens on; none for the
// display console.
func (d Desktop) Ports() []DesktopPort {
	switch d.Protocol {
	case DesktopRDP:
		return []DesktopPort{{d.Port, "tcp", "rdp"}}
	case DesktopDCV:
		// DCV speaks QUIC (UDP) on the same port when enabled; through
		// gpuvmd's tunnels it falls back to its websocket over TCP.
		return []DesktopPort{{d.Port, "tcp", "dcv"}}
	case DesktopSunshine:
		out := make([]DesktopPort, 0, len(sunshineOffsets))
		for _, o := range sunshineOffsets {
			p := DesktopPort{Port: d.Port + o.offset, Transport: o.transport, Use: o.use}
			if o.use == "web" {
				p.Port = d.WebPort
			}
			out = append(out, p)
		}
		return out
	}
	return nil
}

// resolveDesktop reads the desktop block. Without one, the desktop is the
// display console (its type, or DesktopNone without a display).
func (r *resolver) resolveDesktop(b *profileBlock, p *Profile) {
	p.Desktop = Desktop{Protocol: p.Display.Type}
	d := b.Desktop
	if d == nil {
		return
	}
	p.Desktop.Declared = true
	body, def := d.Body, d.DefRange
	if d.Protocol == nil {
		if !has(body, "protocol") {
			r.errf(def, "Missing protocol", "A desktop block says how people reach the VM: write protocol = %s.", quoteList(desktopProtocols))
		}
		return
	}
	p.Desktop.Protocol = *d.Protocol
	if !r.oneOf(body, "protocol", p.Desktop.Protocol, desktopProtocols, def) {
		return
	}
	// Attributes that belong to other protocols.
	applies := map[string][]string{
		"port":        {DesktopRDP, DesktopSunshine, DesktopDCV},
		"web_port":    {DesktopSunshine},
		"credentials": {DesktopSunshine},
		"session":     {DesktopDCV},
	}
	for _, a := range []string{"port", "web_port", "credentials", "session"} {
		if has(body, a) && !slices.Contains(applies[a], p.Desktop.Protocol) {
			r.errf(attrRange(body, a, def), a+" does not apply", "%s is for protocol = %s, not %q.%s", a, quoteList(applies[a]), p.Desktop.Protocol, consoleHint(p.Desktop.Protocol, a))
		}
	}
	if !p.Desktop.Tunneled() {
		// The display console: it must be the display the VM has.
		if p.Display.Type != p.Desktop.Protocol {
			r.errf(valueRange(body, "protocol", def), "Desktop is not the display",
				"protocol = %q is the display console, but the profile's display is %q: write display { type = %q }, or choose rdp, sunshine or dcv (a server in the guest).",
				p.Desktop.Protocol, p.Display.Type, p.Desktop.Protocol)
		}
		return
	}
	if p.Network.Type == "none" {
		r.errf(valueRange(body, "protocol", def), "Desktop needs a network",
			"protocol = %q is a server in the guest, reached through gpuvmd's tunnels to the guest's address; the profile has network { type = \"none\" }.", p.Desktop.Protocol)
	}
	switch p.Desktop.Protocol {
	case DesktopRDP:
		p.Desktop.Port = r.desktopPort(body, "port", d.Port, DefaultRDPPort, 1, 65535, def)
	case DesktopDCV:
		p.Desktop.Port = r.desktopPort(body, "port", d.Port, DefaultDCVPort, 1, 65535, def)
		p.Desktop.Session = str(d.Session, DefaultDCVSession)
		if !dcvSessionPattern.MatchString(p.Desktop.Session) {
			r.errf(valueRange(body, "session", def), "Invalid session", "%q is not a DCV session ID (letters, digits, '.', '_' and '-', at most 64, starting with a letter or digit).", p.Desktop.Session)
		}
	case DesktopSunshine:
		// Sunshine's ports run from base-5 to base+21.
		p.Desktop.Port = r.desktopPort(body, "port", d.Port, DefaultSunshinePort, 6, 65535-21, def)
		p.Desktop.WebPort = r.desktopPort(body, "web_port", d.WebPort, p.Desktop.Port+1, 1, 65535, def)
		p.Desktop.Credentials = str(d.Credentials, CredentialsAsk)
		r.oneOf(body, "credentials", p.Desktop.Credentials, desktopCredentials, def)
		if d.WebPort != nil {
			for _, q := range p.Desktop.Ports() {
				if q.Use != "web" && q.Transport == "tcp" && q.Port == p.Desktop.WebPort {
					r.errf(valueRange(body, "web_port", def), "Invalid web_port", "web_port %d is Sunshine's %s port (port = %d gives %s).", q.Port, q.Use, p.Desktop.Port, sunshinePortList(p.Desktop))
				}
			}
		}
	}
}

// desktopPort reads a port attribute within [lo, hi].
func (r *resolver) desktopPort(body hcl.Body, name string, v *int, def, lo, hi int, fallback hcl.Range) int {
	if v == nil {
		return def
	}
	if *v < lo || *v > hi {
		why := ""
		if name == "port" && lo > 1 {
			why = " (Sunshine's ports run from port-5 to port+21)"
		}
		r.errf(valueRange(body, name, fallback), "Invalid "+name, "%s is a TCP port from %d to %d%s, not %d.", name, lo, hi, why, *v)
		return def
	}
	return *v
}

func consoleHint(protocol, attr string) string {
	if attr == "port" && (protocol == DesktopVNC || protocol == DesktopSPICE) {
		return " The display console's port is QEMU's, chosen when the VM starts."
	}
	return ""
}

// sunshinePortList names Sunshine's streaming ports (its web UI aside).
func sunshinePortList(d Desktop) string {
	var tcp, udp []string
	for _, p := range d.Ports() {
		switch {
		case p.Use == "web":
		case p.Transport == "tcp":
			tcp = append(tcp, fmt.Sprint(p.Port))
		default:
			udp = append(udp, fmt.Sprint(p.Port))
		}
	}
	return "TCP " + strings.Join(tcp, ", ") + " and UDP " + strings.Join(udp, ", ")
}
