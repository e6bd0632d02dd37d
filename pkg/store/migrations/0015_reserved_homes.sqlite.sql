-- gpuvm schema, version 15 (sqlite): a placeholder. Version 15 is kept for the
-- homes' migration, written on another branch at the same time; when the two
-- are merged this file is replaced by that one (the snapshots' migration
-- stays version 16). It changes nothing.
SELECT 1;
