-- Scheduling controls: rate limits per key (durable token buckets) and paused queues.
--
-- An instance with a `rate_limit_key` takes `rate_limit_units` tokens of its key's bucket at
-- each claim. The bucket is one row: `tokens` as of `refilled_at` (the database's clock),
-- refilled lazily by the claim that locks it, at `capacity` tokens per `per_micros`. A key
-- without a row is not limited. A paused queue is a row of `durable_fsm_paused_queues`: the
-- pick does not claim from it.

ALTER TABLE {prefix}durable_fsm
    ADD COLUMN rate_limit_key TEXT,
    ADD COLUMN rate_limit_units INT NOT NULL DEFAULT 1
        CONSTRAINT {index_prefix}durable_fsm_rate_limit_units CHECK (rate_limit_units >= 1);

CREATE TABLE {prefix}durable_fsm_rate_limits (
    key TEXT PRIMARY KEY,
    capacity INT NOT NULL CHECK (capacity >= 1),
    per_micros BIGINT NOT NULL CHECK (per_micros >= 1),
    tokens DOUBLE PRECISION NOT NULL,
    refilled_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE {prefix}durable_fsm_paused_queues (
    queue TEXT PRIMARY KEY,
    paused_at TIMESTAMPTZ NOT NULL
);
