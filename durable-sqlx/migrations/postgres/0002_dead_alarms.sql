-- Dead alarms: an alarm whose handler failed keeps its last error, and one that exhausted its
-- attempts is kept (marked dead) instead of being deleted. The partial index serves the
-- scheduler's "earliest due alarm" and "claim due alarms" queries, which skip dead alarms.
ALTER TABLE {prefix}durable_alarms
    ADD COLUMN last_error TEXT,
    ADD COLUMN dead BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX {index_prefix}durable_alarms_due ON {prefix}durable_alarms (due_at) WHERE NOT dead;
