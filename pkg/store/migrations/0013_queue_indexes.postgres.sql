-- gpuvm schema, version 13 (postgres): indexes for a long queue (issue #26), so
-- that what reads the queue reads only it, not every VM ever made (deleted
-- ones included). Additive: an older gpuvmd ignores them. Keep in step with
-- the other driver's file and with models.go (TestModelsMatchSchema).

-- SetQueue: the VMs that left the queue still holding a position, which it
-- clears (the queued ones come from vms_queued_start). Nearly always empty.
CREATE INDEX vms_queue_left ON vms (id) WHERE queue_position <> 0 AND state <> 'queued';

-- The metrics' queue length and wait (GetQueueStats), covering: the queued
-- VMs by start time, then creation.
CREATE INDEX vms_queued_start ON vms (state, start_at, created_at) WHERE state = 'queued';

-- The metrics' VMs by state (CountVMsByState), covering: the live VMs only.
CREATE INDEX vms_live_state ON vms (state) WHERE state <> 'deleted';
