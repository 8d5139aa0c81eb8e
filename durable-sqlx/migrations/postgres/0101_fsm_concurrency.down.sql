-- Reverses 0101_fsm_concurrency.sql: drops the concurrency keys' index and columns.

DROP INDEX {prefix}durable_fsm_concurrency;

ALTER TABLE {prefix}durable_fsm
    DROP COLUMN concurrency_slot,
    DROP COLUMN concurrency_limit,
    DROP COLUMN concurrency_key;
