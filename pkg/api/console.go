package api

import "time"

// ConsoleResponse is the answer to GET /v1/vms/{id}/console: how to reach a
// running VM's display. Ticket is one-time and short-lived: it opens one
// connection, through WebSocketURL or BrowserURL (both carry it), before
// ExpiresAt.
//
// A VM whose profile's desktop is a server in the guest (rdp, sunshine, dcv)
// and that has no display (display { type = "none" }) is answered with
// Protocol "none" and no ticket: Desktop says how to reach it.
type ConsoleResponse struct {
	VMID string `json:"vm_id"`
	// Protocol is the display's protocol: vnc or spice; none when the VM
	// has no display but a desktop in the guest.
	Protocol string `json:"protocol"`
	// Ticket, ExpiresAt, WebSocketURL and VVURL are absent with Protocol
	// none.
	Ticket    string    `json:"ticket,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// WebSocketURL is gpuvmd's websocket proxy to the display
	// (ws(s)://HOST/v1/console/ws?vm=ID&ticket=T); it takes binary frames.
	// For VNC, gpuvmd answers the display's password itself: the client
	// sees security type None.
	WebSocketURL string `json:"websocket_url,omitempty"`
	// VVURL is the virt-viewer file of the VM (GET, bearer token).
	VVURL string `json:"vv_url,omitempty"`
	// BrowserURL opens the display in a browser (noVNC, served by
	// gpuvmd); VNC only.
	BrowserURL string `json:"browser_url,omitempty"`
	// Direct is where QEMU itself listens, for admins only (and useful only
	// when the display listens on an address they can reach).
	Direct *Console `json:"direct,omitempty"`
	// Desktop is how the VM's profile says people work on it
	// (profile.desktop): the display console above, or a server in the
	// guest reached through gpuvmd's tunnels. Absent when the VM's profile
	// no longer exists.
	Desktop *Desktop `json:"desktop,omitempty"`
	// GPUDisplay says whether the display shows the VM's GPU: "emulated"
	// (QEMU's emulated card only: what a vGPU, a MIG slice or a whole GPU
	// renders is not on it) or "vgpu" (profile.display.vgpu_display: the
	// vGPU's own framebuffer is shown through the display). Absent for a
	// VM without a GPU.
	GPUDisplay string `json:"gpu_display,omitempty"`
	// Notes are messages for people about what the console shows and how
	// to work on the VM.
	Notes []string `json:"notes,omitempty"`
}

// TunnelRequest is the body of POST /v1/vms/{id}/tunnel. Unknown fields are
// refused.
type TunnelRequest struct {
	// Port is the guest's port to reach: 1–65535 (TCP: 22 ssh, 3389 RDP,
	// 5900 a VNC server in the guest, 8443 NICE DCV, 47984/47989/48010
	// Sunshine; UDP: 47998–48000 Sunshine's video, control and audio,
	// 8443 DCV's QUIC, 4172 PCoIP).
	Port int `json:"port"`
	// Protocol is TunnelTCP (the default when empty) or TunnelUDP.
	Protocol string `json:"protocol,omitempty"`
}

// Tunnel protocols.
const (
	// TunnelTCP: the websocket carries one TCP connection's bytes.
	TunnelTCP = "tcp"
	// TunnelUDP: the websocket carries datagrams, one binary message
	// each, to and from a UDP socket of gpuvmd connected to the guest's
	// port.
	TunnelUDP = "udp"
)

// TunnelResponse is the answer to POST /v1/vms/{id}/tunnel: a one-time
// ticket that opens one websocket, forwarded to Port of the guest.
type TunnelResponse struct {
	VMID      string    `json:"vm_id"`
	Port      int       `json:"port"`
	Protocol  string    `json:"protocol"`
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
	// WebSocketURL is gpuvmd's websocket to the guest's port. TCP:
	// ws(s)://HOST/v1/tunnel/ws?vm=ID&ticket=T, binary messages carry
	// the TCP stream. UDP: ws(s)://HOST/v1/tunnel/udp/ws?vm=ID&ticket=T,
	// each binary message is one datagram, whole (its length is the
	// message's), either way.
	WebSocketURL string `json:"websocket_url"`
}

// VVContentType is the media type of a virt-viewer connection file.
const VVContentType = "application/x-virt-viewer"
