package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/gin-gonic/gin"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/auth"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Sign-in (POST /v1/login) gives a session for a directory account's name
// and password: a bearer session of the store (its secret sent as
// Authorization: Bearer, only its hash kept), which POST /v1/logout ends.
// The portal's password form opens a cookie session the same way (POST
// /v1/session with username and password, portal.go), the OpenID sign-ins
// either kind (oidc.go). Every session follows one rule (pkg/store's
// sessions): it lives server.auth.session_ttl after its last use, never
// more than maxSessionAge after its sign-in.
//
// Every refusal for the credentials (an unknown user, a wrong password, a
// name the directory finds twice, a local user of that name, a disabled
// account is not one: a sign-in enables it) is answered the same: 401, the
// same problem, no sooner than loginFailureFloor after the request came
// (plus jitter), so that nobody learns from the answer or its timing which
// names exist. Only the audit entry (auth.login) says why. Failed sign-ins
// are limited per source address and per username — the name as the
// directory matches it (loginKey: " Bob" is bob), and the directory entry
// it found — beyond, 429 with Retry-After, for any name alike (and for
// the right password too).

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
	var req api.LoginRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	id, refuse, ok := s.checkPassword(c, req.Username, req.Password)
	if !ok {
		return
	}
	if u, secret, ss, ok := s.startSession(c, id, refuse, store.SessionBearer); ok {
		writeLogin(c, u, secret, ss)
	}
}

// checkPassword checks a username and password with the directory, within
// the sign-in limits. ok false: the answer is written (the uniform 401, a
// 429, 404 without a directory, 503 when it does not answer). refuse is
// how a later refusal of the sign-in is answered.
func (s *Server) checkPassword(c *gin.Context, username, password string) (auth.Identity, func(string), bool) {
	start := time.Now()
	auditUser(c, clip(username, 100))
	if s.SignIn == nil {
		s.writeProblem(c, errLoginNotReady)
		return auth.Identity{}, nil, false
	}
	// The per-user limit counts the name as the directory matches it (a
	// name spelt with other case or spaces is the same account), and, once
	// the directory has answered, its entry's own name as well.
	ip, userKeys := clientIP(c.Request), []string{loginKey(username)}
	if s.loginBlocked(c, start, ip, userKeys) {
		return auth.Identity{}, nil, false
	}
	refuse := func(reason string) {
		s.loginLimits.byIP.add(ip, start)
		for _, k := range slices.Compact(userKeys) {
			s.loginLimits.byUser.add(k, start)
		}
		auditReason(c, reason)
		slowRefusal(c, start)
		s.writeProblem(c, errLoginRefused)
	}
	id, err := s.SignIn.SignIn(c.Request.Context(), username, password)
	var r *auth.Refusal
	switch {
	case errors.As(err, &r):
		if r.Account != "" {
			userKeys = append(userKeys, loginKey(r.Account))
			if s.loginBlocked(c, start, "", userKeys[1:]) {
				return auth.Identity{}, nil, false
			}
		}
		refuse(r.Reason)
		return auth.Identity{}, nil, false
	case errors.Is(err, auth.ErrInvalidCredentials):
		refuse("invalid credentials")
		return auth.Identity{}, nil, false
	case err != nil:
		s.log.Error("sign-in: the directory failed", "err", err, "request_id", c.GetString(requestIDKey))
		auditReason(c, clip(err.Error(), 150))
		s.writeProblem(c, with(errUnavailable, "the directory does not answer; try again later"))
		return auth.Identity{}, nil, false
	}
	// The right password of an account whose name is blocked however it
	// was spelt is refused as the blocked name is.
	userKeys = append(userKeys, loginKey(id.Name))
	if s.loginBlocked(c, start, "", userKeys[1:]) {
		return auth.Identity{}, nil, false
	}
	return id, refuse, true
}

// loginBlocked answers 429 with Retry-After and reports true when the
// source address ip ("": not checked) or one of the user keys has reached
// its limit.
func (s *Server) loginBlocked(c *gin.Context, now time.Time, ip string, userKeys []string) bool {
	type check struct {
		w   *rateWindow
		key string
	}
	var checks []check
	if ip != "" {
		checks = append(checks, check{s.loginLimits.byIP, ip})
	}
	for _, k := range userKeys {
		checks = append(checks, check{s.loginLimits.byUser, k})
	}
	for _, b := range checks {
		if wait, blocked := b.w.blocked(b.key, now); blocked {
			c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
			auditReason(c, "rate limited")
			s.writeProblem(c, with(errTooManyRequests, "too many sign-ins; try again later"))
			return true
		}
	}
	return false
}

// loginKey is a username as a directory matches it (LDAP's caseIgnoreMatch
// of uid, RFC 4518's string preparation): control and format characters
// (soft hyphen, zero-width space, variation selectors) mapped to nothing,
// other spaces to a space, case folded, compatibility-normalised (NFKC),
// spaces at either end dropped and runs inside made one. Names the
// directory takes for one account are one key.
func loginKey(name string) string {
	name = strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r) || unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp):
			return ' '
		case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Variation_Selector) || r == 0x034F || r == 0x1806 || r == 0xFFFC:
			return -1
		}
		return r
	}, name)
	name = norm.NFKC.String(cases.Fold().String(name))
	return strings.Join(strings.Fields(name), " ")
}

// slowRefusal waits until loginFailureFloor (plus jitter) after start: a
// refusal takes as long whatever its reason.
func slowRefusal(c *gin.Context, start time.Time) {
	wait := loginFailureFloor - time.Since(start) + rand.N(loginFailureFloor/8+1)
	select {
	case <-time.After(wait):
	case <-c.Request.Context().Done():
	}
}

