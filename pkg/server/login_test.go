package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/auth/ldap"
	"github.com/gpuvm/gpuvm/pkg/auth/ldap/ldaptest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/policy"
	"github.com/gpuvm/gpuvm/pkg/scheduler"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// loginPolicy lets nobody have a VM but the directory's group ml101, whose
// quota is two: the directory decides who is in it.
const loginPolicy = `
server {
  auth {
    session_ttl = "1h"
    %s
  }
}
policy {
  defaults {
    quota { vms = 0 }
  }
  group "ml101" {
    quota { vms = 2 }
  }
}
profile "open" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
`

// policyAdmitter applies the configuration's policy as the orchestrator
// does, with no VM running yet.
type policyAdmitter struct{ e *policy.Engine }

func (p policyAdmitter) Admit(_ context.Context, user string, groups []string, profile string, _ int) (scheduler.Admission, error) {
	reason, refuse := p.e.AdmitWithoutGPU(time.Now(), nil, &scheduler.Request{ID: "new", User: user, Groups: groups, Profile: profile})
	return scheduler.Admission{Reason: reason, Refuse: refuse}, nil
}

type loginEnv struct {
	s   *Server
	st  *store.Store
	dir *ldap.Directory
	srv *ldaptest.Server
	ip  atomic.Int64
}

