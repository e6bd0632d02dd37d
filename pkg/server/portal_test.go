package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/portal"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// portalReq sends a request with optional headers and cookie.
func portalReq(t *testing.T, s *Server, method, path, body string, hdr map[string]string, cookie *http.Cookie) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

// Signing in trades a token for an HttpOnly, SameSite=Strict cookie that
// the API takes; a state-changing request with it needs the CSRF token and
// this origin; signing out kills the cookie on the server; both are in the
// audit log.
func TestPortalSession(t *testing.T) {
	e := newAdminEnv(t)
	s := e.s

	// Refused sign-ins.
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		want       int
	}{
		{"no token", `{"token":""}`, nil, 422},
		{"wrong token", `{"token":"gpuvm_nope"}`, nil, 401},
		{"a form, not JSON", `token=x`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 400},
		{"another origin", `{"token":"` + e.ann + `"}`, map[string]string{"Origin": "https://evil.example"}, 403},
		{"another site", `{"token":"` + e.ann + `"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
	} {
		if rec := portalReq(t, s, "POST", "/v1/session", tc.body, tc.hdr, nil); rec.Code != tc.want || rec.Header().Get("Set-Cookie") != "" {
			t.Errorf("%s: %d %s, set-cookie %q; want %d and no cookie", tc.name, rec.Code, rec.Body, rec.Header().Get("Set-Cookie"), tc.want)
		}
	}

	rec := portalReq(t, s, "POST", "/v1/session", `{"token":"`+e.ann+`"}`, map[string]string{"Origin": "http://example.com"}, nil)
	if rec.Code != 201 {
		t.Fatalf("sign in: %d %s", rec.Code, rec.Body)
	}
	var sess api.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &sess); err != nil || sess.User.Name != "ann" || sess.CSRFToken == "" {
		t.Fatalf("session %+v, %v", sess, err)
	}
	if !sess.ExpiresAt.After(e.clock.Now().Add(config.DefaultSessionTTL - time.Minute)) {
		t.Errorf("expires %v", sess.ExpiresAt)
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v", cookies)
	}
	ck := cookies[0]
	if ck.Name != api.SessionCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/" ||
		!strings.HasPrefix(ck.Value, store.SessionPrefix) || ck.Expires.IsZero() || strings.Contains(rec.Body.String(), ck.Value) {
		t.Fatalf("cookie %+v (body %s)", ck, rec.Body)
	}
	// Under TLS (here: a proxy that says so) it is Secure.
	if r := portalReq(t, s, "POST", "/v1/session", `{"token":"`+e.ann+`"}`, map[string]string{"X-Forwarded-Proto": "https"}, nil); !r.Result().Cookies()[0].Secure {
		t.Errorf("cookie over TLS not Secure: %v", r.Header())
	}

	// The API takes the cookie.
	if r := portalReq(t, s, "GET", "/v1/whoami", "", nil, ck); r.Code != 200 || !strings.Contains(r.Body.String(), `"ann"`) {
		t.Fatalf("whoami with the cookie: %d %s", r.Code, r.Body)
	}
	if r := portalReq(t, s, "GET", "/v1/session", "", nil, ck); r.Code != 200 || !strings.Contains(r.Body.String(), sess.CSRFToken) {
		t.Fatalf("GET /v1/session: %d %s", r.Code, r.Body)
	}
	// GET /v1/session is for sessions only.
	if r := portalReq(t, s, "GET", "/v1/session", "", map[string]string{"Authorization": "Bearer " + e.ann}, nil); r.Code != 404 {
		t.Errorf("GET /v1/session with a bearer token: %d", r.Code)
	}

	// CSRF: a state-changing request without the token, with a wrong one,
	// or from another origin is refused; with it, it goes through.
	create := `{"profile":"nope"}`
	for name, hdr := range map[string]map[string]string{
		"no CSRF token":  nil,
		"wrong token":    {api.CSRFHeader: sess.CSRFToken + "x"},
		"another origin": {api.CSRFHeader: sess.CSRFToken, "Origin": "https://evil.example"},
	} {
		if r := portalReq(t, s, "POST", "/v1/vms", create, hdr, ck); r.Code != 403 {
			t.Errorf("%s: POST /v1/vms = %d %s, want 403", name, r.Code, r.Body)
		}
		if r := portalReq(t, s, "DELETE", "/v1/session", "", hdr, ck); r.Code != 403 {
			t.Errorf("%s: DELETE /v1/session = %d, want 403", name, r.Code)
		}
	}
	// Behind a proxy that rewrites Host, Origin is the host the proxy was
	// asked for.
	if r := portalReq(t, s, "POST", "/v1/vms", create, map[string]string{api.CSRFHeader: sess.CSRFToken,
		"Origin": "https://gpu.lab.example", "X-Forwarded-Host": "gpu.lab.example"}, ck); r.Code == 403 || r.Code == 401 {
		t.Errorf("POST /v1/vms through a proxy: %d %s", r.Code, r.Body)
	}
	// With the token the request reaches the handler (which knows no such
	// profile: there is no configuration).
	if r := portalReq(t, s, "POST", "/v1/vms", create, map[string]string{api.CSRFHeader: sess.CSRFToken}, ck); r.Code == 403 || r.Code == 401 {
		t.Errorf("POST /v1/vms with the CSRF token: %d %s", r.Code, r.Body)
	}
	// A bearer token needs no CSRF token, and wins over a cookie.
	if r := portalReq(t, s, "GET", "/v1/whoami", "", map[string]string{"Authorization": "Bearer " + e.bob}, ck); !strings.Contains(r.Body.String(), `"bob"`) {
		t.Errorf("bearer with a cookie: %s", r.Body)
	}

	// Signing out ends the session on the server: the same cookie is dead.
	if r := portalReq(t, s, "DELETE", "/v1/session", "", map[string]string{api.CSRFHeader: sess.CSRFToken}, ck); r.Code != 204 ||
		!strings.Contains(r.Header().Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("sign out: %d %v", r.Code, r.Header())
	}
	if r := portalReq(t, s, "GET", "/v1/whoami", "", nil, ck); r.Code != 401 {
		t.Fatalf("the cookie after sign-out: %d", r.Code)
	}

	// The audit log has both, with the user and the token's ID, never the
	// token or the cookie.
	es, _, err := e.st.ListAudit(context.Background(), store.AuditFilter{User: "ann", Action: "session.", Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	var ok, out int
	for _, a := range es {
		if strings.Contains(a.Detail+a.Target, "gpuvm_") || strings.Contains(a.Detail+a.Target, "gvs_") {
			t.Errorf("a secret in the audit log: %+v", a)
		}
		switch {
		case a.Action == "session.create" && a.Outcome == store.AuditOK && a.TokenID != 0 && a.Target == "user/ann":
			ok++
		case a.Action == "session.delete" && a.Outcome == store.AuditOK:
			out++
		}
	}
	if ok != 2 || out != 1 {
		t.Errorf("audit: %d sign-ins, %d sign-outs of ann (want 2, 1): %+v", ok, out, es)
	}
}

// Revoking the token a session was opened with ends the session.
func TestPortalSessionTokenRevoked(t *testing.T) {
	e := newAdminEnv(t)
	// Sign in with a fresh token, so that its ID is known.
	plain, tok, err := e.st.CreateToken(context.Background(), "ann", "portal", nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := portalReq(t, e.s, "POST", "/v1/session", `{"token":"`+plain+`"}`, nil, nil)
	ck := rec.Result().Cookies()[0]
	if err := e.st.RevokeToken(context.Background(), "ann", tok.ID); err != nil {
		t.Fatal(err)
	}
	if r := portalReq(t, e.s, "GET", "/v1/vms", "", nil, ck); r.Code != 401 {
		t.Fatalf("after revoking the token: %d", r.Code)
	}
}

// The portal's pages: a visitor without a session goes to /login, the
// pages carry the CSP and the framing and referrer headers, the console
// page keeps its own, and unknown paths stay 404 problems.
func TestPortalPages(t *testing.T) {
	e := newAdminEnv(t)
	s := e.s
	for p, to := range map[string]string{"/": "/login", "/vms": "/login?next=%2Fvms", "/book": "/login?next=%2Fbook"} {
		if r := portalReq(t, s, "GET", p, "", nil, nil); r.Code != 303 || r.Header().Get("Location") != to {
			t.Errorf("GET %s signed out: %d %v", p, r.Code, r.Header())
		}
	}
	r := portalReq(t, s, "GET", "/login", "", map[string]string{"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}, nil)
	if r.Code != 200 || !strings.Contains(r.Body.String(), `<html lang="zh-CN">`) {
		t.Fatalf("GET /login: %d %s", r.Code, r.Body)
	}
	h := r.Header()
	if h.Get("Content-Security-Policy") != portal.CSP || h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" ||
		!strings.Contains(portal.CSP, "frame-ancestors 'none'") || strings.Contains(portal.CSP, "unsafe-inline") {
		t.Errorf("headers %v", h)
	}
	rec := portalReq(t, s, "POST", "/v1/session", `{"token":"`+e.ann+`"}`, nil, nil)
	ck := rec.Result().Cookies()[0]
	if r := portalReq(t, s, "GET", "/login", "", nil, ck); r.Code != 303 || r.Header().Get("Location") != "/" {
		t.Errorf("GET /login signed in: %d", r.Code)
	}
	for _, p := range []string{"/", "/vms", "/portal/app.js", "/portal/portal.css"} {
		if r := portalReq(t, s, "GET", p, "", nil, ck); r.Code != 200 || r.Header().Get("Content-Security-Policy") != portal.CSP {
			t.Errorf("GET %s: %d %v", p, r.Code, r.Header())
		}
	}
	if r := portalReq(t, s, "GET", "/portal/nope.js", "", nil, ck); r.Code != 404 {
		t.Errorf("unknown asset: %d", r.Code)
	}
	if r := portalReq(t, s, "POST", "/vms", "", nil, ck); r.Code != 404 || r.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("POST /vms: %d %v", r.Code, r.Header())
	}
	if r := portalReq(t, s, "GET", "/nope", "", nil, nil); r.Code != 404 || r.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET /nope: %d %v", r.Code, r.Header())
	}
	// The console page keeps its own policy.
	if r := portalReq(t, s, "GET", consolePageURL+"x?ticket=gvt_x", "", nil, nil); r.Header().Get("Content-Security-Policy") == portal.CSP {
		t.Errorf("the console page has the portal's CSP")
	}
}

// A portal session in use slides: each use moves its end to session_ttl
// (12 h) from then, never past 7 days after the sign-in; one left alone for
// session_ttl ends.
func TestPortalSessionSlides(t *testing.T) {
	e := newAdminEnv(t)
	signIn := func() *http.Cookie {
		rec := portalReq(t, e.s, "POST", "/v1/session", `{"token":"`+e.ann+`"}`, nil, nil)
		if rec.Code != 201 {
			t.Fatalf("sign in: %d %s", rec.Code, rec.Body)
		}
		return rec.Result().Cookies()[0]
	}
	start := e.clock.Now()
	used, idle := signIn(), signIn()
	for e.clock.Now().Before(start.Add(maxSessionAge - 11*time.Hour)) {
		e.clock.Advance(11 * time.Hour)
		rec := portalReq(t, e.s, "GET", "/v1/session", "", nil, used)
		var sess api.Session
		_ = json.Unmarshal(rec.Body.Bytes(), &sess)
		if rec.Code != 200 {
			t.Fatalf("a session in use, %s after the sign-in: %d", e.clock.Now().Sub(start), rec.Code)
		}
		if want := e.clock.Now().Add(config.DefaultSessionTTL); sess.ExpiresAt.Sub(want).Abs() > time.Minute && sess.ExpiresAt.Before(start.Add(maxSessionAge-time.Minute)) {
			t.Errorf("%s after the sign-in the session ends %s, want %s", e.clock.Now().Sub(start), sess.ExpiresAt, want)
		}
	}
	if rec := portalReq(t, e.s, "GET", "/v1/whoami", "", nil, idle); rec.Code != http.StatusUnauthorized {
		t.Errorf("a session left alone for days: %d", rec.Code)
	}
	e.clock.Set(start.Add(maxSessionAge))
	if rec := portalReq(t, e.s, "GET", "/v1/whoami", "", nil, used); rec.Code != http.StatusUnauthorized {
		t.Errorf("a session in use past 7 days: %d", rec.Code)
	}
}
