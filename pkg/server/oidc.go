package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/auth"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Signing in with the OpenID provider (server.auth.oidc). gpuvmd is the
// provider's client and runs the authorization code flow with PKCE itself
// (pkg/auth/oidc); its callback is /v1/auth/oidc/callback. Three ways in:
//
//   - The portal: its button is a link to /v1/auth/oidc/start?return_to=PATH.
//     The callback opens a cookie session (HttpOnly, SameSite=Strict, with a
//     CSRF token, as POST /v1/session) and sends the browser on to PATH (a
//     path of this server only). No token is ever in a URL.
//   - The CLI, by the device authorization grant where the provider offers
//     it (POST /v1/auth/oidc/device, then .../device/poll): a bearer session.
//   - The CLI, by a loopback redirect otherwise (RFC 8252): it listens on
//     http://127.0.0.1:PORT/..., opens /v1/auth/oidc/start?redirect_uri=
//     that&code_challenge=C&code_challenge_method=S256&state=S; the callback
//     sends the browser to redirect_uri?code=ONE-TIME-CODE&state=S, and the
//     CLI trades the code and its PKCE verifier for a bearer session (POST
//     /v1/auth/oidc/token). The code is no credential without the
//     verifier, which never leaves the CLI, and is good once, for a minute.
//     A refusal sends the browser to redirect_uri?error=access_denied&state=S.
//
// Every refusal is answered the same whatever the reason (only the audit
// entry says why), no sooner than loginFailureFloor, and counts against the
// source address's sign-in limit.

// OIDCSignIn is an OpenID provider's code flow (pkg/auth/oidc's Lazy).
type OIDCSignIn interface {
	Start(ctx context.Context, returnTo string) (authURL, state string, err error)
	Finish(ctx context.Context, state, code string) (auth.Identity, string, error)
	// The device authorization grant, for gpuvm login --sso.
	SupportsDevice(ctx context.Context) bool
	StartDevice(ctx context.Context) (*oidc.Device, error)
	PollDevice(id string) (auth.Identity, error)
}

var (
	errOIDCNotReady = with(errNotFound, "OpenID Connect sign-in is not configured on this server (server.auth.oidc)")
	errOIDCRefused  = with(errUnauthenticated, "the sign-in with the OpenID provider failed; start again")
)

// oidcStateCookie binds a sign-in's state to the browser that started it.
const oidcStateCookie = "gpuvm_oidc_state"

// Bounds of loopback sign-ins.
const (
	loopbackStartTTL = 10 * time.Minute // the provider's part
	loopbackCodeTTL  = time.Minute      // the code's way to the CLI
	maxLoopbacks     = 10000
)

// loopbacks are the CLI sign-ins by loopback redirect under way: starts by
// the provider's state, codes by their SHA-256.
type loopbacks struct {
	mu     sync.Mutex
	starts map[string]loopbackStart
	codes  map[string]loopbackCode
}

type loopbackStart struct {
	redirect, challenge, state string
	expires                    time.Time
}

type loopbackCode struct {
	id        auth.Identity
	challenge string
	expires   time.Time
}

func (l *loopbacks) addStart(providerState string, st loopbackStart) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.starts == nil {
		l.starts, l.codes = map[string]loopbackStart{}, map[string]loopbackCode{}
	}
	now := time.Now()
	if len(l.starts) >= maxLoopbacks {
		for k, v := range l.starts {
			if now.After(v.expires) {
				delete(l.starts, k)
			}
		}
		if len(l.starts) >= maxLoopbacks {
			clear(l.starts) // flooded: the oldest sign-ins start again
		}
	}
	l.starts[providerState] = st
}

// takeStart removes and answers the loopback start of a provider state.
func (l *loopbacks) takeStart(providerState string) (loopbackStart, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.starts[providerState]
	delete(l.starts, providerState)
	return st, ok && time.Now().Before(st.expires)
}

func (l *loopbacks) addCode(code string, lc loopbackCode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for k, v := range l.codes {
		if now.After(v.expires) {
			delete(l.codes, k)
		}
	}
	if len(l.codes) >= maxLoopbacks {
		clear(l.codes)
	}
	l.codes[hashText(code)] = lc
}

// takeCode removes and answers a code: once, whatever the verifier.
func (l *loopbacks) takeCode(code string) (loopbackCode, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lc, ok := l.codes[hashText(code)]
	delete(l.codes, hashText(code))
	return lc, ok && time.Now().Before(lc.expires)
}

