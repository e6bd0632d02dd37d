package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/clocktest"
	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// adminEnv is a server that authenticates with a real store: users admin,
// ann and bob with a token each, on host "h1" with two GPUs.
type adminEnv struct {
	s               *Server
	st              *store.Store
	clock           *clocktest.Clock
	worker          *countWaker
	inventoryErr    error
	admin, ann, bob string
}

func newAdminEnv(t *testing.T) *adminEnv {
	t.Helper()
	ctx := context.Background()
	e := &adminEnv{clock: clocktest.New(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)), worker: &countWaker{}}
	st := storetest.New(t, storetest.WithClock(e.clock.Now), storetest.Quiet)
	e.st = st
	tokens := map[string]*string{"admin": &e.admin, "ann": &e.ann, "bob": &e.bob}
	for _, name := range []string{"admin", "ann", "bob"} {
		if err := st.CreateUser(ctx, &store.User{Name: name, Admin: name == "admin", Groups: []string{"staff"}}); err != nil {
			t.Fatal(err)
		}
		var err error
		if *tokens[name], _, err = st.CreateToken(ctx, name, "test", nil); err != nil {
			t.Fatal(err)
		}
	}
	mock := &backend.Mock{
		InventoryF: func(context.Context) (backend.Inventory, error) {
			if e.inventoryErr != nil {
				return backend.Inventory{}, e.inventoryErr
			}
			return backend.Inventory{Backend: "passthrough", Host: "sim", Simulated: true, GPUs: []backend.GPU{
				{Address: "0000:41:00.0", Model: "L40S", Mode: gpu.ModeIdle},
				{Address: "0000:42:00.0", Model: "L40S", Mode: gpu.ModeIdle},
			}}, nil
		},
	}
	e.s = newServer(t, Deps{Auth: st, Backends: fakeBackends{"passthrough": mock}, Store: st, Worker: e.worker, Host: "h1",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return e
}

// call sends a request and decodes a JSON answer into out (when not nil).
func (e *adminEnv) call(t *testing.T, method, path, token, body string, out any) (int, map[string]any) {
	t.Helper()
	rec, m := send(t, e.s, method, path, token, body)
	if out != nil && rec.Code < 300 {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, rec.Body)
		}
	}
	if rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s %s: %d without problem+json", method, path, rec.Code)
	}
	return rec.Code, m
}

// Who may ask what: admins everything; a user about themself; about
// anyone else a user learns nothing (404), and admin-only routes say 403.
func TestUserRoutesAccess(t *testing.T) {
	e := newAdminEnv(t)
	tests := []struct {
		name, method, path, token, body string
		status                          int
		problem                         string
	}{
		{"admin lists users", "GET", "/v1/users", "admin", "", 200, ""},
		{"user lists users", "GET", "/v1/users", "ann", "", 403, "forbidden"},
		{"user creates a user", "POST", "/v1/users", "ann", `{"name":"eve"}`, 403, "forbidden"},
		{"no token", "GET", "/v1/users/ann", "", "", 401, "unauthenticated"},
		{"admin gets a user", "GET", "/v1/users/ann", "admin", "", 200, ""},
		{"admin gets nobody", "GET", "/v1/users/nobody", "admin", "", 404, "not-found"},
		{"user gets self", "GET", "/v1/users/ann", "ann", "", 200, ""},
		{"user gets another", "GET", "/v1/users/bob", "ann", "", 404, "not-found"},
		{"user gets nobody", "GET", "/v1/users/nobody", "ann", "", 404, "not-found"},
		{"user lists own tokens", "GET", "/v1/users/ann/tokens", "ann", "", 200, ""},
		{"user lists another's tokens", "GET", "/v1/users/bob/tokens", "ann", "", 404, "not-found"},
		{"admin lists a user's tokens", "GET", "/v1/users/bob/tokens", "admin", "", 200, ""},
		{"admin lists nobody's tokens", "GET", "/v1/users/nobody/tokens", "admin", "", 404, "not-found"},
		{"user makes a token for another", "POST", "/v1/users/bob/tokens", "ann", `{"name":"x"}`, 404, "not-found"},
		{"admin makes a token for nobody", "POST", "/v1/users/nobody/tokens", "admin", `{"name":"x"}`, 404, "not-found"},
		{"user revokes another's token", "DELETE", "/v1/users/bob/tokens/1", "ann", "", 404, "not-found"},
		{"token of another user by its ID", "DELETE", "/v1/users/ann/tokens/3", "ann", "", 404, "not-found"},
		{"token ID not a number", "DELETE", "/v1/users/ann/tokens/abc", "ann", "", 404, "not-found"},
		{"whoami", "GET", "/v1/whoami", "ann", "", 200, ""},
		{"hosts for users", "GET", "/v1/hosts", "ann", "", 200, ""},
		{"drain needs admin", "POST", "/v1/admin/gpus/0000:41:00.0/drain", "ann", "", 403, "forbidden"},
		{"undrain needs admin", "DELETE", "/v1/admin/gpus/0000:41:00.0/drain", "ann", "", 403, "forbidden"},
	}
	tokens := map[string]string{"admin": e.admin, "ann": e.ann, "bob": e.bob, "": ""}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.call(t, tc.method, tc.path, tokens[tc.token], tc.body, nil)
			if code != tc.status {
				t.Fatalf("status %d, want %d: %v", code, tc.status, body)
			}
			if tc.problem != "" && (body["type"] != ProblemBase+tc.problem || body["detail"] == "") {
				t.Errorf("problem %v", body)
			}
			// A 404 about another user reads as one about nobody.
			if tc.status == 404 && strings.Contains(tc.path, "/users/bob") && !strings.Contains(fmt.Sprint(body["detail"]), `"bob"`) {
				t.Errorf("detail %v", body["detail"])
			}
		})
	}
}

