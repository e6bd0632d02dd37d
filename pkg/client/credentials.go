package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Credentials gets a VM's one-time desktop password and guest user (the
// VM's owner only). The server gives it once: a second call is an *Error
// with status 410 (problem type api.ProblemBase+"credentials-read"). The
// request (POST /v1/vms/{id}/credentials: reading spends it) is never
// retried, so an answer lost on the way is lost for good.
func (c *Client) Credentials(ctx context.Context, idOrName string) (*api.CredentialsResponse, error) {
	var out api.CredentialsResponse
	if err := c.do(ctx, http.MethodPost, "/v1/vms/"+url.PathEscape(idOrName)+"/credentials", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