func hashText(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// validReturnTo: a path of this server, so that the sign-in sends nobody
// elsewhere. Browsers read a URL more loosely than Go does: they drop tabs
// and newlines anywhere in it, trim other control characters at its ends,
// take a backslash for "/" and remove dot segments, so "/<tab>/host",
// "/\host", "\/host" and "/.//host" all begin "//host", another host (or
// a path that is one once written again). One leading "/", no "//" in the
// path, no control character, no backslash and no fragment: a path of this
// server to every parser.
func validReturnTo(p string) bool {
	if p == "" {
		return true
	}
	path, _, _ := strings.Cut(p, "?")
	if len(p) > 200 || !strings.HasPrefix(p, "/") || strings.Contains(path, "//") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' || c == '#' {
			return false
		}
	}
	return true
}

// loopbackRedirect checks the redirect URI of a CLI's loopback sign-in:
// http to a loopback IP literal with a port (RFC 8252 7.3), nothing else.
func loopbackRedirect(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || len(raw) > 200 {
		return "", errors.New("redirect_uri is not a URL of 200 characters at most")
	}
	ip := net.ParseIP(u.Hostname())
	switch {
	case u.Scheme != "http":
		return "", errors.New("redirect_uri must be http://127.0.0.1:PORT/… (a loopback address)")
	case ip == nil || !ip.IsLoopback():
		return "", errors.New("redirect_uri's host must be a loopback IP address (127.0.0.1 or [::1]), not " + strconv.Quote(u.Hostname()))
	case u.Port() == "":
		return "", errors.New("redirect_uri needs the port the CLI listens on")
	case u.User != nil || u.Fragment != "" || u.RawQuery != "":
		return "", errors.New("redirect_uri has no user, query or fragment")
	}
	return u.String(), nil
}

// pkceChallenge is S256 of a verifier (RFC 7636 4.2).
func pkceChallenge(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func (s *Server) oidcRateLimited(c *gin.Context) bool {
	if wait, blocked := s.loginLimits.byIP.blocked(clientIP(c.Request), time.Now()); blocked {
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		auditReason(c, "rate limited")
		s.writeProblem(c, with(errTooManyRequests, "too many sign-ins; try again later"))
		return true
	}
	return false
}

// oidcStart serves GET /v1/auth/oidc/start: a redirect to the provider,
// for the portal (return_to) or a CLI's loopback sign-in (redirect_uri,
// code_challenge, code_challenge_method=S256, state).
func (s *Server) oidcStart(c *gin.Context) {
	q := c.Request.URL.Query()
	returnTo, given := q["return_to"]
	redirect, loopback := q.Get("redirect_uri"), q.Has("redirect_uri")
	var lb *loopbackStart
	switch {
	case given && loopback:
		s.writeProblem(c, withField(errValidation, "return_to", "give return_to (the portal) or redirect_uri (a CLI), not both"))
		return
	case given && (returnTo[0] == "" || !validReturnTo(returnTo[0])):
		s.writeProblem(c, withField(errValidation, "return_to", "return_to is a path of this server, starting with one '/'"))
		return
	case !loopback && (q.Has("code_challenge") || q.Has("code_challenge_method")):
		field := "code_challenge"
		if !q.Has(field) {
			field = "code_challenge_method"
		}
		s.writeProblem(c, withField(errValidation, field, field+" goes with redirect_uri (a CLI's loopback sign-in) only"))
		return
	case loopback:
		r, err := loopbackRedirect(redirect)
		if err != nil {
			s.writeProblem(c, withField(errValidation, "redirect_uri", err.Error()))
			return
		}
		challenge, state := q.Get("code_challenge"), q.Get("state")
		if q.Get("code_challenge_method") != "S256" || len(challenge) != 43 {
			s.writeProblem(c, withField(errValidation, "code_challenge", "a loopback sign-in needs code_challenge (43 characters) with code_challenge_method=S256"))
			return
		}
		if state == "" || len(state) > 100 {
			s.writeProblem(c, withField(errValidation, "state", "a loopback sign-in needs a state of 1 to 100 characters"))
			return
		}
		lb = &loopbackStart{redirect: r, challenge: challenge, state: state, expires: time.Now().Add(loopbackStartTTL)}
	}
	if s.OIDC == nil {
		s.writeProblem(c, errOIDCNotReady)
		return
	}
	if s.oidcRateLimited(c) {
		return
	}
	var path string
	if given {
		path = returnTo[0]
	}
	authURL, state, err := s.OIDC.Start(c.Request.Context(), path)
	if err != nil {
		s.log.Error("sign-in: the OpenID provider cannot be discovered", "err", err, "request_id", c.GetString(requestIDKey))
		s.writeProblem(c, with(errUnavailable, "the OpenID provider does not answer; try again later"))
		return
	}
	if lb != nil {
		s.loopbacks.addStart(state, *lb)
	}
	// The state is bound to this browser: the callback wants it back in
	// this cookie too, so that nobody can finish their own sign-in in
	// somebody else's browser (login CSRF). Lax: the provider's redirect to
	// the callback is a top-level navigation from another site.
	http.SetCookie(c.Writer, &http.Cookie{Name: oidcStateCookie, Value: state, Path: "/v1/auth/oidc/callback", MaxAge: int(loopbackStartTTL.Seconds()),
		HttpOnly: true, Secure: secureRequest(c.Request), SameSite: http.SameSiteLaxMode})
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusFound, authURL)
}

