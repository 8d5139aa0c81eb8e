-- Scheduling controls: rate limits per key (durable token buckets) and paused queues.
--
-- An instance with a `rate_limit_key` takes `rate_limit_units` tokens of its key's bucket at
-- each claim. The bucket is one row: `tokens` as of `refilled_at` (microseconds of the host's
-- clock, which every process on the file shares), refilled lazily by the pick that claims
-- under the write lock, at `capacity` tokens per `per_micros`. A key without a row is not
-- limited. A paused queue is a row of `durable_fsm_paused_queues`: the pick does not claim
-- from it.

ALTER TABLE {prefix}durable_fsm ADD COLUMN rate_limit_key TEXT;
ALTER TABLE {prefix}durable_fsm ADD COLUMN rate_limit_units INTEGER NOT NULL DEFAULT 1
    CHECK (rate_limit_units >= 1);

CREATE TABLE {prefix}durable_fsm_rate_limits (
    key TEXT PRIMARY KEY,
    capacity INTEGER NOT NULL CHECK (capacity >= 1),
    per_micros INTEGER NOT NULL CHECK (per_micros >= 1),
    tokens REAL NOT NULL,
    refilled_at INTEGER NOT NULL
);

CREATE TABLE {prefix}durable_fsm_paused_queues (
    queue TEXT PRIMARY KEY,
    paused_at INTEGER NOT NULL
);