func TestCreateUserAndWhoami(t *testing.T) {
	e := newAdminEnv(t)
	var u api.User
	code, body := e.call(t, "POST", "/v1/users", e.admin, `{"name":"carl","groups":["render","artists","render"]}`, &u)
	if code != 201 || u.Name != "carl" || u.Admin || strings.Join(u.Groups, ",") != "artists,render" || u.CreatedAt == nil {
		t.Fatalf("create: %d %v %+v", code, body, u)
	}
	code, body = e.call(t, "POST", "/v1/users", e.admin, `{"name":"dora","admin":true}`, &u)
	if code != 201 || !u.Admin || u.Groups == nil {
		t.Fatalf("create admin: %d %v %+v", code, body, u)
	}
	tests := []struct {
		name, body     string
		status         int
		problem, field string
	}{
		{"taken", `{"name":"carl"}`, 409, "conflict", "name"},
		{"upper case", `{"name":"Carl"}`, 422, "validation", "name"},
		{"empty", `{}`, 422, "validation", "name"},
		{"starts with a digit", `{"name":"1carl"}`, 422, "validation", "name"},
		{"too long", `{"name":"` + strings.Repeat("a", 64) + `"}`, 422, "validation", "name"},
		{"bad group", `{"name":"erin","groups":["ok","no spaces"]}`, 422, "validation", "groups[1]"},
		{"unknown field", `{"name":"erin","password":"x"}`, 400, "bad-request", "password"},
		{"too many groups", `{"name":"erin","groups":[` + strings.Repeat(`"g",`, maxUserGroups) + `"g"]}`, 422, "validation", "groups"},
		{"duplicate key", `{"name":"../x","name":"erin"}`, 400, "bad-request", "name"},
		{"not JSON", `{`, 400, "bad-request", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.call(t, "POST", "/v1/users", e.admin, tc.body, nil)
			if code != tc.status || body["type"] != ProblemBase+tc.problem || (tc.field != "" && body["field"] != tc.field) {
				t.Errorf("%d %v", code, body)
			}
		})
	}
	var list api.UserList
	if code, _ := e.call(t, "GET", "/v1/users", e.admin, "", &list); code != 200 {
		t.Fatal(code)
	}
	var names []string
	for _, u := range list.Items {
		names = append(names, u.Name)
	}
	if strings.Join(names, ",") != "admin,ann,bob,carl,dora" {
		t.Errorf("users %v", names)
	}
	var me api.User
	if code, _ := e.call(t, "GET", "/v1/whoami", e.ann, "", &me); code != 200 || me.Name != "ann" || me.Admin || strings.Join(me.Groups, ",") != "staff" {
		t.Errorf("whoami: %d %+v", code, me)
	}
	if code, _ := e.call(t, "GET", "/v1/whoami", e.admin, "", &me); code != 200 || me.Name != "admin" || !me.Admin {
		t.Errorf("whoami admin: %d %+v", code, me)
	}
}

