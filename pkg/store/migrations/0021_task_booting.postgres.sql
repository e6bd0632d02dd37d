-- gpuvm schema, version 21 (postgres): when a task's VM was first seen
-- running (docs/tasks.md, the boot timeout), kept so that a restart of
-- gpuvmd does not give a guest whose runner never reports its time again.
-- Additive: an older gpuvmd ignores it. Keep in step with the other
-- driver's file and with models.go (TestModelsMatchSchema).
ALTER TABLE tasks ADD COLUMN booting_at TIMESTAMPTZ;
