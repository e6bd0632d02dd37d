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
	// Port is the guest's TCP port to reach: 1–65535 (22 ssh, 3389 RDP,
	// 5900 a VNC server in the guest, 8443 NICE DCV, 47990 Sunshine...).
	Port int `json:"port"`
}

// TunnelResponse is the answer to POST /v1/vms/{id}/tunnel: a one-time
// ticket that opens one websocket, forwarded to Port of the guest.
type TunnelResponse struct {
	VMID      string    `json:"vm_id"`
	Port      int       `json:"port"`
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
	// WebSocketURL is gpuvmd's websocket to the guest's port
	// (ws(s)://HOST/v1/tunnel/ws?vm=ID&ticket=T); binary frames carry
	// the TCP stream.
	WebSocketURL string `json:"websocket_url"`
}

// VVContentType is the media type of a virt-viewer connection file.
const VVContentType = "application/x-virt-viewer"
