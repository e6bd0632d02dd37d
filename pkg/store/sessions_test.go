package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A session is found by its secret and its kind until it expires, is
// signed out, or its token is revoked; only the secret's hash is stored.
func TestSessions(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann", "render")
		_, tok, err := s.CreateToken(ctx, "ann", "laptop", nil)
		if err != nil {
			t.Fatal(err)
		}
		week := s.Now().Add(7 * 24 * time.Hour)
		cookie := NewSession{Kind: SessionCookie, Method: SignInToken, TokenID: tok.ID, Idle: time.Hour, NotAfter: week}
		secret, ps, err := s.CreateSession(ctx, "ann", cookie)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, SessionPrefix) || ps.ID == secret || ps.ID != TicketID(secret) || ps.CSRF == "" || ps.Kind != SessionCookie {
			t.Fatalf("secret %q, session %+v", secret, ps)
		}
		var stored int64
		if err := s.db.Model(&Session{}).Where("id = ? OR csrf = ?", secret, secret).Count(&stored).Error; err != nil || stored != 0 {
			t.Fatalf("the secret itself is stored (%d rows, %v)", stored, err)
		}
		got, u, err := s.GetSession(ctx, SessionCookie, secret)
		if err != nil || u.Name != "ann" || len(u.Groups) != 1 || got.CSRF != ps.CSRF || got.TokenID == nil || *got.TokenID != tok.ID || got.Method != SignInToken {
			t.Fatalf("GetSession = %+v, %+v, %v", got, u, err)
		}
		for _, bad := range []struct{ kind, secret string }{
			{SessionCookie, ""}, {SessionCookie, "gvs_nope"}, {SessionCookie, secret + "x"},
			{SessionCookie, strings.TrimPrefix(secret, SessionPrefix)},
			{SessionBearer, secret}, // a cookie's secret is no bearer token
			{"other", secret},
		} {
			if _, _, err := s.GetSession(ctx, bad.kind, bad.secret); !errors.Is(err, ErrNoSession) {
				t.Errorf("GetSession(%s, %q) = %v, want ErrNoSession", bad.kind, bad.secret, err)
			}
		}

		// A bearer session has no CSRF token, and is no cookie.
		bearer, bs, err := s.CreateSession(ctx, "ann", NewSession{Kind: SessionBearer, Method: SourceLDAP, Idle: time.Hour, NotAfter: week})
		if err != nil || bs.CSRF != "" || bs.TokenID != nil {
			t.Fatalf("bearer session %+v, %v", bs, err)
		}
		if _, _, err := s.GetSession(ctx, SessionCookie, bearer); !errors.Is(err, ErrNoSession) {
			t.Errorf("a bearer secret as a cookie: %v", err)
		}
		if _, _, err := s.GetSession(ctx, SessionBearer, bearer); err != nil {
			t.Errorf("bearer session: %v", err)
		}

		// Signing out ends it, twice is no error.
		for _, sec := range []string{secret, bearer} {
			if err := s.DeleteSession(ctx, sec); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteSession(ctx, sec); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := s.GetSession(ctx, SessionCookie, secret); !errors.Is(err, ErrNoSession) {
			t.Fatalf("after sign-out: %v", err)
		}
		if _, _, err := s.GetSession(ctx, SessionBearer, bearer); !errors.Is(err, ErrNoSession) {
			t.Fatalf("after sign-out: %v", err)
		}

		// Revoking the token it was opened with ends it.
		secret, _, err = s.CreateSession(ctx, "ann", cookie)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeToken(ctx, "ann", tok.ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.GetSession(ctx, SessionCookie, secret); !errors.Is(err, ErrNoSession) {
			t.Fatalf("after the token's revocation: %v", err)
		}
		if n, err := s.DeleteUserSessions(ctx, "ann"); err != nil || n != 1 {
			t.Fatalf("DeleteUserSessions = %d, %v; want 1", n, err)
		}

		// Validation, and an unknown user.
		for name, o := range map[string]NewSession{
			"no kind":    {Method: SignInToken, Idle: time.Hour, NotAfter: week},
			"no method":  {Kind: SessionCookie, Idle: time.Hour, NotAfter: week},
			"no idle":    {Kind: SessionCookie, Method: SignInToken, NotAfter: week},
			"ends today": {Kind: SessionCookie, Method: SignInToken, Idle: time.Hour, NotAfter: s.Now().Add(-time.Second)},
		} {
			if _, _, err := s.CreateSession(ctx, "ann", o); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if _, _, err := s.CreateSession(ctx, "nobody", NewSession{Kind: SessionBearer, Method: SourceLDAP, Idle: time.Hour, NotAfter: week}); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown user: %v", err)
		}
	})
}