// oidcCallback serves GET /v1/auth/oidc/callback, where the provider sends
// the browser back: the code is exchanged and the ID token verified; then
// a portal sign-in gets its cookie session and goes on to its return_to, a
// loopback sign-in goes back to the CLI with a one-time code.
func (s *Server) oidcCallback(c *gin.Context) {
	start := time.Now()
	if s.OIDC == nil {
		s.writeProblem(c, errOIDCNotReady)
		return
	}
	if s.oidcRateLimited(c) {
		return
	}
	ip := clientIP(c.Request)
	state := c.Query("state")
	lb, isLoopback := s.loopbacks.takeStart(state)
	refuse := func(reason string) {
		s.loginLimits.byIP.add(ip, start)
		auditReason(c, reason)
		slowRefusal(c, start)
		if isLoopback {
			// Back to the CLI, which stops waiting and says it failed.
			c.Header("Cache-Control", "no-store")
			c.Redirect(http.StatusSeeOther, lb.redirect+"?"+url.Values{"error": {"access_denied"}, "state": {lb.state}}.Encode())
			return
		}
		if strings.Contains(c.GetHeader("Accept"), "text/html") {
			// A browser: back to the portal's sign-in page, which says so.
			c.Header("Cache-Control", "no-store")
			continuePage(c, http.StatusUnauthorized, "The sign-in failed.", "/login?sso=failed")
			return
		}
		s.writeProblem(c, errOIDCRefused)
	}
	bound, _ := c.Request.Cookie(oidcStateCookie)
	http.SetCookie(c.Writer, &http.Cookie{Name: oidcStateCookie, Value: "", Path: "/v1/auth/oidc/callback", MaxAge: -1,
		HttpOnly: true, Secure: secureRequest(c.Request), SameSite: http.SameSiteLaxMode})
	if bound == nil || subtle.ConstantTimeCompare([]byte(bound.Value), []byte(state)) != 1 {
		_, _, _ = s.OIDC.Finish(c.Request.Context(), state, "") // forget the start
		refuse("the state is not the one this browser started with")
		return
	}
	if e := c.Query("error"); e != "" {
		_, _, _ = s.OIDC.Finish(c.Request.Context(), state, "") // forget the start
		refuse("the provider answered " + clip(e, 60))
		return
	}
	id, returnTo, err := s.OIDC.Finish(c.Request.Context(), state, c.Query("code"))
	var r *auth.Refusal
	switch {
	case errors.As(err, &r):
		refuse(r.Reason)
		return
	case err != nil:
		s.log.Error("sign-in: the OpenID provider failed", "err", err, "request_id", c.GetString(requestIDKey))
		auditReason(c, clip(err.Error(), 150))
		s.writeProblem(c, with(errUnavailable, "the OpenID provider does not answer; try again later"))
		return
	}
	auditUser(c, id.Name)
	c.Header("Cache-Control", "no-store")
	if isLoopback {
		code, err := randomCode()
		if err != nil {
			s.writeProblem(c, err)
			return
		}
		s.loopbacks.addCode(code, loopbackCode{id: id, challenge: lb.challenge, expires: time.Now().Add(loopbackCodeTTL)})
		auditDetail(c, "loopback sign-in: the code goes to %s", lb.redirect)
		c.Redirect(http.StatusSeeOther, lb.redirect+"?"+url.Values{"code": {code}, "state": {lb.state}}.Encode())
		return
	}
	_, secret, ss, ok := s.startSession(c, id, refuse, store.SessionCookie)
	if !ok {
		return
	}
	s.setSessionCookie(c, secret, ss)
	if returnTo == "" || !validReturnTo(returnTo) {
		returnTo = "/"
	}
	continuePage(c, http.StatusOK, "Signed in.", returnTo)
}

