package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A session is found by its secret until it expires, is signed out, or its
// token is revoked; only the secret's hash is stored.
func TestSessions(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann", "render")
		_, tok, err := s.CreateToken(ctx, "ann", "laptop", nil)
		if err != nil {
			t.Fatal(err)
		}
		secret, ps, err := s.CreateSession(ctx, "ann", tok.ID, time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, SessionPrefix) || ps.ID == secret || ps.ID != TicketID(secret) || ps.CSRF == "" {
			t.Fatalf("secret %q, session %+v", secret, ps)
		}
		var stored int64
		if err := s.db.Model(&PortalSession{}).Where("id = ? OR csrf = ?", secret, secret).Count(&stored).Error; err != nil || stored != 0 {
			t.Fatalf("the secret itself is stored (%d rows, %v)", stored, err)
		}
		got, u, err := s.GetSession(ctx, secret)
		if err != nil || u.Name != "ann" || len(u.Groups) != 1 || got.CSRF != ps.CSRF || got.TokenID == nil || *got.TokenID != tok.ID {
			t.Fatalf("GetSession = %+v, %+v, %v", got, u, err)
		}
		for _, bad := range []string{"", "gvs_nope", secret + "x", strings.TrimPrefix(secret, SessionPrefix)} {
			if _, _, err := s.GetSession(ctx, bad); !errors.Is(err, ErrNoSession) {
				t.Errorf("GetSession(%q) = %v, want ErrNoSession", bad, err)
			}
		}

		// Signing out ends it, twice is no error.
		if err := s.DeleteSession(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSession(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.GetSession(ctx, secret); !errors.Is(err, ErrNoSession) {
			t.Fatalf("after sign-out: %v", err)
		}

		// Revoking the token it was opened with ends it.
		secret, _, err = s.CreateSession(ctx, "ann", tok.ID, time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeToken(ctx, "ann", tok.ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.GetSession(ctx, secret); !errors.Is(err, ErrNoSession) {
			t.Fatalf("after the token's revocation: %v", err)
		}

		// Without a token, it lasts ttl; one never outlives notAfter.
		secret, _, err = s.CreateSession(ctx, "ann", 0, time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		soon := s.Now().Add(10 * time.Minute)
		short, capped, err := s.CreateSession(ctx, "ann", 0, time.Hour, &soon)
		if err != nil || !capped.ExpiresAt.Equal(soon.Truncate(time.Microsecond)) {
			t.Fatalf("capped session %+v, %v", capped, err)
		}
		d.clock.Advance(30 * time.Minute)
		if _, _, err := s.GetSession(ctx, secret); err != nil {
			t.Fatalf("half-way: %v", err)
		}
		if _, _, err := s.GetSession(ctx, short); !errors.Is(err, ErrNoSession) {
			t.Fatalf("past notAfter: %v", err)
		}
		d.clock.Advance(31 * time.Minute)
		if _, _, err := s.GetSession(ctx, secret); !errors.Is(err, ErrNoSession) {
			t.Fatalf("expired: %v", err)
		}
		if n, err := s.DeleteExpiredSessions(ctx, s.Now()); err != nil || n != 3 {
			t.Fatalf("DeleteExpiredSessions = %d, %v; want 3 (the expired, the capped, the revoked token's)", n, err)
		}

		// Validation, and an unknown user.
		if _, _, err := s.CreateSession(ctx, "ann", 0, 0, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("no ttl: %v", err)
		}
		if _, _, err := s.CreateSession(ctx, "nobody", 0, time.Hour, nil); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown user: %v", err)
		}
	})
}
