-- The durable FSM engine's tables: instances (one row each) and their inboxes.
--
-- The FSM engine's migrations are numbered from 100, apart from the object store's.
-- `{prefix}` is the table prefix, `{index_prefix}` the same for indexes.
--
-- The layout is the Postgres one, in SQLite's types:
-- - `status` is text, checked against the six statuses;
-- - JSON (state, result, payloads, awaited names) is text;
-- - times are INTEGER microseconds since the Unix epoch, as in the object store's tables;
-- - the correlation scope is a bit mask of statuses (runnable 1, executing 2,
--   awaiting_signal 4, awaiting_children 8, done 16, failed 32), so that the generated guard
--   is a deterministic expression of the row: SQLite has no arrays, and a generated column
--   must not call non-deterministic functions.
-- `AUTOINCREMENT` keeps ids from being reused after garbage collection: an id is the address
-- of an instance's signals, as on Postgres.

CREATE TABLE {prefix}durable_fsm (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fsm TEXT NOT NULL,
    fsm_version INTEGER NOT NULL DEFAULT 1,
    step TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'runnable' CHECK (status IN
        ('runnable', 'executing', 'awaiting_signal', 'awaiting_children', 'done', 'failed')),
    state TEXT NOT NULL DEFAULT '{}',
    result TEXT,
    -- The awaited names while awaiting a signal, as a JSON array (kept by a retry of the
    -- woken step).
    awaits TEXT,

    queue TEXT NOT NULL DEFAULT 'default',
    -- Lower runs first.
    priority INTEGER NOT NULL DEFAULT 0,
    eligible_at INTEGER NOT NULL,
    -- Attempts of the current step; reset by `next` and `schedule_childs`.
    attempt INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    await_deadline INTEGER,

    locked_by TEXT,
    -- Incremented by every claim: an outcome commits only under the token of its claim.
    lease_token INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER,

    parent_id INTEGER REFERENCES {prefix}durable_fsm (id) ON DELETE SET NULL,
    -- Children not yet ended, while awaiting them.
    children_pending INTEGER NOT NULL DEFAULT 0,

    -- The business key: signal address and uniqueness guard.
    correlation_key TEXT,
    correlation_scope INTEGER NOT NULL DEFAULT 15
        CHECK (correlation_scope BETWEEN 0 AND 63),
    correlation_guard TEXT GENERATED ALWAYS AS (
        CASE WHEN correlation_key IS NOT NULL
                  AND (correlation_scope & CASE status
                           WHEN 'runnable' THEN 1
                           WHEN 'executing' THEN 2
                           WHEN 'awaiting_signal' THEN 4
                           WHEN 'awaiting_children' THEN 8
                           WHEN 'done' THEN 16
                           WHEN 'failed' THEN 32
                           ELSE 0 END) <> 0
             THEN correlation_key END
    ) STORED,

    inserted_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
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
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    target_id INTEGER NOT NULL REFERENCES {prefix}durable_fsm (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}',
    -- NULL: no deduplication.
    dedup_key TEXT,
    inserted_at INTEGER NOT NULL,
    UNIQUE (target_id, dedup_key)
);

CREATE INDEX {index_prefix}durable_fsm_signals_target ON {prefix}durable_fsm_signals (target_id, name);