// maxSessionAge bounds how long a session lives after its sign-in, however
// much it is used.
const maxSessionAge = 7 * 24 * time.Hour

// sessionRule is what a new session of kind gets: server.auth.session_ttl
// of idle time, never past maxSessionAge, nor past notAfter when that is
// set (the expiry of the API token a portal session is opened with).
func (s *Server) sessionRule(kind, method string, tokenID int64, notAfter *time.Time) store.NewSession {
	ttl := s.authSettings().SessionTTL
	if ttl <= 0 {
		ttl = config.DefaultSessionTTL
	}
	limit := s.Store.Now().Add(maxSessionAge)
	if notAfter != nil && notAfter.Before(limit) {
		limit = *notAfter
	}
	return store.NewSession{Kind: kind, Method: method, TokenID: tokenID, Idle: ttl, NotAfter: limit}
}

// startSession makes or refreshes the user a directory signed in and opens
// a session of kind for them. ok false: the answer is written.
func (s *Server) startSession(c *gin.Context, id auth.Identity, refuse func(reason string), kind string) (*store.User, string, *store.Session, bool) {
	ctx := c.Request.Context()
	u, err := s.Store.SignInDirectoryUser(ctx, store.DirectoryUser{Name: id.Name, Source: id.Source, Admin: id.Admin, Groups: id.Groups, UID: id.UID})
	switch {
	case errors.Is(err, store.ErrOtherSource):
		s.log.Warn("sign-in refused: a local user has the directory user's name; rename or remove the local user", "user", id.Name, "source", id.Source)
		refuse("a local user is named " + strconv.Quote(id.Name))
		return nil, "", nil, false
	case err != nil:
		s.writeProblem(c, err)
		return nil, "", nil, false
	}
	if _, err := s.Store.DeleteExpiredSessions(ctx, s.Store.Now()); err != nil {
		s.log.Warn("cannot remove expired sessions", "err", err)
	}
	secret, ss, err := s.Store.CreateSession(ctx, u.Name, s.sessionRule(kind, id.Source, 0, nil))
	if err != nil {
		s.writeProblem(c, err)
		return nil, "", nil, false
	}
	auditUser(c, u.Name)
	c.Set(sessionKey, ss)
	auditDetail(c, "%s session until %s (at most %s), from %s, admin %t, groups %s", kind, ss.ExpiresAt.Format(time.RFC3339),
		ss.NotAfter.Format(time.RFC3339), id.Source, u.Admin, strings.Join(u.Groups, ","))
	s.log.Info("signed in", "user", u.Name, "source", id.Source, "session", kind, "admin", u.Admin, "groups", u.Groups)
	return u, secret, ss, true
}

// writeLogin answers a bearer session as JSON.
func writeLogin(c *gin.Context, u *store.User, secret string, ss *store.Session) {
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, api.LoginResponse{Token: secret, ExpiresAt: ss.ExpiresAt, NotAfter: ss.NotAfter, User: toAPIUser(u)})
}

// logout is POST /v1/logout: it ends the request's session, a bearer
// session or the portal's cookie (as DELETE /v1/session does). An API token
// is refused: it is revoked, not signed out.
func (s *Server) logout(c *gin.Context) {
	var none struct{}
	if !s.decodeOptionalJSON(c, &none) {
		return
	}
	v, _ := c.Get(sessionKey)
	ss, _ := v.(*store.Session)
	if ss == nil {
		s.writeProblem(c, with(errValidation, "this token is an API token, not a sign-in's session: revoke it with DELETE /v1/users/{name}/tokens/{id} (gpuvm admin tokens revoke NAME ID)"))
		return
	}
	s.endSession(c, ss)
}

// endSession deletes the request's session; a cookie's is cleared too.
func (s *Server) endSession(c *gin.Context, ss *store.Session) {
	auditTarget(c, "user/"+user(c).Name+"/session")
	if err := s.Store.DeleteSession(c.Request.Context(), c.GetString(sessionSecretKey)); err != nil {
		s.writeProblem(c, err)
		return
	}
	if ss.Kind == store.SessionCookie {
		s.clearSessionCookie(c)
	}
	c.Status(http.StatusNoContent)
}

// authenticateBearerSession authenticates a bearer token that is a
// session's secret. found false: it is none (the caller answers).
func (s *Server) authenticateBearerSession(c *gin.Context, secret string) (found bool) {
	ss, u, err := s.Store.GetSession(c.Request.Context(), store.SessionBearer, secret)
	switch {
	case errors.Is(err, store.ErrNoSession):
		return false
	case err != nil:
		s.writeProblem(c, err)
		return true
	}
	c.Set(userKey, u)
	c.Set(sessionKey, ss)
	c.Set(sessionSecretKey, secret)
	c.Next()
	return true
}

// authMethods serves GET /v1/auth/methods: what a sign-in page may offer.
func (s *Server) authMethods(c *gin.Context) {
	m := api.AuthMethods{Password: s.SignIn != nil, OIDC: s.OIDC != nil, Token: s.authSettings().Local.Enabled,
		Contact: s.config().Server.Contact}
	if s.OIDC != nil {
		if o := s.authSettings().OIDC; o != nil {
			m.OIDCName = o.DisplayName
		}
		if m.OIDCName == "" {
			m.OIDCName = "SSO"
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), 5*time.Second)
		m.OIDCDevice = s.OIDC.SupportsDevice(ctx)
		cancel()
	}
	// The sign-in page's badge: whether, never which (usage.go).
	if sim, err := s.simulatedHosts(c.Request.Context()); err != nil {
		s.log.Warn("auth methods: the hosts are not read: no simulated badge", "err", err)
	} else {
		m.Simulated = len(sim) > 0
	}
	c.JSON(http.StatusOK, m)
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
