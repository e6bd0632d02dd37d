package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// StartVM asks for a stopped VM (by ID, or by name among the caller's live
// VMs) to start again. The answer comes at once (202) with the start
// operation; WaitOperation follows it (a VM with a GPU waits in the queue
// for one first: the operation ends when the VM runs). A VM that is not stopped, or has an
// unfinished operation, is a conflict (ErrConflict).
func (c *Client) StartVM(ctx context.Context, idOrName string) (*api.VMActionResponse, error) {
	return c.vmAction(ctx, idOrName, api.ActionStart)
}

// StopVM asks for a running VM to shut down (forced off when the guest does
// not power off in time) and give its GPU back; it keeps its disk, and its
// lease runs on. The answer and the errors are as StartVM's.
func (c *Client) StopVM(ctx context.Context, idOrName string) (*api.VMActionResponse, error) {
	return c.vmAction(ctx, idOrName, api.ActionStop)
}

// RebootVM asks a running VM's guest to restart; it stays running. The
// answer and the errors are as StartVM's.
func (c *Client) RebootVM(ctx context.Context, idOrName string) (*api.VMActionResponse, error) {
	return c.vmAction(ctx, idOrName, api.ActionReboot)
}

// ExtendVM adds hours to a VM's lease and returns the VM as it is now. More
// than the profile's maximum lease in all is a validation problem
// (ErrValidation, field "hours") that names the maximum.
func (c *Client) ExtendVM(ctx context.Context, idOrName string, hours int) (*api.VM, error) {
	var out api.VM
	err := c.do(ctx, http.MethodPost, actionPath(idOrName, api.ActionExtend), nil, nil, api.ExtendVMRequest{Hours: hours}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) vmAction(ctx context.Context, idOrName, action string) (*api.VMActionResponse, error) {
	var out api.VMActionResponse
	if err := c.do(ctx, http.MethodPost, actionPath(idOrName, action), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func actionPath(idOrName, action string) string {
	return "/v1/vms/" + url.PathEscape(idOrName) + "/actions/" + action
}

// ResizeVM moves a stopped VM to another profile (api.ActionResize). With
// req.DryRun it returns the plan alone and changes nothing; otherwise the
// plan, the VM and the queued resize operation. A refusal is a problem
// naming the field: a VM that is not stopped ErrConflict, an unknown
// profile ErrNotFound, a profile not open to the owner or one the sharing
// policy refuses ErrForbidden, another image or a smaller disk
// ErrValidation.
func (c *Client) ResizeVM(ctx context.Context, idOrName string, req api.ResizeVMRequest) (*api.ResizeVMResponse, error) {
	var out api.ResizeVMResponse
	if err := c.do(ctx, http.MethodPost, actionPath(idOrName, api.ActionResize), nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
