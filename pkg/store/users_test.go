package store

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestUsers(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		alice := mustUser(t, s, "alice", "render", "ml", "render")
		if !slices.Equal(alice.Groups, []string{"ml", "render"}) || alice.ID == 0 {
			t.Fatalf("alice = %+v", alice)
		}
		mustUser(t, s, "bob", "ml")
		if err := s.CreateUser(ctx, &User{Name: "root", Admin: true}); err != nil {
			t.Fatal(err)
		}

		tests := []struct {
			name string
			do   func() error
			want error
		}{
			{"duplicate name", func() error { return s.CreateUser(ctx, &User{Name: "alice"}) }, ErrNameTaken},
			{"duplicate is a conflict", func() error { return s.CreateUser(ctx, &User{Name: "bob"}) }, ErrConflict},
			{"empty name", func() error { return s.CreateUser(ctx, &User{}) }, ErrInvalid},
			{"empty group", func() error { return s.CreateUser(ctx, &User{Name: "carol", Groups: []string{""}}) }, ErrInvalid},
			{"unknown user", func() error { _, err := s.GetUser(ctx, "nobody"); return err }, ErrNotFound},
			{"groups of unknown user", func() error { return s.SetUserGroups(ctx, "nobody", nil) }, ErrNotFound},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if err := tc.do(); !errors.Is(err, tc.want) {
					t.Fatalf("error %v, want %v", err, tc.want)
				}
			})
		}
		if n := count(t, s, "users", "name = ?", "carol"); n != 0 {
			t.Fatal("a failed CreateUser left its user behind")
		}

		u, err := s.GetUser(ctx, "alice")
		if err != nil || !slices.Equal(u.Groups, []string{"ml", "render"}) || u.Admin {
			t.Fatalf("GetUser = %+v, %v", u, err)
		}
		if err := s.SetUserGroups(ctx, "alice", []string{"vis"}); err != nil {
			t.Fatal(err)
		}
		us, err := s.ListUsers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, u := range us {
			got = append(got, u.Name+":"+strings.Join(u.Groups, ","))
		}
		if want := []string{"alice:vis", "bob:ml", "root:"}; !slices.Equal(got, want) {
			t.Fatalf("ListUsers = %v, want %v", got, want)
		}
		gs, err := s.ListGroups(ctx)
		if err != nil || len(gs) != 3 {
			t.Fatalf("ListGroups = %+v, %v", gs, err)
		}
		if g, err := s.CreateGroup(ctx, "ml"); err != nil || g.ID != gs[0].ID {
			t.Fatalf("CreateGroup(existing) = %+v, %v; want id %d", g, err, gs[0].ID)
		}
	})
}

