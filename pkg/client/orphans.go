package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Orphans lists what the server's host has that looks like gpuvm's but is
// not provably its installation's (admins only).
func (c *Client) Orphans(ctx context.Context) (*api.OrphanList, error) {
	var out api.OrphanList
	if err := c.do(ctx, http.MethodGet, "/v1/admin/orphans", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteOrphan deletes an orphan (admins only) and returns what it was.
func (c *Client) DeleteOrphan(ctx context.Context, id string) (*api.Orphan, error) {
	var out api.Orphan
	if err := c.do(ctx, http.MethodDelete, "/v1/admin/orphans/"+url.PathEscape(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AdoptOrphan makes an orphaned domain of the server's installation a VM
// again (admins only).
func (c *Client) AdoptOrphan(ctx context.Context, id string, req api.AdoptRequest) (*api.VM, error) {
	var out api.VM
	if err := c.do(ctx, http.MethodPost, "/v1/admin/orphans/"+url.PathEscape(id)+"/adopt", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AdoptVolume makes an orphaned data disk (its "pool/name" or file name) a
// detached data disk of req.Owner (admin).
func (c *Client) AdoptVolume(ctx context.Context, req api.AdoptVolumeRequest) (*api.Volume, error) {
	var out api.Volume
	if err := c.do(ctx, http.MethodPost, "/v1/admin/volumes/adopt", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
