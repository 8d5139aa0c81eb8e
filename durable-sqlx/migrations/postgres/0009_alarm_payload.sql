-- Alarm payloads: the encoded argument an alarm's handler receives, stored with the alarm and
-- replaced with it when the alarm is set again. NULL for an alarm without an argument.
ALTER TABLE {prefix}durable_alarms ADD COLUMN payload BYTEA;
