-- gpuvm schema, version 5 (postgres): the one-time desktop password of a VM.
-- Keep in step with the other driver's file and with models.go
-- (TestModelsMatchSchema).

-- One row per VM that has a desktop password, written with the VM. The
-- password itself is kept only until its owner reads it once (then it is
-- emptied and read_at set); the SHA-512 crypt hash stays, for the cloud-init
-- seed of a VM that is created again (a requeue, a retry after a crash).
CREATE TABLE vm_credentials (
	vm_id         TEXT PRIMARY KEY REFERENCES vms (id) ON DELETE CASCADE,
	login         TEXT NOT NULL,
	password      TEXT NOT NULL DEFAULT '',
	password_hash TEXT NOT NULL,
	created_at    TIMESTAMPTZ NOT NULL,
	read_at       TIMESTAMPTZ,
	read_by       TEXT NOT NULL DEFAULT ''
);
