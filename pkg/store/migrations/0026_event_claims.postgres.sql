-- gpuvm schema, version 26 (postgres): an event's ID is its own from its
-- INSERT, and no commit waits for another's. Keep in step with the other
-- driver's file.
--
-- Watchers read events "after the last ID I saw", so no event may become
-- visible below an ID a watcher has already been shown. Schema 23 gave an
-- event its final ID inside COMMIT, under one advisory lock held to the
-- commit's end: every commit that appended an event, on every node of a
-- fleet, waited in that lock's queue while one holder flushed its commit,
-- and a holder that waited for a core stalled them all (issue 26: wait
-- queues of 7 to 20 backends, 0.1 to 0.8 s stalls of every node's
-- creates).
--
-- Now a transaction, before its first event takes an ID, claims the IDs
-- above the sequence's last value: it takes a shared advisory lock whose
-- key is that value (its low 32 bits; shared locks never wait for each
-- other) and holds it until it ends, and the lock is let go only after the
-- commit is visible. A reader asks events_horizon() first: the sequence's
-- last value, read before the claims, lowered to the lowest claim held.
-- Every ID at or below it is final (committed or never will be), and the
-- reader reads up to it only, in a statement after (a snapshot taken
-- later). An event that commits late holds the readers back, not the
-- writers. SQLite keeps its one writer at a time.
--
-- A copy that keeps its source's IDs (gpuvm migrate-db) writes them: the
-- default, and so the claim, is not used.
DROP TRIGGER events_order_at_commit ON events;
DROP FUNCTION events_order_at_commit();

CREATE SEQUENCE events_ids;
-- Go on from the IDs the identity handed out, seen or not, even when every
-- event was deleted (a watcher's last ID stays below every new one).
DO $$
DECLARE
	v bigint;
BEGIN
	EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %s',
		pg_get_serial_sequence('events', 'id')) INTO v;
	v := GREATEST(v, (SELECT COALESCE(MAX(id), 0) FROM events));
	IF v >= 1 THEN
		PERFORM setval('events_ids', v);
	END IF;
END
$$;
ALTER TABLE events ALTER COLUMN id DROP IDENTITY;
ALTER SEQUENCE events_ids OWNED BY events.id;

-- events_claims_class is the first key of the claims' locks: one per
-- schema, so that two gpuvm schemas in one database (tests, a copy) do not
-- hold each other's readers back.
CREATE FUNCTION events_claims_class() RETURNS int LANGUAGE sql STABLE
	AS $$ SELECT hashtext('gpuvm event claims ' || current_schema()) $$;

-- events_last_id is the highest ID the sequence has handed out (every one
-- below it handed out too), read as it is now, not as a snapshot saw it. A
-- sequence moved on by setval(…, false) (gpuvm migrate-db) has handed out
-- the one below its value.
CREATE FUNCTION events_last_id() RETURNS bigint LANGUAGE sql VOLATILE
	AS $$ SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM events_ids $$;

CREATE FUNCTION events_next_id() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	v bigint;
BEGIN
	IF current_setting('gpuvm.event_claim', true) IS DISTINCT FROM 'held' THEN
		v := events_last_id();
		-- the low 32 bits, as the signed int the lock's second key is
		PERFORM pg_advisory_xact_lock_shared(events_claims_class(),
			((v & 4294967295) - CASE WHEN v & 2147483648 <> 0 THEN 4294967296 ELSE 0 END)::int);
		PERFORM set_config('gpuvm.event_claim', 'held', true);
	END IF;
	RETURN nextval('events_ids');
END
$$;
ALTER TABLE events ALTER COLUMN id SET DEFAULT events_next_id();

-- events_horizon is the highest ID at or below which every event is final.
-- A claim's full value is the one nearest the sequence's last value with
-- its low 32 bits (claims are held for a transaction's life, far fewer than
-- 2^31 IDs).
CREATE FUNCTION events_horizon() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	v bigint;
	c bigint;
BEGIN
	v := events_last_id();
	SELECT MIN(v + (((l.objid::bigint - (v & 4294967295)) + 2147483648) & 4294967295) - 2147483648) INTO c
		FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.objsubid = 2
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.classid = events_claims_class()::oid;
	RETURN LEAST(v, c);
END
$$;
