package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Images lists the stored images (GET /v1/images): every field for admins,
// name, version, OS, firmware, format and size for users.
func (c *Client) Images(ctx context.Context) (*api.ImageList, error) {
	var out api.ImageList
	if err := c.do(ctx, http.MethodGet, "/v1/images", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ImportImage imports a file on the server's host as a new image (POST
// /v1/admin/images). It returns when the copy is stored, or refused.
func (c *Client) ImportImage(ctx context.Context, req api.ImportImageRequest) (*api.Image, error) {
	var out api.Image
	if err := c.do(ctx, http.MethodPost, "/v1/admin/images", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PublishImage turns a stopped VM's disk into the next version of an image
// (POST /v1/admin/images/publish).
func (c *Client) PublishImage(ctx context.Context, req api.PublishImageRequest) (*api.Image, error) {
	var out api.Image
	if err := c.do(ctx, http.MethodPost, "/v1/admin/images/publish", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteImage deletes NAME (every version) or NAME@VERSION (DELETE
// /v1/admin/images/{ref}).
func (c *Client) DeleteImage(ctx context.Context, ref string) (*api.DeletedImages, error) {
	var out api.DeletedImages
	if err := c.do(ctx, http.MethodDelete, "/v1/admin/images/"+url.PathEscape(ref), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
