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

		plain, _, err := s.CreateSession(ctx, "bob", NewSession{Kind: SessionBearer, Method: SourceLDAP, Idle: 12 * time.Hour, NotAfter: d.clock.Now().Add(7 * 24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		cookie, _, err := s.CreateSession(ctx, "bob", NewSession{Kind: SessionCookie, Method: SourceLDAP, Idle: 12 * time.Hour, NotAfter: d.clock.Now().Add(7 * 24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if _, u, err := s.GetSession(ctx, SessionBearer, plain); err != nil || u.Name != "bob" {
			t.Fatalf("bearer session: %+v %v", u, err)
		}
		api, _, err := s.CreateToken(ctx, "bob", "ci", nil)
		if err != nil {
			t.Fatal(err)
		}

		// The sync disables bob: every token of his is refused, his
		// sessions of both kinds end (for good: re-enabling him does not
		// bring them back).
		if changed, err := s.SetUserDisabled(ctx, "bob", true); err != nil || !changed {
			t.Fatalf("disable: %t %v", changed, err)
		}
		if changed, _ := s.SetUserDisabled(ctx, "bob", true); changed {
			t.Error("disabling twice changed something")
		}
		if _, _, err := s.AuthenticateToken(ctx, api); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("token of a disabled user: %v, want ErrInvalidToken", err)
		}
		for kind, secret := range map[string]string{SessionBearer: plain, SessionCookie: cookie} {
			if _, _, err := s.GetSession(ctx, kind, secret); !errors.Is(err, ErrNoSession) {
				t.Errorf("%s session of a disabled user: %v, want ErrNoSession", kind, err)
			}
		}
		var left int64
		if err := s.db.Model(&Session{}).Where("user_id = ?", bob.ID).Count(&left).Error; err != nil || left != 0 {
			t.Errorf("%d sessions of the disabled user are left (%v)", left, err)
		}
		if _, _, err := s.CreateSession(ctx, "bob", NewSession{Kind: SessionBearer, Method: SourceLDAP, Idle: time.Hour, NotAfter: d.clock.Now().Add(time.Hour)}); !errors.Is(err, ErrInvalid) {
			t.Errorf("a session for a disabled user: %v, want ErrInvalid", err)
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

		for kind, secret := range map[string]string{SessionBearer: plain, SessionCookie: cookie} {
			if _, _, err := s.GetSession(ctx, kind, secret); !errors.Is(err, ErrNoSession) {
				t.Errorf("%s session after re-enabling: %v, want ErrNoSession", kind, err)
			}
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
