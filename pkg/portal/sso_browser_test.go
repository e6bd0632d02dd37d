package portal_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gpuvm/gpuvm/pkg/auth/ldap"
	"github.com/gpuvm/gpuvm/pkg/auth/ldap/ldaptest"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc/oidctest"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// ssoConfig is a server with an OpenID provider that lets in ml101 only,
// and one profile.
const ssoConfig = `
server {
  auth {
    oidc {
      issuer             = %q
      client_id          = %q
      client_secret_file = %q
      redirect_url       = %q
      display_name       = "Example ID"
      allowed_groups     = ["ml101"]
      admin_groups       = ["gpu-admins"]
    }
  }
}
profile "seat" {
  description = "a desktop without a GPU"
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
`

// ssoEnv is a portal with a real OpenID provider (test/oidcop, its own
// process) and a real directory (slapd). gpuvmd is behind a front whose
// URL is known before the provider starts, as the provider must know the
// callback.
func ssoEnv(t *testing.T) (base string) {
	t.Helper()
	var backend atomic.Pointer[url.URL]
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httputil.NewSingleHostReverseProxy(backend.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	callback := front.URL + "/v1/auth/oidc/callback"
	op := oidctest.Start(t, nil, callback)
	text := fmt.Sprintf(ssoConfig, op.Issuer, oidctest.ClientID, op.SecretFile, callback)
	cfg, diags := config.Parse(config.Source{Name: "sso.hcl", Data: []byte(text)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	srv := ldaptest.Start(t, nil)
	dir, err := ldap.New(config.LDAP{
		URL: srv.URL, StartTLS: true, CAFile: srv.CAFile, BindDN: ldaptest.ServiceDN, BindPasswordFile: srv.ServicePasswordFile,
		UserBase: ldaptest.People, UserFilter: config.DefaultLDAPUserFilter, UsernameAttribute: "uid",
		GroupBase: ldaptest.Groups, GroupFilter: config.DefaultLDAPGroupFilter, GroupAttribute: "cn", Timeout: 5 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := clienttest.New(t, clienttest.Options{Profiles: text, SignIn: dir, OIDC: oidc.NewLazy(*cfg.Server.Auth.OIDC, nil)})
	u, _ := url.Parse(env.URL)
	backend.Store(u)
	return front.URL
}

// sessionCookie is the browser's portal session cookie, or nil.
func (b *browser) sessionCookie() *network.Cookie {
	b.t.Helper()
	var cookies []*network.Cookie
	b.run(chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		cookies, err = network.GetCookies().WithURLs([]string{b.base + "/"}).Do(ctx)
		return err
	}))
	for _, c := range cookies {
		if c.Name == "gpuvm_session" {
			return c
		}
	}
	return nil
}

// location is the page's URL.
func (b *browser) location() string {
	b.t.Helper()
	var loc string
	b.run(chromedp.Location(&loc))
	return loc
}

// whoIsSignedIn asks GET /v1/session in the page: the user's name, or "".
func (b *browser) whoIsSignedIn() string {
	b.t.Helper()
	var name string
	b.eval(`fetch('/v1/session').then(r => r.ok ? r.json() : {user: {name: ''}}).then(s => s.user.name)`, &name)
	return name
}

// signOut ends the session from the page (DELETE /v1/session).
func (b *browser) signOut() {
	b.t.Helper()
	if got := b.jsFetch("DELETE", "/v1/session", "", true); got != http.StatusNoContent {
		b.t.Fatalf("sign out: %d", got)
	}
}

// providerSignIn clicks the portal's SSO button and signs in at the
// provider's own login page.
func (b *browser) providerSignIn(user, password string) {
	b.t.Helper()
	b.run(chromedp.Navigate(b.base+"/login"), chromedp.WaitVisible(`#sso`, chromedp.ByQuery), chromedp.Click(`#sso`, chromedp.ByQuery),
		chromedp.WaitVisible(`form[action="/login/username"] #username`, chromedp.ByQuery),
		chromedp.SendKeys(`#username`, user, chromedp.ByQuery), chromedp.SendKeys(`#password`, password, chromedp.ByQuery),
		chromedp.Click(`form button[type=submit]`, chromedp.ByQuery))
}

// TestSSOInChromium: the portal's sign-in page shows the server's ways; a
// person signs in with the OpenID provider (its own login page, in its own
// process) and lands on the portal signed in, with an HttpOnly,
// SameSite=Strict cookie and no token in any URL the browser visited; one
// outside allowed_groups is turned back with the one refusal; a directory
// account signs in with its password against slapd, and every wrong
// password or unknown name gets the same message.
func TestSSOInChromium(t *testing.T) {
	needBrowser(t)
	base := ssoEnv(t)
	b := newBrowser(t, base, false)

	b.run(chromedp.Navigate(base+"/login"), chromedp.WaitVisible(`#sso`, chromedp.ByQuery))
	if got := b.text(`#sso`); got != "Sign in with Example ID" {
		t.Errorf("the SSO button says %q", got)
	}
	for _, sel := range []string{`#username`, `#password`, `#token`} {
		var n int
		b.eval(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n)
		if n != 1 {
			t.Errorf("the sign-in page has %d %s", n, sel)
		}
	}
	b.check("login-sso")

	// The provider's way: click, sign in there, land on the portal.
	b.providerSignIn("alice", "alice-pw")
	b.waitFor("the portal, signed in", `location.pathname === '/' && document.querySelector('main h1') !== null`)
	if who := b.whoIsSignedIn(); who != "alice" {
		t.Fatalf("signed in as %q, want alice", who)
	}
	ck := b.sessionCookie()
	if ck == nil || !ck.HTTPOnly || ck.SameSite != network.CookieSameSiteStrict || !strings.HasPrefix(ck.Value, "gvs_") {
		t.Fatalf("the session cookie: %+v", ck)
	}
	var visible bool
	b.eval(`document.cookie.includes('gpuvm_session')`, &visible)
	if visible {
		t.Error("the page's script can read the session cookie")
	}
	b.mu.Lock()
	visited := append([]string(nil), b.requests...)
	b.mu.Unlock()
	var sawProvider, sawCallback bool
	for _, u := range visited {
		if strings.Contains(u, ck.Value) || strings.Contains(u, "gvs_") || strings.Contains(u, "token=") || strings.Contains(u, "gpuvm_") {
			t.Errorf("a token in a URL the browser visited: %s", u)
		}
		sawProvider = sawProvider || strings.Contains(u, "/login/username")
		sawCallback = sawCallback || strings.HasPrefix(u, base+"/v1/auth/oidc/callback?")
	}
	if !sawProvider || !sawCallback {
		t.Errorf("the browser's way did not go through the provider's login and the callback: %q", visited)
	}
	b.signOut()
	if who := b.whoIsSignedIn(); who != "" {
		t.Errorf("after signing out: %q", who)
	}

	// eve is not in allowed_groups: back on the sign-in page, told it failed.
	b.providerSignIn("eve", "eve-pw")
	b.waitFor("the refusal", `location.pathname === '/login' && document.querySelector('[role=alert]') !== null`)
	if got := b.text(`[role=alert]`); !strings.HasPrefix(got, "The sign-in with Example ID failed.") {
		t.Errorf("eve is told %q", got)
	}
	if b.sessionCookie() != nil || b.whoIsSignedIn() != "" {
		t.Error("eve got a session")
	}
	if loc := b.location(); loc != base+"/login?sso=failed" {
		t.Errorf("eve is at %s", loc)
	}

	// The directory's way: a wrong password and an unknown name read the
	// same; the right password signs carol in, in a cookie session.
	b.run(chromedp.Navigate(base+"/login"), chromedp.WaitVisible(`#password-form`, chromedp.ByQuery))
	var refusals []string
	for _, try := range [][2]string{{"carol", "wrong"}, {"mallory", "carol-pw"}, {"*)(uid=*", "x"}} {
		b.eval(`document.querySelector('#username').value = ''`, nil)
		b.run(chromedp.SendKeys(`#username`, try[0], chromedp.ByQuery),
			chromedp.SendKeys(`#password`, try[1]+"\r", chromedp.ByQuery))
		// Busy for the refusal's floor (400 ms): then the new answer.
		b.waitFor("the sign-in of "+try[0]+" under way", `document.querySelector('#password-form button').disabled`)
		b.waitFor("the refusal of "+try[0], `document.querySelector('#password-form [role=alert]') !== null && !document.querySelector('#password-form button').disabled`)
		refusals = append(refusals, b.text(`#password-form [role=alert]`))
	}
	for _, r := range refusals[1:] {
		if r != refusals[0] {
			t.Errorf("refusals differ: %q", refusals)
		}
	}
	if !strings.Contains(refusals[0], "the username or password is wrong") {
		t.Errorf("the refusal says %q", refusals[0])
	}
	b.eval(`document.querySelector('#username').value = ''`, nil)
	b.run(chromedp.SendKeys(`#username`, "carol", chromedp.ByQuery),
		chromedp.SendKeys(`#password`, "carol-pw\r", chromedp.ByQuery))
	b.waitFor("the portal, signed in", `location.pathname === '/' && document.querySelector('main h1') !== null`)
	if who := b.whoIsSignedIn(); who != "carol" {
		t.Fatalf("signed in as %q, want carol", who)
	}
	if ck := b.sessionCookie(); ck == nil || !ck.HTTPOnly || ck.SameSite != network.CookieSameSiteStrict {
		t.Errorf("the session cookie after the password sign-in: %+v", ck)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, u := range b.requests {
		if strings.Contains(u, "carol-pw") || strings.Contains(u, "gvs_") {
			t.Errorf("a secret in a URL: %s", u)
		}
	}
}
