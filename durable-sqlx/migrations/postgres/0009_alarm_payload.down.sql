-- Reverses 0009: alarms lose their payloads.
ALTER TABLE {prefix}durable_alarms DROP COLUMN payload;
