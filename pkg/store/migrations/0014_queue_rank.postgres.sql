-- gpuvm schema, version 14 (postgres): vms.queue_position becomes a rank (issue
-- #26): a sparse number in the queue's order that a scheduling round changes
-- only for the VMs that move out of order, not for every VM behind one that
-- left. The position people see is counted from it: 1 + the queued VMs of a
-- smaller rank. The dense positions already stored are valid ranks. Additive:
-- an older gpuvmd reads the ranks as positions (large numbers) until its next
-- round. Keep in step with the other driver's file and with models.go
-- (TestModelsMatchSchema).

-- The count of the queued VMs ahead of one (fillQueuePositions), covering.
CREATE INDEX vms_queue_rank ON vms (queue_position) WHERE state = 'queued';
