package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Data disks (/v1/volumes, docs/volumes.md). A volume is named by its ID
// or by its name among the caller's volumes.

func volumePath(ref string) string { return "/v1/volumes/" + url.PathEscape(ref) }

// ListVolumes lists the caller's data disks (and their home, when homes
// are on) with their disk quota.
func (c *Client) ListVolumes(ctx context.Context) (*api.VolumeList, error) {
	var out api.VolumeList
	if err := c.do(ctx, http.MethodGet, "/v1/volumes", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateVolume makes a data disk of size ("20GiB").
func (c *Client) CreateVolume(ctx context.Context, name, size string) (*api.Volume, error) {
	var out api.Volume
	if err := c.do(ctx, http.MethodPost, "/v1/volumes", nil, nil, api.CreateVolumeRequest{Name: name, Size: size}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetVolume reads one data disk.
func (c *Client) GetVolume(ctx context.Context, ref string) (*api.Volume, error) {
	var out api.Volume
	if err := c.do(ctx, http.MethodGet, volumePath(ref), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ResizeVolume grows a data disk to size.
func (c *Client) ResizeVolume(ctx context.Context, ref, size string) (*api.Volume, error) {
	var out api.Volume
	if err := c.do(ctx, http.MethodPost, volumePath(ref)+"/actions/resize", nil, nil, api.ResizeVolumeRequest{Size: size}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AttachVolume attaches a data disk to a queued or stopped VM.
func (c *Client) AttachVolume(ctx context.Context, ref, vm string) (*api.Volume, error) {
	var out api.Volume
	if err := c.do(ctx, http.MethodPost, volumePath(ref)+"/actions/attach", nil, nil, api.AttachVolumeRequest{VM: vm}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DetachVolume detaches a data disk from its VM.
func (c *Client) DetachVolume(ctx context.Context, ref string) (*api.Volume, error) {
	var out api.Volume
	if err := c.do(ctx, http.MethodPost, volumePath(ref)+"/actions/detach", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteVolume deletes a detached data disk and its data.
func (c *Client) DeleteVolume(ctx context.Context, ref string) error {
	return c.do(ctx, http.MethodDelete, volumePath(ref), nil, nil, nil, nil)
}
