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

// Sessions: somebody signed in. One concept for the web portal and the CLI:
// a row of sessions, of kind SessionCookie (the portal's HttpOnly cookie,
// with a CSRF token) or SessionBearer (the token of POST /v1/login and of
// the OpenID sign-ins of 'gpuvm login --sso', sent as a bearer token). Both
// follow one expiry rule, checked and slid by GetSession: a session lives
// its idle time (server.auth.session_ttl when it was opened) after its last
// use, never past its NotAfter (a cap from its sign-in, and the expiry of
// the API token a cookie session was opened with). Signing out deletes the
// row; so does disabling its user (SetUserDisabled), and a disabled user's
// sessions are refused even before.

// Kinds of session.
const (
	SessionCookie = "cookie"
	SessionBearer = "bearer"
)

// SignInToken is the Method of a session opened with an API token (the
// portal's token form); the others are a directory's source (SourceLDAP,
// SourceOIDC).
const SignInToken = "token"

// SessionPrefix starts the secret of every session (the cookie's value, the
// bearer token of a sign-in), so that people and secret scanners can tell
// one from an API token.
const SessionPrefix = "gvs_"

// ErrNoSession: the session is unknown, expired, signed out, its user
// disabled, or its token was revoked. The text is meant for the person
// signing in.
var ErrNoSession = errors.New("no such session: sign in again")

// sessionTouchEvery is how often a session in use is written: its
// last_seen_at, and its expiry slid.
const sessionTouchEvery = time.Minute

// NewSession describes a session to open.
type NewSession struct {
	Kind   string // SessionCookie or SessionBearer
	Method string // SignInToken or the directory's source
	// TokenID is the API token a cookie session is opened with (0: none).
	TokenID int64
	// Idle is how long the session lives after its last use.
	Idle time.Duration
	// NotAfter caps the session's life, however much it is used.
	NotAfter time.Time
}

// CreateSession opens a session for user. It returns the session's secret
// (only its SHA-256 is kept) and the session, whose CSRF (cookie sessions)
// is the synchronizer token of its state-changing requests.
func (s *Store) CreateSession(ctx context.Context, user string, o NewSession) (string, *Session, error) {
	switch {
	case o.Kind != SessionCookie && o.Kind != SessionBearer:
		return "", nil, fmt.Errorf("create session: %w: kind %q is neither %q nor %q", ErrInvalid, o.Kind, SessionCookie, SessionBearer)
	case o.Idle < time.Second:
		return "", nil, fmt.Errorf("create session: %w: the idle time must be a second or more, not %v", ErrInvalid, o.Idle)
	case o.Method == "":
		return "", nil, fmt.Errorf("create session: %w: no sign-in method", ErrInvalid)
	}
	now := s.clock()
	if !o.NotAfter.After(now) {
		return "", nil, fmt.Errorf("create session: %w: it would end at once (not after %s)", ErrInvalid, o.NotAfter.UTC().Format(time.RFC3339))
	}
	secret, err := randomText(SessionPrefix)
	if err != nil {
		return "", nil, fmt.Errorf("create session: %w", err)
	}
	var csrf string
	if o.Kind == SessionCookie {
		if csrf, err = randomText(""); err != nil {
			return "", nil, fmt.Errorf("create session: %w", err)
		}
	}
	u, err := s.GetUser(ctx, user)
	if err != nil {
		return "", nil, fmt.Errorf("create session: %w", err)
	}
	if u.DisabledAt != nil {
		return "", nil, fmt.Errorf("create session: %w: user %q is disabled", ErrInvalid, user)
	}
	notAfter := o.NotAfter.UTC().Truncate(time.Microsecond)
	ps := &Session{ID: TicketID(secret), UserID: u.ID, Kind: o.Kind, Method: o.Method, CSRF: csrf, CreatedAt: now,
		ExpiresAt: minTime(now.Add(o.Idle), notAfter).Truncate(time.Microsecond), IdleSeconds: int64(o.Idle / time.Second),
		NotAfter: notAfter, LastSeenAt: now}
	if o.TokenID != 0 {
		ps.TokenID = &o.TokenID
	}
	if err := s.db.WithContext(ctx).Create(ps).Error; err != nil {
		return "", nil, wrap(err, nil, "create session for user %q", user)
	}
	return secret, ps, nil
}

// GetSession finds the live session of kind with a secret, and its user. A
// session past its expiry, signed out, of another kind, of a disabled user,
// or whose API token was revoked or has expired is ErrNoSession. A session
// in use slides: at most once a minute, last_seen_at is written and the
// expiry moved to the idle time from now (never past not_after).
//
// Secrets start with SessionPrefix; a bearer secret may also be a session
// token of a gpuvmd before schema version 9 (TokenPrefix), which the
// migration kept.
func (s *Store) GetSession(ctx context.Context, kind, secret string) (*Session, *User, error) {
	if !strings.HasPrefix(secret, SessionPrefix) && (kind != SessionBearer || !strings.HasPrefix(secret, TokenPrefix)) {
		return nil, nil, fmt.Errorf("get session: %w", ErrNoSession)
	}
	now := s.clock()
	var ps Session
	err := s.db.WithContext(ctx).
		Where("id = ? AND kind = ? AND expires_at > ?", TicketID(secret), kind, now).
		Where("user_id IN (SELECT id FROM users WHERE disabled_at IS NULL)").
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
		until := minTime(now.Add(time.Duration(ps.IdleSeconds)*time.Second), ps.NotAfter).Truncate(time.Microsecond)
		if until.Before(ps.ExpiresAt) {
			until = ps.ExpiresAt // a shorter idle time never cuts a session
		}
		err := s.db.WithContext(ctx).Model(&Session{}).Where("id = ?", ps.ID).
			Updates(map[string]any{"last_seen_at": now, "expires_at": until}).Error
		if err != nil {
			return nil, nil, wrap(err, nil, "get session: touch")
		}
		ps.LastSeenAt, ps.ExpiresAt = now, until
	}
	return &ps, u, nil
}

// DeleteSession ends the session of a secret (signing out); ending one that
// is gone already is no error.
func (s *Store) DeleteSession(ctx context.Context, secret string) error {
	err := s.db.WithContext(ctx).Where("id = ?", TicketID(secret)).Delete(&Session{}).Error
	return wrap(err, nil, "delete session")
}

// DeleteUserSessions ends every session of a user, and says how many.
func (s *Store) DeleteUserSessions(ctx context.Context, user string) (int64, error) {
	res := s.db.WithContext(ctx).Where("user_id IN (SELECT id FROM users WHERE name = ?)", user).Delete(&Session{})
	if res.Error != nil {
		return 0, wrap(res.Error, nil, "delete the sessions of user %q", user)
	}
	return res.RowsAffected, nil
}

// DeleteExpiredSessions removes the sessions that expired before t, and
// says how many.
func (s *Store) DeleteExpiredSessions(ctx context.Context, t time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("expires_at < ?", t.UTC()).Delete(&Session{})
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
