-- Reverts 0004: tombstones are deleted (the schema before it has no room for them: a recreated
-- object then starts again at version 1) and the table is rebuilt with `state` NOT NULL.
CREATE TABLE {prefix}durable_objects_rebuilt (
    object_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version > 0),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (object_type, object_id)
);
INSERT INTO {prefix}durable_objects_rebuilt
    (object_type, object_id, state, version, created_at, updated_at)
    SELECT object_type, object_id, state, version, created_at, updated_at
    FROM {prefix}durable_objects
    WHERE state IS NOT NULL;
DROP TABLE {prefix}durable_objects;
ALTER TABLE {prefix}durable_objects_rebuilt RENAME TO {prefix}durable_objects;
