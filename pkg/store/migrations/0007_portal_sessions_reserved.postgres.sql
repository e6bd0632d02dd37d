-- gpuvm schema, version 7 (postgres): RESERVED, a placeholder on branch sso only. Version
-- 7 is the portal branch's migration, written at the same time; this file keeps
-- the versions without a gap until that branch is merged, and must be deleted then
-- (loadMigrations refuses two names for one version, so the merge cannot miss it).
SELECT 1;
