package client

import (
	"context"
	"net/http"
	"net/url"

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

// DeviceLogin starts a device sign-in with the server's OpenID provider
// (POST /v1/auth/oidc/device).
func (c *Client) DeviceLogin(ctx context.Context) (*api.DeviceLoginResponse, error) {
	anon := *c
	anon.token = ""
	var out api.DeviceLoginResponse
	if err := anon.do(ctx, http.MethodPost, "/v1/auth/oidc/device", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DevicePoll collects a device sign-in (POST /v1/auth/oidc/device/poll):
// the session, or nil while the person has not finished at the provider.
func (c *Client) DevicePoll(ctx context.Context, id string) (*api.LoginResponse, error) {
	anon := *c
	anon.token = ""
	var out struct {
		api.LoginResponse
		Status string `json:"status"`
	}
	if err := anon.do(ctx, http.MethodPost, "/v1/auth/oidc/device/poll", nil, nil, api.DevicePollRequest{ID: id}, &out); err != nil {
		return nil, err
	}
	if out.Token == "" {
		return nil, nil
	}
	return &out.LoginResponse, nil
}

// AuthMethods says how the server lets people sign in (GET
// /v1/auth/methods).
func (c *Client) AuthMethods(ctx context.Context) (*api.AuthMethods, error) {
	anon := *c
	anon.token = ""
	var out api.AuthMethods
	if err := anon.do(ctx, http.MethodGet, "/v1/auth/methods", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// OIDCStartURL is where a browser starts a loopback sign-in with the
// server's OpenID provider (GET /v1/auth/oidc/start): back to redirectURI
// with a one-time code and state, which OIDCToken trades with the PKCE
// verifier of challenge.
func (c *Client) OIDCStartURL(redirectURI, challenge, state string) string {
	return c.URL() + "/v1/auth/oidc/start?" + url.Values{"redirect_uri": {redirectURI}, "code_challenge": {challenge},
		"code_challenge_method": {"S256"}, "state": {state}}.Encode()
}

// OIDCToken finishes a loopback sign-in (POST /v1/auth/oidc/token).
func (c *Client) OIDCToken(ctx context.Context, code, verifier string) (*api.LoginResponse, error) {
	anon := *c
	anon.token = ""
	var out api.LoginResponse
	if err := anon.do(ctx, http.MethodPost, "/v1/auth/oidc/token", nil, nil, api.OIDCTokenRequest{Code: code, CodeVerifier: verifier}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
