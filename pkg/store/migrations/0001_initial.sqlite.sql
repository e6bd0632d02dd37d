-- gpuvm schema, version 1 (SQLite). Keep in step with 0001_initial.postgres.sql
-- and with the gorm structs in models.go (TestModelsMatchSchema checks both).
-- Times are UTC, written by the store as text that sorts in time order.

CREATE TABLE users (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	name       TEXT NOT NULL,
	admin      BOOLEAN NOT NULL DEFAULT FALSE,
	created_at TIMESTAMP NOT NULL,
	updated_at TIMESTAMP NOT NULL
);
CREATE UNIQUE INDEX users_name ON users (name);

CREATE TABLE groups (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	name       TEXT NOT NULL,
	created_at TIMESTAMP NOT NULL
);
CREATE UNIQUE INDEX groups_name ON groups (name);

CREATE TABLE group_members (
	group_id INTEGER NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
	user_id  INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	PRIMARY KEY (group_id, user_id)
);
CREATE INDEX group_members_user ON group_members (user_id);

CREATE TABLE api_tokens (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	user_id      INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	name         TEXT NOT NULL,
	hash         TEXT NOT NULL,
	prefix       TEXT NOT NULL,
	created_at   TIMESTAMP NOT NULL,
	expires_at   TIMESTAMP,
	revoked_at   TIMESTAMP,
	last_used_at TIMESTAMP
);
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (hash);
CREATE INDEX api_tokens_prefix ON api_tokens (prefix);
CREATE UNIQUE INDEX api_tokens_user_name_live ON api_tokens (user_id, name) WHERE revoked_at IS NULL;

CREATE TABLE vms (
	id           TEXT PRIMARY KEY,
	name         TEXT NOT NULL,
	owner        TEXT NOT NULL REFERENCES users (name),
	group_name   TEXT NOT NULL DEFAULT '',
	profile      TEXT NOT NULL,
	spec         TEXT NOT NULL DEFAULT '',
	state        TEXT NOT NULL,
	phase        TEXT NOT NULL DEFAULT '',
	state_reason TEXT NOT NULL DEFAULT '',
	host         TEXT NOT NULL DEFAULT '',
	hours        INTEGER NOT NULL DEFAULT 0,
	lease_end    TIMESTAMP,
	created_at   TIMESTAMP NOT NULL,
	updated_at   TIMESTAMP NOT NULL,
	version      INTEGER NOT NULL DEFAULT 1
);
CREATE UNIQUE INDEX vms_owner_name_live ON vms (owner, name) WHERE state <> 'deleted';
CREATE INDEX vms_created ON vms (created_at, id);
CREATE INDEX vms_owner_created ON vms (owner, created_at, id);
CREATE INDEX vms_state_created ON vms (state, created_at, id);
CREATE INDEX vms_host ON vms (host);

CREATE TABLE operations (
	id           TEXT PRIMARY KEY,
	vm_id        TEXT NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
	kind         TEXT NOT NULL,
	state        TEXT NOT NULL CHECK (state IN ('pending', 'running', 'done', 'failed')),
	step         TEXT NOT NULL DEFAULT '',
	error        TEXT NOT NULL DEFAULT '',
	requested_by TEXT NOT NULL DEFAULT '',
	created_at   TIMESTAMP NOT NULL,
	updated_at   TIMESTAMP NOT NULL,
	started_at   TIMESTAMP,
	finished_at  TIMESTAMP
);
CREATE INDEX operations_vm ON operations (vm_id, created_at);
CREATE INDEX operations_unfinished ON operations (created_at) WHERE state IN ('pending', 'running');

-- One row per device given to a VM: its history stays after release.
CREATE TABLE allocations (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	vm_id           TEXT NOT NULL REFERENCES vms (id),
	host            TEXT NOT NULL,
	gpu_address     TEXT NOT NULL,
	backend         TEXT NOT NULL,
	kind            TEXT NOT NULL CHECK (kind IN ('vgpu', 'mig', 'passthrough')),
	slot            TEXT NOT NULL,
	placement_start INTEGER NOT NULL DEFAULT 0,
	placement_size  INTEGER NOT NULL DEFAULT 0,
	profile         TEXT NOT NULL DEFAULT '',
	device_id       TEXT NOT NULL DEFAULT '',
	hostdev         TEXT NOT NULL DEFAULT '',
	state           TEXT NOT NULL CHECK (state IN ('reserved', 'created', 'released')),
	created_at      TIMESTAMP NOT NULL,
	updated_at      TIMESTAMP NOT NULL,
	released_at     TIMESTAMP
);
CREATE INDEX allocations_vm ON allocations (vm_id);
CREATE INDEX allocations_vm_live ON allocations (vm_id) WHERE state <> 'released';
CREATE INDEX allocations_host_live ON allocations (host, gpu_address) WHERE state <> 'released';

