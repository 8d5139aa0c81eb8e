-- Reverses 0101_fsm_concurrency.sql: drops the concurrency keys' index and columns.

DROP INDEX {index_prefix}durable_fsm_concurrency;
ALTER TABLE {prefix}durable_fsm DROP COLUMN concurrency_slot;
ALTER TABLE {prefix}durable_fsm DROP COLUMN concurrency_limit;
ALTER TABLE {prefix}durable_fsm DROP COLUMN concurrency_key;
