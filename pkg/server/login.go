package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/auth"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Sign-in (POST /v1/login) gives a session token for a directory account's
// name and password; POST /v1/logout revokes it. The session is an API
// token of the user (hashed in the store, sent as a bearer token) with an
// expiry, server.auth.session_ttl after the sign-in, and Session set.
//
// Every refusal for the credentials (an unknown user, a wrong password, a
// name the directory finds twice, a local user of that name, a disabled
// account is not one: a sign-in enables it) is answered the same: 401, the
// same problem, no sooner than loginFailureFloor after the request came
// (plus jitter), so that nobody learns from the answer or its timing which
// names exist. Only the audit entry (auth.login) says why. Failed sign-ins
// are limited per source address and per username: beyond, 429 with
// Retry-After, for any name alike (and for the right password too).

// PasswordSignIn checks a username and password with a directory
// (pkg/auth/ldap's Directory).
type PasswordSignIn interface {
	SignIn(ctx context.Context, username, password string) (auth.Identity, error)
}

// Bounds of sign-in.
var (
	// loginFailureFloor is how long a refused sign-in takes at least.
	loginFailureFloor = 400 * time.Millisecond
	// loginPerIP failed sign-ins a minute from one source address (a lab
	// behind one NAT address signs in at once: successes do not count).
	loginPerIP       = 20
	loginIPWindow    = time.Minute
	loginPerUser     = 5 // failures of one username
	loginUserWindow  = 5 * time.Minute
	loginMaxTracked  = 100000
	errLoginRefused  = with(errUnauthenticated, "the username or password is wrong")
	errLoginNotReady = with(errNotFound, "password sign-in is not configured on this server (server.auth.ldap)")
)

var errTooManyRequests = &Problem{Type: ProblemBase + "too-many-requests", Title: "Too many requests", Status: http.StatusTooManyRequests}

// rateWindow counts events per key in fixed windows.
type rateWindow struct {
	mu     sync.Mutex
	limit  int
	window time.Duration
	counts map[string]*rateCount
}

type rateCount struct {
	n     int
	start time.Time
}

func newRateWindow(limit int, window time.Duration) *rateWindow {
	return &rateWindow{limit: limit, window: window, counts: map[string]*rateCount{}}
}

// blocked says whether key has reached its limit, and for how long.
func (w *rateWindow) blocked(key string, now time.Time) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.counts[key]
	if !ok || now.Sub(c.start) >= w.window {
		return 0, false
	}
	if c.n >= w.limit {
		return c.start.Add(w.window).Sub(now), true
	}
	return 0, false
}

// add counts one event of key.
func (w *rateWindow) add(key string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.counts) >= loginMaxTracked {
		for k, c := range w.counts {
			if now.Sub(c.start) >= w.window {
				delete(w.counts, k)
			}
		}
		if len(w.counts) >= loginMaxTracked {
			// Flooded with fresh keys: forget them all rather than grow.
			clear(w.counts)
		}
	}
	c, ok := w.counts[key]
	if !ok || now.Sub(c.start) >= w.window {
		w.counts[key] = &rateCount{n: 1, start: now}
		return
	}
	c.n++
}

// loginLimits are the server's sign-in rate limits.
type loginLimits struct {
	byIP, byUser *rateWindow
}

func newLoginLimits() *loginLimits {
	return &loginLimits{byIP: newRateWindow(loginPerIP, loginIPWindow), byUser: newRateWindow(loginPerUser, loginUserWindow)}
}

// authSettings is server.auth of the configuration in force, or the
// defaults.
func (s *Server) authSettings() config.Auth {
	if s.Config != nil {
		if cfg := s.Config.Load(); cfg != nil {
			return cfg.Server.Auth
		}
	}
	return config.Auth{SessionTTL: config.DefaultSessionTTL, Local: config.LocalAuth{Enabled: true, BreakGlass: config.DefaultBreakGlass}}
}

