package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// ListAuditOptions selects the audit entries ListAudit and ListOwnAudit
// return; zero fields select everything.
type ListAuditOptions struct {
	User string // the user who acted (ListOwnAudit: only the caller)
	// VM is a VM's ID, or the name of one of the caller's VMs.
	VM string
	// Action is an action ("vm.create") or a kind ending in a dot ("vm.").
	Action string
	// From (included) and To (excluded) bound the entries' times.
	From, To time.Time
	// Limit is the page size (0: the server's default, 100; at most 500);
	// After the Next of the previous page.
	Limit int
	After string
}

func (o ListAuditOptions) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"user": o.User, "vm": o.VM, "action": o.Action, "after": o.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !o.From.IsZero() {
		q.Set("from", o.From.Format(time.RFC3339Nano))
	}
	if !o.To.IsZero() {
		q.Set("to", o.To.Format(time.RFC3339Nano))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}

// ListAudit gets a page of the audit log, newest first (admins only).
func (c *Client) ListAudit(ctx context.Context, o ListAuditOptions) (*api.AuditList, error) {
	var out api.AuditList
	if err := c.do(ctx, http.MethodGet, "/v1/admin/audit", o.query(), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListOwnAudit gets a page of the caller's own audit entries, newest first.
func (c *Client) ListOwnAudit(ctx context.Context, o ListAuditOptions) (*api.AuditList, error) {
	var out api.AuditList
	if err := c.do(ctx, http.MethodGet, "/v1/audit", o.query(), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
