package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// ListAlertsOptions selects the alerts ListAlerts returns.
type ListAlertsOptions struct {
	State string // api.AlertFiring, api.AlertResolved, or "" for both
	Rule  string // "": every rule's
	// Limit is the page size (0: the server's default, 100); After the
	// Next of the previous page.
	Limit int
	After string
}

// ListAlerts gets a page of alerts, newest first (admins only).
func (c *Client) ListAlerts(ctx context.Context, o ListAlertsOptions) (*api.AlertList, error) {
	q := url.Values{}
	if o.State != "" {
		q.Set("state", o.State)
	}
	if o.Rule != "" {
		q.Set("rule", o.Rule)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	var out api.AlertList
	if err := c.do(ctx, http.MethodGet, "/v1/alerts", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
