package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// StartWindowsInstall has gpuvmd define and start an unattended Windows
// install (POST /v1/admin/images/windows-install).
func (c *Client) StartWindowsInstall(ctx context.Context, req api.WindowsInstallRequest) (*api.WindowsInstall, error) {
	var out api.WindowsInstall
	if err := c.do(ctx, http.MethodPost, "/v1/admin/images/windows-install", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WindowsInstall is the state of the install VM name (GET
// /v1/admin/images/windows-install/{name}).
func (c *Client) WindowsInstall(ctx context.Context, name string) (*api.WindowsInstall, error) {
	var out api.WindowsInstall
	if err := c.do(ctx, http.MethodGet, "/v1/admin/images/windows-install/"+url.PathEscape(name), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
