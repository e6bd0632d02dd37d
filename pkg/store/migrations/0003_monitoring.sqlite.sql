-- gpuvm schema, version 3 (sqlite): GPU samples and alerts. Keep in step with
-- the other driver's file and with models.go (TestModelsMatchSchema).

-- A sample of one GPU (instance empty) or of one device on it (a vGPU's
-- mdev UUID or VF, a MIG instance's device ID), mapped to the VM and user
-- holding it when it was taken. resolution is 0 for a raw sample and the
-- length in seconds of the period a downsampled row averages (count raw
-- samples went into it). Ratios are 0..1; -1 means "not reported".
CREATE TABLE gpu_samples (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	host         TEXT NOT NULL,
	gpu_address  TEXT NOT NULL,
	instance     TEXT NOT NULL DEFAULT '',
	vm_id        TEXT NOT NULL DEFAULT '',
	user_name    TEXT NOT NULL DEFAULT '',
	taken_at     TIMESTAMP NOT NULL,
	resolution   INTEGER NOT NULL DEFAULT 0,
	sample_count INTEGER NOT NULL DEFAULT 1,
	gpu_util     REAL NOT NULL DEFAULT -1,
	mem_util     REAL NOT NULL DEFAULT -1,
	enc_util     REAL NOT NULL DEFAULT -1,
	dec_util     REAL NOT NULL DEFAULT -1,
	mem_used     BIGINT NOT NULL DEFAULT 0,
	mem_total    BIGINT NOT NULL DEFAULT 0,
	temperature  REAL NOT NULL DEFAULT -1,
	power_watts  REAL NOT NULL DEFAULT -1,
	sm_clock_mhz INTEGER NOT NULL DEFAULT 0,
	xid_errors   INTEGER NOT NULL DEFAULT 0,
	ecc_errors   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX gpu_samples_gpu ON gpu_samples (host, gpu_address, resolution, taken_at);
CREATE INDEX gpu_samples_vm ON gpu_samples (vm_id, resolution, taken_at);
CREATE INDEX gpu_samples_resolution ON gpu_samples (resolution, taken_at);

-- An alert of a rule (policy alert blocks) about a subject (a GPU, a VM, the
-- queue): firing until resolved_at is set. At most one firing per rule and
-- subject.
CREATE TABLE alerts (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	rule        TEXT NOT NULL,
	subject     TEXT NOT NULL,
	host        TEXT NOT NULL DEFAULT '',
	metric      TEXT NOT NULL,
	value       REAL NOT NULL DEFAULT 0,
	summary     TEXT NOT NULL DEFAULT '',
	state       TEXT NOT NULL CHECK (state IN ('firing', 'resolved')),
	started_at  TIMESTAMP NOT NULL,
	resolved_at TIMESTAMP,
	notified_at TIMESTAMP,
	updated_at  TIMESTAMP NOT NULL
);
CREATE UNIQUE INDEX alerts_firing ON alerts (rule, subject) WHERE state = 'firing';
CREATE INDEX alerts_started ON alerts (started_at);
