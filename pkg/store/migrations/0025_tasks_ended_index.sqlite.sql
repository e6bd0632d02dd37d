-- gpuvm schema, version 25 (sqlite): an index on when a task ended. Keep in
-- step with the other driver's file and with models.go
-- (TestModelsMatchSchema).

-- The estimates learn how long tasks run from the tasks ended in the last
-- 30 days (ListEndedTaskRuns, at every replay of the state): without it
-- that read scanned every task ever recorded. Only ended tasks are in it
-- (the live ones are in tasks_live).
CREATE INDEX tasks_ended ON tasks (ended_at) WHERE ended_at IS NOT NULL;
