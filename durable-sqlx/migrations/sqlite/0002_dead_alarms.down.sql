-- Reverts 0002: dead alarms are deleted (the schema before it kept none) and the columns and
-- index go. The index goes first: SQLite refuses to drop a column an index reads.
DELETE FROM {prefix}durable_alarms WHERE dead = 1;
DROP INDEX {prefix}durable_alarms_due;
ALTER TABLE {prefix}durable_alarms DROP COLUMN dead;
ALTER TABLE {prefix}durable_alarms DROP COLUMN last_error;
