package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc/oidctest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// TestOIDCSignIn: the portal's way: /v1/auth/oidc/start sends the browser
// to a real provider, which sends it back to the callback; the callback
// sends it on to return_to with the session token in the fragment.
func TestOIDCSignIn(t *testing.T) {
	var s *Server
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.ServeHTTP(w, r) }))
	t.Cleanup(hs.Close)
	callback := hs.URL + "/v1/auth/oidc/callback"
	op := oidctest.Start(t, nil, callback)
	prov := oidc.NewLazy(config.OIDC{Issuer: op.Issuer, ClientID: oidctest.ClientID, ClientSecretFile: op.SecretFile, RedirectURL: callback,
		Scopes: config.DefaultOIDCScopes, UsernameClaim: "preferred_username", GroupsClaim: "groups", AdminGroups: []string{"gpu-admins"}}, nil)
	st := storetest.New(t)
	s = New(Deps{Auth: st, OIDC: prov, Backends: fakeBackends{}, Store: st})
	if rec, _ := do(t, s, "GET", "/v1/auth/methods", ""); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"password":false,"oidc":true,"token":true}` {
		t.Errorf("methods: %d %s", rec.Code, rec.Body)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	signIn := func(returnTo string) *http.Response {
		t.Helper()
		start := hs.URL + "/v1/auth/oidc/start"
		if returnTo != "" {
			start += "?return_to=" + url.QueryEscape(returnTo)
		}
		resp, err := noFollow.Get(start)
		if err != nil || resp.StatusCode != http.StatusFound {
			t.Fatalf("start: %v %v", resp, err)
		}
		back := oidctest.SignIn(t, resp.Header.Get("Location"), callback, "alice", "alice-pw")
		resp, err = noFollow.Get(back.String())
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	resp := signIn("/portal/")
	loc := resp.Header.Get("Location")
	path, fragment, _ := strings.Cut(loc, "#")
	frag, _ := url.ParseQuery(fragment)
	if resp.StatusCode != http.StatusSeeOther || path != "/portal/" || frag.Get("token") == "" || frag.Get("expires_at") == "" {
		t.Fatalf("callback: %d %q", resp.StatusCode, loc)
	}
	rec, _ := do(t, s, "GET", "/v1/whoami", frag.Get("token"))
	var who api.User
	_ = json.Unmarshal(rec.Body.Bytes(), &who)
	if rec.Code != 200 || who.Name != "alice" || who.Source != "oidc" || !slices.Equal(who.Memberships, []api.GroupMembership{{Group: "ml101", Source: "oidc"}}) {
		t.Errorf("whoami: %d %s", rec.Code, rec.Body)
	}

	// Without return_to, the answer is JSON, as POST /v1/login's.
	resp = signIn("")
	var lr api.LoginResponse
	if err := json.NewDecoder(resp.Body).Decode(&lr); err != nil || resp.StatusCode != 200 || lr.User.Name != "alice" {
		t.Fatalf("callback: %d %+v %v", resp.StatusCode, lr, err)
	}
	resp.Body.Close()

	// A replayed or forged callback starts nothing; an open redirect is
	// refused at the start.
	for _, q := range []string{"?state=forged&code=x", "?error=access_denied&state=x"} {
		resp, err := noFollow.Get(callback + q)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("callback %s: %v %v", q, resp.StatusCode, err)
		}
	}
	for _, bad := range []string{"//evil.example/", "https://evil.example/", "/\\evil.example"} {
		resp, err := noFollow.Get(hs.URL + "/v1/auth/oidc/start?return_to=" + url.QueryEscape(bad))
		if err != nil || resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("return_to %q: %v %v", bad, resp.StatusCode, err)
		}
	}
}
