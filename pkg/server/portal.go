package server

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/portal"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The web portal (pkg/portal) is served by the same engine as the API, on
// the same origin: its pages and assets through noRoute (they are not API
// routes), its sign-in and sign-out as the API routes of this file.
//
// A portal session is a cookie session of the store (pkg/store's
// sessions, kind cookie), opened by POST /v1/session with an API token
// (checked like a bearer token; the session keeps only the token's ID, so
// that revoking the token ends the session) or a directory account's
// username and password (as POST /v1/login checks them), or by the OpenID
// sign-in's callback (oidc.go). Its secret travels only in an HttpOnly,
// SameSite=Strict cookie (Secure under TLS); the API takes the cookie in
// place of a bearer token. A state-changing request with the cookie must
// carry the session's CSRF token in X-CSRF-Token (a synchronizer token,
// compared with the stored one) and, when the browser sends Origin, come
// from this origin. DELETE /v1/session (or POST /v1/logout) deletes the
// row: the cookie is dead at once, wherever it is. It expires as every
// session does: server.auth.session_ttl after its last use, at most
// maxSessionAge after the sign-in.

// Keys of the request's session: the *store.Session, its secret.
const (
	sessionKey       = "gpuvm.session"
	sessionSecretKey = "gpuvm.session-secret"
)

var sessionAPIRoutes = []route{
	{Method: "POST", Path: "/v1/session", Summary: "Sign in to the web portal: exchange an API token (token), or a directory account's username and password (server.auth.ldap; refused as POST /v1/login refuses: one 401 whatever the reason, limited per source and per username), for a session cookie (gpuvm_session: HttpOnly, SameSite=Strict, Secure under TLS) that the API takes in place of a bearer token; it lasts server.auth.session_ttl after its last use, 7 days at most. State-changing requests with the cookie need the answer's csrf_token in X-CSRF-Token",
		Auth: authNone, Body: api.SignInRequest{}, Status: 201, Answer: api.Session{}, Errors: []int{400, 401, 403, 404, 413, 422, 429, 503}},
	{Method: "GET", Path: "/v1/session", Summary: "The caller's portal session: its user, CSRF token and expiry (the session cookie only)", Auth: authUser, Status: 200, Answer: api.Session{}, Errors: []int{404}},
	{Method: "DELETE", Path: "/v1/session", Summary: "Sign out: the session ends on the server, its cookie is cleared (the session cookie and its X-CSRF-Token; POST /v1/logout does the same)", Auth: authUser, Status: 204, Errors: []int{403, 404}},
}

// portalRoutes mounts the portal: its session routes, and its pages and
// assets behind the API's routes (noRoute).
func (s *Server) portalRoutes(v1 *gin.RouterGroup) {
	s.portal = portal.New(portal.Options{SignedIn: s.signedIn})
	s.engine.POST("/v1/session", s.signIn)
	v1.GET("/session", s.getSession)
	v1.DELETE("/session", s.signOut)
}

// noRoute serves the portal's pages and assets; anything else is 404.
func (s *Server) noRoute(c *gin.Context) {
	if s.portal != nil && s.portal.Serves(c.Request) {
		s.portal.ServeHTTP(c.Writer, c.Request)
		return
	}
	s.writeProblem(c, with(errNotFound, "no route "+c.Request.Method+" "+c.Request.URL.Path))
}

// noMethod answers a request whose path is served for other methods only
// (gin has set Allow): 405, naming them. A GET never does what a POST does
// (POST /v1/vms/{id}/credentials spends the desktop password).
func (s *Server) noMethod(c *gin.Context) {
	allow := c.Writer.Header().Get("Allow")
	s.writeProblem(c, with(errMethodNotAllowed, c.Request.Method+" "+c.Request.URL.Path+" is not served: this path takes "+allow))
}

