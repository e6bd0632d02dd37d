package config

// What a profile's VMs offer people: a desktop, the display console, the
// guest's network (SSH, tunnels), a one-time desktop password. The API
// (api.VMAccess), the CLI and the portal offer exactly this.

// DesktopOffered is the protocol of the desktop the profile gives people
// to work on, "" for none: a server in the guest (rdp, sunshine, dcv), or
// the display console (vnc, spice) when the profile's desktop block names
// it, when the vGPU draws on the display (vgpu_display), or for a Windows
// guest (which draws its desktop on any display). The display of a Linux
// guest with no desktop block is only the boot console.
func (p *Profile) DesktopOffered() string {
	d := p.Desktop
	switch {
	case d.Tunneled():
		return d.Protocol
	case d.Protocol != DesktopVNC && d.Protocol != DesktopSPICE:
		return ""
	case d.Declared, p.Display.VGPUDisplay, p.OS == "windows":
		return d.Protocol
	}
	return ""
}

// ConsoleOffered is the display console's protocol (vnc or spice), "" when
// the profile has no display.
func (p *Profile) ConsoleOffered() string {
	if p.Display.Type == "vnc" || p.Display.Type == "spice" {
		return p.Display.Type
	}
	return ""
}

// NetworkOffered reports whether the guest has a network, through which
// gpuvmd's tunnels (gpuvm ssh, gpuvm tunnel) reach it.
func (p *Profile) NetworkOffered() bool { return p.Network.Type != "none" }

// UsesPassword reports whether the profile's VMs get a one-time desktop
// password: its cloud-init template sets it in the guest (password_hash),
// or its desktop takes the VM's credentials (sunshine, credentials =
// "vm"). Without either the password would work nowhere, so gpuvmd makes
// none.
func (p *Profile) UsesPassword() bool {
	return (p.CloudInit != nil && p.CloudInit.password) || p.Desktop.Credentials == CredentialsVM
}
