-- Initial schema: object states and their alarms.
--
-- `{prefix}` is replaced by the store's schema and table prefix (`app1.x_`, empty by default),
-- `{index_prefix}` by the table prefix alone (index names take no schema).
--
-- Text keys use the "C" collation so that ids sort in byte order whatever the database's
-- locale. `state` is the runtime's UTF-8 JSON as TEXT: `jsonb` rejects strings holding U+0000,
-- which serde_json writes as the escape `\u0000`; TEXT keeps them, and `state::jsonb` still
-- works for inspection of every other row.

CREATE TABLE {prefix}durable_objects (
    object_type TEXT COLLATE "C" NOT NULL,
    object_id TEXT COLLATE "C" NOT NULL,
    state TEXT NOT NULL,
    version BIGINT NOT NULL CHECK (version > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (object_type, object_id)
);

CREATE TABLE {prefix}durable_alarms (
    object_type TEXT COLLATE "C" NOT NULL,
    object_id TEXT COLLATE "C" NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    due_at TIMESTAMPTZ NOT NULL,
    claimed_at TIMESTAMPTZ,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (object_type, object_id, name)
);
