-- gpuvm schema, version 9 (sqlite): the licence state of a vGPU as its
-- guest's driver reported it to the host (monitor.LicenseLicensed, grace,
-- unlicensed; '' when not known), with each sample of the device. Additive:
-- an older gpuvmd writes '' (not known). Keep in step with the other driver's
-- file and with models.go (TestModelsMatchSchema).
ALTER TABLE gpu_samples ADD COLUMN license TEXT NOT NULL DEFAULT '';
