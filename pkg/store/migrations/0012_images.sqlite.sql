-- gpuvm schema, version 12 (sqlite): imported and published disk images. An image
-- is a name and a version (1, 2, ... per name: an import makes version 1, a
-- publish the next); its bytes live in a volume of a libvirt storage pool,
-- whose format, sizes and SHA-256 were read when it was stored. An image use
-- records which image version a VM's disk overlay was made on, so that a
-- version is not deleted under a VM. Additive: an older gpuvmd ignores both
-- tables. Keep in step with the other driver's file and with models.go
-- (TestModelsMatchSchema).
CREATE TABLE images (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	name         TEXT NOT NULL,
	version      INTEGER NOT NULL CHECK (version >= 1),
	os           TEXT NOT NULL CHECK (os IN ('linux', 'windows')),
	firmware     TEXT NOT NULL CHECK (firmware IN ('bios', 'uefi')),
	format       TEXT NOT NULL CHECK (format IN ('qcow2', 'raw', 'iso')),
	virtual_size INTEGER NOT NULL CHECK (virtual_size >= 0),
	actual_size  INTEGER NOT NULL CHECK (actual_size >= 0),
	sha256       TEXT NOT NULL,
	pool         TEXT NOT NULL,
	volume       TEXT NOT NULL,
	path         TEXT NOT NULL,
	origin       TEXT NOT NULL CHECK (origin IN ('import', 'publish')),
	source_path  TEXT NOT NULL DEFAULT '',
	source_vm    TEXT NOT NULL DEFAULT '',
	created_by   TEXT NOT NULL,
	created_at   TIMESTAMP NOT NULL
);
CREATE UNIQUE INDEX images_name_version ON images (name, version);
CREATE UNIQUE INDEX images_pool_volume ON images (pool, volume);

CREATE TABLE image_uses (
	vm_id      TEXT PRIMARY KEY REFERENCES vms (id) ON DELETE CASCADE,
	image_id   INTEGER NOT NULL REFERENCES images (id),
	created_at TIMESTAMP NOT NULL
);
CREATE INDEX image_uses_image ON image_uses (image_id);
