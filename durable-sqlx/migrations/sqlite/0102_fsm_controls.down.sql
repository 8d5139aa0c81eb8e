-- Reverses 0102_fsm_controls.sql: drops the paused queues, the rate limits and their columns.

DROP TABLE {prefix}durable_fsm_paused_queues;
DROP TABLE {prefix}durable_fsm_rate_limits;
ALTER TABLE {prefix}durable_fsm DROP COLUMN rate_limit_units;
ALTER TABLE {prefix}durable_fsm DROP COLUMN rate_limit_key;
