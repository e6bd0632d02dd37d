-- gpuvm schema, version 19 (sqlite): tasks, commands run in a VM of their own.
-- Keep in step with the other driver's file and with models.go
-- (TestModelsMatchSchema).

-- One row per task (docs/tasks.md). A task owns a VM (vm_id), made with it
-- in one transaction and deleted when the command ends; the row outlives it.
-- command is the JSON argv, or script the script, one of them; env a JSON
-- object. exit_code and signal are set when the command ended (Slurm's
-- "exit:signal"); log_bytes is how much of its output gpuvmd keeps.
CREATE TABLE tasks (
	id           TEXT PRIMARY KEY,
	owner        TEXT NOT NULL,
	profile      TEXT NOT NULL,
	command      TEXT NOT NULL DEFAULT '',
	script       TEXT NOT NULL DEFAULT '',
	env          TEXT NOT NULL DEFAULT '',
	time_limit_s INTEGER NOT NULL,
	kill_wait_s  INTEGER NOT NULL DEFAULT 30,
	state        TEXT NOT NULL,
	reason       TEXT NOT NULL DEFAULT '',
	exit_code    INTEGER,
	signal       INTEGER,
	vm_id        TEXT NOT NULL DEFAULT '',
	log_bytes    INTEGER NOT NULL DEFAULT 0,
	created_at   TIMESTAMP NOT NULL,
	updated_at   TIMESTAMP NOT NULL,
	started_at   TIMESTAMP,
	ended_at     TIMESTAMP,
	term_at      TIMESTAMP,
	cancel_at    TIMESTAMP
);
CREATE INDEX tasks_owner ON tasks (owner, created_at);
CREATE INDEX tasks_vm ON tasks (vm_id);
CREATE INDEX tasks_live ON tasks (state) WHERE ended_at IS NULL;