// localAllowed says whether the token of a user may be used: directory
// users always (their sign-in is checked, and the sync disables them),
// local users while local auth is on, or when they are break-glass admins.
func (s *Server) localAllowed(u *store.User) bool {
	if u.Source != "" && u.Source != store.SourceLocal {
		return true
	}
	a := s.authSettings()
	return a.Local.Enabled || (u.Admin && slices.Contains(a.Local.BreakGlass, u.Name))
}

func clientIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

func (s *Server) login(c *gin.Context) {
	start := time.Now()
	var req api.LoginRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	auditUser(c, clip(req.Username, 100))
	if s.SignIn == nil {
		s.writeProblem(c, errLoginNotReady)
		return
	}
	ip, userKey := clientIP(c.Request), strings.ToLower(req.Username)
	for _, b := range []struct {
		w   *rateWindow
		key string
	}{{s.loginLimits.byIP, ip}, {s.loginLimits.byUser, userKey}} {
		if wait, blocked := b.w.blocked(b.key, start); blocked {
			c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
			auditReason(c, "rate limited")
			s.writeProblem(c, with(errTooManyRequests, "too many sign-ins; try again later"))
			return
		}
	}
	refuse := func(reason string) {
		s.loginLimits.byIP.add(ip, start)
		s.loginLimits.byUser.add(userKey, start)
		auditReason(c, reason)
		// The same answer, no sooner than the floor, whatever the reason.
		wait := loginFailureFloor - time.Since(start) + rand.N(loginFailureFloor/8+1)
		select {
		case <-time.After(wait):
		case <-c.Request.Context().Done():
		}
		s.writeProblem(c, errLoginRefused)
	}
	id, err := s.SignIn.SignIn(c.Request.Context(), req.Username, req.Password)
	var r *auth.Refusal
	switch {
	case errors.As(err, &r):
		refuse(r.Reason)
		return
	case errors.Is(err, auth.ErrInvalidCredentials):
		refuse("invalid credentials")
		return
	case err != nil:
		s.log.Error("sign-in: the directory failed", "err", err, "request_id", c.GetString(requestIDKey))
		auditReason(c, clip(err.Error(), 150))
		s.writeProblem(c, with(errUnavailable, "the directory does not answer; try again later"))
		return
	}
	s.startSession(c, id, refuse, "")
}

// startSession makes or refreshes the user a directory signed in and
// answers a session token for it: as JSON, or, with returnTo (a path of
// this server), a 303 to returnTo with the token in the fragment, which
// the browser keeps from servers and logs.
func (s *Server) startSession(c *gin.Context, id auth.Identity, refuse func(reason string), returnTo string) {
	u, err := s.Store.SignInDirectoryUser(c.Request.Context(), store.DirectoryUser{Name: id.Name, Source: id.Source, Admin: id.Admin, Groups: id.Groups})
	switch {
	case errors.Is(err, store.ErrOtherSource):
		s.log.Warn("sign-in refused: a local user has the directory user's name; rename or remove the local user", "user", id.Name, "source", id.Source)
		refuse("a local user is named " + strconv.Quote(id.Name))
		return
	case err != nil:
		s.writeProblem(c, err)
		return
	}
	ttl := s.authSettings().SessionTTL
	if ttl <= 0 {
		ttl = config.DefaultSessionTTL
	}
	plain, tok, err := s.Store.CreateSessionToken(c.Request.Context(), u.Name, time.Now().Add(ttl))
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	auditUser(c, u.Name)
	c.Set(tokenKey, tok)
	auditDetail(c, "session token %d until %s, from %s, admin %t, groups %s", tok.ID, tok.ExpiresAt.Format(time.RFC3339), id.Source, u.Admin, strings.Join(u.Groups, ","))
	s.log.Info("signed in", "user", u.Name, "source", id.Source, "admin", u.Admin, "groups", u.Groups, "token_id", tok.ID)
	if returnTo != "" {
		c.Header("Cache-Control", "no-store")
		c.Redirect(http.StatusSeeOther, returnTo+"#"+url.Values{"token": {plain}, "expires_at": {tok.ExpiresAt.Format(time.RFC3339)}}.Encode())
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, api.LoginResponse{Token: plain, TokenID: tok.ID, ExpiresAt: *tok.ExpiresAt, User: toAPIUser(u)})
}

