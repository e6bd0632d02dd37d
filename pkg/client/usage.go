package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// UsageOptions ask GET /v1/usage for a range and a grouping; zero values
// take the server's defaults (the last 30 days, by user).
type UsageOptions struct {
	From, To time.Time
	// By is one of api.UsageGroupings.
	By string
	// User restricts an admin's report to one user (a user sees only
	// their own anyway).
	User string
}

// Usage gets the GPU time held in a range, grouped, with the utilisation
// achieved: a user's own, an admin's everyone's.
func (c *Client) Usage(ctx context.Context, o UsageOptions) (*api.UsageReport, error) {
	q := rangeQuery(o.From, o.To)
	if o.By != "" {
		q.Set("by", o.By)
	}
	if o.User != "" {
		q.Set("user", o.User)
	}
	var out api.UsageReport
	if err := c.do(ctx, http.MethodGet, "/v1/usage", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReportOptions ask GET /v1/reports/summary for a range.
type ReportOptions struct {
	From, To time.Time
	// TZ is the IANA time zone of the weekday × hour heatmaps ("": the
	// server's).
	TZ string
	// IdleBelow is the utilisation (0..1) under which a VM is idle (0:
	// the server's default, 10%).
	IdleBelow float64
}

// ReportSummary gets everything the periodic review report shows (admins).
func (c *Client) ReportSummary(ctx context.Context, o ReportOptions) (*api.ReportSummary, error) {
	q := rangeQuery(o.From, o.To)
	if o.TZ != "" {
		q.Set("tz", o.TZ)
	}
	if o.IdleBelow > 0 {
		q.Set("idle_below", strconv.FormatFloat(o.IdleBelow, 'g', -1, 64))
	}
	var out api.ReportSummary
	if err := c.do(ctx, http.MethodGet, "/v1/reports/summary", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func rangeQuery(from, to time.Time) url.Values {
	q := url.Values{}
	if !from.IsZero() {
		q.Set("from", from.UTC().Format(time.RFC3339))
	}
	if !to.IsZero() {
		q.Set("to", to.UTC().Format(time.RFC3339))
	}
	return q
}
