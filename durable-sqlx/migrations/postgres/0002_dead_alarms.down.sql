-- Reverts 0002: dead alarms are deleted (the schema before it kept none); the columns go, and
-- the index on them with them.
DELETE FROM {prefix}durable_alarms WHERE dead;
DROP INDEX {prefix}durable_alarms_due;
ALTER TABLE {prefix}durable_alarms
    DROP COLUMN dead,
    DROP COLUMN last_error;
