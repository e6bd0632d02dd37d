package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The desktop part of GET /v1/vms/{id}/console: how the VM's profile says
// people work on it (profile.desktop), and whether its display shows its
// GPU.

// desktopLocalHost is where the links of a tunneled desktop assume the
// local end of the tunnels ('gpuvm desktop' listens there, at the guest's
// port numbers).
const desktopLocalHost = "127.0.0.1"

// vmProfile is the VM's profile as configured now; nil when it is gone or
// gpuvmd has no configuration.
func (s *Server) vmProfile(vm *store.VM) *config.Profile {
	if s.Config == nil {
		return nil
	}
	cfg := s.Config.Load()
	if cfg == nil {
		return nil
	}
	return cfg.Profiles[vm.Profile]
}

// vmAccess is what a VM of profile p offers people (api.VM's Access); nil
// when the profile no longer exists.
func vmAccess(p *config.Profile) *api.VMAccess {
	if p == nil {
		return nil
	}
	net := p.NetworkOffered()
	// Sunshine's web UI credentials, when they are the VM's, are read by
	// gpuvm desktop --pin itself: shown to the owner they would be spent.
	shown := p.UsesPassword() && p.Desktop.Credentials != config.CredentialsVM
	return &api.VMAccess{Desktop: p.DesktopOffered(), Console: p.ConsoleOffered(), SSH: net, Tunnels: net, Password: shown}
}

