-- gpuvm schema, version 17 (postgres): data disks (block volumes a person
-- creates, attaches to one VM at a time, detaches). Keep in step with the
-- other driver's file and with models.go (TestModelsMatchSchema).

-- One row per volume, written before the volume is made on the host
-- (intent first): state says how far it got (creating, ready, deleting,
-- error). The host's volume is "gpuvm-disk-<installation>-<id>.qcow2" in
-- the libvirt pool named here (docs/volumes.md): installation carries the
-- database's installation id, so nothing removes a volume another
-- installation made. kind is "disk" now; homes and shares may get rows later.
-- attached_vm is the VM it is attached to (NULL: detached); attached_at
-- orders a VM's disks (their target devices vdb, vdc, ...).
CREATE TABLE volumes (
	id           TEXT PRIMARY KEY,
	owner        TEXT NOT NULL,
	name         TEXT NOT NULL,
	kind         TEXT NOT NULL DEFAULT 'disk',
	size_bytes   BIGINT NOT NULL,
	host         TEXT NOT NULL DEFAULT '',
	pool         TEXT NOT NULL DEFAULT '',
	volume       TEXT NOT NULL DEFAULT '',
	attached_vm  TEXT,
	attached_at  TIMESTAMPTZ,
	state        TEXT NOT NULL,
	error        TEXT NOT NULL DEFAULT '',
	installation TEXT NOT NULL,
	created_by   TEXT NOT NULL DEFAULT '',
	created_at   TIMESTAMPTZ NOT NULL,
	updated_at   TIMESTAMPTZ NOT NULL
);
CREATE UNIQUE INDEX volumes_owner_name ON volumes (owner, name);
CREATE INDEX volumes_attached_vm ON volumes (attached_vm);
