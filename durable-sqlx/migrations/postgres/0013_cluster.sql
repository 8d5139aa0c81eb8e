-- Cluster mode: many runtimes (nodes) on this database, each object live on one of them.
--
-- `durable_cluster` holds the shard count, fixed when the first node creates the cluster.
-- `durable_nodes` is the membership: one row per node id, its heartbeat on the database's clock.
-- `durable_shards` holds one row per shard: the node holding its lease, the lease's end (the
-- database's clock) and its epoch, which every acquisition bumps.
--
-- Each object row gets the fence of the node that last activated it (its shard's epoch then)
-- and its shard (`hash(type, id) % shards`, computed by the runtime): a commit is applied only
-- with the object's current fence, so a node that lost the shard cannot write. A node that
-- must answer for an object never stored writes a placeholder row (no state, version 0) to put
-- its fence on it; listings skip it like a tombstone.
CREATE TABLE {prefix}durable_cluster (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    shards INTEGER NOT NULL CHECK (shards > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE {prefix}durable_nodes (
    node_id TEXT COLLATE "C" PRIMARY KEY,
    address TEXT NOT NULL,
    generation BIGINT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL,
    status TEXT NOT NULL
);

CREATE TABLE {prefix}durable_shards (
    shard INTEGER PRIMARY KEY,
    owner TEXT COLLATE "C",
    epoch BIGINT NOT NULL DEFAULT 0,
    lease_expires_at TIMESTAMPTZ
);

ALTER TABLE {prefix}durable_objects
    ADD COLUMN fence BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN shard INTEGER;

ALTER TABLE {prefix}durable_objects
    DROP CONSTRAINT {index_prefix}durable_objects_version_check,
    ADD CONSTRAINT {index_prefix}durable_objects_version_check CHECK (version >= 0);
