-- gpuvm schema, version 20 (postgres): task arrays, retries and the warning
-- signal (docs/tasks.md). Additive: an older gpuvmd ignores the new
-- columns (it would not launch an array's elements or a retry). Keep in
-- step with the other driver's file and with models.go
-- (TestModelsMatchSchema).

-- An array is a row of its own (array_spec, array_cap, array_count; no VM)
-- and a row per element (array_id: the array's ID, array_index; ID
-- "ARRAY_INDEX"). A task whose vm_id is '' and that has not ended waits to
-- be launched: its VM is made by the task supervisor, never more than
-- array_cap of an array's elements at once. attempt counts a task's
-- launches; retries and retry_on (a comma-separated list of exit codes
-- and node_fail, boot_fail) say when a failed attempt is launched again.
-- warn_signal is sent warn_lead_s before the time limit (warned_at: when).
-- start_at is the earliest start of VMs made later; vm_group the group
-- they are counted in; log_base the bytes of output kept before this
-- attempt (the runner numbers its output from 0).
ALTER TABLE tasks ADD COLUMN array_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN array_index BIGINT;
ALTER TABLE tasks ADD COLUMN array_spec TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN array_cap BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN array_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN retries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN retry_on TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN attempt BIGINT NOT NULL DEFAULT 1;
ALTER TABLE tasks ADD COLUMN warn_signal TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN warn_lead_s BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN warned_at TIMESTAMPTZ;
ALTER TABLE tasks ADD COLUMN start_at TIMESTAMPTZ;
ALTER TABLE tasks ADD COLUMN vm_group TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN log_base BIGINT NOT NULL DEFAULT 0;
CREATE INDEX tasks_array ON tasks (array_id, array_index);

-- One row per ended attempt of a task that may retry (retries > 0): how
-- it ended, on which VM.
CREATE TABLE task_attempts (
	task_id    TEXT NOT NULL,
	attempt    BIGINT NOT NULL,
	vm_id      TEXT NOT NULL DEFAULT '',
	state      TEXT NOT NULL,
	reason     TEXT NOT NULL DEFAULT '',
	exit_code  BIGINT,
	signal     BIGINT,
	started_at TIMESTAMPTZ,
	ended_at   TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (task_id, attempt)
);
