// Package oidc signs people in with an OpenID provider: the authorization
// code flow with PKCE (S256) and a nonce, the ID token verified against the
// provider's keys (discovery, JWKS), its issuer, audience and expiry, the
// user named by a claim and their groups read from a claim.
//
// A sign-in is two steps: Start makes the provider's authorization URL and
// remembers, under a random state, the PKCE verifier and the nonce (for
// pendingTTL, once); Finish, with the state and code the provider sent
// back, exchanges the code and verifies what comes back.
package oidc

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/gpuvm/gpuvm/pkg/auth"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

var (
	userName  = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	groupName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,63}$`)
)

// Bounds of the pending sign-ins.
const (
	pendingTTL = 10 * time.Minute
	maxPending = 10000
)

// Provider is an OpenID provider people sign in with.
type Provider struct {
	cfg      config.OIDC
	provider *gooidc.Provider
	oauth    oauth2.Config
	verifier *gooidc.IDTokenVerifier
	// deviceVerifier checks the ID tokens of device sign-ins, for
	// device_client_id.
	deviceVerifier *gooidc.IDTokenVerifier
	log            *slog.Logger
	now            func() time.Time

	mu      sync.Mutex
	pending map[string]pending
	devices map[string]*deviceState
}

type pending struct {
	verifier, nonce, returnTo string
	expires                   time.Time
}

// Option changes a Provider (tests).
type Option func(*Provider)

// WithClock makes the provider verify ID tokens (their expiry) at the
// times now gives.
func WithClock(now func() time.Time) Option { return func(p *Provider) { p.now = now } }

// New discovers the provider (Issuer/.well-known/openid-configuration) and
// reads the client secret.
func New(ctx context.Context, cfg config.OIDC, log *slog.Logger, opts ...Option) (*Provider, error) {
	if log == nil {
		log = slog.Default()
	}
	p := &Provider{cfg: cfg, log: log.With("component", "oidc", "issuer", cfg.Issuer), now: time.Now, pending: map[string]pending{}}
	for _, o := range opts {
		o(p)
	}
	var secret string
	if cfg.ClientSecretFile != "" {
		b, err := os.ReadFile(cfg.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("oidc client secret: %w", err)
		}
		secret = strings.TrimRight(string(b), "\r\n")
	}
	prov, err := gooidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover the OpenID provider %s: %w", cfg.Issuer, err)
	}
	p.provider = prov
	p.oauth = oauth2.Config{ClientID: cfg.ClientID, ClientSecret: secret, Endpoint: prov.Endpoint(), RedirectURL: cfg.RedirectURL, Scopes: cfg.Scopes}
	p.verifier = prov.Verifier(&gooidc.Config{ClientID: cfg.ClientID, Now: func() time.Time { return p.now() }})
	p.deviceVerifier = prov.Verifier(&gooidc.Config{ClientID: p.deviceClientID(), Now: func() time.Time { return p.now() }})
	return p, nil
}

func randomString() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Start makes the URL of the provider to send the browser to, and the
// state that Finish takes back. returnTo is kept for the caller (where the
// portal goes after the sign-in).
func (p *Provider) Start(returnTo string) (authURL, state string) {
	state, nonce, verifier := randomString(), randomString(), oauth2.GenerateVerifier()
	now := time.Now()
	p.mu.Lock()
	if len(p.pending) >= maxPending {
		for k, v := range p.pending {
			if now.After(v.expires) {
				delete(p.pending, k)
			}
		}
		if len(p.pending) >= maxPending {
			clear(p.pending) // flooded: the oldest sign-ins start again
		}
	}
	p.pending[state] = pending{verifier: verifier, nonce: nonce, returnTo: returnTo, expires: now.Add(pendingTTL)}
	p.mu.Unlock()
	return p.oauth.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), gooidc.Nonce(nonce)), state
}

// Finish completes a sign-in with what the provider sent back: the state
// (used once), the code. It answers who signed in and Start's returnTo. A
// refusal is an *auth.Refusal.
func (p *Provider) Finish(ctx context.Context, state, code string) (auth.Identity, string, error) {
	p.mu.Lock()
	pend, ok := p.pending[state]
	delete(p.pending, state)
	p.mu.Unlock()
	if !ok || time.Now().After(pend.expires) {
		return auth.Identity{}, "", auth.Refuse("unknown or expired state")
	}
	if code == "" {
		return auth.Identity{}, pend.returnTo, auth.Refuse("no code")
	}
	tok, err := p.oauth.Exchange(ctx, code, oauth2.VerifierOption(pend.verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return auth.Identity{}, pend.returnTo, auth.Refuse("the provider refused the code: " + re.ErrorCode)
		}
		return auth.Identity{}, pend.returnTo, fmt.Errorf("exchange the code: %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return auth.Identity{}, pend.returnTo, auth.Refuse("no ID token")
	}
	id, err := p.Verify(ctx, raw, pend.nonce, oauth2.StaticTokenSource(tok))
	return id, pend.returnTo, err
}

// Verify checks an ID token (signature, issuer, audience, expiry, nonce)
// and reads who it names: the username and groups claims of the ID token,
// or, when it lacks one, of the userinfo endpoint with ts (when not nil),
// as providers leave profile claims out of ID tokens (OpenID Connect Core
// 5.4).
func (p *Provider) Verify(ctx context.Context, rawIDToken, nonce string, ts oauth2.TokenSource) (auth.Identity, error) {
	if nonce == "" {
		return auth.Identity{}, auth.Refuse("ID token: no nonce to check")
	}
	return p.verify(ctx, p.verifier, rawIDToken, nonce, ts)
}

// verify is Verify with a verifier; nonce "" (the device grant has none)
// wants an ID token without one.
func (p *Provider) verify(ctx context.Context, v *gooidc.IDTokenVerifier, rawIDToken, nonce string, ts oauth2.TokenSource) (auth.Identity, error) {
	idt, err := v.Verify(ctx, rawIDToken)
	if err != nil {
		return auth.Identity{}, auth.Refuse("ID token: " + err.Error())
	}
	if idt.Nonce != nonce {
		return auth.Identity{}, auth.Refuse("ID token: wrong nonce")
	}
	claims := map[string]any{}
	if err := idt.Claims(&claims); err != nil {
		return auth.Identity{}, auth.Refuse("ID token claims: " + err.Error())
	}
	_, hasName := claims[p.cfg.UsernameClaim]
	_, hasGroups := claims[p.cfg.GroupsClaim]
	if (!hasName || !hasGroups) && ts != nil {
		ui, err := p.provider.UserInfo(ctx, ts)
		if err != nil {
			return auth.Identity{}, fmt.Errorf("userinfo: %w", err)
		}
		if ui.Subject != idt.Subject {
			return auth.Identity{}, auth.Refuse("userinfo is about another subject")
		}
		extra := map[string]any{}
		if err := ui.Claims(&extra); err == nil {
			for k, v := range extra {
				if _, ok := claims[k]; !ok {
					claims[k] = v
				}
			}
		}
	}
	nameClaim, _ := claims[p.cfg.UsernameClaim].(string)
	name := strings.ToLower(nameClaim)
	if !userName.MatchString(name) {
		return auth.Identity{}, auth.Refuse(fmt.Sprintf("claim %s %q is not a gpuvm user name", p.cfg.UsernameClaim, nameClaim))
	}
	groups := []string{}
	if list, ok := claims[p.cfg.GroupsClaim].([]any); ok {
		for _, g := range list {
			s, _ := g.(string)
			if !groupName.MatchString(s) {
				p.log.Warn("provider group left out: not a gpuvm group name", "group", s, "user", name)
				continue
			}
			groups = append(groups, s)
		}
	}
	slices.Sort(groups)
	groups = slices.Compact(groups)
	if len(p.cfg.AllowedGroups) > 0 && !slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(p.cfg.AllowedGroups, g) }) {
		return auth.Identity{}, auth.Refuse("in none of allowed_groups")
	}
	id := auth.Identity{Name: name, Source: store.SourceOIDC, Groups: groups}
	id.Admin = slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(p.cfg.AdminGroups, g) })
	return id, nil
}

// Lazy is a Provider discovered at its first use, and again after a
// failed discovery (not sooner than discoveryBackoff), so that gpuvmd
// starts while the provider is down.
type Lazy struct {
	cfg  config.OIDC
	log  *slog.Logger
	opts []Option

	mu sync.Mutex
	p  *Provider
	// failed and err are the last failed discovery: none again before
	// discoveryBackoff, so that anonymous requests (GET
	// /v1/auth/methods, a sign-in's start) cannot make gpuvmd hammer a
	// provider that is down.
	failed time.Time
	err    error
}

// discoveryBackoff is how long a failed discovery is answered again
// without asking the provider.
var discoveryBackoff = 10 * time.Second

// NewLazy is a Provider of cfg discovered when first needed.
func NewLazy(cfg config.OIDC, log *slog.Logger, opts ...Option) *Lazy {
	return &Lazy{cfg: cfg, log: log, opts: opts}
}

func (l *Lazy) get(ctx context.Context) (*Provider, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.p != nil {
		return l.p, nil
	}
	if l.err != nil && time.Since(l.failed) < discoveryBackoff {
		return nil, l.err
	}
	p, err := New(ctx, l.cfg, l.log, l.opts...)
	if err != nil {
		l.failed, l.err = time.Now(), err
		return nil, err
	}
	l.p = p
	return p, nil
}

// Start is Provider.Start, after discovery.
func (l *Lazy) Start(ctx context.Context, returnTo string) (authURL, state string, err error) {
	p, err := l.get(ctx)
	if err != nil {
		return "", "", err
	}
	authURL, state = p.Start(returnTo)
	return authURL, state, nil
}

// Finish is Provider.Finish, after discovery.
func (l *Lazy) Finish(ctx context.Context, state, code string) (auth.Identity, string, error) {
	p, err := l.get(ctx)
	if err != nil {
		return auth.Identity{}, "", err
	}
	return p.Finish(ctx, state, code)
}

// Device is a sign-in by the device authorization grant (RFC 8628) that
// gpuvmd runs with the provider for a CLI: the person opens
// VerificationURI on any device and types UserCode; gpuvmd polls the
// provider meanwhile. The CLI holds ID, a random secret, to collect the
// outcome.
type Device struct {
	ID                      string
	UserCode                string
	VerificationURI         string
	VerificationURIComplete string
	Expires                 time.Time
	Interval                time.Duration
}

// ErrDevicePending: the person has not finished at the provider yet.
var ErrDevicePending = errors.New("the sign-in at the provider is not finished yet")

type deviceState struct {
	done    chan struct{}
	id      auth.Identity
	err     error
	expires time.Time
}

// StartDevice asks the provider for a device code (as the client
// device_client_id, with its secret) and polls it in the background until
// the person finishes, refuses, or the code expires.
func (p *Provider) StartDevice(ctx context.Context) (*Device, error) {
	oc := p.oauth
	oc.ClientID = p.deviceClientID()
	resp, err := oc.DeviceAuth(ctx)
	if err != nil {
		return nil, fmt.Errorf("device authorization at the provider: %w", err)
	}
	expires := resp.Expiry
	if expires.IsZero() || time.Until(expires) > pendingTTL {
		expires = time.Now().Add(pendingTTL)
	}
	d := &Device{ID: randomString(), UserCode: resp.UserCode, VerificationURI: resp.VerificationURI,
		VerificationURIComplete: resp.VerificationURIComplete, Expires: expires, Interval: time.Duration(resp.Interval) * time.Second}
	st := &deviceState{done: make(chan struct{}), expires: expires.Add(time.Minute)}
	p.mu.Lock()
	if p.devices == nil {
		p.devices = map[string]*deviceState{}
	}
	for k, v := range p.devices {
		if time.Now().After(v.expires) {
			delete(p.devices, k)
		}
	}
	if len(p.devices) >= maxPending {
		p.mu.Unlock()
		return nil, errors.New("too many device sign-ins under way")
	}
	p.devices[d.ID] = st
	p.mu.Unlock()
	go func() {
		defer close(st.done)
		pctx, cancel := context.WithDeadline(context.Background(), expires)
		defer cancel()
		tok, err := oc.DeviceAccessToken(pctx, resp)
		if err != nil {
			var re *oauth2.RetrieveError
			if errors.As(err, &re) {
				st.err = auth.Refuse("the provider refused the device sign-in: " + re.ErrorCode)
			} else {
				st.err = auth.Refuse("the device sign-in ended: " + err.Error())
			}
			return
		}
		raw, _ := tok.Extra("id_token").(string)
		if raw == "" {
			st.err = auth.Refuse("no ID token")
			return
		}
		st.id, st.err = p.verify(pctx, p.deviceVerifier, raw, "", oauth2.StaticTokenSource(tok))
	}()
	return d, nil
}

// PollDevice answers the outcome of a device sign-in once it is known
// (then forgets it), or ErrDevicePending.
func (p *Provider) PollDevice(id string) (auth.Identity, error) {
	p.mu.Lock()
	st, ok := p.devices[id]
	p.mu.Unlock()
	if !ok {
		return auth.Identity{}, auth.Refuse("unknown or expired device sign-in")
	}
	select {
	case <-st.done:
	default:
		return auth.Identity{}, ErrDevicePending
	}
	p.mu.Lock()
	delete(p.devices, id)
	p.mu.Unlock()
	return st.id, st.err
}

func (p *Provider) deviceClientID() string {
	if p.cfg.DeviceClientID != "" {
		return p.cfg.DeviceClientID
	}
	return p.cfg.ClientID
}

// StartDevice is Provider.StartDevice, after discovery.
func (l *Lazy) StartDevice(ctx context.Context) (*Device, error) {
	p, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return p.StartDevice(ctx)
}

// PollDevice is Provider.PollDevice; before discovery, nothing is known.
func (l *Lazy) PollDevice(id string) (auth.Identity, error) {
	l.mu.Lock()
	p := l.p
	l.mu.Unlock()
	if p == nil {
		return auth.Identity{}, auth.Refuse("unknown device sign-in")
	}
	return p.PollDevice(id)
}

// SupportsDevice says whether the provider offers the device authorization
// grant (a device_authorization_endpoint in its discovery document).
func (p *Provider) SupportsDevice() bool { return p.oauth.Endpoint.DeviceAuthURL != "" }

// SupportsDevice is Provider.SupportsDevice, after discovery; false while
// the provider cannot be discovered.
func (l *Lazy) SupportsDevice(ctx context.Context) bool {
	p, err := l.get(ctx)
	return err == nil && p.SupportsDevice()
}
