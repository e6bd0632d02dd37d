-- gpuvm schema, version 10 (postgres): the SSH public keys a user keeps for new VMs
-- (PUT /v1/users/{name}/ssh-keys; the portal's ask form is filled with them),
-- one a line. Additive: an older gpuvmd leaves them as they are. Keep in step
-- with the other driver's file and with models.go (TestModelsMatchSchema).
ALTER TABLE users ADD COLUMN ssh_keys TEXT NOT NULL DEFAULT '';
