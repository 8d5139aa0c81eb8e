-- Reverts 0011: the index of live alarms by due time and the index of claims by lease end.
DROP INDEX {prefix}durable_alarms_unclaimed;
DROP INDEX {prefix}durable_alarms_claimable;
CREATE INDEX {index_prefix}durable_alarms_due ON {prefix}durable_alarms (due_at) WHERE dead = 0;
CREATE INDEX {index_prefix}durable_alarms_claimed ON {prefix}durable_alarms (claim_expires_at)
    WHERE claimed_at IS NOT NULL;
