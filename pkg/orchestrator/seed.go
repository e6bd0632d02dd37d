package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/licensing"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/windows"
)

// seed is the cloud-init NoCloud seed of a VM whose profile has a
// cloud_init block (nil otherwise): the guest user is the owner's login
// from the VM's credential (cloudinit.LoginName of the owner for a VM made
// without one) with the SSH keys of the create request and, when the VM has
// a one-time desktop password, its SHA-512 crypt hash — never the password.
// The profile's template renders the user-data; meta-data and
// network-config come from the built-in templates. A VM that holds a GPU
// (kind: that of its first device, "" for none) of a licensed profile
// gets the licensing script as vendor-data (pkg/licensing). A VM with a
// home (home.go) gets the vendor-data that mounts it, and its template the
// owner's uid.
func (lc *lifecycle) seed(ctx context.Context, set lifecycleSettings, p *config.Profile, vm *store.VM, kind gpu.Kind, home *vmHome, shares []vmShare) (*cloudinit.Config, error) {
	if p == nil || p.CloudInit == nil {
		return nil, nil
	}
	var spec struct {
		SSHKeys []string `json:"ssh_keys"`
	}
	if vm.Spec != "" {
		if err := json.Unmarshal([]byte(vm.Spec), &spec); err != nil {
			return nil, fmt.Errorf("vm %s: its recorded request: %w", vm.ID, err)
		}
	}
	c := &cloudinit.Config{InstanceID: vm.ID, Hostname: vm.Name, User: cloudinit.LoginName(vm.Owner), SSHKeys: spec.SSHKeys,
		VMID: vm.ID, Owner: vm.Owner}
	cr, err := lc.st.GetVMCredential(ctx, vm.ID)
	switch {
	case err == nil:
		c.User, c.PasswordHash = cr.Login, cr.PasswordHash
	case !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	in := config.CloudInitInput{User: c.User, Hostname: c.Hostname, SSHAuthorizedKeys: c.SSHKeys,
		VMID: vm.ID, VMName: vm.Name, PasswordHash: c.PasswordHash}
	if home != nil {
		in.UID = home.uid
		if err := homeInSeed(c, p, vm, home); err != nil {
			return nil, err
		}
	}
	for _, s := range shares {
		c.Shares = append(c.Shares, s.mount)
	}
	ud, err := set.RenderCloudInit(p, in)
	if err != nil {
		return nil, err
	}
	c.UserData = ud
	if c.Task, err = lc.seedTask(ctx, vm); err != nil { // tasks.go
		return nil, err
	}
	if err := licenseGuest(c, p, kind); err != nil {
		return nil, fmt.Errorf("vm %s: %w", vm.ID, err)
	}
	return c, nil
}

// homeInSeed tells the guest where its owner's home is: a Linux guest's
// vendor-data mounts it at its path (cloudinit.Home); a Windows guest's
// image, built with WinFsp, mounts what the seed's windows.MountsFile
// lists, the home on windows.HomeDrive (docs/windows.md, "Homes").
func homeInSeed(c *cloudinit.Config, p *config.Profile, vm *store.VM, home *vmHome) error {
	if p.OS != "windows" {
		c.Home = &cloudinit.Home{Tag: home.fs.Tag, Mount: home.mount, UID: home.uid}
		return nil
	}
	b, err := windows.MountsJSON([]windows.Mount{{Tag: home.fs.Tag, Drive: windows.HomeDrive, Name: vm.Owner + "'s home"}})
	if err != nil {
		return fmt.Errorf("vm %s: %w", vm.ID, err)
	}
	c.Extra = append(c.Extra, cloudinit.File{Name: windows.MountsFile, Data: b})
	return nil
}

// newHostKey makes the SSH host key of a VM whose profile gives its Linux
// guest a cloud-init seed (nil, nil for any other), and the VM's spec with
// the key's public half as ssh_host_keys, which the API shows ('gpuvm ssh'
// trusts it). The private half goes into the seed only: the database, the
// API and the logs never have it.
func newHostKey(p *config.Profile, vm *store.VM) (*cloudinit.HostKey, *string, error) {
	if p == nil || p.CloudInit == nil || p.OS == "windows" {
		return nil, nil, nil
	}
	k, err := cloudinit.NewHostKey("gpuvm-" + vm.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("vm %s: %w", vm.ID, err)
	}
	spec := map[string]json.RawMessage{}
	if vm.Spec != "" {
		if err := json.Unmarshal([]byte(vm.Spec), &spec); err != nil {
			return nil, nil, fmt.Errorf("vm %s: its recorded request: %w", vm.ID, err)
		}
	}
	keys, err := json.Marshal([]string{k.Public})
	if err != nil {
		return nil, nil, err
	}
	spec[SpecHostKeys] = keys
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("vm %s: %w", vm.ID, err)
	}
	out := string(b)
	return k, &out, nil
}

// SpecHostKeys is the key of a VM's spec that holds the public halves of
// the SSH host keys gpuvm made for its guest.
const SpecHostKeys = "ssh_host_keys"

// WindowsLicensingScript is the name of a Windows guest's licensing
// script in its seed: cloudbase-init reads no vendor-data
// (cloudbase/cloudbase-init#67), so the unattended install's first logon
// (or a cloudbase-init LocalScripts entry of the image) runs it from the
// seed's drive.
const WindowsLicensingScript = "gpuvm-licensing.ps1"

// licenseGuest adds the licensing script to the seed of a guest of p that
// holds a GPU of kind (nothing when it needs none): a Linux guest's
// vendor-data, a Windows guest's WindowsLicensingScript. The token is read
// now, so that a token the admin replaced is used by the next VM without
// a reload.
func licenseGuest(c *cloudinit.Config, p *config.Profile, kind gpu.Kind) error {
	l := p.Licensing
	if l == nil || !l.Enabled || kind == "" {
		return nil
	}
	tok, err := licensing.ReadToken(l.TokenFile)
	if err != nil {
		return fmt.Errorf("profile %s (licensing at %s): %w", p.Name, l.Source, err)
	}
	g := licensing.Guest{Token: tok, FeatureType: licensing.FeatureType(l, kind, p.Desktop.Tunneled())}
	if p.OS == "windows" {
		b, err := licensing.WindowsScript(g)
		c.Extra = append(c.Extra, cloudinit.File{Name: WindowsLicensingScript, Data: b})
		return err
	}
	b, err := licensing.LinuxScript(g)
	c.VendorData = string(b)
	return err
}
