-- gpuvm schema, version 15 (postgres): a person's stable uid (issue #27), the owner
-- of their home on the host and of their account in every guest: the
-- directory's uidNumber when LDAP gives one, else one gpuvm assigns once
-- from server.storage.homes' uid range. NULL until first needed. Additive:
-- an older gpuvmd ignores the column. Keep in step with the other driver's
-- file and with models.go (TestModelsMatchSchema).

ALTER TABLE users ADD COLUMN uid BIGINT;
CREATE UNIQUE INDEX users_uid ON users (uid) WHERE uid IS NOT NULL;