// passwordsRead marks, in the VMs' access, the one-time passwords that
// were read: none is left to offer. A failed read leaves the offers as the
// profiles say (the credentials route answers the truth).
func (s *Server) passwordsRead(ctx context.Context, vms ...*api.VM) {
	var ids []string
	for _, vm := range vms {
		if vm.Access != nil && vm.Access.Password {
			ids = append(ids, vm.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	read, err := s.Store.CredentialsReadAt(ctx, ids)
	if err != nil {
		s.log.Warn("read which desktop passwords were read", "err", err)
		return
	}
	for _, vm := range vms {
		if at, ok := read[vm.ID]; ok && vm.Access != nil {
			vm.Access.Password, vm.Access.PasswordReadAt = false, &at
		}
	}
}

// desktopTunneled reports whether the profile's desktop is a server in the
// guest (so that a VM without a display still has a way in).
func desktopTunneled(p *config.Profile) bool { return p != nil && p.Desktop.Tunneled() }

// desktopAnswer is the Desktop of a ConsoleResponse; display is the live
// display's protocol ("" when the VM has none).
func desktopAnswer(p *config.Profile, vm *store.VM, httpBase, display string) *api.Desktop {
	if p == nil {
		return nil
	}
	d := p.Desktop
	out := &api.Desktop{Protocol: d.Protocol, Command: "gpuvm desktop " + vm.Name}
	local := func(port int) string { return net.JoinHostPort(desktopLocalHost, strconv.Itoa(port)) }
	if d.Tunneled() {
		out.TunnelURL = vmURL(httpBase, vm.ID, "/tunnel")
		out.LocalHost = desktopLocalHost
		for _, q := range d.Ports() {
			out.Ports = append(out.Ports, api.DesktopPort{Port: q.Port, Transport: q.Transport, Use: q.Use})
		}
	}
	switch d.Protocol {
	case config.DesktopVNC, config.DesktopSPICE:
		out.Command = "gpuvm console " + vm.Name
		out.Message = fmt.Sprintf("The desktop is the display console (%s): open it with the websocket, the virt-viewer file or the browser link of this answer, or with '%s'.", d.Protocol, out.Command)
		if display == "" {
			out.Message = fmt.Sprintf("The desktop is the display console (%s), but the VM has no display now.", d.Protocol)
		}
	case config.DesktopNone:
		out.Command = "gpuvm ssh " + vm.Name
		out.Message = "The profile has neither a display nor a desktop: reach the guest with 'gpuvm ssh' or 'gpuvm tunnel'."
	case config.DesktopRDP:
		out.RDPFile = string(rdpFile(local(d.Port), ""))
		out.Message = fmt.Sprintf("Remote Desktop (RDP) listens on port %d of the guest. '%s' (or 'gpuvm rdp %s') tunnels it to %s and starts your RDP client, or writes an .rdp file; by hand: POST %s with {\"port\": %d} (gpuvm tunnel %s %d --local-port %d) and open rdp_file.",
			d.Port, out.Command, vm.Name, local(d.Port), out.TunnelURL, d.Port, vm.Name, d.Port, d.Port)
	case config.DesktopDCV:
		out.Session = d.Session
		out.WebURL = "https://" + local(d.Port) + "/#" + d.Session
		out.Link = "dcv://" + local(d.Port) + "/#" + d.Session
		out.Message = fmt.Sprintf("Amazon DCV listens on port %d of the guest. '%s' tunnels it to %s; then open web_url in a browser or link in DCV's client. With an authentication token from the guest's DCV (an external authenticator such as dcvsimpleextauth), add ?authToken=TOKEN before the '#' (gpuvm desktop --auth-token); without one DCV asks for the guest user's password. DCV's QUIC (UDP) transport does not pass gpuvmd's TCP tunnels: the client falls back to its websocket.",
			d.Port, out.Command, local(d.Port))
	case config.DesktopSunshine:
		out.WebURL = "https://" + local(d.WebPort) + "/"
		out.PairURL = "https://" + local(d.WebPort) + "/api/pin"
		out.Credentials = d.Credentials
		var tcp, udp []string
		for _, q := range d.Ports() {
			if q.Use == "web" {
				continue
			}
			if q.Transport == "tcp" {
				tcp = append(tcp, strconv.Itoa(q.Port))
			} else {
				udp = append(udp, strconv.Itoa(q.Port))
			}
		}
		out.Message = fmt.Sprintf("Sunshine streams from the guest to Moonlight on TCP %s and UDP %s, its web UI on TCP %d. '%s' tunnels them to %s at the same ports; add the host %s in Moonlight. Pairing: Moonlight shows a PIN; give it with '%s --pin NNNN' (gpuvm POSTs it to Sunshine's /api/pin with the web UI's credentials) or type it in the web UI (web_url, /pin).",
			strings.Join(tcp, ", "), strings.Join(udp, ", "), d.WebPort, out.Command, desktopLocalHost, desktopLocalHost, out.Command)
	}
	return out
}

// gpuDisplay says whether the display shows the profile's GPU, and the
// note that tells people.
func gpuDisplay(p *config.Profile) (string, []string) {
	if p == nil || p.GPU == nil {
		return "", nil
	}
	if p.Display.VGPUDisplay {
		return "vgpu", []string{"The display shows the vGPU's own framebuffer (vgpu_display, libvirt's <hostdev display='on'>): what the vGPU renders is on the console."}
	}
	what := "a vGPU's"
	switch p.GPU.Kind {
	case gpu.KindMIG:
		what = "a MIG-backed vGPU's"
	case gpu.KindPassthrough:
		what = "a passed-through GPU's"
	case gpu.KindAny:
		what = "the GPU's"
	}
	note := "QEMU's emulated display does not show " + what + " framebuffer: the console shows the boot screens and what the guest draws on the emulated card, not 3D work on the GPU."
	switch {
	case p.Desktop.Tunneled():
		note += fmt.Sprintf(" Work on the desktop (%s) instead.", p.Desktop.Protocol)
	case p.GPU.Kind == gpu.KindPassthrough:
		note += " Use a desktop server in the guest (profile.desktop: rdp, sunshine or dcv)."
	default:
		note += " Use a desktop server in the guest (profile.desktop: rdp, sunshine or dcv), or display { vgpu_display = true } where NVIDIA's driver supports a display for the vGPU (an mdev vGPU: libvirt's <hostdev display='on'>)."
	}
	return "emulated", []string{note}
}

// rdpFile is a Remote Desktop connection file for a server at addr
// (host:port), with the user name when not empty. Lines end in CRLF, as
// Windows' client writes them; the client asks for the credentials (the
// password is never in the file), and connects to a server whose
// certificate it cannot verify (xrdp's own, Windows' self-signed one) after
// asking.
func rdpFile(addr, user string) []byte {
	var b strings.Builder
	b.WriteString("full address:s:" + addr + "\r\n")
	if user = strings.NewReplacer("\r", "", "\n", "").Replace(user); user != "" {
		b.WriteString("username:s:" + user + "\r\n")
	}
	b.WriteString("prompt for credentials:i:1\r\nscreen mode id:i:1\r\nauthentication level:i:2\r\n")
	return []byte(b.String())
}

// desktopAPIRoutes document the desktop file route (apiRoutes).
var desktopAPIRoutes = []route{
	{Method: "GET", Path: "/v1/vms/{id}/desktop.rdp", Summary: "The Remote Desktop file of a VM whose profile's desktop is rdp: full address is the local end of the tunnel that 'gpuvm tunnel VM PORT --local-port PORT' (or 'gpuvm rdp VM') opens, 127.0.0.1 at the guest's RDP port, since the guest is reached through gpuvmd; username is the VM's guest user; never a password. 409 when the desktop is not RDP",
		Auth: authUser, Params: []param{pVM}, Status: 200, Answer: "", ContentType: api.RDPContentType, Errors: []int{404, 409}},
}

// getDesktopRDP answers GET /v1/vms/{id}/desktop.rdp: the .rdp file of a VM
// whose profile's desktop is RDP, for the tunnel 'gpuvm rdp' or 'gpuvm
// tunnel' opens on 127.0.0.1 at the guest's port. It is the same file
// whatever the VM's state (it connects while the VM runs and the tunnel is
// open) and holds no secret: the user name, not the password.
func (s *Server) getDesktopRDP(c *gin.Context) {
	vm, ok := s.findVM(c)
	if !ok {
		return
	}
	if vm.State == store.VMDeleted {
		s.writeProblem(c, with(errNotFound, "VM "+strconv.Quote(vm.Name)+" is deleted"))
		return
	}
	p := s.vmProfile(vm)
	switch {
	case p == nil:
		s.writeProblem(c, with(errConflict, fmt.Sprintf("the profile %q of VM %q no longer exists: its desktop is not known", vm.Profile, vm.Name)))
		return
	case p.Desktop.Protocol != config.DesktopRDP:
		s.writeProblem(c, with(errConflict, fmt.Sprintf("the desktop of VM %q is %s (profile %s), not RDP: there is no .rdp file; GET /v1/vms/{id}/console says how to reach it",
			vm.Name, p.Desktop.Protocol, p.Name)))
		return
	}
	login := cloudinit.LoginName(vm.Owner)
	cr, err := s.Store.GetVMCredential(c.Request.Context(), vm.ID)
	switch {
	case err == nil:
		login = cr.Login
	case errors.Is(err, store.ErrNotFound): // a VM made before gpuvmd made credentials
	default:
		s.writeProblem(c, fmt.Errorf("reading the guest user of VM %s: %w", vm.Name, err))
		return
	}
	body := rdpFile(net.JoinHostPort(desktopLocalHost, strconv.Itoa(p.Desktop.Port)), login)
	c.Header("Content-Disposition", `attachment; filename="`+vm.Name+`.rdp"`)
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, api.RDPContentType, body)
}
