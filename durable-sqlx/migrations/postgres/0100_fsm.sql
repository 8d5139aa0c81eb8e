-- The durable FSM engine's tables: instances (one row each) and their inboxes.
--
-- The FSM engine's migrations are numbered from 100, apart from the object store's.
-- `{prefix}` is the store's schema and table prefix, `{index_prefix}` the table prefix alone.
--
-- The layout is the gen_durable specification's, with three additions: `lease_token` (a per-claim
-- token that fences outcome commits), `await_deadline` (await timeouts, swept by the reaper)
-- and two partial indexes serving that sweep and garbage collection.

CREATE TYPE {prefix}durable_status AS ENUM
    ('runnable', 'executing', 'awaiting_signal', 'awaiting_children', 'done', 'failed');

CREATE TABLE {prefix}durable_fsm (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fsm TEXT NOT NULL,
    fsm_version INT NOT NULL DEFAULT 1,
    step TEXT NOT NULL,
    status {prefix}durable_status NOT NULL DEFAULT 'runnable',
    state JSONB NOT NULL DEFAULT '{}',
    result JSONB,
    -- The awaited names while awaiting a signal (kept by a retry of the woken step).
    awaits TEXT[],

    queue TEXT NOT NULL DEFAULT 'default',
    -- Lower runs first.
    priority SMALLINT NOT NULL DEFAULT 0,
    eligible_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Attempts of the current step; reset by `next` and `schedule_childs`.
    attempt INT NOT NULL DEFAULT 0,
    last_error TEXT,
    await_deadline TIMESTAMPTZ,

    locked_by TEXT,
    -- Incremented by every claim: an outcome commits only under the token of its claim.
    lease_token BIGINT NOT NULL DEFAULT 0,
    lease_expires_at TIMESTAMPTZ,

    parent_id BIGINT REFERENCES {prefix}durable_fsm (id) ON DELETE SET NULL,
    -- Children not yet ended, while awaiting them.
    children_pending INT NOT NULL DEFAULT 0,

    -- The business key: signal address and uniqueness guard. The scope is the enum array
    -- (not text[]) so that the generated guard is IMMUTABLE.
    correlation_key TEXT,
    correlation_scope {prefix}durable_status[] NOT NULL
        DEFAULT '{runnable,executing,awaiting_signal,awaiting_children}',
    correlation_guard TEXT GENERATED ALWAYS AS (
        CASE WHEN correlation_key IS NOT NULL AND status = ANY (correlation_scope)
             THEN correlation_key END
    ) STORED,

    inserted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The picker's hot path.
CREATE INDEX {index_prefix}durable_fsm_pick ON {prefix}durable_fsm (queue, priority, eligible_at)
    WHERE status = 'runnable';

-- The reaper, over expired leases.
CREATE INDEX {index_prefix}durable_fsm_lease ON {prefix}durable_fsm (lease_expires_at)
    WHERE status = 'executing';

-- Uniqueness among occupied statuses and the signal address lookup, in one index.
CREATE UNIQUE INDEX {index_prefix}durable_fsm_correlation ON {prefix}durable_fsm (correlation_guard)
    WHERE correlation_guard IS NOT NULL;

-- A parent's children: the join and the children a step reads.
CREATE INDEX {index_prefix}durable_fsm_parent ON {prefix}durable_fsm (parent_id)
    WHERE parent_id IS NOT NULL;

-- The reaper's await-timeout sweep.
CREATE INDEX {index_prefix}durable_fsm_deadline ON {prefix}durable_fsm (await_deadline)
    WHERE status = 'awaiting_signal' AND await_deadline IS NOT NULL;

-- Garbage collection of ended rows.
CREATE INDEX {index_prefix}durable_fsm_ended ON {prefix}durable_fsm (updated_at)
    WHERE status IN ('done', 'failed');

CREATE TABLE {prefix}durable_fsm_signals (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    target_id BIGINT NOT NULL REFERENCES {prefix}durable_fsm (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    payload JSONB NOT NULL DEFAULT '{}',
    -- NULL: no deduplication.
    dedup_key TEXT,
    inserted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT {index_prefix}durable_fsm_signals_dedup UNIQUE (target_id, dedup_key)
);

CREATE INDEX {index_prefix}durable_fsm_signals_target ON {prefix}durable_fsm_signals (target_id, name);
