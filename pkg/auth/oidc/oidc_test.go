package oidc_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	"github.com/gpuvm/gpuvm/pkg/auth"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc/oidctest"
	"github.com/gpuvm/gpuvm/pkg/config"
)

const redirect = "http://127.0.0.1:1/v1/auth/oidc/callback"

func testConfig(op *oidctest.Provider) config.OIDC {
	return config.OIDC{Issuer: op.Issuer, ClientID: oidctest.ClientID, ClientSecretFile: op.SecretFile, RedirectURL: redirect,
		Scopes: config.DefaultOIDCScopes, UsernameClaim: config.DefaultOIDCUsernameClaim, GroupsClaim: config.DefaultOIDCGroupsClaim,
		AdminGroups: []string{"gpu-admins"}}
}

func refusal(t *testing.T, err error, reason string) {
	t.Helper()
	var r *auth.Refusal
	if !errors.Is(err, auth.ErrInvalidCredentials) || !errors.As(err, &r) || !strings.Contains(r.Reason, reason) {
		t.Fatalf("error %v, want a refusal for %q", err, reason)
	}
}

// TestCodeFlow: discovery, the code flow with PKCE and a nonce through a
// real provider's login form, groups and admin from the claims.
func TestCodeFlow(t *testing.T) {
	op := oidctest.Start(t, nil, redirect)
	ctx := context.Background()
	p, err := oidc.New(ctx, testConfig(op), nil)
	if err != nil {
		t.Fatal(err)
	}
	authURL, state := p.Start("/portal/")
	u, _ := url.Parse(authURL)
	q := u.Query()
	if q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256" || q.Get("nonce") == "" || q.Get("state") != state || q.Get("client_id") != oidctest.ClientID {
		t.Errorf("authorization URL without PKCE, nonce or state: %s", authURL)
	}
	back := oidctest.SignIn(t, authURL, redirect, "bob", "bob-pw")
	if back.Query().Get("state") != state || back.Query().Get("code") == "" {
		t.Fatalf("sent back to %s", back)
	}
	id, returnTo, err := p.Finish(ctx, state, back.Query().Get("code"))
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "bob" || id.Source != "oidc" || !id.Admin || !slices.Equal(id.Groups, []string{"gpu-admins", "ml101"}) || returnTo != "/portal/" {
		t.Errorf("bob = %+v, returnTo %q", id, returnTo)
	}
	// A state is used once.
	_, _, err = p.Finish(ctx, state, back.Query().Get("code"))
	refusal(t, err, "unknown or expired state")
	_, _, err = p.Finish(ctx, "made-up", "code")
	refusal(t, err, "unknown or expired state")

	// A wrong password at the provider sends nobody back.
	authURL, _ = p.Start("")
	if back := oidctest.SignIn(t, authURL, redirect, "alice", "wrong"); back.Query().Get("code") != "" {
		t.Errorf("a wrong password got a code: %s", back)
	}
}

// TestPKCEEnforced: the provider will not exchange the code without the
// verifier whose challenge Start sent.
func TestPKCEEnforced(t *testing.T) {
	op := oidctest.Start(t, nil, redirect)
	ctx := context.Background()
	cfg := testConfig(op)
	p, err := oidc.New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	authURL, _ := p.Start("")
	back := oidctest.SignIn(t, authURL, redirect, "alice", "alice-pw")
	u, _ := url.Parse(authURL)
	oc := oauth2.Config{ClientID: oidctest.ClientID, ClientSecret: oidctest.ClientSecret, RedirectURL: redirect,
		Endpoint: oauth2.Endpoint{TokenURL: strings.TrimSuffix(op.Issuer, "/") + "/oauth/token", AuthURL: u.Scheme + "://" + u.Host + u.Path}}
	if _, err := oc.Exchange(ctx, back.Query().Get("code")); err == nil {
		t.Error("the code was exchanged without the PKCE verifier")
	}
}

