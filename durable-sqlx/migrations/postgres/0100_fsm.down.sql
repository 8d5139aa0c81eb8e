-- Reverts 0100: drops the state machines' tables (every instance and signal in them) and their
-- status type.
DROP TABLE {prefix}durable_fsm_signals;
DROP TABLE {prefix}durable_fsm;
DROP TYPE {prefix}durable_status;
