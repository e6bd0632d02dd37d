package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// The adversarial walk of authority: what a browser's ambient credential
// (the portal's cookie) can make the API do without the session's CSRF
// token, and what a GET can do at all.

// getsThatAreNotReads are the GET routes that do more than read, and why
// each is a GET. Every other GET is a read: it changes nothing
// (TestGetRoutesChangeNothing). Nothing that spends may be here: a page of
// the same site (another port of the host) can make the browser send a GET
// with the cookie and no CSRF token.
var getsThatAreNotReads = map[string]string{
	"GET /v1/vms/{id}/console":    "issues a console ticket: spends nothing, expires in a minute, and only the caller can read the answer",
	"GET /v1/vms/{id}/console.vv": "the same ticket, in a virt-viewer file",
	"GET " + consoleWSPath:        "a websocket, which browsers open with GET; the ticket is the credential",
	"GET " + tunnelWSPath:         "a websocket, which browsers open with GET; the ticket is the credential",
	"GET " + tunnelUDPWSPath:      "a websocket, which browsers open with GET; the ticket is the credential",
	"GET /v1/volumes/{id}":        "an admin's ?as_admin=true override reads another person's volume: recorded",
	"GET /v1/auth/oidc/callback":  "the OpenID provider sends the browser back with GET; it checks the state the sign-in started with",
}

// portalSession opens a portal session with an API token: its cookie and
// CSRF token.
func (e *hostileEnv) portalSession(token string) (*http.Cookie, string) {
	e.t.Helper()
	rec := e.do(context.Background(), "POST", "/v1/session", "", `{"token":"`+token+`"}`, nil)
	var sess api.Session
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &sess) != nil {
		e.t.Fatalf("portal sign-in with %s: %d %s", token, rec.Code, rec.Body)
	}
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == api.SessionCookie {
			return ck, sess.CSRFToken
		}
	}
	e.t.Fatalf("portal sign-in with %s: no cookie", token)
	return nil, ""
}

// doCookie is do with a session cookie in place of a bearer token.
func (e *hostileEnv) doCookie(ctx context.Context, method, path string, ck *http.Cookie, body string, hdr map[string]string) int {
	h := map[string]string{"Cookie": ck.Name + "=" + ck.Value}
	for k, v := range hdr {
		h[k] = v
	}
	return e.do(ctx, method, path, "", body, h).Code
}