func TestTokens(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		mustUser(t, s, "alice", "render")
		mustUser(t, s, "bob")
		plain, tok, err := s.CreateToken(ctx, "alice", "laptop", nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(plain, TokenPrefix) || len(plain) != len(TokenPrefix)+tokenRandomChars || !strings.HasPrefix(plain, tok.Prefix) {
			t.Fatalf("token %q, prefix %q", plain, tok.Prefix)
		}
		// The database never holds the token.
		var stored []APIToken
		s.db.Find(&stored)
		for _, st := range stored {
			if strings.Contains(st.Hash, plain) || st.Hash == plain || len(st.Hash) != 64 {
				t.Fatalf("stored hash %q", st.Hash)
			}
		}

		u, got, err := s.AuthenticateToken(ctx, plain)
		if err != nil || u.Name != "alice" || got.ID != tok.ID || !slices.Equal(u.Groups, []string{"render"}) {
			t.Fatalf("AuthenticateToken = %+v, %+v, %v", u, got, err)
		}
		// The user comes whole, as GetUser reads it (one query reads both).
		if _, err := s.UserUID(ctx, "alice", 10000, 20000); err != nil {
			t.Fatal(err)
		}
		if err := s.SetUserSSHKeys(ctx, "alice", []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop"}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetUserGroups(ctx, "alice", []string{"render", "ml"}); err != nil {
			t.Fatal(err)
		}
		whole, err := s.GetUser(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if u, _, err := s.AuthenticateToken(ctx, plain); err != nil || !reflect.DeepEqual(u, whole) {
			t.Fatalf("AuthenticateToken's user = %+v, %v; GetUser's %+v", u, err, whole)
		}
		firstUse := *got.LastUsedAt
		_, got, _ = s.AuthenticateToken(ctx, plain)
		if !got.LastUsedAt.Equal(firstUse) {
			t.Fatalf("last_used_at written again within a minute: %v, %v", firstUse, got.LastUsedAt)
		}
		d.clock.Advance(2 * time.Minute)
		_, got, _ = s.AuthenticateToken(ctx, plain)
		if !got.LastUsedAt.After(firstUse) {
			t.Fatal("last_used_at not updated after a minute")
		}

		expiry := d.clock.Now().Add(time.Hour)
		short, _, err := s.CreateToken(ctx, "alice", "ci", &expiry)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.AuthenticateToken(ctx, short); err != nil {
			t.Fatalf("fresh token refused: %v", err)
		}

		other := plain[:len(plain)-1] + string(rune('a'+(plain[len(plain)-1]-'a'+1)%26))
		tests := []struct {
			name  string
			token string
			setup func()
			why   string
		}{
			{"unknown", other, nil, "unknown"},
			{"malformed", "Bearer xyz", nil, "malformed"},
			{"empty", "", nil, "malformed"},
			{"expired", short, func() { d.clock.Advance(2 * time.Hour) }, "expired"},
			{"revoked", plain, func() {
				if err := s.RevokeToken(ctx, "alice", tok.ID); err != nil {
					t.Fatal(err)
				}
			}, "revoked"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if tc.setup != nil {
					tc.setup()
				}
				_, _, err := s.AuthenticateToken(ctx, tc.token)
				if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), tc.why) {
					t.Fatalf("error %v, want ErrInvalidToken (%s)", err, tc.why)
				}
			})
		}

		if err := s.RevokeToken(ctx, "alice", tok.ID); err != nil {
			t.Fatalf("revoke twice: %v", err)
		}
		if err := s.RevokeToken(ctx, "bob", tok.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("bob revokes alice's token: %v", err)
		}
		// A revoked token's name is free again; a live one's is not.
		if _, _, err := s.CreateToken(ctx, "alice", "laptop", nil); err != nil {
			t.Fatalf("reuse name of revoked token: %v", err)
		}
		if _, _, err := s.CreateToken(ctx, "alice", "laptop", nil); !errors.Is(err, ErrNameTaken) {
			t.Fatalf("duplicate live token name: %v", err)
		}
		if _, _, err := s.CreateToken(ctx, "nobody", "x", nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("token of unknown user: %v", err)
		}
		ts, err := s.ListTokens(ctx, "alice")
		if err != nil || len(ts) != 3 {
			t.Fatalf("ListTokens = %+v, %v", ts, err)
		}
	})
}

// TestUserGroups: the groups of the named users agree with ListUsers', a
// user in none has [], a name that is no user is left out.
func TestUserGroups(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		mustUser(t, s, "alice", "render", "ml")
		mustUser(t, s, "bob", "ml")
		if err := s.CreateUser(ctx, &User{Name: "carol"}); err != nil {
			t.Fatal(err)
		}
		mustUser(t, s, "dave", "vis")
		for _, tc := range []struct {
			names []string
			want  map[string][]string
		}{
			{nil, map[string][]string{}},
			{[]string{"alice"}, map[string][]string{"alice": {"ml", "render"}}},
			{[]string{"alice", "bob", "carol", "nobody"}, map[string][]string{"alice": {"ml", "render"}, "bob": {"ml"}, "carol": {}}},
		} {
			got, err := s.UserGroups(ctx, tc.names)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("UserGroups(%q) = %v, want %v", tc.names, got, tc.want)
			}
			for name, gs := range tc.want {
				if g, ok := got[name]; !ok || g == nil || !slices.Equal(g, gs) {
					t.Fatalf("UserGroups(%q)[%s] = %#v, want %#v", tc.names, name, g, gs)
				}
			}
		}
		us, err := s.ListUsers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, u := range us {
			names = append(names, u.Name)
		}
		got, err := s.UserGroups(ctx, names)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range us {
			if !slices.Equal(got[u.Name], u.Groups) {
				t.Errorf("%s: UserGroups %q, ListUsers %q", u.Name, got[u.Name], u.Groups)
			}
		}
	})
}
