-- Initial schema: object states and their alarms.
--
-- `{prefix}` is replaced by the store's table prefix (empty by default), `{index_prefix}` by the
-- prefix of index names. Times are integer microseconds since the Unix epoch (UTC).

-- One row per stored object. `state` is the runtime's UTF-8 JSON, kept as TEXT so that it can
-- be read with `json_extract(state, '$.field')`; `version` starts at 1 and grows by one per write.
CREATE TABLE {prefix}durable_objects (
    object_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version > 0),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (object_type, object_id)
);

-- One row per scheduled alarm, unique per object and name.
CREATE TABLE {prefix}durable_alarms (
    object_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    name TEXT NOT NULL,
    due_at INTEGER NOT NULL,
    claimed_at INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (object_type, object_id, name)
);
