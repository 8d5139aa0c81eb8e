-- Concurrency keys: at most `concurrency_limit` executing instances per `concurrency_key`.
--
-- An executing instance with a key holds one slot of it, `concurrency_slot` in
-- 0..concurrency_limit. The unique partial index below is the arbiter: a second executing row
-- in a taken slot cannot be committed, whatever a picker believed. With a limit of 1 the slot
-- is always 0, so the index is unique over the key of executing rows: strict per-key order.
-- Leaving `executing` (any outcome, or the reaper) drops the row from the index, which frees
-- the slot with no bookkeeping of its own.

ALTER TABLE {prefix}durable_fsm ADD COLUMN concurrency_key TEXT;
ALTER TABLE {prefix}durable_fsm ADD COLUMN concurrency_limit INTEGER NOT NULL DEFAULT 1
    CHECK (concurrency_limit >= 1);
ALTER TABLE {prefix}durable_fsm ADD COLUMN concurrency_slot INTEGER;

CREATE UNIQUE INDEX {index_prefix}durable_fsm_concurrency ON {prefix}durable_fsm
    (concurrency_key, concurrency_slot)
    WHERE status = 'executing' AND concurrency_key IS NOT NULL;
