-- Key-value storage per object: one row per key, committed with the object's state. Keys are
-- BYTEA (TEXT refuses NUL), compared byte by byte; values are BYTEA too. `bytes` is the entry's
-- size as counted against the object's quota (key plus value).
--
-- A B-tree entry holds at most about 2.7 kB, less than a long key: the primary key is the key's
-- first 1024 bytes and its SHA-256, and `ORDER BY key_head, key` lists in the order of the keys'
-- bytes (keys that differ within their first 1024 bytes differ in `key_head` the same way).
CREATE TABLE {prefix}durable_kv (
    object_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    key BYTEA NOT NULL,
    value BYTEA NOT NULL,
    bytes BIGINT NOT NULL,
    key_head BYTEA GENERATED ALWAYS AS (substring(key FROM 1 FOR 1024)) STORED,
    key_hash BYTEA GENERATED ALWAYS AS (sha256(key)) STORED,
    PRIMARY KEY (object_type, object_id, key_head, key_hash)
);

-- The object's key count and bytes, kept in the transaction that changes its keys, so that a
-- commit checks its limits without counting rows.
ALTER TABLE {prefix}durable_objects
    ADD COLUMN kv_keys BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN kv_bytes BIGINT NOT NULL DEFAULT 0;
