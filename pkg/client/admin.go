package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Whoami gets the caller: name, admin or not, groups.
func (c *Client) Whoami(ctx context.Context) (*api.User, error) {
	var out api.User
	if err := c.do(ctx, http.MethodGet, "/v1/whoami", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListUsers lists every user by name (admins only).
func (c *Client) ListUsers(ctx context.Context) ([]api.User, error) {
	var out api.UserList
	if err := c.do(ctx, http.MethodGet, "/v1/users", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// GetUser gets a user: admins any, a user only themself (others are not
// found).
func (c *Client) GetUser(ctx context.Context, name string) (*api.User, error) {
	var out api.User
	if err := c.do(ctx, http.MethodGet, "/v1/users/"+url.PathEscape(name), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateUser adds a user (admins only); a taken name is a conflict.
func (c *Client) CreateUser(ctx context.Context, req api.CreateUserRequest) (*api.User, error) {
	var out api.User
	if err := c.do(ctx, http.MethodPost, "/v1/users", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListTokens lists a user's tokens, newest first, revoked and expired ones
// included (admins: anyone's; users: their own).
func (c *Client) ListTokens(ctx context.Context, user string) ([]api.Token, error) {
	var out api.TokenList
	if err := c.do(ctx, http.MethodGet, "/v1/users/"+url.PathEscape(user)+"/tokens", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// CreateToken makes a token for a user (admins: anyone; users: themself).
// The answer's Secret is the token: it is never shown again.
func (c *Client) CreateToken(ctx context.Context, user string, req api.CreateTokenRequest) (*api.CreatedToken, error) {
	var out api.CreatedToken
	if err := c.do(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(user)+"/tokens", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeToken revokes a user's token by its ID; revoking a revoked token
// is no error.
func (c *Client) RevokeToken(ctx context.Context, user string, id int64) error {
	return c.do(ctx, http.MethodDelete, fmt.Sprintf("/v1/users/%s/tokens/%d", url.PathEscape(user), id), nil, nil, nil, nil)
}

// ListHosts lists the gpuvmd hosts with their state and free capacity.
func (c *Client) ListHosts(ctx context.Context) ([]api.Host, error) {
	var out api.HostList
	if err := c.do(ctx, http.MethodGet, "/v1/hosts", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// DrainGPU drains a GPU of the server (admins only): it takes no new VMs,
// what it holds keeps running. Draining a drained GPU replaces the reason.
func (c *Client) DrainGPU(ctx context.Context, address, reason string) (*api.GPUDrainState, error) {
	var out api.GPUDrainState
	err := c.do(ctx, http.MethodPost, "/v1/admin/gpus/"+url.PathEscape(address)+"/drain", nil, nil, api.DrainRequest{Reason: reason}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// DrainHost drains a node of the fleet (admins only): it takes no new VMs;
// the VMs on it stay there (the answer names them).
func (c *Client) DrainHost(ctx context.Context, name string) (*api.HostDrainState, error) {
	var out api.HostDrainState
	if err := c.do(ctx, http.MethodPost, "/v1/admin/hosts/"+url.PathEscape(name)+"/drain", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UndrainHost lets a drained node take VMs again (admins only); a node that
// is not drained is not found.
func (c *Client) UndrainHost(ctx context.Context, name string) (*api.HostDrainState, error) {
	var out api.HostDrainState
	if err := c.do(ctx, http.MethodDelete, "/v1/admin/hosts/"+url.PathEscape(name)+"/drain", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UndrainGPU lets a drained GPU take VMs again (admins only); a GPU that
// is not drained is not found.
func (c *Client) UndrainGPU(ctx context.Context, address string) (*api.GPUDrainState, error) {
	var out api.GPUDrainState
	if err := c.do(ctx, http.MethodDelete, "/v1/admin/gpus/"+url.PathEscape(address)+"/drain", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AnnounceDriverChange announces a change of the hosts' NVIDIA vGPU
// manager (admins only): the owners of the VMs that hold a vGPU are told,
// and offered a snapshot, until then.
func (c *Client) AnnounceDriverChange(ctx context.Context, req api.DriverChangeRequest) (*api.DriverChange, error) {
	var out api.DriverChange
	if err := c.do(ctx, http.MethodPost, "/v1/admin/driver-changes", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DriverChanges lists the announced driver changes, the next first.
func (c *Client) DriverChanges(ctx context.Context) (*api.DriverChangeList, error) {
	var out api.DriverChangeList
	if err := c.do(ctx, http.MethodGet, "/v1/admin/driver-changes", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WithdrawDriverChange withdraws an announced driver change.
func (c *Client) WithdrawDriverChange(ctx context.Context, id string) (*api.DriverChange, error) {
	var out api.DriverChange
	if err := c.do(ctx, http.MethodDelete, "/v1/admin/driver-changes/"+url.PathEscape(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
