-- gpuvm schema, version 2 (sqlite): the hosts of a fleet, drained GPUs, console
-- tickets, and what the scheduler and leases keep on a VM. Keep in step with
-- the other driver's file and with models.go (TestModelsMatchSchema).

-- One row per gpuvmd (node): it registers at start and keeps the heartbeat
-- and its inventory (api.HostInventory as JSON) current.
CREATE TABLE hosts (
	name         TEXT PRIMARY KEY,
	api_url      TEXT NOT NULL DEFAULT '',
	version      TEXT NOT NULL DEFAULT '',
	state        TEXT NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'down', 'draining')),
	inventory    TEXT NOT NULL DEFAULT '',
	started_at   TIMESTAMP NOT NULL,
	heartbeat_at TIMESTAMP NOT NULL,
	updated_at   TIMESTAMP NOT NULL
);

-- A drained GPU takes no new allocations; what it holds keeps running.
CREATE TABLE gpu_drains (
	host        TEXT NOT NULL,
	gpu_address TEXT NOT NULL,
	reason      TEXT NOT NULL DEFAULT '',
	drained_by  TEXT NOT NULL DEFAULT '',
	created_at  TIMESTAMP NOT NULL,
	PRIMARY KEY (host, gpu_address)
);

-- A one-time ticket to a VM's display or to a port of its guest. Only the
-- ticket's SHA-256 is kept; a ticket is spent when used_at is set.
CREATE TABLE console_tickets (
	id         TEXT PRIMARY KEY,
	vm_id      TEXT NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
	user_name  TEXT NOT NULL,
	kind       TEXT NOT NULL CHECK (kind IN ('console', 'tunnel')),
	port       INTEGER NOT NULL DEFAULT 0,
	created_at TIMESTAMP NOT NULL,
	expires_at TIMESTAMP NOT NULL,
	used_at    TIMESTAMP
);
CREATE INDEX console_tickets_expires ON console_tickets (expires_at);

ALTER TABLE vms ADD COLUMN display_password TEXT NOT NULL DEFAULT '';
ALTER TABLE vms ADD COLUMN queue_position INTEGER NOT NULL DEFAULT 0;
ALTER TABLE vms ADD COLUMN start_at TIMESTAMP;
ALTER TABLE vms ADD COLUMN lease_warned_at TIMESTAMP;
