package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Rules gets the policy in force written down for the caller, in lang ("en"
// or "zh-CN"; "": the server's choice from Accept-Language, English).
func (c *Client) Rules(ctx context.Context, lang string) (*api.Rules, error) {
	q := url.Values{}
	if lang != "" {
		q.Set("lang", lang)
	}
	var out api.Rules
	if err := c.do(ctx, http.MethodGet, "/v1/rules", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
