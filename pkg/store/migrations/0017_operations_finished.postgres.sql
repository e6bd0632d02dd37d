-- gpuvm schema, version 17 (postgres): the creates finished, by finish time, so
-- that each node's monitor, which every round (10 s) asks for the creates
-- finished on its host since its last round (ListFinishedCreates), reads
-- those only, not every operation ever recorded (issue #26: the scale
-- harness on a fleet showed every node scanning the whole table each
-- round). Additive: an older gpuvmd ignores it. Keep in step with the other
-- driver's file and with models.go (TestModelsMatchSchema).
CREATE INDEX operations_creates_done ON operations (finished_at) WHERE kind = 'create' AND state = 'done';
