package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc/oidctest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

type oidcEnv struct {
	s        *Server
	st       *store.Store
	hs       *httptest.Server
	callback string
	noFollow *http.Client
	// otherBrowser: the callback comes from a browser other than the
	// start's (login CSRF).
	otherBrowser bool
}

func newOIDCEnv(t *testing.T, opts ...oidctest.Option) *oidcEnv {
	t.Helper()
	e := &oidcEnv{}
	e.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.s.ServeHTTP(w, r) }))
	t.Cleanup(e.hs.Close)
	e.callback = e.hs.URL + "/v1/auth/oidc/callback"
	op := oidctest.Start(t, nil, e.callback, opts...)
	prov := oidc.NewLazy(config.OIDC{Issuer: op.Issuer, ClientID: oidctest.ClientID, ClientSecretFile: op.SecretFile, RedirectURL: e.callback,
		Scopes: config.DefaultOIDCScopes, UsernameClaim: "preferred_username", GroupsClaim: "groups", AdminGroups: []string{"gpu-admins"},
		AllowedGroups: []string{"ml101"}}, nil)
	e.st = storetest.New(t)
	e.s = newServer(t, Deps{Auth: e.st, OIDC: prov, Backends: fakeBackends{}, Store: e.st})
	jar, _ := cookiejar.New(nil)
	e.noFollow = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e
}

// signIn goes from GET /v1/auth/oidc/start?query through the provider's
// login form as user, and answers gpuvmd's callback's answer.
func (e *oidcEnv) signIn(t *testing.T, query url.Values, user, password string) *http.Response {
	t.Helper()
	resp, err := e.noFollow.Get(e.hs.URL + "/v1/auth/oidc/start?" + query.Encode())
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("start: %v %v", resp, err)
	}
	back := oidctest.SignIn(t, resp.Header.Get("Location"), e.callback, user, password)
	resp, err = e.browser(back)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// browser gets the callback's URL with the cookies of the start, unless
// another browser is asked for.
func (e *oidcEnv) browser(back *url.URL) (*http.Response, error) {
	if e.otherBrowser {
		return (&http.Client{CheckRedirect: e.noFollow.CheckRedirect}).Get(back.String())
	}
	return e.noFollow.Get(back.String())
}

// TestOIDCPortalSignIn: the portal's way: /v1/auth/oidc/start sends the
// browser to a real provider, which sends it back to the callback; the
// callback opens a cookie session and sends the browser on to return_to.
// No token is in any URL.
func TestOIDCPortalSignIn(t *testing.T) {
	e := newOIDCEnv(t)
	rec, _ := do(t, e.s, "GET", "/v1/auth/methods", "")
	if want := `{"password":false,"oidc":true,"oidc_name":"SSO","oidc_device":true,"token":true}`; rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != want {
		t.Errorf("methods: %d %s, want %s", rec.Code, rec.Body, want)
	}

	resp := e.signIn(t, url.Values{"return_to": {"/vms"}}, "alice", "alice-pw")
	body, _ := io.ReadAll(resp.Body)
	ck := sessionCookieOf(resp)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" || ck == nil {
		t.Fatalf("callback: %d %q %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	if ck.Name != api.SessionCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || !strings.HasPrefix(ck.Value, store.SessionPrefix) || strings.Contains(string(body), ck.Value) {
		t.Fatalf("cookie %+v", ck)
	}
	if !strings.Contains(string(body), `content="0;url=/vms"`) || !strings.Contains(string(body), `href="/vms"`) || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("the continue page: %s", body)
	}
	rec = portalReq(t, e.s, "GET", "/v1/session", "", nil, ck)
	var sess api.Session
	_ = json.Unmarshal(rec.Body.Bytes(), &sess)
	if rec.Code != 200 || sess.User.Name != "alice" || sess.User.Source != "oidc" || sess.CSRFToken == "" ||
		!slices.Equal(sess.User.Memberships, []api.GroupMembership{{Group: "ml101", Source: "oidc"}}) {
		t.Errorf("session: %d %s", rec.Code, rec.Body)
	}

	// Without return_to: the portal's first page.
	resp = e.signIn(t, nil, "bob", "bob-pw")
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `content="0;url=/"`) {
		t.Errorf("callback without return_to: %d %s", resp.StatusCode, body)
	}

	// A user outside allowed_groups, a replayed or forged callback: the
	// same 401, no cookie.
	resp = e.signIn(t, url.Values{"return_to": {"/"}}, "eve", "eve-pw")
	refusal, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized || sessionCookieOf(resp) != nil || !strings.Contains(string(refusal), "failed; start again") {
		t.Errorf("eve (outsiders): %d %s", resp.StatusCode, refusal)
	}
	// A sign-in finished in another browser than the one that started it
	// (somebody else's, lured to the callback): refused.
	e.otherBrowser = true
	resp = e.signIn(t, url.Values{"return_to": {"/"}}, "alice", "alice-pw")
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusUnauthorized || string(b) != string(refusal) || sessionCookieOf(resp) != nil {
		t.Errorf("the callback in another browser: %d %s %v", resp.StatusCode, b, resp.Cookies())
	}
	e.otherBrowser = false
	for _, q := range []string{"?state=forged&code=x", "?error=access_denied&state=x"} {
		resp, err := e.noFollow.Get(e.callback + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || string(b) != string(refusal) || sessionCookieOf(resp) != nil {
			t.Errorf("callback %s: %d %s", q, resp.StatusCode, b)
		}
	}
	entries, _, _ := e.st.ListAudit(t.Context(), store.AuditFilter{Action: "auth.sso"})
	var reasons []string
	for _, en := range entries {
		if en.Outcome == store.AuditRefused {
			reasons = append(reasons, en.Detail)
		}
	}
	if len(reasons) != 4 || !slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, "allowed") }) ||
		!slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, "this browser") }) {
		t.Errorf("audit of the refusals: %q", reasons)
	}

	// An open redirect is refused at the start.
	for _, bad := range []string{"//evil.example/", "https://evil.example/", "/\\evil.example", ""} {
		resp, err := e.noFollow.Get(e.hs.URL + "/v1/auth/oidc/start?return_to=" + url.QueryEscape(bad))
		if err != nil || resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("return_to %q: %v %v", bad, resp.StatusCode, err)
		}
	}
}