-- THE invariant: one row per occupied unit of a GPU (a MIG memory slice, a
-- vGPU VF or instance index, the whole GPU), held while its allocation is
-- live and deleted when it is released. The primary key makes two live
-- allocations of one unit impossible, whatever the code above does.
CREATE TABLE allocation_slots (
	host          TEXT NOT NULL,
	gpu_address   TEXT NOT NULL,
	slot_key      TEXT NOT NULL,
	allocation_id INTEGER NOT NULL REFERENCES allocations (id) ON DELETE CASCADE,
	PRIMARY KEY (host, gpu_address, slot_key)
);
CREATE INDEX allocation_slots_allocation ON allocation_slots (allocation_id);

-- One mode per GPU at a time: the mode of a GPU's live slots, and how many
-- there are. A claim in another mode succeeds only when the count is 0.
CREATE TABLE gpu_modes (
	host        TEXT NOT NULL,
	gpu_address TEXT NOT NULL,
	mode        TEXT NOT NULL CHECK (mode IN ('vgpu', 'mig', 'passthrough')),
	live_slots  INTEGER NOT NULL CHECK (live_slots >= 0),
	PRIMARY KEY (host, gpu_address)
);

CREATE TABLE reservations (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	owner_kind   TEXT NOT NULL CHECK (owner_kind IN ('user', 'group')),
	owner        TEXT NOT NULL,
	profile      TEXT NOT NULL DEFAULT '',
	gpu_kind     TEXT NOT NULL DEFAULT '',
	gpu_model    TEXT NOT NULL DEFAULT '',
	gpu_type     TEXT NOT NULL DEFAULT '',
	gpu_count    INTEGER NOT NULL CHECK (gpu_count >= 1),
	start_at     TIMESTAMP NOT NULL,
	end_at       TIMESTAMP NOT NULL,
	rrule        TEXT NOT NULL DEFAULT '',
	repeat_until TIMESTAMP,
	note         TEXT NOT NULL DEFAULT '',
	created_by   TEXT NOT NULL DEFAULT '',
	created_at   TIMESTAMP NOT NULL,
	updated_at   TIMESTAMP NOT NULL,
	version      INTEGER NOT NULL DEFAULT 1,
	CHECK (end_at > start_at),
	CHECK (profile <> '' OR gpu_kind <> '')
);
CREATE INDEX reservations_owner ON reservations (owner_kind, owner);
CREATE INDEX reservations_start ON reservations (start_at);

CREATE TABLE usage_records (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	vm_id       TEXT NOT NULL REFERENCES vms (id),
	user_name   TEXT NOT NULL,
	group_name  TEXT NOT NULL DEFAULT '',
	host        TEXT NOT NULL DEFAULT '',
	gpu_address TEXT NOT NULL,
	kind        TEXT NOT NULL,
	profile     TEXT NOT NULL DEFAULT '',
	share       REAL NOT NULL CHECK (share > 0 AND share <= 1),
	started_at  TIMESTAMP NOT NULL,
	ended_at    TIMESTAMP,
	gpu_seconds REAL NOT NULL DEFAULT 0,
	CHECK (ended_at IS NULL OR ended_at >= started_at)
);
CREATE INDEX usage_records_user_started ON usage_records (user_name, started_at);
CREATE INDEX usage_records_started ON usage_records (started_at);
CREATE INDEX usage_records_open ON usage_records (vm_id) WHERE ended_at IS NULL;

CREATE TABLE events (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	created_at TIMESTAMP NOT NULL,
	vm_id      TEXT NOT NULL DEFAULT '',
	owner      TEXT NOT NULL DEFAULT '',
	type       TEXT NOT NULL,
	payload    TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_vm ON events (vm_id, id);
CREATE INDEX events_created ON events (created_at);

CREATE TABLE idempotency_keys (
	user_name       TEXT NOT NULL,
	idempotency_key TEXT NOT NULL,
	request_hash    TEXT NOT NULL,
	vm_id           TEXT NOT NULL DEFAULT '',
	operation_id    TEXT NOT NULL DEFAULT '',
	created_at      TIMESTAMP NOT NULL,
	PRIMARY KEY (user_name, idempotency_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
