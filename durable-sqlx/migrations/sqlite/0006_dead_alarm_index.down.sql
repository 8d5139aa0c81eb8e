-- Reverts 0006: drops the index of dead alarms.
DROP INDEX {prefix}durable_alarms_dead;
