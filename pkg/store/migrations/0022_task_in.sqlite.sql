-- gpuvm schema, version 21 (sqlite): tasks run in a person's own VM (--in,
-- docs/tasks.md). Additive: an older gpuvmd ignores the new columns (it
-- would treat such a task's VM as a task VM of its own). Keep in step with
-- the other driver's file and with models.go (TestModelsMatchSchema).

-- in_vm is the VM (its ID) a task runs in when it is the owner's own, not
-- one made for it; in_profile the profile that VM had before the task (the
-- one it is put back to); in_step how far the task's use of it has come
-- (docs/tasks.md: "" submitted, resize, start, stop, put back, done);
-- in_steps the steps done, one a line, in words; in_end the state the task
-- ends in once its VM is put back ("": from its exit, time limit or cancel).
ALTER TABLE tasks ADD COLUMN in_vm TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN in_profile TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN in_step TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN in_steps TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN in_end TEXT NOT NULL DEFAULT '';
