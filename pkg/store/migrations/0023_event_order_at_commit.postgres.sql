-- gpuvm schema, version 23 (postgres): an event's ID is given when its
-- transaction commits, not when it is inserted. Keep in step with the
-- other driver's file.
--
-- Watchers read events "after the last ID I saw", so IDs must become
-- visible in order. PostgreSQL hands out identity values at INSERT: until
-- now every transaction that appended an event took the advisory lock
-- 0x67706576 ("gpev") there and held it to its commit, so a create's
-- commit, and every client round trip between its event and its commit,
-- was made one at a time across the whole fleet; the other creates queued
-- for the lock holding their pool connections (issue 26: PostgreSQL's
-- creates waited there for most of their time).
--
-- Now an event is inserted with a provisional ID, and a deferred
-- constraint trigger, which PostgreSQL runs inside COMMIT, takes the same
-- lock and gives each of the transaction's events its final ID, in the
-- order they were appended. The lock is held from then until the commit
-- is visible: no client round trip inside it, and nothing else locked
-- after it (no deadlock). Provisional IDs come from the same sequence and
-- are never seen outside their transaction; the IDs seen skip them.
--
-- A copy that keeps its source's IDs (gpuvm migrate-db) sets
-- gpuvm.event_ids to 'kept' in its transaction.
CREATE FUNCTION events_order_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF current_setting('gpuvm.event_ids', true) = 'kept' THEN
		RETURN NULL;
	END IF;
	PERFORM pg_advisory_xact_lock(1735419254);
	UPDATE events SET id = nextval(pg_get_serial_sequence('events', 'id')) WHERE id = NEW.id;
	RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER events_order_at_commit AFTER INSERT ON events
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION events_order_at_commit();