// signedIn says whether a request carries a live session cookie (the
// portal's pages send those without one to /login).
func (s *Server) signedIn(r *http.Request) bool {
	ck, err := r.Cookie(api.SessionCookie)
	if err != nil {
		return false
	}
	_, u, err := s.Store.GetSession(r.Context(), store.SessionCookie, ck.Value)
	return err == nil && s.localAllowed(u)
}

// hasSession says whether a request authenticates with the session cookie:
// it has one and no Authorization header (a bearer token wins).
func hasSession(c *gin.Context) bool {
	if c.GetHeader("Authorization") != "" {
		return false
	}
	_, err := c.Request.Cookie(api.SessionCookie)
	return err == nil
}

// authenticateSession is authenticate for a request with the session
// cookie: the session must be live, and a state-changing request must
// carry its CSRF token and come from this origin.
func (s *Server) authenticateSession(c *gin.Context) {
	ck, _ := c.Request.Cookie(api.SessionCookie)
	ps, u, err := s.Store.GetSession(c.Request.Context(), store.SessionCookie, ck.Value)
	if err == nil && !s.localAllowed(u) {
		// server.auth.local.enabled = false: a session a local user opened
		// with a token ends as the token's use does.
		err = store.ErrNoSession
	}
	switch {
	case errors.Is(err, store.ErrNoSession):
		s.clearSessionCookie(c)
		s.writeProblem(c, with(errUnauthenticated, "the portal session has ended: sign in again at /login"))
		return
	case err != nil:
		s.writeProblem(c, err)
		return
	}
	c.Set(userKey, u)
	c.Set(sessionKey, ps)
	c.Set(sessionSecretKey, ck.Value)
	if ps.TokenID != nil {
		c.Set(tokenKey, &store.APIToken{ID: *ps.TokenID}) // the audit log names it
	}
	if stateChanging(c.Request.Method) {
		if !sameOrigin(c.Request) {
			s.writeProblem(c, withField(errForbidden, originHeader(c.Request), "the request comes from another origin"))
			return
		}
		got := c.GetHeader(api.CSRFHeader)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(ps.CSRF)) != 1 {
			s.writeProblem(c, withField(errForbidden, api.CSRFHeader, "a request with the session cookie that changes something needs the session's CSRF token in "+api.CSRFHeader+" (GET /v1/session has it)"))
			return
		}
	}
	c.Next()
}

// sameOrigin is false when the browser says the request comes from another
// origin (Origin, else Sec-Fetch-Site); a request that says neither is not
// from a browser that would send the cookie cross-site. same-site is not
// this origin: a page on another port of the host (a guest's web app
// through a tunnel on 127.0.0.1) is same-site. Origin may name
// the host a proxy in front was asked for (X-Forwarded-Host): a page of
// another site cannot set that header without a preflight, which gpuvmd
// never grants.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil {
			return false
		}
		fwd, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Host"), ",")
		return strings.EqualFold(u.Host, r.Host) || fwd != "" && strings.EqualFold(u.Host, strings.TrimSpace(fwd))
	}
	site := r.Header.Get("Sec-Fetch-Site")
	return site == "" || site == "same-origin" || site == "none"
}

// originHeader is the header sameOrigin judged a request by.
func originHeader(r *http.Request) string {
	if r.Header.Get("Origin") != "" {
		return "Origin"
	}
	return "Sec-Fetch-Site"
}

