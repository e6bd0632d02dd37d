-- gpuvm schema, version 5 (sqlite): a tunnel ticket records its protocol, so
-- that a TCP ticket opens only a TCP relay and a UDP ticket only a datagram
-- relay. Additive: an older gpuvmd writes no protocol and gets tcp, which is
-- all it can open. Keep in step with the other driver's file and with
-- models.go (TestModelsMatchSchema).
ALTER TABLE console_tickets ADD COLUMN protocol TEXT NOT NULL DEFAULT 'tcp' CHECK (protocol IN ('tcp', 'udp'));
