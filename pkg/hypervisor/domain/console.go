package domain

import (
	"errors"
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// Console says how to reach a running VM's display.
type Console struct {
	Protocol GraphicsType // "vnc" or "spice"
	Host     string       // address QEMU listens on
	Port     int          // display port
	// WebSocketPort is QEMU's VNC websocket port; 0 when there is none.
	WebSocketPort int
	// Password is the display password; empty when there is none.
	Password string
}

// ErrNoConsole says a domain has no VNC or SPICE display, or that it is not
// running (ports are only known then).
var ErrNoConsole = errors.New("no display console")

// ConsoleFromXML reads the console of a running domain from its live XML,
// which libvirt must have been asked for with the secure flag (else the
// password is missing).
func ConsoleFromXML(domainXML string) (Console, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domainXML); err != nil {
		return Console{}, fmt.Errorf("domain XML: %w", err)
	}
	if d.Devices == nil {
		return Console{}, ErrNoConsole
	}
	for _, g := range d.Devices.Graphics {
		switch {
		case g.VNC != nil:
			v := g.VNC
			if v.Port <= 0 {
				return Console{}, fmt.Errorf("%w: VNC port not allocated (is the domain running?)", ErrNoConsole)
			}
			c := Console{Protocol: GraphicsVNC, Host: listenAddress(v.Listen, v.Listeners), Port: v.Port, Password: v.Passwd}
			if v.WebSocket > 0 {
				c.WebSocketPort = v.WebSocket
			}
			return c, nil
		case g.Spice != nil:
			sp := g.Spice
			if sp.Port <= 0 {
				return Console{}, fmt.Errorf("%w: SPICE port not allocated (is the domain running?)", ErrNoConsole)
			}
			return Console{Protocol: GraphicsSpice, Host: listenAddress(sp.Listen, sp.Listeners), Port: sp.Port, Password: sp.Passwd}, nil
		}
	}
	return Console{}, ErrNoConsole
}

func listenAddress(attr string, ls []libvirtxml.DomainGraphicListener) string {
	for _, l := range ls {
		if l.Address != nil && l.Address.Address != "" {
			return l.Address.Address
		}
	}
	if attr != "" {
		return attr
	}
	return "127.0.0.1"
}

// DisplayPassword is the password of a domain's first VNC or SPICE display,
// read from its XML (with secrets); unlike ConsoleFromXML it needs no port,
// so it reads a domain that is shut off too. "" when there is none.
func DisplayPassword(domainXML string) string {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domainXML); err != nil || d.Devices == nil {
		return ""
	}
	for _, g := range d.Devices.Graphics {
		switch {
		case g.VNC != nil:
			return g.VNC.Passwd
		case g.Spice != nil:
			return g.Spice.Passwd
		}
	}
	return ""
}
