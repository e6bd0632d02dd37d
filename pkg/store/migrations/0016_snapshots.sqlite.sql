-- gpuvm schema, version 16 (sqlite): disk snapshots of VMs' system disks.
-- Keep in step with the other driver's file and with models.go
-- (TestModelsMatchSchema).

-- One row per snapshot, written before the disk is touched (intent first):
-- state says how far its operation got (creating, ready, restoring,
-- deleting, failed). The snapshot itself is an internal qcow2 snapshot of the
-- VM's disk overlay whose tag is "gpuvm-<installation id>-<snapshot id>"
-- (docs/snapshots.md): installation carries the database's installation id,
-- so nothing removes a snapshot another installation made.
CREATE TABLE vm_snapshots (
	id           TEXT PRIMARY KEY,
	vm_id        TEXT NOT NULL REFERENCES vms (id) ON DELETE CASCADE,
	owner        TEXT NOT NULL,
	label        TEXT NOT NULL DEFAULT '',
	tag          TEXT NOT NULL,
	installation TEXT NOT NULL,
	state        TEXT NOT NULL,
	consistency  TEXT NOT NULL DEFAULT '',
	operation_id TEXT NOT NULL DEFAULT '',
	error        TEXT NOT NULL DEFAULT '',
	created_by   TEXT NOT NULL DEFAULT '',
	created_at   TIMESTAMP NOT NULL,
	updated_at   TIMESTAMP NOT NULL,
	restored_at  TIMESTAMP
);
CREATE INDEX vm_snapshots_vm ON vm_snapshots (vm_id, created_at);
CREATE INDEX vm_snapshots_owner ON vm_snapshots (owner, created_at);
CREATE INDEX vm_snapshots_operation ON vm_snapshots (operation_id);