// One expiry rule for both kinds: idle time after the last use (sliding,
// written at most once a minute), never past NotAfter.
func TestSessionSlidingExpiry(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		for _, kind := range []string{SessionCookie, SessionBearer} {
			capAt := s.Now().Add(3 * time.Hour)
			used, _, err := s.CreateSession(ctx, "ann", NewSession{Kind: kind, Method: SourceOIDC, Idle: time.Hour, NotAfter: capAt})
			if err != nil {
				t.Fatal(err)
			}
			idle, _, err := s.CreateSession(ctx, "ann", NewSession{Kind: kind, Method: SourceOIDC, Idle: time.Hour, NotAfter: capAt})
			if err != nil {
				t.Fatal(err)
			}
			// Used every 40 minutes, a session of an hour's idle time lives
			// on; one left alone ends after the hour.
			for i := 1; i <= 3; i++ {
				d.clock.Advance(40 * time.Minute)
				ps, _, err := s.GetSession(ctx, kind, used)
				if err != nil {
					t.Fatalf("%s: use %d at %s: %v", kind, i, s.Now(), err)
				}
				if want := minTime(s.Now().Add(time.Hour), capAt); ps.ExpiresAt.Sub(want).Abs() > time.Second {
					t.Errorf("%s: use %d: expires %s, want %s", kind, i, ps.ExpiresAt, want)
				}
			}
			if _, _, err := s.GetSession(ctx, kind, idle); !errors.Is(err, ErrNoSession) {
				t.Errorf("%s: the idle session lives after 2h: %v", kind, err)
			}
			// However much it is used, it ends at NotAfter.
			for s.Now().Before(capAt.Add(-30 * time.Minute)) {
				d.clock.Advance(20 * time.Minute)
				if _, _, err := s.GetSession(ctx, kind, used); err != nil {
					t.Fatalf("%s: before the cap, at %s: %v", kind, s.Now(), err)
				}
			}
			d.clock.Set(capAt)
			if _, _, err := s.GetSession(ctx, kind, used); !errors.Is(err, ErrNoSession) {
				t.Errorf("%s: past NotAfter: %v", kind, err)
			}
		}
		if n, err := s.DeleteExpiredSessions(ctx, s.Now().Add(time.Second)); err != nil || n != 4 {
			t.Fatalf("DeleteExpiredSessions = %d, %v; want 4", n, err)
		}
	})
}