// continuePageHTML goes on to a path of this server. A redirect would do
// but for SameSite=Strict: the browser's way here began at the provider,
// another site, so a 303 to the portal would arrive without the new
// cookie and land on the sign-in page. A refresh from this page is a
// navigation of this site, which sends it. No script (the CSP has none).
var continuePageHTML = template.Must(template.New("continue").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex">
<meta http-equiv="refresh" content="0;url={{.Path}}"><title>{{.Text}} · gpuvm</title></head>
<body><main><p>{{.Text}} <a href="{{.Path}}">Continue</a></p></main></body></html>
`))

// continuePage answers status with a page that says text and goes on to
// path (a path of this server).
func continuePage(c *gin.Context, status int, text, path string) {
	c.Header("Content-Type", "text/html; charset=utf-8")
	c.Header("Referrer-Policy", "no-referrer")
	c.Status(status)
	_ = continuePageHTML.Execute(c.Writer, struct{ Text, Path string }{text, path})
}

// randomCode is 32 random bytes in base64url.
func randomCode() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// oidcToken serves POST /v1/auth/oidc/token: a loopback sign-in's code and
// PKCE verifier for a bearer session.
func (s *Server) oidcToken(c *gin.Context) {
	start := time.Now()
	var req api.OIDCTokenRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	if s.OIDC == nil {
		s.writeProblem(c, errOIDCNotReady)
		return
	}
	if s.oidcRateLimited(c) {
		return
	}
	ip := clientIP(c.Request)
	refuse := func(reason string) {
		s.loginLimits.byIP.add(ip, start)
		auditReason(c, reason)
		slowRefusal(c, start)
		s.writeProblem(c, errOIDCRefused)
	}
	lc, ok := s.loopbacks.takeCode(req.Code)
	switch {
	case !ok:
		refuse("unknown, used or expired code")
		return
	case subtle.ConstantTimeCompare([]byte(pkceChallenge(req.CodeVerifier)), []byte(lc.challenge)) != 1:
		refuse("the code verifier does not match the challenge")
		return
	}
	auditUser(c, lc.id.Name)
	if u, secret, ss, ok := s.startSession(c, lc.id, refuse, store.SessionBearer); ok {
		writeLogin(c, u, secret, ss)
	}
}

// devicePollWait is how long a poll of a device sign-in waits for its
// outcome before it answers "pending".
var devicePollWait = 20 * time.Second

// oidcDevice serves POST /v1/auth/oidc/device: gpuvmd asks the provider
// for a device code, which the CLI shows.
func (s *Server) oidcDevice(c *gin.Context) {
	var none struct{}
	if !s.decodeOptionalJSON(c, &none) {
		return
	}
	if s.OIDC == nil {
		s.writeProblem(c, errOIDCNotReady)
		return
	}
	if s.oidcRateLimited(c) {
		return
	}
	d, err := s.OIDC.StartDevice(c.Request.Context())
	if err != nil {
		s.log.Error("sign-in: the OpenID provider's device authorization failed", "err", err, "request_id", c.GetString(requestIDKey))
		auditReason(c, clip(err.Error(), 150))
		s.writeProblem(c, with(errUnavailable, "the OpenID provider does not answer, or does not offer the device authorization grant; try again later"))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, api.DeviceLoginResponse{ID: d.ID, UserCode: d.UserCode, VerificationURI: d.VerificationURI,
		VerificationURIComplete: d.VerificationURIComplete, ExpiresAt: d.Expires, Interval: max(int(d.Interval.Seconds()), 1)})
}

// oidcDevicePoll serves POST /v1/auth/oidc/device/poll: it waits up to
// devicePollWait for the device sign-in's outcome, then answers 202
// pending, a session (as POST /v1/login), or the uniform 401.
func (s *Server) oidcDevicePoll(c *gin.Context) {
	start := time.Now()
	var req api.DevicePollRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	if s.OIDC == nil {
		s.writeProblem(c, errOIDCNotReady)
		return
	}
	refuse := func(reason string) {
		auditReason(c, reason)
		slowRefusal(c, start)
		s.writeProblem(c, errOIDCRefused)
	}
	deadline := time.Now().Add(devicePollWait)
	for {
		id, err := s.OIDC.PollDevice(req.ID)
		var r *auth.Refusal
		switch {
		case errors.Is(err, oidc.ErrDevicePending) && time.Now().Before(deadline):
			select {
			case <-time.After(250 * time.Millisecond):
				continue
			case <-c.Request.Context().Done():
				s.writeProblem(c, c.Request.Context().Err())
				return
			}
		case errors.Is(err, oidc.ErrDevicePending):
			auditReason(c, "pending")
			c.JSON(http.StatusAccepted, api.DevicePending{Status: "pending"})
			return
		case errors.As(err, &r):
			refuse(r.Reason)
			return
		case err != nil:
			s.writeProblem(c, err)
			return
		}
		auditUser(c, id.Name)
		if u, secret, ss, ok := s.startSession(c, id, refuse, store.SessionBearer); ok {
			writeLogin(c, u, secret, ss)
		}
		return
	}
}