// Every route that changes state or spends something (all but GET, and the
// GETs auditRoutes records) refuses the portal's cookie without the CSRF
// token, whatever the browser says of where the request comes from —
// same-site is not same-origin — and changes nothing.
func TestCookieWithoutCSRFTokenIsRefused(t *testing.T) {
	e := newHostileEnv(t)
	cookies := map[string]*http.Cookie{}
	cookies["ann-token"], _ = e.portalSession("ann-token")
	cookies["admin-token"], _ = e.portalSession("admin-token")
	origins := []map[string]string{
		nil, // a browser that says nothing
		{"Sec-Fetch-Site": "same-origin"},
		{"Sec-Fetch-Site": "same-site"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "none"},
		{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"}, // httptest's host: this origin
		{"Origin": "http://example.com:8080", "Sec-Fetch-Site": "same-site"},
		{"Origin": "null"},
	}
	walked := 0
	for _, r := range apiRoutes {
		key := r.Method + " " + r.Path
		_, audited := auditRoutes[key]
		if r.Auth != authUser && r.Auth != authAdmin || !stateChanging(r.Method) && (!audited || getsThatAreNotReads[key] != "") {
			continue
		}
		walked++
		for _, hdr := range origins {
			before := e.fingerprint()
			code := e.doCookie(context.Background(), r.Method, e.path(r, ""), cookies[tokenOf(r)], hostileBodies[key].body, hdr)
			if code != http.StatusForbidden {
				t.Errorf("%s with the cookie, no CSRF token, %v: %d, want 403", key, hdr, code)
			}
			if after := e.fingerprint(); after != before {
				t.Errorf("%s with the cookie, no CSRF token, %v: the database changed:\n%s\nthen:\n%s", key, hdr, before, after)
			}
		}
	}
	if walked < 20 {
		t.Errorf("only %d routes walked", walked)
	}
	// The refusal names the header at fault.
	for _, tc := range []struct {
		hdr   map[string]string
		field string
	}{
		{nil, api.CSRFHeader},
		{map[string]string{"Sec-Fetch-Site": "same-site"}, "Sec-Fetch-Site"},
		{map[string]string{"Origin": "http://example.com:8080"}, "Origin"},
	} {
		h := map[string]string{"Cookie": cookies["ann-token"].Name + "=" + cookies["ann-token"].Value}
		for k, v := range tc.hdr {
			h[k] = v
		}
		rec := e.do(context.Background(), "POST", "/v1/vms/"+e.box+"/credentials", "", "", h)
		var p api.Problem
		if rec.Code != http.StatusForbidden || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Field != tc.field {
			t.Errorf("credentials with the cookie, %v: %d %s, want 403 naming %s", tc.hdr, rec.Code, rec.Body, tc.field)
		}
	}
}

// A GET that is not one of getsThatAreNotReads changes nothing, with a
// bearer token or the portal's cookie; GET of the desktop password is 405,
// naming POST, and leaves it unspent.
func TestGetRoutesChangeNothing(t *testing.T) {
	e := newHostileEnv(t)
	ann, _ := e.portalSession("ann-token")
	admin, _ := e.portalSession("admin-token")
	for key := range getsThatAreNotReads {
		if !slices.ContainsFunc(apiRoutes, func(r route) bool { return r.Method+" "+r.Path == key }) {
			t.Errorf("getsThatAreNotReads has %s, which is not a route", key)
		}
	}
	for _, r := range apiRoutes {
		key := r.Method + " " + r.Path
		if r.Method != http.MethodGet || getsThatAreNotReads[key] != "" {
			continue
		}
		ck := ann
		if r.Auth == authAdmin {
			ck = admin
		}
		for _, how := range []string{"bearer", "cookie"} {
			before := e.fingerprint()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if r.ContentType == "text/event-stream" {
				ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
			}
			if how == "bearer" {
				e.do(ctx, r.Method, e.path(r, ""), tokenOf(r), "", nil)
			} else {
				e.doCookie(ctx, r.Method, e.path(r, ""), ck, "", map[string]string{"Sec-Fetch-Site": "same-site"})
			}
			cancel()
			if after := e.fingerprint(); after != before {
				t.Errorf("%s (%s) is a read, yet the database changed:\n%s\nthen:\n%s", key, how, before, after)
			}
		}
	}
	before := e.fingerprint()
	rec := e.do(context.Background(), "GET", "/v1/vms/"+e.box+"/credentials", "ann-token", "", nil)
	var p api.Problem
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST" || json.Unmarshal(rec.Body.Bytes(), &p) != nil ||
		p.Type != ProblemBase+"method-not-allowed" || p.Detail == "" {
		t.Errorf("GET credentials: %d Allow %q %s, want 405 naming POST", rec.Code, rec.Header().Get("Allow"), rec.Body)
	}
	if after := e.fingerprint(); after != before {
		t.Errorf("GET credentials changed the database:\n%s\nthen:\n%s", before, after)
	}
	// The owner's POST, bearer or cookie with its CSRF token, spends it.
	ck, csrf := e.portalSession("ann-token")
	if code := e.doCookie(context.Background(), "POST", "/v1/vms/"+e.box+"/credentials", ck, "", map[string]string{api.CSRFHeader: csrf}); code != http.StatusOK {
		t.Errorf("POST credentials with the cookie and its CSRF token: %d", code)
	}
	if e.fingerprint() == before {
		t.Error("POST credentials spent nothing")
	}
}

// Every route refuses a query that does not parse — a ';', which Go's
// parser drops the parameter at, so that "?hours=1;DROP" would read as no
// hours at all; a bad percent-encoding — with a 400 naming the parameter
// ("query" when its name is what is wrong), and changes nothing.
func TestUnparsableQueryIsRefused(t *testing.T) {
	e := newHostileEnv(t)
	cases := []struct{ query, field string }{
		{"hours=1;DROP", "hours"},
		{"limit=10;limit=1", "limit"},
		{"a=1&b=2;c=3", "b"},
		{";", "query"},
		{"x;y=1", "query"},
		{"after=%zz", "after"},
		{"state=%", "state"},
		{"vm=%e", "vm"},
		{"%zz=1", "query"},
		{"ok=1&user=%G0", "user"},
	}
	for _, r := range apiRoutes {
		key := r.Method + " " + r.Path
		for _, tc := range cases {
			before := e.fingerprint()
			// A stream that is not refused runs until its client leaves.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			rec := e.do(ctx, r.Method, e.path(r, "")+"?"+tc.query, tokenOf(r), hostileBodies[key].body, nil)
			cancel()
			var p api.Problem
			if rec.Code != http.StatusBadRequest || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Field != tc.field || p.Detail == "" {
				t.Errorf("%s ?%s: %d %.300s, want 400 naming %q", key, tc.query, rec.Code, rec.Body, tc.field)
			}
			if after := e.fingerprint(); after != before {
				t.Errorf("%s ?%s: refused, and the database changed:\n%s\nthen:\n%s", key, tc.query, before, after)
			}
		}
	}
	// The same values, encoded, are values.
	if rec := e.do(context.Background(), "GET", "/v1/vms?state="+url.QueryEscape("running;x"), "ann-token", "", nil); rec.Code == http.StatusBadRequest {
		var p api.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if p.Field == "query" {
			t.Errorf("an encoded ';' is refused as a query that does not parse: %s", rec.Body)
		}
	}
}
