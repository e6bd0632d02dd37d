package ldap_test

import (
	"context"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/auth"
	"github.com/gpuvm/gpuvm/pkg/auth/ldap"
	"github.com/gpuvm/gpuvm/pkg/auth/ldap/ldaptest"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Config is the configuration of a test directory, as an admin would write
// it (the defaults of pkg/config, a service account, groupOfNames groups).
func Config(s *ldaptest.Server) config.LDAP {
	return config.LDAP{
		URL: s.URL, StartTLS: true, CAFile: s.CAFile,
		BindDN: ldaptest.ServiceDN, BindPasswordFile: s.ServicePasswordFile,
		UserBase: ldaptest.People, UserFilter: config.DefaultLDAPUserFilter, UsernameAttribute: config.DefaultLDAPUsernameAttr,
		GroupBase: ldaptest.Groups, GroupFilter: config.DefaultLDAPGroupFilter, GroupAttribute: config.DefaultLDAPGroupAttribute,
		AdminGroups: []string{"gpu-admins"}, Timeout: 5 * time.Second,
	}
}

func newDirectory(t *testing.T, cfg config.LDAP) *ldap.Directory {
	t.Helper()
	d, err := ldap.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSignIn(t *testing.T) {
	srv := ldaptest.Start(t, nil)
	d := newDirectory(t, Config(srv))
	ctx := context.Background()

	id, err := d.SignIn(ctx, "alice", "alice-pw")
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "alice" || id.Source != store.SourceLDAP || id.Admin || !slices.Equal(id.Groups, []string{"ml101"}) {
		t.Errorf("alice = %+v", id)
	}
	id, err = d.SignIn(ctx, "BOB", "bob-pw") // uid matches without case; the name is lower case
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "bob" || !id.Admin || !slices.Equal(id.Groups, []string{"gpu-admins", "ml101"}) {
		t.Errorf("bob = %+v", id)
	}
	if id, err := d.SignIn(ctx, "carol", "carol-pw"); err != nil || len(id.Groups) != 0 || id.Groups == nil {
		t.Errorf("carol = %+v, %v", id, err)
	}

	// Every refusal is ErrInvalidCredentials, whatever the reason.
	for _, tc := range []struct{ name, user, password, reason string }{
		{"wrong password", "alice", "bob-pw", "wrong password"},
		{"unknown user", "mallory", "alice-pw", "no such user"},
		{"empty password", "alice", "", "empty"},
		{"empty user", "", "x", "empty"},
		// Injections: escaped, they match nobody.
		{"wildcard", "*", "alice-pw", "no such user"},
		{"injection", "*)(uid=*", "alice-pw", "no such user"},
		{"injection or", "admin)(|(uid=*", "alice-pw", "no such user"},
		{"injection close", "alice)(objectClass=*", "alice-pw", "no such user"},
		{"nul", "alice\x00", "alice-pw", "NUL"},
		{"backslash", `alice\2a`, "alice-pw", "no such user"},
		{"long", strings.Repeat("a", 300), "x", "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := d.SignIn(ctx, tc.user, tc.password)
			var r *auth.Refusal
			if !errors.Is(err, auth.ErrInvalidCredentials) || !errors.As(err, &r) || !strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("sign in %q: %+v, %v; want a refusal for %q", tc.user, id, err, tc.reason)
			}
		})
	}
}

// TestTLS: StartTLS and ldaps verify the directory's certificate with the
// CA of the configuration; a certificate of another CA is refused, unless
// the admin turns verification off.
func TestTLS(t *testing.T) {
	srv := ldaptest.Start(t, nil)
	ctx := context.Background()
	other, _ := ldaptest.NewCA(t, "another CA")
	otherFile := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(otherFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ldaps := Config(srv)
	ldaps.URL, ldaps.StartTLS = srv.LDAPSURL, false
	for _, tc := range []struct {
		name string
		cfg  func(c config.LDAP) config.LDAP
		ok   bool
	}{
		{"starttls", func(c config.LDAP) config.LDAP { return c }, true},
		{"ldaps", func(config.LDAP) config.LDAP { return ldaps }, true},
		{"starttls other CA", func(c config.LDAP) config.LDAP { c.CAFile = otherFile; return c }, false},
		{"ldaps other CA", func(config.LDAP) config.LDAP { c := ldaps; c.CAFile = otherFile; return c }, false},
		{"system roots", func(c config.LDAP) config.LDAP { c.CAFile = ""; return c }, false},
		{"insecure", func(c config.LDAP) config.LDAP { c.CAFile, c.InsecureSkipVerify = otherFile, true; return c }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirectory(t, tc.cfg(Config(srv)))
			_, err := d.SignIn(ctx, "alice", "alice-pw")
			if tc.ok && err != nil {
				t.Fatalf("sign in: %v", err)
			}
			if !tc.ok {
				if err == nil || errors.Is(err, auth.ErrInvalidCredentials) || !strings.Contains(err.Error(), "certificate") {
					t.Fatalf("sign in with a certificate of another CA: %v, want a certificate error", err)
				}
			}
		})
	}
}

// fakeUsers is the store as the sync sees it.
type fakeUsers struct{ users []store.User }

func (f *fakeUsers) ListUsers(context.Context) ([]store.User, error) { return f.users, nil }
func (f *fakeUsers) SetUserDisabled(_ context.Context, name string, disabled bool) (bool, error) {
	for i := range f.users {
		if f.users[i].Name == name {
			was := f.users[i].DisabledAt != nil
			if disabled {
				now := time.Now()
				f.users[i].DisabledAt = &now
			} else {
				f.users[i].DisabledAt = nil
			}
			return was != disabled, nil
		}
	}
	return false, store.ErrNotFound
}

func TestSync(t *testing.T) {
	srv := ldaptest.Start(t, nil)
	d := newDirectory(t, Config(srv))
	ctx := context.Background()
	st := &fakeUsers{users: []store.User{
		{Name: "alice", Source: store.SourceLDAP}, {Name: "bob", Source: store.SourceLDAP},
		{Name: "carol", Source: store.SourceLDAP}, {Name: "zed", Source: store.SourceLocal},
	}}
	changes, err := d.Sync(ctx, st)
	if err != nil || len(changes) != 0 {
		t.Fatalf("first sync: %v, %v", changes, err)
	}
	srv.DeleteUser(t, "bob")
	changes, err = d.Sync(ctx, st)
	if err != nil || !slices.Equal(changes, []auth.Change{{User: "bob", Disabled: true}}) {
		t.Fatalf("sync after bob left: %v, %v", changes, err)
	}
	if changes, err := d.Sync(ctx, st); err != nil || len(changes) != 0 {
		t.Fatalf("sync again: %v, %v", changes, err)
	}

	// A directory that cannot be reached disables nobody.
	down := Config(srv)
	down.URL = "ldap://127.0.0.1:1"
	if changes, err := newDirectory(t, down).Sync(ctx, st); err == nil || len(changes) != 0 {
		t.Fatalf("sync with the directory down: %v, %v", changes, err)
	}
	if st.users[0].DisabledAt != nil {
		t.Error("alice disabled while the directory was down")
	}
}
