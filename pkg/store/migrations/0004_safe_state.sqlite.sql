-- gpuvm schema, version 4 (sqlite): the installation's identity and the audit
-- log. Keep in step with the other driver's file and with models.go
-- (TestModelsMatchSchema).

-- The one row that says which gpuvm installation this database belongs to.
-- Its id (a random UUID made here, at the first migration, and carried over
-- by migrate-db and restore) is written into every domain, ledger entry and
-- volume gpuvm makes: the reconciler removes only what carries it.
CREATE TABLE installation (
	singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
	id         TEXT NOT NULL,
	created_at TIMESTAMP NOT NULL
);
INSERT INTO installation (singleton, id, created_at) VALUES (1,
	lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || substr(lower(hex(randomblob(2))), 2) || '-' ||
	substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))),
	strftime('%Y-%m-%d %H:%M:%f', 'now'));

-- Every state-changing request and every console or tunnel opened, append
-- only: rows are never updated, and removed only by retention.
CREATE TABLE audit_log (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	created_at TIMESTAMP NOT NULL,
	user_name  TEXT NOT NULL DEFAULT '',
	token_id   BIGINT NOT NULL DEFAULT 0,
	source     TEXT NOT NULL DEFAULT '',
	action     TEXT NOT NULL,
	target     TEXT NOT NULL DEFAULT '',
	vm_id      TEXT NOT NULL DEFAULT '',
	outcome    TEXT NOT NULL,
	status     INTEGER NOT NULL DEFAULT 0,
	detail     TEXT NOT NULL DEFAULT '',
	request_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_created ON audit_log (created_at);
CREATE INDEX audit_log_user ON audit_log (user_name, id);
CREATE INDEX audit_log_vm ON audit_log (vm_id, id);
CREATE INDEX audit_log_action ON audit_log (action, id);
CREATE TRIGGER audit_log_append_only BEFORE UPDATE ON audit_log BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