func TestAllowedGroups(t *testing.T) {
	op := oidctest.Start(t, nil, redirect)
	ctx := context.Background()
	cfg := testConfig(op)
	cfg.AllowedGroups = []string{"ml101"}
	p, err := oidc.New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user, password string
		ok             bool
	}{{"alice", "alice-pw", true}, {"eve", "eve-pw", false}} {
		authURL, state := p.Start("")
		back := oidctest.SignIn(t, authURL, redirect, tc.user, tc.password)
		id, _, err := p.Finish(ctx, state, back.Query().Get("code"))
		if tc.ok && (err != nil || id.Name != tc.user) {
			t.Errorf("%s: %+v %v", tc.user, id, err)
		}
		if !tc.ok {
			refusal(t, err, "allowed_groups")
		}
	}
}

// TestIDTokenChecks: an ID token of the provider is refused once expired;
// one signed by another key is refused; so is one with another nonce.
func TestIDTokenChecks(t *testing.T) {
	op := oidctest.Start(t, nil, redirect)
	ctx := context.Background()
	var skew atomic.Int64
	p, err := oidc.New(ctx, testConfig(op), nil, oidc.WithClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }))
	if err != nil {
		t.Fatal(err)
	}
	authURL, state := p.Start("")
	back := oidctest.SignIn(t, authURL, redirect, "alice", "alice-pw")
	skew.Store(int64(48 * time.Hour))
	_, _, err = p.Finish(ctx, state, back.Query().Get("code"))
	refusal(t, err, "expired")
	skew.Store(0)

	// Claims a good token would have, signed by a key of our own.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "key1").WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims, _ := json.Marshal(map[string]any{"iss": op.Issuer, "aud": oidctest.ClientID, "sub": "alice", "preferred_username": "alice",
		"groups": []string{"ml101"}, "nonce": "n1", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	jws, err := signer.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := jws.CompactSerialize()
	_, err = p.Verify(ctx, forged, "n1", nil)
	refusal(t, err, "signature")
	_, err = p.Verify(ctx, "not.a.token", "n1", nil)
	refusal(t, err, "ID token")
}

// TestLazy: a provider that does not answer is an error of the sign-in,
// not of gpuvmd's start, and is discovered again later (TestLazyBackoff).
func TestLazy(t *testing.T) {
	l := oidc.NewLazy(config.OIDC{Issuer: "http://127.0.0.1:1/", ClientID: "gpuvm", RedirectURL: redirect, Scopes: []string{"openid"}}, nil)
	ctx := context.Background()
	if _, _, err := l.Start(ctx, ""); err == nil || errors.Is(err, auth.ErrInvalidCredentials) {
		t.Errorf("start with the provider down: %v", err)
	}
	if _, _, err := l.Finish(ctx, "s", "c"); err == nil || errors.Is(err, auth.ErrInvalidCredentials) {
		t.Errorf("finish with the provider down: %v", err)
	}
}

// TestLazyBackoff: a failed discovery is not tried again at once, however
// many requests come (the provider down is not hammered), and is tried
// again after the backoff.
func TestLazyBackoff(t *testing.T) {
	var asked atomic.Int64
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	defer func(d time.Duration) { *oidc.DiscoveryBackoff = d }(*oidc.DiscoveryBackoff)
	*oidc.DiscoveryBackoff = 300 * time.Millisecond
	l := oidc.NewLazy(config.OIDC{Issuer: down.URL + "/", ClientID: "gpuvm", RedirectURL: redirect, Scopes: []string{"openid"}}, nil)
	ctx := context.Background()
	for range 20 {
		if l.SupportsDevice(ctx) {
			t.Fatal("a provider that is down offers the device grant")
		}
		if _, _, err := l.Start(ctx, ""); err == nil {
			t.Fatal("start with the provider down")
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the provider was asked %d times within the backoff, want 1", n)
	}
	time.Sleep(400 * time.Millisecond)
	_, _, _ = l.Start(ctx, "")
	if n := asked.Load(); n != 2 {
		t.Errorf("after the backoff the provider was asked %d times in all, want 2", n)
	}
}