func newLoginEnv(t *testing.T, localBlock string) *loginEnv {
	t.Helper()
	srv := ldaptest.Start(t, nil)
	cfg, diags := config.Parse(config.Source{Name: "gpuvm.hcl", Data: []byte(fmt.Sprintf(loginPolicy, localBlock))})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	eng, err := policy.New(policy.Config{Policy: &cfg.Policy})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := ldap.New(config.LDAP{
		URL: srv.URL, StartTLS: true, CAFile: srv.CAFile,
		BindDN: ldaptest.ServiceDN, BindPasswordFile: srv.ServicePasswordFile,
		UserBase: ldaptest.People, UserFilter: config.DefaultLDAPUserFilter, UsernameAttribute: "uid",
		GroupBase: ldaptest.Groups, GroupFilter: config.DefaultLDAPGroupFilter, GroupAttribute: "cn",
		AdminGroups: []string{"gpu-admins"}, Timeout: 5 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.New(t)
	s := newServer(t, Deps{Auth: st, SignIn: dir, Backends: fakeBackends{}, Config: &fakeConfig{cfg: cfg}, Store: st, Admission: policyAdmitter{eng}})
	return &loginEnv{s: s, st: st, dir: dir, srv: srv}
}

// login posts a sign-in from a source address of its own (unless ip is
// given), so that the per-address limit does not get in the way.
func (e *loginEnv) login(t *testing.T, user, password string, ip ...string) (*httptest.ResponseRecorder, time.Duration) {
	t.Helper()
	body, _ := json.Marshal(api.LoginRequest{Username: user, Password: password})
	req := httptest.NewRequest(http.MethodPost, "/v1/login", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = fmt.Sprintf("198.51.100.%d:4000", e.ip.Add(1)%250+1)
	if len(ip) > 0 {
		req.RemoteAddr = ip[0] + ":4000"
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	e.s.ServeHTTP(rec, req)
	return rec, time.Since(start)
}

func (e *loginEnv) session(t *testing.T, user, password string) api.LoginResponse {
	t.Helper()
	rec, _ := e.login(t, user, password)
	if rec.Code != http.StatusOK {
		t.Fatalf("sign in %s: %d %s", user, rec.Code, rec.Body)
	}
	var out api.LoginResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLogin(t *testing.T) {
	e := newLoginEnv(t, "")
	ctx := context.Background()

	before := time.Now()
	alice := e.session(t, "alice", "alice-pw")
	if !strings.HasPrefix(alice.Token, store.SessionPrefix) || alice.User.Name != "alice" || alice.User.Source != "ldap" || alice.User.Admin {
		t.Errorf("alice = %+v", alice)
	}
	if d := alice.ExpiresAt.Sub(before); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("session expires %s after the sign-in, want session_ttl 1h", d)
	}
	if d := alice.NotAfter.Sub(before); d < maxSessionAge-time.Minute || d > maxSessionAge+time.Minute {
		t.Errorf("session ends %s after the sign-in at the latest, want %s", d, maxSessionAge)
	}
	rec, body := do(t, e.s, "GET", "/v1/whoami", alice.Token)
	if rec.Code != 200 {
		t.Fatalf("whoami: %d %s", rec.Code, rec.Body)
	}
	var who api.User
	_ = json.Unmarshal(rec.Body.Bytes(), &who)
	if !slices.Equal(who.Memberships, []api.GroupMembership{{Group: "ml101", Source: "ldap"}}) || who.Source != "ldap" {
		t.Errorf("whoami = %v", body)
	}
	bob := e.session(t, "bob", "bob-pw")
	if !bob.User.Admin || !slices.Equal(bob.User.Groups, []string{"gpu-admins", "ml101"}) {
		t.Errorf("bob (gpu-admins) = %+v", bob.User)
	}
	if rec, _ := do(t, e.s, "GET", "/v1/users", bob.Token); rec.Code != 200 {
		t.Errorf("bob, an admin by the directory, lists users: %d", rec.Code)
	}

	// The directory's group is the policy's: ml101's quota lets alice have
	// a VM; carol, in no group, gets the defaults' zero.
	carol := e.session(t, "carol", "carol-pw")
	if rec, _ := send(t, e.s, "POST", "/v1/vms", alice.Token, `{"profile":"open","name":"box"}`); rec.Code != http.StatusAccepted {
		t.Errorf("alice (ml101) asks for a VM: %d %s", rec.Code, rec.Body)
	}
	if rec, body := send(t, e.s, "POST", "/v1/vms", carol.Token, `{"profile":"open"}`); rec.Code != http.StatusForbidden || body["type"] != ProblemBase+"policy" {
		t.Errorf("carol (no group) asks for a VM: %d %s", rec.Code, rec.Body)
	}

	// Logging out revokes the session, and only a session.
	api2, _, err := e.st.CreateToken(ctx, "carol", "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := send(t, e.s, "POST", "/v1/logout", api2, ""); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("logout with an API token: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := send(t, e.s, "POST", "/v1/logout", carol.Token, ""); rec.Code != http.StatusNoContent {
		t.Errorf("logout: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := do(t, e.s, "GET", "/v1/whoami", carol.Token); rec.Code != http.StatusUnauthorized {
		t.Errorf("whoami after logout: %d", rec.Code)
	}
	if rec, _ := do(t, e.s, "GET", "/v1/whoami", api2); rec.Code != http.StatusOK {
		t.Errorf("the API token after logout: %d", rec.Code)
	}

	entries, _, err := e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.login"})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[0].Outcome != store.AuditOK || !strings.Contains(entries[0].Detail, "bearer session") {
		t.Errorf("audit of the sign-ins: %+v", entries)
	}
}

// TestLoginRefusals: an unknown user, a wrong password, injections, a name
// of a local user: the same status and body, none sooner than the floor;
// the audit log alone says why.
func TestLoginRefusals(t *testing.T) {
	e := newLoginEnv(t, "")
	ctx := context.Background()
	if err := e.st.CreateUser(ctx, &store.User{Name: "admin", Admin: true}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status int
		body   string
	}
	var first *answer
	for _, tc := range []struct{ name, user, password, reason string }{
		{"wrong password", "alice", "wrong", "wrong password"},
		{"unknown user", "mallory", "alice-pw", "no such user"},
		{"injection", "*)(uid=*", "alice-pw", "no such user"},
		{"injection or", "admin)(|(uid=*", "alice-pw", "no such user"},
		{"wildcard", "*", "x", "no such user"},
		{"empty password", "alice", "", "empty"},
		{"local user's name", "admin", "admin-pw", "a local user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, took := e.login(t, tc.user, tc.password)
			if took < loginFailureFloor {
				t.Errorf("answered after %s, before the floor %s", took, loginFailureFloor)
			}
			var p map[string]any
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			delete(p, "request_id")
			delete(p, "instance")
			b, _ := json.Marshal(p)
			a := &answer{rec.Code, string(b)}
			if first == nil {
				first = a
			}
			if *a != *first || a.status != http.StatusUnauthorized {
				t.Errorf("answer %+v, want %+v (as every refusal)", a, first)
			}
		})
	}
	entries, _, err := e.st.ListAudit(ctx, store.AuditFilter{Action: "auth.login"})
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, en := range entries {
		if en.Outcome != store.AuditRefused {
			t.Errorf("entry %+v is not refused", en)
		}
		details = append(details, en.User+": "+en.Detail)
	}
	all := strings.Join(details, "\n")
	for _, want := range []string{"alice: the username or password is wrong (wrong password)", "mallory: the username or password is wrong (no such user)",
		"*)(uid=*: the username or password is wrong (no such user)", "a local user is named"} {
		if !strings.Contains(all, want) {
			t.Errorf("audit entries\n%s\nmiss %q", all, want)
		}
	}
	if users, _ := e.st.ListUsers(ctx); len(users) != 1 {
		t.Errorf("users after refusals: %+v", users)
	}
}

func TestLoginRateLimits(t *testing.T) {
	old := loginFailureFloor
	loginFailureFloor = time.Millisecond
	t.Cleanup(func() { loginFailureFloor = old })
	e := newLoginEnv(t, "")
	for i := 0; i < loginPerUser; i++ {
		if rec, _ := e.login(t, "alice", "wrong"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, rec.Code)
		}
	}
	// The name is blocked, even with the right password, from anywhere.
	rec, _ := e.login(t, "Alice", "alice-pw")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("after %d failures: %d %s", loginPerUser, rec.Code, rec.Body)
	}
	// A name that does not exist is blocked alike: nothing to learn.
	for i := 0; i < loginPerUser; i++ {
		e.login(t, "nobody", "x")
	}
	if rec, _ := e.login(t, "nobody", "x"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("unknown name after %d failures: %d", loginPerUser, rec.Code)
	}
	// Others still sign in.
	e.session(t, "bob", "bob-pw")

	// One address: successes do not count (a lab behind one NAT address);
	// loginPerIP failures a minute do, whatever the names.
	for i := 0; i < loginPerIP+5; i++ {
		if rec, _ := e.login(t, "carol", "carol-pw", "203.0.113.9"); rec.Code != http.StatusOK {
			t.Fatalf("sign-in %d from one address: %d", i, rec.Code)
		}
	}
	for i := 0; i < loginPerIP; i++ {
		e.login(t, fmt.Sprintf("user%d", i), "x", "203.0.113.9")
	}
	if rec, _ := e.login(t, "carol", "carol-pw", "203.0.113.9"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("address after %d attempts: %d", loginPerIP, rec.Code)
	}
	if rec, _ := e.login(t, "carol", "carol-pw"); rec.Code != http.StatusOK {
		t.Errorf("carol from another address: %d", rec.Code)
	}
}

// TestDirectorySyncDisables: a user who left the directory is disabled by
// the sync: every token refused, VMs kept and reported.
func TestDirectorySyncDisables(t *testing.T) {
	e := newLoginEnv(t, "")
	ctx := context.Background()
	alice := e.session(t, "alice", "alice-pw")
	cookie := e.portalSignIn(t, "alice", "alice-pw")
	apiTok, _, err := e.st.CreateToken(ctx, "alice", "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec := portalReq(t, e.s, "GET", "/v1/whoami", "", nil, cookie); rec.Code != http.StatusOK {
		t.Fatalf("whoami with the portal's cookie: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := send(t, e.s, "POST", "/v1/vms", alice.Token, `{"profile":"open","name":"box"}`); rec.Code != http.StatusAccepted {
		t.Fatalf("create VM: %d %s", rec.Code, rec.Body)
	}
	e.srv.DeleteUser(t, "alice")
	changes, err := e.dir.Sync(ctx, e.st)
	if err != nil {
		t.Fatal(err)
	}
	e.s.ReportDirectoryChanges(ctx, "ldap", changes)
	for _, tok := range []string{alice.Token, apiTok} {
		if rec, _ := do(t, e.s, "GET", "/v1/whoami", tok); rec.Code != http.StatusUnauthorized {
			t.Errorf("token of a disabled user: %d", rec.Code)
		}
	}
	if rec := portalReq(t, e.s, "GET", "/v1/whoami", "", nil, cookie); rec.Code != http.StatusUnauthorized {
		t.Errorf("the portal session of a disabled user: %d", rec.Code)
	}
	vm, err := e.st.GetVMByName(ctx, "alice", "box")
	if err != nil || vm.State == store.VMDeleted {
		t.Errorf("alice's VM after the sync: %+v, %v", vm, err)
	}
	entries, _, _ := e.st.ListAudit(ctx, store.AuditFilter{Action: "user.disable"})
	if len(entries) != 1 || entries[0].User != "alice" || !strings.Contains(entries[0].Detail, "1 VMs kept: box") {
		t.Errorf("audit of the sync: %+v", entries)
	}
	u, _ := e.st.GetUser(ctx, "alice")
	if rec, _ := do(t, e.s, "GET", "/v1/users/alice", e.session(t, "bob", "bob-pw").Token); rec.Code != 200 || u.DisabledAt == nil || !strings.Contains(rec.Body.String(), `"disabled_at"`) {
		t.Errorf("alice as an admin sees her: %d %s", rec.Code, rec.Body)
	}
	// Gone from the directory, she cannot sign in either.
	if rec, _ := e.login(t, "alice", "alice-pw"); rec.Code != http.StatusUnauthorized {
		t.Errorf("sign-in after leaving: %d", rec.Code)
	}
}

// TestLocalOff: with local { enabled = false } the tokens of local users
// are refused but for the break-glass admins'; directory users' tokens,
// sessions and API tokens alike, work.
func TestLocalOff(t *testing.T) {
	e := newLoginEnv(t, `local {
      enabled     = false
      break_glass = ["admin"]
    }
    ldap {
      url       = "ldap://127.0.0.1:1"
      user_base = "ou=people,dc=example,dc=org"
    }`)
	ctx := context.Background()
	mk := func(name string, admin bool) string {
		if err := e.st.CreateUser(ctx, &store.User{Name: name, Admin: admin}); err != nil {
			t.Fatal(err)
		}
		tok, _, err := e.st.CreateToken(ctx, name, "t", nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	admin, zed, other := mk("admin", true), mk("zed", false), mk("root2", true)
	alice := e.session(t, "alice", "alice-pw")
	aliceAPI, _, _ := e.st.CreateToken(ctx, "alice", "ci", nil)
	for _, tc := range []struct {
		name, token string
		status      int
	}{
		{"break-glass admin", admin, 200},
		{"local user", zed, 401},
		{"local admin not break-glass", other, 401},
		{"directory session", alice.Token, 200},
		{"directory user's API token", aliceAPI, 200},
	} {
		if rec, _ := do(t, e.s, "GET", "/v1/whoami", tc.token); rec.Code != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, rec.Code, tc.status)
		}
	}
}

// portalSignIn signs in at the portal with a username and password (POST
// /v1/session) from a source address of its own, and answers the cookie.
func (e *loginEnv) portalSignIn(t *testing.T, user, password string) *http.Cookie {
	t.Helper()
	rec := e.portalPassword(t, user, password)
	if rec.Code != http.StatusCreated {
		t.Fatalf("portal sign-in of %s: %d %s", user, rec.Code, rec.Body)
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("portal sign-in: cookies %v", cookies)
	}
	return cookies[0]
}

func (e *loginEnv) portalPassword(t *testing.T, user, password string) *httptest.ResponseRecorder {
	t.Helper()
	body, _ := json.Marshal(api.SignInRequest{Username: user, Password: password})
	req := httptest.NewRequest(http.MethodPost, "/v1/session", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = fmt.Sprintf("198.51.100.%d:4000", e.ip.Add(1)%250+1)
	rec := httptest.NewRecorder()
	e.s.ServeHTTP(rec, req)
	return rec
}

// TestPortalPasswordSignIn: the portal's password form ends in a cookie
// session (HttpOnly, SameSite=Strict, CSRF token; no token in the answer),
// refused as POST /v1/login refuses, and ended by POST /v1/logout as by
// DELETE /v1/session.
func TestPortalPasswordSignIn(t *testing.T) {
	e := newLoginEnv(t, "")
	rec := e.portalPassword(t, "alice", "alice-pw")
	if rec.Code != http.StatusCreated {
		t.Fatalf("sign-in: %d %s", rec.Code, rec.Body)
	}
	var sess api.Session
	_ = json.Unmarshal(rec.Body.Bytes(), &sess)
	ck := rec.Result().Cookies()[0]
	if ck.Name != api.SessionCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || !strings.HasPrefix(ck.Value, store.SessionPrefix) ||
		strings.Contains(rec.Body.String(), ck.Value) || sess.CSRFToken == "" || sess.User.Name != "alice" || sess.User.Source != "ldap" {
		t.Fatalf("cookie %+v, session %s", ck, rec.Body)
	}
	if d := time.Until(sess.ExpiresAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("the session expires in %s, want session_ttl (1h)", d)
	}
	// The cookie's secret is no bearer token.
	if rec, _ := do(t, e.s, "GET", "/v1/whoami", ck.Value); rec.Code != http.StatusUnauthorized {
		t.Errorf("the cookie's secret as a bearer token: %d", rec.Code)
	}
	// A bearer session is no portal session.
	bearer := e.session(t, "alice", "alice-pw")
	if rec, _ := do(t, e.s, "GET", "/v1/session", bearer.Token); rec.Code != http.StatusNotFound {
		t.Errorf("GET /v1/session with a bearer session: %d", rec.Code)
	}

	// Refusals: the same answer as POST /v1/login's, whatever the reason.
	want := e.portalPassword(t, "alice", "wrong")
	for _, tc := range [][2]string{{"mallory", "x"}, {"*)(uid=*", "alice-pw"}, {"alice", ""}} {
		got := e.portalPassword(t, tc[0], tc[1])
		if got.Code != http.StatusUnauthorized || got.Body.String() != want.Body.String() || len(got.Result().Cookies()) != 0 {
			t.Errorf("sign-in %q: %d %s, want %d %s", tc[0], got.Code, got.Body, want.Code, want.Body)
		}
	}
	if rec := portalReq(t, e.s, "POST", "/v1/session", `{"token":"gpuvm_x","username":"alice","password":"p"}`, nil, nil); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("token and password: %d %s", rec.Code, rec.Body)
	}

	// POST /v1/logout with the cookie ends it (CSRF token needed).
	if rec := portalReq(t, e.s, "POST", "/v1/logout", "", nil, ck); rec.Code != http.StatusForbidden {
		t.Errorf("logout without the CSRF token: %d", rec.Code)
	}
	rec = portalReq(t, e.s, "POST", "/v1/logout", "", map[string]string{api.CSRFHeader: sess.CSRFToken}, ck)
	if rec.Code != http.StatusNoContent || len(rec.Result().Cookies()) != 1 || rec.Result().Cookies()[0].MaxAge >= 0 {
		t.Errorf("logout: %d %v", rec.Code, rec.Result().Cookies())
	}
	if rec := portalReq(t, e.s, "GET", "/v1/whoami", "", nil, ck); rec.Code != http.StatusUnauthorized {
		t.Errorf("after logout: %d", rec.Code)
	}
	if rec, _ := do(t, e.s, "GET", "/v1/whoami", bearer.Token); rec.Code != http.StatusOK {
		t.Errorf("the bearer session after the portal's logout: %d", rec.Code)
	}
	entries, _, _ := e.st.ListAudit(context.Background(), store.AuditFilter{Action: "session.create"})
	var ok, refused int
	for _, en := range entries {
		switch {
		case en.Outcome == store.AuditOK && strings.Contains(en.Detail, "cookie session"):
			ok++
		case en.Outcome == store.AuditRefused && en.Status == http.StatusUnauthorized && en.Detail != "":
			refused++
		}
	}
	if ok != 1 || refused != 4 {
		t.Errorf("audit of the portal sign-ins: %d signed in, %d refused with a reason; want 1, 4: %+v", ok, refused, entries)
	}
}
