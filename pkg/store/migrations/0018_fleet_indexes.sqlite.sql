-- gpuvm schema, version 17 (sqlite): indexes for what a fleet's nodes read
-- every few seconds, so that they read what is new, not the whole history
-- (issue #26: the scale harness on a fleet of three nodes showed these
-- reads scanning the whole table each time). Additive: an older gpuvmd
-- ignores them. Keep in step with the other driver's file and with
-- models.go (TestModelsMatchSchema).

-- The creates finished, by finish time: each node's monitor asks every
-- round (10 s) for the creates finished on its host since its last round
-- (ListFinishedCreates).
CREATE INDEX operations_creates_done ON operations (finished_at) WHERE kind = 'create' AND state = 'done';

-- The events of one type, by ID: the leader's rules pass (every 30 s) and
-- rounds read the vm.warning events of the last day (the preemptions under
-- way), a handful among every VM's events.
CREATE INDEX events_type ON events (type, id);
