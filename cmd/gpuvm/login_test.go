package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/auth/ldap"
	"github.com/gpuvm/gpuvm/pkg/auth/ldap/ldaptest"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc"
	"github.com/gpuvm/gpuvm/pkg/auth/oidc/oidctest"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// TestPasswordLogin: gpuvm login URL --user NAME against a real slapd,
// the password from the standard input (not a terminal); whoami says where
// the groups come from; logout ends the session.
func TestPasswordLogin(t *testing.T) {
	srv := ldaptest.Start(t, nil)
	dir, err := ldap.New(config.LDAP{
		URL: srv.URL, StartTLS: true, CAFile: srv.CAFile, BindDN: ldaptest.ServiceDN, BindPasswordFile: srv.ServicePasswordFile,
		UserBase: ldaptest.People, UserFilter: config.DefaultLDAPUserFilter, UsernameAttribute: "uid",
		GroupBase: ldaptest.Groups, GroupFilter: config.DefaultLDAPGroupFilter, GroupAttribute: "cn", Timeout: 5 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := clienttest.New(t, clienttest.Options{SignIn: dir})
	home := t.TempDir()
	c := newCLI(t, map[string]string{"HOME": home})

	c.term = &terminal{in: strings.NewReader("wrong\n")}
	if _, errOut, code := c.run("login", env.URL, "--user", "alice"); code != exitNoServer || !strings.Contains(errOut, "the username or password is wrong") {
		t.Errorf("wrong password: exit %d %q", code, errOut)
	}
	c.term = &terminal{in: strings.NewReader("alice-pw\n")}
	out := c.must("login", env.URL, "--user", "alice")
	if !strings.HasPrefix(out, "Signed in to "+env.URL+" as alice, groups: ml101 (ldap) until ") {
		t.Errorf("login: %q", out)
	}
	saved, err := os.ReadFile(filepath.Join(home, ".config", "gpuvm", "config.hcl"))
	if err != nil || !strings.Contains(string(saved), `token = "gvs_`) {
		t.Fatalf("saved config: %s %v", saved, err)
	}
	c.term = nil
	if out := c.must("whoami"); out != "alice (from ldap), groups: ml101 (ldap) on "+env.URL+"\n" {
		t.Errorf("whoami: %q", out)
	}
	if out := c.must("logout"); !strings.Contains(out, "session ended") {
		t.Errorf("logout: %q", out)
	}
	if _, _, code := c.run("whoami"); code == 0 {
		t.Error("whoami works after logout")
	}
	if out := c.must("logout"); !strings.Contains(out, "Not logged in") {
		t.Errorf("logout again: %q", out)
	}
	if _, errOut, code := c.run("login", env.URL, "--user", "alice", "--token", "x"); code != 2 || !strings.Contains(errOut, "give one of") {
		t.Errorf("--user and --token: exit %d %q", code, errOut)
	}
}

// codeWriter is the CLI's stderr: it hands on the user code it shows.
type codeWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	code chan string
	sent bool
}

var userCodeRE = regexp.MustCompile(`type the code (\S+)`)

func (w *codeWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if m := userCodeRE.FindStringSubmatch(w.buf.String()); m != nil && !w.sent {
		w.sent = true
		w.code <- m[1]
	}
	return len(p), nil
}

// TestSSOLogin: gpuvm login URL --sso against a real OpenID provider, by
// the device authorization grant that gpuvmd runs.
func TestSSOLogin(t *testing.T) {
	op := oidctest.Start(t, nil, "http://127.0.0.1:1/v1/auth/oidc/callback")
	prov := oidc.NewLazy(config.OIDC{Issuer: op.Issuer, ClientID: oidctest.ClientID, DeviceClientID: oidctest.ClientID + "-device",
		ClientSecretFile: op.SecretFile, RedirectURL: "http://127.0.0.1:1/v1/auth/oidc/callback", Scopes: config.DefaultOIDCScopes,
		UsernameClaim: "preferred_username", GroupsClaim: "groups"}, nil)
	env := clienttest.New(t, clienttest.Options{OIDC: prov})
	home := t.TempDir()
	getenv := func(k string) string { return map[string]string{"HOME": home}[k] }
	stderr := &codeWriter{code: make(chan string, 1)}
	var stdout strings.Builder
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { done <- run(ctx, []string{"login", env.URL, "--sso"}, getenv, &stdout, stderr) }()
	select {
	case code := <-stderr.code:
		oidctest.DeviceSignIn(t, op.Issuer, code, "bob", "bob-pw")
	case err := <-done:
		t.Fatalf("login --sso ended before showing a code: %v\n%s", err, stderr.buf.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("login --sso: %v\n%s", err, stderr.buf.String())
	}
	if !strings.HasPrefix(stdout.String(), "Signed in to "+env.URL+" as bob, groups: gpu-admins (oidc), ml101 (oidc) until ") {
		t.Errorf("login --sso: %q", stdout.String())
	}
	c := newCLI(t, map[string]string{"HOME": home})
	if out := c.must("whoami"); out != "bob (from oidc), groups: gpu-admins (oidc), ml101 (oidc) on "+env.URL+"\n" {
		t.Errorf("whoami: %q", out)
	}
}

// TestSSOLoopbackLogin: gpuvm login URL --sso against a real OpenID
// provider without the device grant: the loopback redirect. The "browser"
// (the open seam) follows the URL gpuvm opens, signs in at the provider's
// form and is sent back to gpuvm's listener on 127.0.0.1.
func TestSSOLoopbackLogin(t *testing.T) {
	var backend atomic.Pointer[url.URL]
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httputil.NewSingleHostReverseProxy(backend.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	callback := front.URL + "/v1/auth/oidc/callback"
	op := oidctest.Start(t, nil, callback, oidctest.WithoutDevice())
	prov := oidc.NewLazy(config.OIDC{Issuer: op.Issuer, ClientID: oidctest.ClientID, ClientSecretFile: op.SecretFile, RedirectURL: callback,
		Scopes: config.DefaultOIDCScopes, UsernameClaim: "preferred_username", GroupsClaim: "groups", AllowedGroups: []string{"ml101"}}, nil)
	env := clienttest.New(t, clienttest.Options{OIDC: prov})
	u, _ := url.Parse(env.URL)
	backend.Store(u)

	// eve, outside allowed_groups, is refused: gpuvm stops waiting at once.
	if stdout, stderr, err := loopbackLogin(t, front.URL, callback, "eve", "eve-pw", nil); err == nil || stdout != "" ||
		!strings.Contains(stderr, "the sign-in with the OpenID provider failed") {
		t.Errorf("eve: %v %q %q", err, stdout, stderr)
	}

	var mu sync.Mutex
	var visited []string
	home := t.TempDir()
	stdout, stderr, err := loopbackLogin(t, front.URL, callback, "alice", "alice-pw", func(r *http.Request) {
		mu.Lock()
		visited = append(visited, r.URL.String())
		mu.Unlock()
	}, home)
	if err != nil {
		t.Fatalf("login --sso: %v\n%s", err, stderr)
	}
	if !strings.HasPrefix(stdout, "Signed in to "+front.URL+" as alice, groups: ml101 (oidc) until ") ||
		!strings.Contains(stderr, front.URL+"/v1/auth/oidc/start?") || !strings.Contains(stderr, "code_challenge_method=S256") {
		t.Errorf("login --sso: %q %q", stdout, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(visited) != 1 || !strings.HasPrefix(visited[0], "http://127.0.0.1:") || strings.Contains(visited[0], "gvs_") {
		t.Errorf("the browser went to %q, want gpuvm's listener with a code only", visited)
	}
	c := newCLI(t, map[string]string{"HOME": home})
	if out := c.must("whoami"); out != "alice (from oidc), groups: ml101 (oidc) on "+front.URL+"\n" {
		t.Errorf("whoami: %q", out)
	}
}

// loopbackLogin runs gpuvm login URL --sso, whose "browser" (the open
// seam) follows the URL gpuvm opens with cookies of its own, signs in at
// the provider's form as user and goes back, each redirect told to
// redirected. home is $HOME (a new one when not given).
func loopbackLogin(t *testing.T, base, callback, user, password string, redirected func(*http.Request), home ...string) (string, string, error) {
	t.Helper()
	if redirected == nil {
		redirected = func(*http.Request) {}
	}
	if len(home) == 0 {
		home = []string{t.TempDir()}
	}
	browse := func(start string) error {
		go func() {
			// The browser's own cookies: gpuvmd binds the sign-in to them.
			jar, _ := cookiejar.New(nil)
			first := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := first.Get(start)
			if err != nil || resp.StatusCode != http.StatusFound {
				t.Errorf("the browser opens %s: %v %v", start, resp, err)
				return
			}
			resp.Body.Close()
			back := oidctest.SignIn(t, resp.Header.Get("Location"), callback, user, password)
			browser := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
				redirected(r)
				return nil
			}}
			resp, err = browser.Get(back.String())
			if err != nil {
				t.Errorf("the browser's way back: %v", err)
				return
			}
			resp.Body.Close()
		}()
		return nil
	}
	var stdout, stderr bytes.Buffer
	ctx := context.WithValue(context.Background(), consoleSeamsKey{}, &consoleSeams{open: browse})
	root := newRoot(func(k string) string { return map[string]string{"HOME": home[0]}[k] }, &stdout, &stderr)
	root.SetArgs([]string{"login", base, "--sso"})
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return stdout.String(), stderr.String(), err
}
