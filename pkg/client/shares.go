package client

import (
	"context"
	"net/http"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// ListShares lists the shares the caller may mount, with their mode (an
// admin's: every share).
func (c *Client) ListShares(ctx context.Context) (*api.ShareList, error) {
	var out api.ShareList
	if err := c.do(ctx, http.MethodGet, "/v1/shares", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