// A token made through the API authenticates until it is revoked or
// expires; lists never show a token or its hash.
func TestTokenLifecycle(t *testing.T) {
	e := newAdminEnv(t)
	// Ann makes one for herself; the admin one for Bob that expires.
	var own, bobs api.CreatedToken
	code, body := e.call(t, "POST", "/v1/users/ann/tokens", e.ann, `{"name":"laptop"}`, &own)
	if code != 201 || !strings.HasPrefix(own.Secret, store.TokenPrefix) || !strings.HasPrefix(own.Secret, own.Prefix) ||
		own.User != "ann" || own.State != api.TokenActive || own.ExpiresAt != nil || own.ID == 0 {
		t.Fatalf("create: %d %v %+v", code, body, own)
	}
	code, body = e.call(t, "POST", "/v1/users/bob/tokens", e.admin, `{"name":"ci","expires_in_hours":2}`, &bobs)
	if code != 201 || bobs.ExpiresAt == nil || !bobs.ExpiresAt.Equal(e.clock.Now().Add(2*time.Hour)) {
		t.Fatalf("create with expiry: %d %v %+v", code, body, bobs)
	}
	if code, body := e.call(t, "POST", "/v1/users/ann/tokens", e.ann, `{"name":"laptop"}`, nil); code != 409 || body["field"] != "name" {
		t.Errorf("same name: %d %v", code, body)
	}
	var me api.User
	if code, _ := e.call(t, "GET", "/v1/whoami", own.Secret, "", &me); code != 200 || me.Name != "ann" {
		t.Fatalf("the new token: %d %+v", code, me)
	}
	if code, _ := e.call(t, "GET", "/v1/whoami", bobs.Secret, "", &me); code != 200 || me.Name != "bob" {
		t.Fatalf("bob's new token: %d %+v", code, me)
	}

	// The list shows both of Ann's tokens, without secrets.
	rec, _ := send(t, e.s, "GET", "/v1/users/ann/tokens", e.ann, "")
	if strings.Contains(rec.Body.String(), own.Secret) || strings.Contains(rec.Body.String(), "hash") {
		t.Errorf("the list shows a secret: %s", rec.Body)
	}
	var list api.TokenList
	json.Unmarshal(rec.Body.Bytes(), &list)
	if len(list.Items) != 2 || list.Items[0].Name != "laptop" || list.Items[0].ID != own.ID || list.Items[1].Name != "test" {
		t.Fatalf("tokens %+v", list)
	}

	// Revoked: 401, and listed as revoked; revoking again is fine.
	for range 2 {
		if code, body := e.call(t, "DELETE", fmt.Sprintf("/v1/users/ann/tokens/%d", own.ID), e.ann, "", nil); code != 204 {
			t.Fatalf("revoke: %d %v", code, body)
		}
	}
	if code, body := e.call(t, "GET", "/v1/whoami", own.Secret, "", nil); code != 401 || body["type"] != ProblemBase+"unauthenticated" {
		t.Errorf("revoked token: %d %v", code, body)
	}
	e.call(t, "GET", "/v1/users/ann/tokens", e.ann, "", &list)
	if list.Items[0].State != api.TokenRevoked || list.Items[0].RevokedAt == nil || list.Items[1].State != api.TokenActive {
		t.Errorf("after revoke: %+v", list.Items)
	}
	// The admin may revoke a user's token; the name reused is no conflict.
	if code, _ := e.call(t, "POST", "/v1/users/ann/tokens", e.ann, `{"name":"laptop"}`, nil); code != 201 {
		t.Errorf("name of a revoked token: %d", code)
	}

	// Expired: 401, listed as expired.
	e.clock.Advance(2 * time.Hour)
	if code, _ := e.call(t, "GET", "/v1/whoami", bobs.Secret, "", nil); code != 401 {
		t.Errorf("expired token: %d", code)
	}
	e.call(t, "GET", "/v1/users/bob/tokens", e.admin, "", &list)
	if list.Items[0].Name != "ci" || list.Items[0].State != api.TokenExpired {
		t.Errorf("bob's tokens: %+v", list.Items)
	}
	if code, _ := e.call(t, "DELETE", fmt.Sprintf("/v1/users/bob/tokens/%d", bobs.ID), e.admin, "", nil); code != 204 {
		t.Errorf("admin revokes bob's token: %d", code)
	}
}

func TestCreateTokenValidation(t *testing.T) {
	e := newAdminEnv(t)
	now := e.clock.Now()
	tests := []struct {
		name, body     string
		status         int
		problem, field string
	}{
		{"no name", `{}`, 422, "validation", "name"},
		{"bad name", `{"name":"a b"}`, 422, "validation", "name"},
		{"negative hours", `{"name":"x","expires_in_hours":-1}`, 422, "validation", "expires_in_hours"},
		{"too many hours", `{"name":"x","expires_in_hours":100000}`, 422, "validation", "expires_in_hours"},
		{"both", `{"name":"x","expires_in_hours":1,"expires_at":"` + now.Add(time.Hour).Format(time.RFC3339) + `"}`, 422, "validation", "expires_at"},
		{"past", `{"name":"x","expires_at":"` + now.Add(-time.Minute).Format(time.RFC3339) + `"}`, 422, "validation", "expires_at"},
		{"far future", `{"name":"x","expires_at":"2099-01-01T00:00:00Z"}`, 422, "validation", "expires_at"},
		{"hours as text", `{"name":"x","expires_in_hours":"2"}`, 400, "bad-request", "expires_in_hours"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.call(t, "POST", "/v1/users/ann/tokens", e.ann, tc.body, nil)
			if code != tc.status || body["type"] != ProblemBase+tc.problem || body["field"] != tc.field {
				t.Errorf("%d %v", code, body)
			}
		})
	}
	var tok api.CreatedToken
	at := now.Add(36 * time.Hour)
	code, body := e.call(t, "POST", "/v1/users/ann/tokens", e.ann, `{"name":"x","expires_at":"`+at.Format(time.RFC3339)+`"}`, &tok)
	if code != 201 || tok.ExpiresAt == nil || !tok.ExpiresAt.Equal(at) {
		t.Errorf("expires_at: %d %v %+v", code, body, tok)
	}
}
