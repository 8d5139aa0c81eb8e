-- Reverts 0001: drops the store's tables, and every object state and alarm in them.
DROP TABLE {prefix}durable_alarms;
DROP TABLE {prefix}durable_objects;