// signIn is POST /v1/session: with a token, or a username and password.
func (s *Server) signIn(c *gin.Context) {
	if !sameOrigin(c.Request) {
		s.writeProblem(c, with(errForbidden, "sign in from the portal's own page"))
		return
	}
	var req api.SignInRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	token := strings.TrimSpace(req.Token)
	switch {
	case token != "" && (req.Username != "" || req.Password != ""):
		s.writeProblem(c, withField(errValidation, "token", "give a token, or a username and password, not both"))
		return
	case token == "" && req.Username == "":
		s.writeProblem(c, withField(errValidation, "token", "give your API token (gpuvm admin tokens create NAME makes one), or your directory account's username and password"))
		return
	case token == "":
		id, refuse, ok := s.checkPassword(c, req.Username, req.Password) // login.go
		if !ok {
			return
		}
		if u, secret, ps, ok := s.startSession(c, id, refuse, store.SessionCookie); ok {
			auditTarget(c, "user/"+u.Name)
			s.setSessionCookie(c, secret, ps)
			c.JSON(http.StatusCreated, toAPISession(u, ps))
		}
		return
	}
	ctx := c.Request.Context()
	u, tok, err := s.Auth.AuthenticateToken(ctx, token)
	if err == nil && !s.localAllowed(u) {
		err = store.ErrInvalidToken
	}
	switch {
	case errors.Is(err, store.ErrInvalidToken):
		s.writeProblem(c, withField(errUnauthenticated, "token", "the token is unknown, expired or revoked"))
		return
	case err != nil:
		s.writeProblem(c, err)
		return
	}
	auditUser(c, u.Name)
	var tokenID int64
	var notAfter *time.Time
	if tok != nil {
		tokenID, notAfter = tok.ID, tok.ExpiresAt
		c.Set(tokenKey, tok)
	}
	if _, err := s.Store.DeleteExpiredSessions(ctx, s.Store.Now()); err != nil {
		s.log.Warn("cannot remove expired sessions", "err", err)
	}
	secret, ps, err := s.Store.CreateSession(ctx, u.Name, s.sessionRule(store.SessionCookie, store.SignInToken, tokenID, notAfter))
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	auditTarget(c, "user/"+u.Name)
	s.setSessionCookie(c, secret, ps)
	c.JSON(http.StatusCreated, toAPISession(u, ps))
}

// setSessionCookie gives the browser a cookie session's secret: HttpOnly,
// SameSite=Strict, Secure under TLS, kept until the session's NotAfter (the
// store decides when it ends before).
func (s *Server) setSessionCookie(c *gin.Context, secret string, ps *store.Session) {
	http.SetCookie(c.Writer, &http.Cookie{Name: api.SessionCookie, Value: secret, Path: "/", Expires: ps.NotAfter,
		HttpOnly: true, Secure: secureRequest(c.Request), SameSite: http.SameSiteStrictMode})
	c.Header("Cache-Control", "no-store")
}

// getSession is GET /v1/session: only with the session cookie.
func (s *Server) getSession(c *gin.Context) {
	v, _ := c.Get(sessionKey)
	ps, _ := v.(*store.Session)
	if ps == nil || ps.Kind != store.SessionCookie {
		s.writeProblem(c, with(errNotFound, "no portal session: this request authenticated with a bearer token"))
		return
	}
	out := toAPISession(user(c), ps)
	sim, err := s.simulatedHosts(c.Request.Context()) // usage.go
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	for name := range sim {
		out.SimulatedHosts = append(out.SimulatedHosts, name)
	}
	slices.Sort(out.SimulatedHosts)
	out.Contact = s.config().Server.Contact
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, out)
}

// signOut is DELETE /v1/session.
func (s *Server) signOut(c *gin.Context) {
	v, _ := c.Get(sessionKey)
	ps, _ := v.(*store.Session)
	if ps == nil || ps.Kind != store.SessionCookie {
		s.writeProblem(c, with(errNotFound, "no portal session: this request authenticated with a bearer token"))
		return
	}
	s.endSession(c, ps) // login.go
}

func (s *Server) clearSessionCookie(c *gin.Context) {
	http.SetCookie(c.Writer, &http.Cookie{Name: api.SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: secureRequest(c.Request), SameSite: http.SameSiteStrictMode})
}

// secureRequest: the request came over TLS, to gpuvmd or to a proxy in
// front that says so (which only makes the cookie stricter).
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func toAPISession(u *store.User, ps *store.Session) api.Session {
	return api.Session{User: toAPIUser(u), CSRFToken: ps.CSRF, ExpiresAt: ps.ExpiresAt}
}
