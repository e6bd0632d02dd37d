package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// seed is the cloud-init NoCloud seed of a VM whose profile has a
// cloud_init block (nil otherwise): the guest user is the owner's login
// from the VM's credential (cloudinit.LoginName of the owner for a VM made
// without one) with the SSH keys of the create request and, when the VM has
// a one-time desktop password, its SHA-512 crypt hash — never the password.
// The profile's template renders the user-data; meta-data and
// network-config come from the built-in templates.
func (lc *lifecycle) seed(ctx context.Context, set lifecycleSettings, p *config.Profile, vm *store.VM) (*cloudinit.Config, error) {
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
	ud, err := set.RenderCloudInit(p, config.CloudInitInput{User: c.User, Hostname: c.Hostname, SSHAuthorizedKeys: c.SSHKeys,
		VMID: vm.ID, VMName: vm.Name, PasswordHash: c.PasswordHash})
	if err != nil {
		return nil, err
	}
	c.UserData = ud
	return c, nil
}
