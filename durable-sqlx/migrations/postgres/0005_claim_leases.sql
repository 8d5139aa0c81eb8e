-- Claim leases: a claim lasts until `claim_expires_at`, which the claiming scheduler extends
-- while it holds or fires the alarm, so that the claim of a process that died lapses within
-- seconds. `claimed_at` is the time of the claim and identifies it. The lease is read only
-- while the alarm is claimed. Claims made before this migration keep the minute they had.
-- The partial index serves the scheduler's "when does a claim lapse" query over the few
-- claimed rows.
ALTER TABLE {prefix}durable_alarms ADD COLUMN claim_expires_at TIMESTAMPTZ;
UPDATE {prefix}durable_alarms SET claim_expires_at = claimed_at + interval '60 seconds'
    WHERE claimed_at IS NOT NULL;
CREATE INDEX {index_prefix}durable_alarms_claimed ON {prefix}durable_alarms (claim_expires_at)
    WHERE claimed_at IS NOT NULL;
