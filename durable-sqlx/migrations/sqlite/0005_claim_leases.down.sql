-- Reverts 0005: claims keep their `claimed_at` and lapse a minute after it again.
DROP INDEX {prefix}durable_alarms_claimed;
ALTER TABLE {prefix}durable_alarms DROP COLUMN claim_expires_at;
