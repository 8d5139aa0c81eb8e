-- Reverts 0013: placeholder rows go, and with them the cluster's tables and columns.
DELETE FROM {prefix}durable_objects WHERE version = 0;
ALTER TABLE {prefix}durable_objects
    DROP CONSTRAINT {index_prefix}durable_objects_version_check,
    ADD CONSTRAINT {index_prefix}durable_objects_version_check CHECK (version > 0);
ALTER TABLE {prefix}durable_objects DROP COLUMN shard, DROP COLUMN fence;
DROP TABLE {prefix}durable_shards;
DROP TABLE {prefix}durable_nodes;
DROP TABLE {prefix}durable_cluster;
