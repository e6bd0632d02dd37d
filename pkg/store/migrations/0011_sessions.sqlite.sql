-- gpuvm schema, version 11 (sqlite): one kind of sign-in session. The portal's
-- cookie sessions (portal_sessions, version 7) and the session tokens of a
-- sign-in (api_tokens with session set, version 8) become rows of one table,
-- sessions, told apart by kind: 'cookie' (the web portal's HttpOnly cookie,
-- with its CSRF token) or 'bearer' (sent as Authorization: Bearer by the
-- CLI). One expiry rule for both: a session lives idle_seconds after its
-- last use (sliding), never past not_after; logging out deletes the row;
-- the directory's sync disabling a user deletes theirs. api_tokens keeps the
-- API tokens for scripts only.
--
-- Existing rows stay valid: portal sessions are copied as cookie sessions
-- (one opened with a session token keeps that token's expiry instead of the
-- link to it), live session tokens as bearer sessions under the same hash
-- (the SHA-256 of the secret, as both tables keep), so a saved 'gpuvm login'
-- token goes on working until its expiry, which is not slid past. Keep in
-- step with the other driver's file and with models.go (TestModelsMatchSchema).
CREATE TABLE sessions (
	id           TEXT PRIMARY KEY,
	user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	kind         TEXT NOT NULL CHECK (kind IN ('cookie', 'bearer')),
	method       TEXT NOT NULL,
	token_id     INTEGER REFERENCES api_tokens (id) ON DELETE CASCADE,
	csrf         TEXT NOT NULL,
	created_at   TIMESTAMP NOT NULL,
	expires_at   TIMESTAMP NOT NULL,
	idle_seconds INTEGER NOT NULL CHECK (idle_seconds > 0),
	not_after    TIMESTAMP NOT NULL,
	last_seen_at TIMESTAMP NOT NULL
);
CREATE INDEX sessions_expires ON sessions (expires_at);
CREATE INDEX sessions_user ON sessions (user_id);

INSERT INTO sessions (id, user_id, kind, method, token_id, csrf, created_at, expires_at, idle_seconds, not_after, last_seen_at)
SELECT p.id, p.user_id, 'cookie', 'token',
	CASE WHEN t.session THEN NULL ELSE p.token_id END,
	p.csrf, p.created_at,
	CASE WHEN t.session AND t.expires_at < p.expires_at THEN t.expires_at ELSE p.expires_at END,
	43200,
	CASE WHEN t.session AND t.expires_at < p.expires_at THEN t.expires_at ELSE p.expires_at END,
	p.last_seen_at
FROM portal_sessions AS p LEFT JOIN api_tokens AS t ON t.id = p.token_id
WHERE t.id IS NULL OR NOT t.session OR t.revoked_at IS NULL;

INSERT INTO sessions (id, user_id, kind, method, token_id, csrf, created_at, expires_at, idle_seconds, not_after, last_seen_at)
SELECT t.hash, t.user_id, 'bearer', u.source, NULL, '', t.created_at, t.expires_at, 43200, t.expires_at,
	COALESCE(t.last_used_at, t.created_at)
FROM api_tokens AS t JOIN users AS u ON u.id = t.user_id
WHERE t.session AND t.revoked_at IS NULL AND t.expires_at IS NOT NULL;

DROP TABLE portal_sessions;
DELETE FROM api_tokens WHERE session;
ALTER TABLE api_tokens DROP COLUMN session;
