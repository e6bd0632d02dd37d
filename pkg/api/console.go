package api

import "time"

// ConsoleResponse is the answer to GET /v1/vms/{id}/console: how to reach a
// running VM's display. Ticket is one-time and short-lived: it opens one
// connection, through WebSocketURL or BrowserURL (both carry it), before
// ExpiresAt.
type ConsoleResponse struct {
	VMID string `json:"vm_id"`
	// Protocol is the display's protocol: vnc or spice.
	Protocol  string    `json:"protocol"`
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
	// WebSocketURL is gpuvmd's websocket proxy to the display
	// (ws(s)://HOST/v1/console/ws?vm=ID&ticket=T); it takes binary frames.
	// For VNC, gpuvmd answers the display's password itself: the client
	// sees security type None.
	WebSocketURL string `json:"websocket_url"`
	// VVURL is the virt-viewer file of the VM (GET, bearer token).
	VVURL string `json:"vv_url"`
	// BrowserURL opens the display in a browser (noVNC, served by
	// gpuvmd); VNC only.
	BrowserURL string `json:"browser_url,omitempty"`
	// Direct is where QEMU itself listens, for admins only (and useful only
	// when the display listens on an address they can reach).
	Direct *Console `json:"direct,omitempty"`
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
