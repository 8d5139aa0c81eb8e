-- Tombstones: deleting an object keeps its row with a NULL state and its version advanced by
-- one, so that a recreated object continues above every version the key ever had and a writer
-- still holding a version of the deleted object gets a conflict. Listing skips tombstones.
--
-- SQLite cannot drop a column's NOT NULL in place: the table is rebuilt with the same columns
-- and key, and its rows copied.
CREATE TABLE {prefix}durable_objects_rebuilt (
    object_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    state TEXT,
    version INTEGER NOT NULL CHECK (version > 0),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (object_type, object_id)
);
INSERT INTO {prefix}durable_objects_rebuilt
    (object_type, object_id, state, version, created_at, updated_at)
    SELECT object_type, object_id, state, version, created_at, updated_at
    FROM {prefix}durable_objects;
DROP TABLE {prefix}durable_objects;
ALTER TABLE {prefix}durable_objects_rebuilt RENAME TO {prefix}durable_objects;