// TestOIDCLoopbackSignIn: the CLI's way without the device grant: the
// callback sends the browser to the CLI's loopback redirect URI with a
// one-time code, which the PKCE verifier alone trades for a bearer session.
func TestOIDCLoopbackSignIn(t *testing.T) {
	e := newOIDCEnv(t, oidctest.WithoutDevice())
	rec, _ := do(t, e.s, "GET", "/v1/auth/methods", "")
	var m api.AuthMethods
	if _ = json.Unmarshal(rec.Body.Bytes(), &m); !m.OIDC || m.OIDCDevice {
		t.Errorf("methods of a provider without the device grant: %s", rec.Body)
	}
	redirect := "http://127.0.0.1:49999/callback"
	start := func(verifier, state string) url.Values {
		t.Helper()
		resp := e.signIn(t, url.Values{"redirect_uri": {redirect}, "code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)},
			"code_challenge_method": {"S256"}, "state": {state}}, "alice", "alice-pw")
		loc, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || err != nil || !strings.HasPrefix(loc.String(), redirect+"?") || sessionCookieOf(resp) != nil {
			t.Fatalf("callback: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		if loc.Query().Get("state") != state || loc.Query().Get("code") == "" || strings.Contains(loc.String(), store.SessionPrefix) {
			t.Fatalf("the loopback redirect: %s", loc)
		}
		return loc.Query()
	}
	token := func(code, verifier string) *httptest.ResponseRecorder {
		b, _ := json.Marshal(api.OIDCTokenRequest{Code: code, CodeVerifier: verifier})
		rec, _ := send(t, e.s, "POST", "/v1/auth/oidc/token", "", string(b))
		return rec
	}

	// A wrong verifier is refused, and burns the code.
	verifier := oauth2.GenerateVerifier()
	q := start(verifier, "s1")
	if rec := token(q.Get("code"), oauth2.GenerateVerifier()); rec.Code != http.StatusUnauthorized {
		t.Errorf("a wrong verifier: %d %s", rec.Code, rec.Body)
	}
	if rec := token(q.Get("code"), verifier); rec.Code != http.StatusUnauthorized {
		t.Errorf("a code used twice: %d %s", rec.Code, rec.Body)
	}

	verifier = oauth2.GenerateVerifier()
	q = start(verifier, "s2")
	rec = token(q.Get("code"), verifier)
	var lr api.LoginResponse
	if _ = json.Unmarshal(rec.Body.Bytes(), &lr); rec.Code != http.StatusOK || lr.User.Name != "alice" || !strings.HasPrefix(lr.Token, store.SessionPrefix) {
		t.Fatalf("token: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := do(t, e.s, "GET", "/v1/whoami", lr.Token); rec.Code != http.StatusOK {
		t.Errorf("whoami with the loopback session: %d", rec.Code)
	}
	if rec := token(q.Get("code"), verifier); rec.Code != http.StatusUnauthorized {
		t.Errorf("a code used twice: %d %s", rec.Code, rec.Body)
	}

	// A refusal (eve is outside allowed_groups) goes back to the CLI, which
	// stops waiting.
	resp := e.signIn(t, url.Values{"redirect_uri": {redirect}, "code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)},
		"code_challenge_method": {"S256"}, "state": {"s3"}}, "eve", "eve-pw")
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != redirect+"?error=access_denied&state=s3" {
		t.Errorf("a refused loopback sign-in: %d %q", resp.StatusCode, loc)
	}

	// Bad starts: another host, no PKCE, both return_to and redirect_uri.
	for name, q := range map[string]url.Values{
		"not loopback": {"redirect_uri": {"http://evil.example:80/cb"}, "code_challenge": {strings.Repeat("a", 43)}, "code_challenge_method": {"S256"}, "state": {"x"}},
		"localhost":    {"redirect_uri": {"http://localhost:5000/cb"}, "code_challenge": {strings.Repeat("a", 43)}, "code_challenge_method": {"S256"}, "state": {"x"}},
		"https":        {"redirect_uri": {"https://127.0.0.1:5000/cb"}, "code_challenge": {strings.Repeat("a", 43)}, "code_challenge_method": {"S256"}, "state": {"x"}},
		"no port":      {"redirect_uri": {"http://127.0.0.1/cb"}, "code_challenge": {strings.Repeat("a", 43)}, "code_challenge_method": {"S256"}, "state": {"x"}},
		"plain pkce":   {"redirect_uri": {redirect}, "code_challenge": {strings.Repeat("a", 43)}, "code_challenge_method": {"plain"}, "state": {"x"}},
		"no state":     {"redirect_uri": {redirect}, "code_challenge": {strings.Repeat("a", 43)}, "code_challenge_method": {"S256"}},
		"both":         {"redirect_uri": {redirect}, "return_to": {"/"}, "code_challenge": {strings.Repeat("a", 43)}, "code_challenge_method": {"S256"}, "state": {"x"}},
	} {
		resp, err := e.noFollow.Get(e.hs.URL + "/v1/auth/oidc/start?" + q.Encode())
		if err != nil || resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("%s: %v %v", name, resp.StatusCode, err)
		}
	}
}

func sessionCookieOf(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == api.SessionCookie {
			return c
		}
	}
	return nil
}

