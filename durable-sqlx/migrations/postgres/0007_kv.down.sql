-- Reverses 0007_kv.sql: drops the key-value table and the object's counters.
ALTER TABLE {prefix}durable_objects DROP COLUMN kv_bytes, DROP COLUMN kv_keys;
DROP TABLE {prefix}durable_kv;
