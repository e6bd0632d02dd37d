package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// rawBody is a request body sent as its bytes (application/octet-stream).
type rawBody []byte

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

// UploadOffset is where the upload for image name ends on the server (GET
// /v1/admin/images/uploads/{name}); 0 when none is started.
func (c *Client) UploadOffset(ctx context.Context, name string) (int64, error) {
	var out api.Upload
	err := c.do(ctx, http.MethodGet, "/v1/admin/images/uploads/"+url.PathEscape(name), nil, nil, nil, &out)
	if p := (*Problem)(nil); errors.As(err, &p) && p.Status == http.StatusNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return out.Offset, nil
}

// UploadChunk sends chunk as the bytes of the upload for image name from
// offset (PUT /v1/admin/images/uploads/{name}) and returns the new end.
func (c *Client) UploadChunk(ctx context.Context, name string, offset int64, chunk []byte) (int64, error) {
	var out api.Upload
	hdr := http.Header{api.UploadOffsetHeader: {strconv.FormatInt(offset, 10)}}
	if err := c.do(ctx, http.MethodPut, "/v1/admin/images/uploads/"+url.PathEscape(name), nil, hdr, rawBody(chunk), &out); err != nil {
		return 0, err
	}
	return out.Offset, nil
}

// DiscardUpload abandons the upload for image name.
func (c *Client) DiscardUpload(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/admin/images/uploads/"+url.PathEscape(name), nil, nil, nil, nil)
}
