-- Reverts 0100: drops the state machines' tables (every instance and signal in them).
DROP TABLE {prefix}durable_fsm_signals;
DROP TABLE {prefix}durable_fsm;
