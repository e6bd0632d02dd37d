-- gpuvm schema, version 14 (postgres): vms.queue_position becomes a rank (issue
-- #26): a sparse number in the queue's order that a scheduling round changes
-- only for the VMs that move out of order, not for every VM behind one that
-- left. The position people see is counted from it: 1 + the queued VMs of a
-- smaller rank. The dense positions already stored are valid ranks. Additive:
-- an older gpuvmd reads the ranks as positions (large numbers) until its next
-- round. Keep in step with the other driver's file and with models.go
-- (TestModelsMatchSchema).

-- The queued VMs ahead of one (fillQueuePositions) and the ranked ones
-- (SetQueue), covering; state first, so that SQLite prefers it to
-- vms_queued_start for these.
CREATE INDEX vms_queue_rank ON vms (state, queue_position) WHERE state = 'queued';
