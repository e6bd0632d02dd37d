package client

import (
	"context"
	"net/http"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Login signs in with a directory account's name and password (POST
// /v1/login) and answers the session token; the client's own token is not
// sent.
func (c *Client) Login(ctx context.Context, username, password string) (*api.LoginResponse, error) {
	anon := *c
	anon.token = ""
	var out api.LoginResponse
	if err := anon.do(ctx, http.MethodPost, "/v1/login", nil, nil, api.LoginRequest{Username: username, Password: password}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Logout revokes the client's token, a sign-in's session (POST
// /v1/logout).
func (c *Client) Logout(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/logout", nil, nil, nil, nil)
}