// TestValidReturnTo: return_to is a path of this server to a browser's URL
// parser too, which drops tabs and newlines, takes a backslash for a slash
// and removes dot segments: every spelling that it reads as another host,
// or as a path beginning "//", is refused.
func TestValidReturnTo(t *testing.T) {
	for _, c := range []struct {
		p  string
		ok bool
	}{
		{"", true}, // none: the catalogue
		{"/", true},
		{"/vms", true},
		{"/vms?x=1", true},
		{"/vms?u=https://example.org/a", true}, // "//" in the query is no host
		{"/%2F%2Fevil.example", true},          // stays a path: browsers do not decode %2F
		{"/vms#y", false},                      // no fragment
		{"/\t/evil.example", false},
		{"/\n/evil.example", false},
		{"/\r/evil.example", false},
		{"/\t\\evil.example", false},
		{"/\\evil.example", false},
		{"/\\\\evil.example", false},
		{"\\/evil.example", false},
		{"//evil.example", false},
		{" //evil.example", false},
		{"/./\\evil.example", false},
		{"/.//evil.example", false},
		{"/x/..//evil.example", false},
		{"/%2e//evil.example", false},
		{"https:evil.example", false},
		{"https://evil.example/", false},
		{"javascript:alert(1)", false},
		{"/\x00/evil.example", false},
		{"/\x0b/evil.example", false},
		{"/vms\x7f", false},
		{"/" + strings.Repeat("a", 200), false},
	} {
		if got := validReturnTo(c.p); got != c.ok {
			t.Errorf("validReturnTo(%q) = %v, want %v", c.p, got, c.ok)
		}
	}
}
