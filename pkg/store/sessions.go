package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SessionPrefix starts the secret of every portal session (the value of its
// cookie), so that people and secret scanners can tell one from a token.
const SessionPrefix = "gvs_"

// ErrNoSession: the session is unknown, expired, signed out, or its token
// was revoked. The text is meant for the person signing in.
var ErrNoSession = errors.New("no such session: sign in again")

// sessionTouchEvery is how often a session's last_seen_at is written.
const sessionTouchEvery = time.Minute

// CreateSession opens a portal session for user, signed in with the API
// token tokenID (0: none), valid for ttl but never past notAfter when that
// is set (the token's own expiry). It returns the session's secret (for the
// cookie; only its SHA-256 is kept) and the session, whose CSRF is the
// synchronizer token of its state-changing requests.
func (s *Store) CreateSession(ctx context.Context, user string, tokenID int64, ttl time.Duration, notAfter *time.Time) (string, *PortalSession, error) {
	if ttl <= 0 {
		return "", nil, fmt.Errorf("create session: %w: the validity must be positive, not %v", ErrInvalid, ttl)
	}
	secret, err := randomText(SessionPrefix)
	if err != nil {
		return "", nil, fmt.Errorf("create session: %w", err)
	}
	csrf, err := randomText("")
	if err != nil {
		return "", nil, fmt.Errorf("create session: %w", err)
	}
	u, err := s.GetUser(ctx, user)
	if err != nil {
		return "", nil, fmt.Errorf("create session: %w", err)
	}
	now := s.clock()
	ps := &PortalSession{ID: TicketID(secret), UserID: u.ID, CSRF: csrf, CreatedAt: now, ExpiresAt: now.Add(ttl).Truncate(time.Microsecond), LastSeenAt: now}
	if tokenID != 0 {
		ps.TokenID = &tokenID
	}
	if notAfter != nil && notAfter.Before(ps.ExpiresAt) {
		ps.ExpiresAt = notAfter.UTC().Truncate(time.Microsecond)
	}
	if err := s.db.WithContext(ctx).Create(ps).Error; err != nil {
		return "", nil, wrap(err, nil, "create session for user %q", user)
	}
	return secret, ps, nil
}

// GetSession finds the live session of a secret and its user. A session
// past its expiry, signed out, or whose API token was revoked or has
// expired is ErrNoSession. last_seen_at is updated at most once a minute.
func (s *Store) GetSession(ctx context.Context, secret string) (*PortalSession, *User, error) {
	if !strings.HasPrefix(secret, SessionPrefix) {
		return nil, nil, fmt.Errorf("get session: %w", ErrNoSession)
	}
	now := s.clock()
	var ps PortalSession
	err := s.db.WithContext(ctx).
		Where("id = ? AND expires_at > ?", TicketID(secret), now).
		Where("token_id IS NULL OR token_id IN (SELECT id FROM api_tokens WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?))", now).
		Take(&ps).Error
	switch err = wrap(err, nil, "get session"); {
	case errors.Is(err, ErrNotFound):
		return nil, nil, fmt.Errorf("get session: %w", ErrNoSession)
	case err != nil:
		return nil, nil, err
	}
	u, err := s.getUser(ctx, "id = ?", ps.UserID)
	if err != nil {
		return nil, nil, wrap(err, nil, "get session: its user")
	}
	if now.Sub(ps.LastSeenAt) >= sessionTouchEvery {
		if err := s.db.WithContext(ctx).Model(&PortalSession{}).Where("id = ?", ps.ID).Update("last_seen_at", now).Error; err != nil {
			return nil, nil, wrap(err, nil, "get session: touch")
		}
		ps.LastSeenAt = now
	}
	return &ps, u, nil
}

// DeleteSession ends the session of a secret (signing out); ending one that
// is gone already is no error.
func (s *Store) DeleteSession(ctx context.Context, secret string) error {
	err := s.db.WithContext(ctx).Where("id = ?", TicketID(secret)).Delete(&PortalSession{}).Error
	return wrap(err, nil, "delete session")
}

// DeleteExpiredSessions removes the sessions that expired before t, and
// says how many.
func (s *Store) DeleteExpiredSessions(ctx context.Context, t time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("expires_at < ?", t.UTC()).Delete(&PortalSession{})
	if res.Error != nil {
		return 0, wrap(res.Error, nil, "delete expired sessions")
	}
	return res.RowsAffected, nil
}

// randomText is prefix and 32 random bytes in base64url.
func randomText(prefix string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}
