package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// ListHomes reads the caller's home (an admin's: every home).
func (c *Client) ListHomes(ctx context.Context) (*api.HomeList, error) {
	var out api.HomeList
	if err := c.do(ctx, http.MethodGet, "/v1/homes", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteHome deletes user's home and everything in it; confirm is the
// person's name typed again.
func (c *Client) DeleteHome(ctx context.Context, user, confirm string) error {
	return c.do(ctx, http.MethodDelete, "/v1/homes/"+url.PathEscape(user), url.Values{"confirm": {confirm}}, nil, nil, nil)
}
