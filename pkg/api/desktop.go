package api

// Desktop protocols (Desktop.Protocol).
const (
	DesktopVNC      = "vnc"
	DesktopSPICE    = "spice"
	DesktopRDP      = "rdp"
	DesktopSunshine = "sunshine"
	DesktopDCV      = "dcv"
	DesktopNone     = "none"
)

// RDPContentType is the media type of a Remote Desktop connection file
// (GET /v1/vms/{id}/desktop.rdp).
const RDPContentType = "application/x-rdp"

// Desktop is how people work on a VM, as its profile's desktop block says
// (ConsoleResponse.Desktop). For vnc and spice it is the display console
// (the rest of the ConsoleResponse); for rdp, sunshine and dcv a server in
// the guest, reached through gpuvmd's tunnels (POST TunnelURL with
// {"port": N} for each TCP port; 'gpuvm desktop VM' does it all). The
// links assume the tunnels listen locally on LocalHost at the guest's own
// port numbers, as 'gpuvm desktop' does.
type Desktop struct {
	// Protocol is vnc, spice, rdp, sunshine, dcv, or none (no display and
	// no desktop: SSH and tunnels only).
	Protocol string `json:"protocol"`
	// Ports are the guest's ports of the server; none for the display
	// console.
	Ports []DesktopPort `json:"ports,omitempty"`
	// TunnelURL is POST /v1/vms/{id}/tunnel (bearer token): a one-time
	// ticket to one of the ports.
	TunnelURL string `json:"tunnel_url,omitempty"`
	// Command is the gpuvm command that opens the desktop.
	Command string `json:"command"`
	// LocalHost is the local address the links below use (127.0.0.1).
	LocalHost string `json:"local_host,omitempty"`
	// RDPFile is a suggested Remote Desktop file (rdp) for a tunnel on
	// LocalHost at the guest's port.
	RDPFile string `json:"rdp_file,omitempty"`
	// WebURL is the server's web page through the tunnel: DCV's web
	// client, Sunshine's web UI.
	WebURL string `json:"web_url,omitempty"`
	// Link opens DCV's native client (dcv://HOST:PORT/#SESSION).
	Link string `json:"link,omitempty"`
	// Session is the DCV session the links open.
	Session string `json:"session,omitempty"`
	// PairURL is Sunshine's API that takes Moonlight's PIN (POST
	// {"pin": "NNNN", "name": "…"}, basic auth with the web UI's
	// credentials), through the tunnel to its web UI port.
	PairURL string `json:"pair_url,omitempty"`
	// Credentials is where the web UI's credentials come from (sunshine):
	// ask (the person gives them) or vm (the VM's one-time desktop
	// credentials).
	Credentials string `json:"credentials,omitempty"`
	// Message says, for people, how to reach the desktop.
	Message string `json:"message"`
}

// DesktopPort is one port of a desktop server in the guest.
type DesktopPort struct {
	Port int `json:"port"`
	// Transport is tcp or udp (udp needs UDP tunnels).
	Transport string `json:"transport"`
	// Use is what the port carries: rdp, dcv; for Sunshine https, http,
	// web, rtsp, video, control, audio.
	Use string `json:"use"`
}
