-- gpuvm schema, version 26 (postgres): a transaction's events are given
-- their final IDs by one UPDATE at its commit, not one UPDATE each. Keep in
-- step with the other driver's file.
--
-- Since version 23 each event's deferred trigger, run inside COMMIT, took
-- the events' ordering lock and updated its own row. A round of the
-- leader that ranks a burst of new VMs commits hundreds of events, and
-- held the lock, which every commit with an event waits for on every node
-- of a fleet, for 17 ms with 200 events and 33 ms with 1,000 on this
-- project's 2-core machine at rest (10 and 15 ms now); under load commits
-- were seen holding it for 150 ms while creates on every node waited
-- (issue 26).
--
-- Now an event is inserted with a provisional ID that is negative (its
-- identity value, negated, by a BEFORE trigger), and the first of its
-- transaction's deferred triggers takes the lock and gives every
-- provisional event of the transaction its final ID in one UPDATE, in the
-- order they were appended (the provisional IDs, descending); the others
-- return at once. Other transactions' provisional rows are invisible to
-- it, and a committed event never has a negative ID. A transaction-local
-- setting says the IDs are given; each insert clears it, so an event
-- appended after the triggers ran early (SET CONSTRAINTS … IMMEDIATE) is
-- given its ID too. A copy that keeps its source's IDs (gpuvm migrate-db)
-- sets gpuvm.event_ids to 'kept' in its transaction, as before.
CREATE FUNCTION events_provisional_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF current_setting('gpuvm.event_ids', true) = 'kept' THEN
		RETURN NEW;
	END IF;
	NEW.id := -NEW.id;
	PERFORM set_config('gpuvm.event_ids_given', '', true);
	RETURN NEW;
END
$$;
CREATE TRIGGER events_provisional_id BEFORE INSERT ON events
	FOR EACH ROW EXECUTE FUNCTION events_provisional_id();

CREATE OR REPLACE FUNCTION events_order_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.id > 0 OR current_setting('gpuvm.event_ids_given', true) = 'yes' THEN
		RETURN NULL;
	END IF;
	PERFORM pg_advisory_xact_lock(1735419254);
	UPDATE events e SET id = f.final
		FROM (SELECT prov, nextval(pg_get_serial_sequence('events', 'id')) AS final
			FROM (SELECT id AS prov FROM events WHERE id < 0 ORDER BY id DESC) s) f
		WHERE e.id = f.prov;
	PERFORM set_config('gpuvm.event_ids_given', 'yes', true);
	RETURN NULL;
END
$$;
