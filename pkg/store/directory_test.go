package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestDirectoryUsers: users a directory signs in are made at the first
// sign-in and refreshed at each; their memberships say where they come
// from; a disabled user's tokens are refused and a sign-in enables it.
func TestDirectoryUsers(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		mustUser(t, s, "alice", "render")
		bob, err := s.SignInDirectoryUser(ctx, DirectoryUser{Name: "bob", Source: SourceLDAP, Admin: true, Groups: []string{"ml101", "gpu-admins"}})
		if err != nil {
			t.Fatal(err)
		}
		if bob.Source != SourceLDAP || !bob.Admin || !slices.Equal(bob.Groups, []string{"gpu-admins", "ml101"}) || bob.DisabledAt != nil {
			t.Fatalf("bob = %+v", bob)
		}
		if want := []Membership{{"gpu-admins", SourceLDAP}, {"ml101", SourceLDAP}}; !slices.Equal(bob.Memberships, want) {
			t.Errorf("memberships %v, want %v", bob.Memberships, want)
		}
		alice, _ := s.GetUser(ctx, "alice")
		if alice.Source != SourceLocal || !slices.Equal(alice.Memberships, []Membership{{"render", SourceLocal}}) {
			t.Errorf("alice = %+v", alice)
		}

		// A local user is not taken over by a directory's user of the name.
		if _, err := s.SignInDirectoryUser(ctx, DirectoryUser{Name: "alice", Source: SourceLDAP}); !errors.Is(err, ErrOtherSource) || !errors.Is(err, ErrConflict) {
			t.Errorf("sign in as local alice: %v, want ErrOtherSource", err)
		}

		plain, tok, err := s.CreateSessionToken(ctx, "bob", d.clock.Now().Add(12*time.Hour))
		if err != nil || !tok.Session || tok.ExpiresAt == nil {
			t.Fatalf("session %+v: %v", tok, err)
		}
		if _, tok2, err := s.AuthenticateToken(ctx, plain); err != nil || !tok2.Session {
			t.Fatalf("authenticate session: %+v %v", tok2, err)
		}
		api, _, err := s.CreateToken(ctx, "bob", "ci", nil)
		if err != nil {
			t.Fatal(err)
		}

		// The sync disables bob: every token of his is refused.
		if changed, err := s.SetUserDisabled(ctx, "bob", true); err != nil || !changed {
			t.Fatalf("disable: %t %v", changed, err)
		}
		if changed, _ := s.SetUserDisabled(ctx, "bob", true); changed {
			t.Error("disabling twice changed something")
		}
		for _, p := range []string{plain, api} {
			if _, _, err := s.AuthenticateToken(ctx, p); !errors.Is(err, ErrInvalidToken) {
				t.Errorf("token of a disabled user: %v, want ErrInvalidToken", err)
			}
		}
		if _, err := s.SetUserDisabled(ctx, "nobody", true); !errors.Is(err, ErrNotFound) {
			t.Errorf("disable nobody: %v", err)
		}

		// Signing in again: enabled, groups refreshed, an admin's own
		// membership kept, admin taken away.
		if err := s.db.Create(&GroupMember{GroupID: groupID(t, s, "render"), UserID: bob.ID, Source: SourceLocal}).Error; err != nil {
			t.Fatal(err)
		}
		bob, err = s.SignInDirectoryUser(ctx, DirectoryUser{Name: "bob", Source: SourceLDAP, Groups: []string{"ml102"}})
		if err != nil {
			t.Fatal(err)
		}
		if bob.Admin || bob.DisabledAt != nil {
			t.Errorf("bob after sign-in = %+v", bob)
		}
		if want := []Membership{{"ml102", SourceLDAP}, {"render", SourceLocal}}; !slices.Equal(bob.Memberships, want) {
			t.Errorf("memberships %v, want %v", bob.Memberships, want)
		}
		if _, _, err := s.AuthenticateToken(ctx, api); err != nil {
			t.Errorf("token after re-enabling: %v", err)
		}

		// A session is extended, an API token is not.
		_, tok3, err := s.AuthenticateToken(ctx, plain)
		if err != nil {
			t.Fatal(err)
		}
		later := tok3.ExpiresAt.Add(time.Hour)
		if err := s.ExtendSessionToken(ctx, tok3.ID, later); err != nil {
			t.Fatal(err)
		}
		if err := s.ExtendSessionToken(ctx, tok3.ID, later.Add(-2*time.Hour)); err != nil { // never shortened
			t.Fatal(err)
		}
		if _, tok4, _ := s.AuthenticateToken(ctx, plain); !tok4.ExpiresAt.Equal(later.UTC().Truncate(time.Microsecond)) {
			t.Errorf("extended session expires %s, want %s", tok4.ExpiresAt, later)
		}
		_, apiTok, _ := s.AuthenticateToken(ctx, api)
		if err := s.ExtendSessionToken(ctx, apiTok.ID, later); err != nil {
			t.Fatal(err)
		}
		if _, apiTok, _ = s.AuthenticateToken(ctx, api); apiTok.ExpiresAt != nil {
			t.Errorf("an API token was given an expiry: %s", apiTok.ExpiresAt)
		}

		// A session expires.
		d.clock.Advance(14 * time.Hour)
		if _, _, err := s.AuthenticateToken(ctx, plain); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("expired session: %v", err)
		}
		if _, err := s.SignInDirectoryUser(ctx, DirectoryUser{Name: "carol", Source: "nis"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("unknown source: %v", err)
		}
	})
}

func groupID(t *testing.T, s *Store, name string) int64 {
	t.Helper()
	g, err := s.CreateGroup(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return g.ID
}
