-- gpuvm schema, version 8 (sqlite): users from a directory (LDAP, OIDC). A user
-- records where it comes from and when the directory's sync disabled it (its
-- tokens are refused; its VMs are kept); a group membership records where it
-- comes from, so that a sign-in refreshes the directory's and keeps an admin's;
-- a token says whether it is a sign-in's session (POST /v1/logout revokes
-- those only). Additive: an older gpuvmd writes the defaults (local users,
-- local memberships, API tokens), which is all it makes. Keep in step with the
-- other driver's file and with models.go (TestModelsMatchSchema).
ALTER TABLE users ADD COLUMN source TEXT NOT NULL DEFAULT 'local' CHECK (source IN ('local', 'ldap', 'oidc'));
ALTER TABLE users ADD COLUMN disabled_at TIMESTAMP;
ALTER TABLE group_members ADD COLUMN source TEXT NOT NULL DEFAULT 'local' CHECK (source IN ('local', 'ldap', 'oidc'));
ALTER TABLE api_tokens ADD COLUMN session BOOLEAN NOT NULL DEFAULT FALSE;