// Migration 9 keeps the sessions of version 8: the portal's become cookie
// sessions (one opened with a session token takes that token's expiry), the
// live session tokens bearer sessions that the same secret opens; API tokens
// stay, session tokens leave api_tokens.
func TestMigrateSessions(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			ctx := context.Background()
			d := newTestDB(t, driver)
			all := migrations
			var at9 int
			for i, m := range all {
				if m.Name == "sessions" {
					at9 = i
				}
			}
			migrations = all[:at9]
			old, err := Open(ctx, d.config())
			migrations = all
			if err != nil {
				t.Fatal(err)
			}
			now := d.clock.Now().UTC()
			// Raw SQL: the User model has columns of later versions.
			if err := old.db.Exec("INSERT INTO users (id, name, admin, created_at, updated_at, source, ssh_keys) VALUES (1, 'ann', FALSE, ?, ?, 'local', '')", now, now).Error; err != nil {
				t.Fatal(err)
			}
			ann := &User{ID: 1, Name: "ann"}
			apiPlain, _ := newToken()
			sessPlain, _ := newToken()
			revokedPlain, _ := newToken()
			exec := func(q string, args ...any) {
				t.Helper()
				if err := old.db.Exec(q, args...).Error; err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			ins := `INSERT INTO api_tokens (id, user_id, name, hash, prefix, created_at, expires_at, revoked_at, session) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
			exec(ins, 1, ann.ID, "ci", hashToken(apiPlain), apiPlain[:tokenPrefixLength], now, nil, nil, false)
			exec(ins, 2, ann.ID, "session-a", hashToken(sessPlain), sessPlain[:tokenPrefixLength], now, now.Add(5*time.Hour), nil, true)
			exec(ins, 3, ann.ID, "session-b", hashToken(revokedPlain), revokedPlain[:tokenPrefixLength], now, now.Add(5*time.Hour), now, true)
			ps := `INSERT INTO portal_sessions (id, user_id, token_id, csrf, created_at, expires_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?)`
			exec(ps, TicketID("gvs_api"), ann.ID, 1, "c1", now, now.Add(12*time.Hour), now)
			exec(ps, TicketID("gvs_sess"), ann.ID, 2, "c2", now, now.Add(12*time.Hour), now)
			exec(ps, TicketID("gvs_revoked"), ann.ID, 3, "c3", now, now.Add(12*time.Hour), now)
			exec(ps, TicketID("gvs_none"), ann.ID, nil, "c4", now, now.Add(12*time.Hour), now)
			_ = old.Close()

			s := d.open(t)
			if v, _ := s.CurrentSchemaVersion(ctx); v != SchemaVersion() {
				t.Fatalf("at version %d", v)
			}
			for secret, want := range map[string]time.Duration{"gvs_api": 12 * time.Hour, "gvs_sess": 5 * time.Hour, "gvs_none": 12 * time.Hour} {
				got, u, err := s.GetSession(ctx, SessionCookie, secret)
				if err != nil || u.Name != "ann" {
					t.Errorf("migrated cookie session %s: %v", secret, err)
					continue
				}
				if got.ExpiresAt.Sub(now.Add(want)).Abs() > time.Second {
					t.Errorf("%s expires %s, want %s", secret, got.ExpiresAt, now.Add(want))
				}
			}
			if _, _, err := s.GetSession(ctx, SessionCookie, "gvs_revoked"); !errors.Is(err, ErrNoSession) {
				t.Errorf("the session of a revoked token came back: %v", err)
			}
			if got, u, err := s.GetSession(ctx, SessionBearer, sessPlain); err != nil || u.Name != "ann" || got.ExpiresAt.Sub(now.Add(5*time.Hour)).Abs() > time.Second {
				t.Errorf("migrated session token: %+v %v", got, err)
			}
			if _, _, err := s.GetSession(ctx, SessionBearer, revokedPlain); !errors.Is(err, ErrNoSession) {
				t.Errorf("a revoked session token came back: %v", err)
			}
			if _, _, err := s.AuthenticateToken(ctx, apiPlain); err != nil {
				t.Errorf("the API token: %v", err)
			}
			if toks, err := s.ListTokens(ctx, "ann"); err != nil || len(toks) != 1 || toks[0].Name != "ci" {
				t.Errorf("tokens after the migration: %+v %v", toks, err)
			}
			// Revoking the API token still ends the session opened with it.
			if err := s.RevokeToken(ctx, "ann", 1); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.GetSession(ctx, SessionCookie, "gvs_api"); !errors.Is(err, ErrNoSession) {
				t.Errorf("after revoking its token: %v", err)
			}
		})
	}
}
