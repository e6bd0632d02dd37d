package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

func snapshotsPath(vm string) string { return "/v1/vms/" + url.PathEscape(vm) + "/snapshots" }

// CreateSnapshot asks for a disk snapshot of a running or stopped VM; the
// answer holds the operation that takes it. Beyond the owner's limit it is
// a conflict naming the policy's rule.
func (c *Client) CreateSnapshot(ctx context.Context, vm, label string) (*api.SnapshotResponse, error) {
	var out api.SnapshotResponse
	if err := c.do(ctx, http.MethodPost, snapshotsPath(vm), nil, nil, api.CreateSnapshotRequest{Label: label}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSnapshots lists a VM's disk snapshots, oldest first.
func (c *Client) ListSnapshots(ctx context.Context, vm string) (*api.SnapshotList, error) {
	var out api.SnapshotList
	if err := c.do(ctx, http.MethodGet, snapshotsPath(vm), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RestoreSnapshot sets a stopped VM's disk back to a snapshot (its ID or
// label).
func (c *Client) RestoreSnapshot(ctx context.Context, vm, snap string) (*api.SnapshotResponse, error) {
	var out api.SnapshotResponse
	if err := c.do(ctx, http.MethodPost, snapshotsPath(vm)+"/"+url.PathEscape(snap)+"/restore", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSnapshot deletes a VM's snapshot (its ID or label).
func (c *Client) DeleteSnapshot(ctx context.Context, vm, snap string) (*api.SnapshotResponse, error) {
	var out api.SnapshotResponse
	if err := c.do(ctx, http.MethodDelete, snapshotsPath(vm)+"/"+url.PathEscape(snap), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