func (s *Server) logout(c *gin.Context) {
	var none struct{}
	if !s.decodeOptionalJSON(c, &none) {
		return
	}
	v, _ := c.Get(tokenKey)
	tok, _ := v.(*store.APIToken)
	if tok == nil || !tok.Session {
		s.writeProblem(c, with(errValidation, "this token is an API token, not a sign-in's session: revoke it with DELETE /v1/users/{name}/tokens/{id} (gpuvm token revoke)"))
		return
	}
	u := user(c)
	auditTarget(c, "user/"+u.Name+"/token/"+strconv.FormatInt(tok.ID, 10))
	if err := s.Store.RevokeToken(c.Request.Context(), u.Name, tok.ID); err != nil {
		s.writeProblem(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// ReportDirectoryChanges records what a directory's sync did (pkg/auth/ldap's
// Sync): an audit entry per user disabled or enabled again (user.disable,
// user.enable), and a log line at warn with the VMs the user keeps, which
// an admin decides about.
func (s *Server) ReportDirectoryChanges(ctx context.Context, source string, changes []auth.Change) {
	for _, ch := range changes {
		page, err := s.Store.ListVMs(ctx, store.VMFilter{Owner: ch.User, Limit: 1000})
		var vms []string
		for _, vm := range page.VMs {
			vms = append(vms, vm.Name)
		}
		action, verb := "user.enable", "enabled again: the directory has them again"
		if ch.Disabled {
			action, verb = "user.disable", "disabled: the directory no longer has them; their tokens are refused, their VMs kept"
		}
		detail := fmt.Sprintf("%s sync; %d VMs kept: %s", source, len(vms), strings.Join(vms, ","))
		if err != nil {
			detail = fmt.Sprintf("%s sync; VMs not listed: %v", source, err)
		}
		s.log.Warn("directory user "+verb, "user", ch.User, "source", source, "vms", vms)
		s.RecordAudit(ctx, &store.AuditEntry{Action: action, Outcome: store.AuditOK, Status: http.StatusOK,
			User: ch.User, Target: "user/" + ch.User, Source: source + " sync", Detail: clip(detail, maxAuditDetail)})
	}
}

// OIDCSignIn is an OpenID provider's code flow (pkg/auth/oidc's
// Provider).
type OIDCSignIn interface {
	Start(ctx context.Context, returnTo string) (authURL, state string, err error)
	Finish(ctx context.Context, state, code string) (auth.Identity, string, error)
	// The device authorization grant, for gpuvm login --sso.
	StartDevice(ctx context.Context) (*oidc.Device, error)
	PollDevice(id string) (auth.Identity, error)
}

var errOIDCNotReady = with(errNotFound, "OpenID Connect sign-in is not configured on this server (server.auth.oidc)")

// validReturnTo: a path of this server, so that the sign-in sends nobody
// elsewhere ("//host" and "/\\host" are other hosts to browsers).
func validReturnTo(p string) bool {
	return p == "" || (len(p) <= 200 && strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") && !strings.ContainsAny(p, "\\#\r\n") && !strings.HasPrefix(p, "/\\"))
}

// oidcStart serves GET /v1/auth/oidc/start: a redirect to the provider.
//
// The portal links its "Sign in with SSO" button to
// /v1/auth/oidc/start?return_to=/portal/PAGE; after the provider, the
// browser lands on /portal/PAGE#token=…&expires_at=…, whose script takes
// the token out of the fragment (history.replaceState) and trades it for
// the portal's cookie session (or sends it as a bearer token).
func (s *Server) oidcStart(c *gin.Context) {
	returnTo, given := c.GetQuery("return_to")
	if given && (returnTo == "" || !validReturnTo(returnTo)) {
		s.writeProblem(c, withField(errValidation, "return_to", "return_to is a path of this server, starting with one '/'"))
		return
	}
	if s.OIDC == nil {
		s.writeProblem(c, errOIDCNotReady)
		return
	}
	if wait, blocked := s.loginLimits.byIP.blocked(clientIP(c.Request), time.Now()); blocked {
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		s.writeProblem(c, with(errTooManyRequests, "too many sign-ins; try again later"))
		return
	}
	authURL, _, err := s.OIDC.Start(c.Request.Context(), returnTo)
	if err != nil {
		s.log.Error("sign-in: the OpenID provider cannot be discovered", "err", err, "request_id", c.GetString(requestIDKey))
		s.writeProblem(c, with(errUnavailable, "the OpenID provider does not answer; try again later"))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusFound, authURL)
}

// oidcCallback serves GET /v1/auth/oidc/callback, where the provider sends
// the browser back: the code is exchanged and a session started.
func (s *Server) oidcCallback(c *gin.Context) {
	start := time.Now()
	if s.OIDC == nil {
		s.writeProblem(c, errOIDCNotReady)
		return
	}
	ip := clientIP(c.Request)
	if wait, blocked := s.loginLimits.byIP.blocked(ip, start); blocked {
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		auditReason(c, "rate limited")
		s.writeProblem(c, with(errTooManyRequests, "too many sign-ins; try again later"))
		return
	}
	refuse := func(reason string) {
		s.loginLimits.byIP.add(ip, start)
		auditReason(c, reason)
		wait := loginFailureFloor - time.Since(start) + rand.N(loginFailureFloor/8+1)
		select {
		case <-time.After(wait):
		case <-c.Request.Context().Done():
		}
		s.writeProblem(c, with(errUnauthenticated, "the sign-in with the OpenID provider failed; start again"))
	}
	if e := c.Query("error"); e != "" {
		refuse("the provider answered " + clip(e, 60))
		return
	}
	id, returnTo, err := s.OIDC.Finish(c.Request.Context(), c.Query("state"), c.Query("code"))
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
	s.startSession(c, id, refuse, returnTo)
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
	ip, now := clientIP(c.Request), time.Now()
	if wait, blocked := s.loginLimits.byIP.blocked(ip, now); blocked {
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		s.writeProblem(c, with(errTooManyRequests, "too many sign-ins; try again later"))
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
		wait := loginFailureFloor - time.Since(start) + rand.N(loginFailureFloor/8+1)
		select {
		case <-time.After(wait):
		case <-c.Request.Context().Done():
		}
		s.writeProblem(c, with(errUnauthenticated, "the sign-in with the OpenID provider failed; start again"))
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
		s.startSession(c, id, refuse, "")
		return
	}
}

// authMethods serves GET /v1/auth/methods: what a sign-in page may offer.
func (s *Server) authMethods(c *gin.Context) {
	c.JSON(http.StatusOK, api.AuthMethods{Password: s.SignIn != nil, OIDC: s.OIDC != nil, Token: s.authSettings().Local.Enabled})
}

// maxSessionAge bounds how long a session lives, refreshed or not.
const maxSessionAge = 7 * 24 * time.Hour

// refreshSession extends a session token in use when less than half of
// session_ttl is left, to session_ttl from now, never past maxSessionAge
// from its sign-in: a portal in use keeps its session, one left alone
// loses it. At most one write per half session_ttl.
func (s *Server) refreshSession(c *gin.Context, tok *store.APIToken) {
	if tok == nil || !tok.Session || tok.ExpiresAt == nil {
		return
	}
	ttl := s.authSettings().SessionTTL
	if ttl <= 0 {
		ttl = config.DefaultSessionTTL
	}
	now := time.Now()
	if tok.ExpiresAt.Sub(now) >= ttl/2 {
		return
	}
	until := now.Add(ttl)
	if limit := tok.CreatedAt.Add(maxSessionAge); until.After(limit) {
		until = limit
	}
	if !until.After(*tok.ExpiresAt) {
		return
	}
	if err := s.Store.ExtendSessionToken(c.Request.Context(), tok.ID, until); err != nil {
		s.log.Warn("session not extended", "token_id", tok.ID, "err", err)
		return
	}
	tok.ExpiresAt = &until
}
