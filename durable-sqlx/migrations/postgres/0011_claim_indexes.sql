-- The scheduler's indexes read only the alarms a claim may take, so that its cost does not
-- grow with the alarms claimed ahead of their due time and not yet fired (which the index
-- of live alarms by due time made every later claim and look read again, row by row):
--
-- - unclaimed alarms by due time, in claiming order: the first due ones are claimed;
-- - claimed alarms by the time they become claimable again (due, and their lease ended):
--   while a runtime renews its claims that time is well ahead, so a claim reads only the
--   claims whose process died, and the earliest of them is the first entry.
--
-- Every claim sets its lease (claims made before leases existed got one in migration 5).
UPDATE {prefix}durable_alarms SET claim_expires_at = claimed_at + interval '60 seconds'
    WHERE claimed_at IS NOT NULL AND claim_expires_at IS NULL;
DROP INDEX {prefix}durable_alarms_due;
DROP INDEX {prefix}durable_alarms_claimed;
CREATE INDEX {index_prefix}durable_alarms_unclaimed ON {prefix}durable_alarms
    (due_at, object_type, object_id, name) WHERE NOT dead AND claimed_at IS NULL;
CREATE INDEX {index_prefix}durable_alarms_claimable ON {prefix}durable_alarms
    (greatest(due_at, claim_expires_at)) WHERE claimed_at IS NOT NULL;
