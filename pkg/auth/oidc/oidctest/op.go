// Package oidctest runs a real OpenID provider for tests as its own
// process: test/oidcop (zitadel/oidc's op package and its example's
// storage, pinned in go.mod as a tool), built with the go command, started
// on a free port of 127.0.0.1 with users and groups, and stopped with the
// test. It also signs a user in through the provider's login form, as a
// browser would.
package oidctest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/test/testbin"
)

// User is a person of the provider.
type User struct {
	Password string   `json:"password"`
	Groups   []string `json:"groups"`
}

// DefaultUsers: alice (ml101), bob (ml101, gpu-admins), eve (outsiders).
var DefaultUsers = map[string]User{
	"alice": {Password: "alice-pw", Groups: []string{"ml101"}},
	"bob":   {Password: "bob-pw", Groups: []string{"ml101", "gpu-admins"}},
	"eve":   {Password: "eve-pw", Groups: []string{"outsiders"}},
}

// The client the provider knows.
const (
	ClientID     = "gpuvm"
	ClientSecret = "gpuvm-secret"
)

// Provider is a running provider.
type Provider struct {
	Issuer string
	// SecretFile holds ClientSecret.
	SecretFile string
}

// build makes the provider's binary in dir (the go command's build cache
// makes this a link after the first time).
func build(t testing.TB, dir string) string {
	t.Helper()
	if p := testbin.Prebuilt("oidcop"); p != "" {
		return p
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build the test OpenID provider (test/oidcop): %v", err)
	}
	bin := filepath.Join(dir, "oidcop")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/gpuvm/gpuvm/test/oidcop").CombinedOutput(); err != nil {
		t.Fatalf("go build test/oidcop: %v\n%s", err, out)
	}
	return bin
}

// Option changes how the provider runs.
type Option func(*[]string)

// WithoutDevice runs a provider that offers no device authorization grant
// (no device_authorization_endpoint in its discovery document).
func WithoutDevice() Option { return func(args *[]string) { *args = append(*args, "-no-device") } }

// Start runs the provider with users (DefaultUsers when nil) and a web
// client whose redirect URI is redirectURL.
func Start(t testing.TB, users map[string]User, redirectURL string, opts ...Option) *Provider {
	t.Helper()
	dir := t.TempDir()
	bin := build(t, dir)
	if users == nil {
		users = DefaultUsers
	}
	usersFile := filepath.Join(dir, "users.json")
	data, _ := json.Marshal(users)
	if err := os.WriteFile(usersFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Provider{SecretFile: filepath.Join(dir, "secret")}
	if err := os.WriteFile(p.SecretFile, []byte(ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-users", usersFile, "-client", ClientID + ":" + ClientSecret + ":" + redirectURL}
	for _, o := range opts {
		o(&args)
	}
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "oidcop.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the OpenID provider: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l, ok := <-line:
		issuer, found := strings.CutPrefix(l, "issuer ")
		if !ok || !found {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("the OpenID provider did not start: %q\n%s", l, log)
		}
		p.Issuer = issuer
	case <-time.After(30 * time.Second):
		t.Fatal("the OpenID provider did not start within 30s")
	}
	return p
}

// SignIn goes through the provider's login form from authURL as a browser
// would, and answers the URL the provider sends the browser back to (the
// redirect URI with code and state); redirects there are not followed.
func SignIn(t testing.TB, authURL, redirectURL, user, password string) *url.URL {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	var back *url.URL
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirectURL) {
			back = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := c.Get(authURL)
	if err != nil {
		t.Fatalf("GET the authorization URL: %v", err)
	}
	resp.Body.Close()
	if back != nil {
		return back // an error sent back at once
	}
	id := resp.Request.URL.Query().Get("authRequestID")
	if id == "" {
		t.Fatalf("the provider did not show its login form: %s %s", resp.Status, resp.Request.URL)
	}
	login := *resp.Request.URL
	login.RawQuery = ""
	resp, err = c.PostForm(login.String(), url.Values{"username": {user}, "password": {password}, "id": {id}})
	if err != nil {
		t.Fatalf("POST the login form: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if back == nil {
		return &url.URL{Path: "refused", RawQuery: url.Values{"status": {resp.Status}, "body": {string(body[:min(len(body), 200)])}}.Encode()}
	}
	return back
}

// DeviceSignIn is the person's part of a device sign-in: at the provider's
// device page, the user code, the username and password, then "allow".
func DeviceSignIn(t testing.TB, issuer, userCode, user, password string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	base := strings.TrimSuffix(issuer, "/")
	resp, err := c.PostForm(base+"/device/login", url.Values{"user_code": {userCode}, "username": {user}, "password": {password}})
	if err != nil {
		t.Fatalf("device login: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "confirm") {
		t.Fatalf("device login refused: %s %.300s", resp.Status, body)
	}
	resp, err = c.PostForm(base+"/device/confirm", url.Values{"action": {"allowed"}})
	if err != nil {
		t.Fatalf("device confirm: %v", err)
	}
	resp.Body.Close()
}
