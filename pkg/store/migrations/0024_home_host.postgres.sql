-- gpuvm schema, version 24 (postgres): the host a person's home lives on
-- (issue #27). In a fleet a home is a directory on one node, the one where
-- it was first made; the leader places the person's VMs that mount it
-- there when it can. NULL until their home is first made (or, for a home
-- made before this version, first used again). Additive: an older gpuvmd
-- ignores the column. Keep in step with the other driver's file and with
-- models.go (TestModelsMatchSchema).

ALTER TABLE users ADD COLUMN home_host TEXT;
