-- Reverts 0004: tombstones are deleted (the schema before it has no room for them: a recreated
-- object then starts again at version 1) and `state` is NOT NULL again.
DELETE FROM {prefix}durable_objects WHERE state IS NULL;
ALTER TABLE {prefix}durable_objects ALTER COLUMN state SET NOT NULL;
