-- gpuvm schema, version 7 (postgres): the web portal's sign-in sessions.
-- Keep in step with the other driver's file and with models.go
-- (TestModelsMatchSchema).

-- One row per signed-in browser. The cookie holds the session's secret;
-- only its SHA-256 is kept (id). A session ends at expires_at, when it is
-- signed out (the row is deleted), when its user is removed, or when the API
-- token it was opened with is revoked or expires (the lookup checks it).
-- csrf is the synchronizer token the portal sends with every state-changing
-- request of the session; it is no credential on its own.
CREATE TABLE portal_sessions (
	id           TEXT PRIMARY KEY,
	user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	token_id     BIGINT REFERENCES api_tokens (id) ON DELETE CASCADE,
	csrf         TEXT NOT NULL,
	created_at   TIMESTAMPTZ NOT NULL,
	expires_at   TIMESTAMPTZ NOT NULL,
	last_seen_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX portal_sessions_expires ON portal_sessions (expires_at);
CREATE INDEX portal_sessions_user ON portal_sessions (user_id);
