package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/backend"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

type fakeAuth map[string]*store.User

func (f fakeAuth) AuthenticateToken(_ context.Context, plain string) (*store.User, *store.APIToken, error) {
	if u, ok := f[plain]; ok {
		return u, &store.APIToken{}, nil
	}
	return nil, nil, store.ErrInvalidToken
}

type fakeBackends map[string]backend.Backend

func (f fakeBackends) Names() []string {
	var out []string
	for n := range f {
		out = append(out, n)
	}
	return out
}
func (f fakeBackends) Backend(n string) (backend.Backend, bool) { b, ok := f[n]; return b, ok }

type fakeConfig struct {
	cfg    *config.Config
	broken bool
}

func (f *fakeConfig) Load() *config.Config { return f.cfg }
func (f *fakeConfig) Reload() (string, error) {
	if f.broken {
		return "x.hcl:1:1: Unsupported block type", errors.New("configuration has errors; nothing was changed")
	}
	return "", nil
}

func testServer(t testing.TB, cfg *fakeConfig) *Server {
	t.Helper()
	mock := &backend.Mock{
		InventoryF: func(context.Context) (backend.Inventory, error) {
			return backend.Inventory{Backend: "vgpu", Host: "test", GPUs: []backend.GPU{{Address: "0000:41:00.0", Model: "A40"}}}, nil
		},
		HealthF: func(context.Context) (backend.Health, error) { return backend.Health{OK: true}, nil },
	}
	return newServer(t, Deps{
		Auth:     fakeAuth{"admin-token": {Name: "admin", Admin: true}, "ann-token": {Name: "ann", Groups: []string{"artists"}}},
		Backends: fakeBackends{"vgpu": mock},
		Config:   cfg,
		Store:    storetest.New(t),
	})
}

func do(t *testing.T, s *Server, method, path, token string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var body map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	return rec, body
}

func TestAuthAndProblems(t *testing.T) {
	cfg, diags := config.Parse(config.Source{Name: "p.hcl", Data: []byte(`
policy {
  group "artists" {}
}
profile "open" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
}
profile "artists-only" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  groups = ["artists"]
}
profile "staff-only" {
  vcpus = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  users = ["bob"]
}
`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	fc := &fakeConfig{cfg: cfg}
	s := testServer(t, fc)
	tests := []struct {
		name, method, path, token string
		status                    int
		problem                   string
	}{
		{"no token", "GET", "/v1/gpus", "", 401, "unauthenticated"},
		{"bad token", "GET", "/v1/gpus", "nope", 401, "unauthenticated"},
		{"not admin", "GET", "/v1/gpus", "ann-token", 403, "forbidden"},
		{"admin", "GET", "/v1/gpus", "admin-token", 200, ""},
		{"unknown route", "GET", "/v1/nothing", "admin-token", 404, "not-found"},
		{"profile allowed by group", "GET", "/v1/profiles/artists-only", "ann-token", 200, ""},
		{"profile of others is not found", "GET", "/v1/profiles/staff-only", "ann-token", 404, "not-found"},
		{"reload needs admin", "POST", "/v1/admin/reload", "ann-token", 403, "forbidden"},
		{"reload", "POST", "/v1/admin/reload", "admin-token", 200, ""},
		{"healthz is open", "GET", "/healthz", "", 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, body := do(t, s, tc.method, tc.path, tc.token)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.problem != "" {
				if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
					t.Errorf("Content-Type %q", ct)
				}
				if body["type"] != ProblemBase+tc.problem || body["status"] != float64(tc.status) || body["detail"] == "" {
					t.Errorf("problem %v", body)
				}
			}
		})
	}
	req := httptest.NewRequest("GET", "/v1/profiles", nil)
	req.Header.Set("Authorization", "Bearer ann-token")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var ps []map[string]any
	json.Unmarshal(rec.Body.Bytes(), &ps)
	if len(ps) != 2 || ps[0]["name"] != "artists-only" || ps[1]["name"] != "open" {
		t.Errorf("ann sees %v", ps)
	}
	fc.broken = true
	rec, body := do(t, s, "POST", "/v1/admin/reload", "admin-token")
	if rec.Code != 422 || body["type"] != ProblemBase+"invalid-configuration" || body["diagnostics"] == "" {
		t.Errorf("broken reload: %d %v", rec.Code, body)
	}
}

type memUsers struct {
	users  map[string]*store.User
	tokens map[string][]store.APIToken
	fail   bool
}

func (m *memUsers) GetUser(_ context.Context, n string) (*store.User, error) {
	if u, ok := m.users[n]; ok {
		return u, nil
	}
	return nil, store.ErrNotFound
}
func (m *memUsers) CreateUser(_ context.Context, u *store.User) error {
	m.users[u.Name] = u
	return nil
}
func (m *memUsers) CreateToken(_ context.Context, user, name string, _ *time.Time) (string, *store.APIToken, error) {
	if m.fail {
		return "", nil, errors.New("disk full")
	}
	m.tokens[user] = append(m.tokens[user], store.APIToken{Name: name})
	return "gpuvm_secret", &store.APIToken{Name: name}, nil
}
func (m *memUsers) ListTokens(_ context.Context, user string) ([]store.APIToken, error) {
	return m.tokens[user], nil
}

func TestEnsureAdmin(t *testing.T) {
	dir := t.TempDir()
	m := &memUsers{users: map[string]*store.User{}, tokens: map[string][]store.APIToken{}, fail: true}
	if _, _, err := EnsureAdmin(context.Background(), m, dir); err == nil {
		t.Fatal("token failure not reported")
	}
	// The user exists but has no token (a start killed half-way): the next start finishes.
	m.fail = false
	path, created, err := EnsureAdmin(context.Background(), m, dir)
	if err != nil || !created {
		t.Fatalf("EnsureAdmin = %v %v", created, err)
	}
	b, err := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if err != nil || string(b) != "gpuvm_secret\n" || fi.Mode().Perm() != 0o600 || filepath.Dir(path) != dir {
		t.Fatalf("token file %q %v %v", b, err, fi.Mode())
	}
	if _, created, _ := EnsureAdmin(context.Background(), m, dir); created {
		t.Error("second start made another token")
	}
	if !m.users["admin"].Admin {
		t.Error("admin is not an admin")
	}
}

// newServer is New, closed when the test ends: the estimates' worker
// stops before the test's store is closed.
func newServer(t testing.TB, d Deps) *Server {
	t.Helper()
	s := New(d)
	t.Cleanup(s.Close)
	return s
}
