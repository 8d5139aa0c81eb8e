-- Key-value storage per object: one row per key, committed with the object's state. Keys and
-- values are BLOBs, compared byte by byte: any key (empty, with NUL) lists in the order of its
-- bytes. `bytes` is the entry's size as counted against the object's quota (key plus value).
CREATE TABLE {prefix}durable_kv (
    object_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    key BLOB NOT NULL,
    value BLOB NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (object_type, object_id, key)
) WITHOUT ROWID;

-- The object's key count and bytes, kept in the transaction that changes its keys, so that a
-- commit checks its limits without counting rows.
ALTER TABLE {prefix}durable_objects ADD COLUMN kv_keys INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}durable_objects ADD COLUMN kv_bytes INTEGER NOT NULL DEFAULT 0;
