//! The FSM store's statements, built once per store with its table names filled in: the
//! specification's SQL (§10), with the engine's clock readings as parameters instead of
//! `now()`, the claim token in every outcome guard, and batched (`unnest`) forms for group
//! commit.

use sqlx::SqlStr;

use crate::schema::{Names, statement};

/// The FSM tables' names.
#[derive(Debug)]
pub(super) struct Tables {
    pub(super) fsm: String,
    pub(super) signals: String,
    pub(super) status: String,
    pub(super) rate_limits: String,
    pub(super) paused: String,
}

impl Tables {
    pub(super) fn new(names: &Names) -> Self {
        Self {
            fsm: format!("{}durable_fsm", names.qualifier),
            signals: format!("{}durable_fsm_signals", names.qualifier),
            status: format!("{}durable_status", names.qualifier),
            rate_limits: format!("{}durable_fsm_rate_limits", names.qualifier),
            paused: format!("{}durable_fsm_paused_queues", names.qualifier),
        }
    }
}

/// The statements.
#[derive(Debug)]
pub(super) struct Sql {
    /// `$1`–`$9`: per row fsm, version, step, state, queue, priority, eligible_at, key, scope
    /// (comma-separated statuses); `$10`: now; `$11`: parent ids (per row, or null); `$12`,
    /// `$13`: per row concurrency key and limit; `$14`, `$15`: per row rate-limit key and
    /// units.
    pub(super) insert: SqlStr,
    /// `$1` queue, `$2` eligible by, `$3` limit, `$4` worker, `$5` lease end, `$6` now. Claims
    /// the rows without a concurrency key or rate-limit key and returns the others as
    /// `deferred` candidates, for the rate-limit gate (`control`), [`Sql::lock_keys`] and
    /// [`Sql::claim_keyed`]. Nothing is picked from a paused queue.
    pub(super) pick: SqlStr,
    /// `$1` concurrency keys: the keys whose claim lock this transaction took.
    pub(super) lock_keys: SqlStr,
    /// `$1` candidate ids, `$2` locked keys, `$3` queue, `$4` eligible by, `$5` worker, `$6`
    /// lease end, `$7` now: claims candidates into free slots of their keys.
    pub(super) claim_keyed: SqlStr,
    /// `$1`: instance ids; their inboxes, oldest first.
    pub(super) inboxes: SqlStr,
    /// `$1`: parent ids; their children.
    pub(super) children: SqlStr,
    /// `$1` ids, `$2` tokens, `$3` lease end.
    pub(super) heartbeat: SqlStr,
    /// `$1` ids, `$2` tokens: locks the rows whose claim holds, in id order.
    pub(super) lock_held: SqlStr,
    /// `$1` target ids, `$2` signal ids: consumes received signals.
    pub(super) consume: SqlStr,
    /// Every `next`, `retry`, `done` and `stop` outcome of a batch in one statement, each
    /// guarded by its claim (see [`simple_outcomes`]); returns the ids that held.
    pub(super) simple: SqlStr,
    /// `$1` ids, `$2` steps, `$3` states, `$4` names (JSON arrays), `$5` received ids (JSON
    /// arrays), `$6` deadlines, `$7` now.
    pub(super) park: SqlStr,
    /// `$1` ids, `$2` steps, `$3` states, `$4` children inserted, `$5` now.
    pub(super) spawned: SqlStr,
    /// `$1` id: resolves and locks a live or ended target.
    pub(super) lock_by_id: SqlStr,
    /// `$1` key: resolves and locks the occupant.
    pub(super) lock_by_key: SqlStr,
    /// `$1` target, `$2` name, `$3` payload, `$4` dedup key, `$5` now: inserts the signal and
    /// wakes the target if it awaits the name.
    pub(super) deliver: SqlStr,
    pub(super) get: SqlStr,
    pub(super) find: SqlStr,
    pub(super) inbox: SqlStr,
    /// `$1` FSM or null, `$2` status or null, `$3` after id (0 for the first page), `$4`
    /// limit: one page of instances in id order. Plain `WHERE`/`ORDER BY`/`LIMIT` on the
    /// primary key, so the page costs the rows it reads.
    pub(super) list: SqlStr,
    /// `$1` now.
    pub(super) reap_leases: SqlStr,
    /// `$1` now.
    pub(super) reap_deadlines: SqlStr,
    /// `$1` ended before, `$2` limit.
    pub(super) gc: SqlStr,
}

/// The columns a claimed row returns.
pub(super) const CLAIMED: &str = "g.id, g.lease_token, g.fsm, g.fsm_version, g.step, g.state::text AS state, \
     g.attempt, g.correlation_key, g.awaits, g.priority, g.eligible_at";

/// Every column of an instance, for reads.
const RECORD: &str = "id, fsm, fsm_version, step, status::text AS status, state::text AS state, \
     result::text AS result, awaits, queue, priority, eligible_at, attempt, last_error, \
     await_deadline, locked_by, lease_expires_at, parent_id, children_pending, correlation_key, \
     correlation_scope::text[] AS correlation_scope, concurrency_key, concurrency_limit, \
     concurrency_slot, rate_limit_key, rate_limit_units, inserted_at, updated_at";

/// The inputs a claimed row's step needs besides its columns: whether it has signals or
/// children to read.
pub(super) const INPUTS: &str = "EXISTS (SELECT 1 FROM {signals} s WHERE s.target_id = g.id) AS has_signals, \
     EXISTS (SELECT 1 FROM {fsm} c WHERE c.parent_id = g.id) AS has_children";

/// Whether the row `f` may hold a slot of its concurrency key: fewer executing rows of the key
/// hold one of the slots below its limit than the limit. A probe of the unique index over
/// executing rows' `(concurrency_key, concurrency_slot)`, reading at most `limit` entries of
/// this one key: never the executing set.
const HAS_FREE_SLOT: &str = "(SELECT count(*) FROM (
         SELECT 1 FROM {fsm} e
         WHERE e.status = 'executing' AND e.concurrency_key = f.concurrency_key
           AND e.concurrency_slot < f.concurrency_limit
         LIMIT f.concurrency_limit) AS held) < f.concurrency_limit";

/// The statement committing a batch's `next`, `retry`, `done` and `stop` outcomes at once:
/// one `UPDATE` per kind, each guarded by the claim (`executing` under the outcome's token),
/// then, for the rows that held, the consumption of received signals (`next`), the deletion of
/// ended instances' inboxes, and their parents' join decrement (the parents locked in id order
/// first, so that concurrent batches cannot deadlock on them). It returns the ids that held.
///
/// Parameters: `$1`–`$4` next (ids, tokens, steps, states); `$5`–`$8` retry (ids, tokens,
/// states, eligible_at); `$9`–`$11` done (ids, tokens, results); `$12`–`$14` stop (ids,
/// tokens, reasons); `$15`, `$16` received signals (target ids, signal ids); `$17` now.
fn simple_outcomes(fsm: &str, signals: &str, status: &str) -> String {
    format!(
        "WITH next_rows AS (
             UPDATE {fsm} f
             SET step = u.step, state = u.state::jsonb, status = 'runnable', eligible_at = $17,
                 attempt = 0, awaits = NULL, {RELEASE}, updated_at = $17
             FROM unnest($1::int8[], $2::int8[], $3::text[], $4::text[]) AS u(id, token, step, state)
             WHERE f.id = u.id AND f.lease_token = u.token AND f.status = 'executing'
             RETURNING f.id
         ), retry_rows AS (
             UPDATE {fsm} f
             SET state = u.state::jsonb, status = 'runnable', eligible_at = u.eligible_at,
                 attempt = f.attempt + 1, {RELEASE}, updated_at = $17
             FROM unnest($5::int8[], $6::int8[], $7::text[], $8::timestamptz[])
                  AS u(id, token, state, eligible_at)
             WHERE f.id = u.id AND f.lease_token = u.token AND f.status = 'executing'
             RETURNING f.id
         ), done_rows AS (
             UPDATE {fsm} f
             SET result = u.result::jsonb, status = 'done', awaits = NULL, {RELEASE},
                 updated_at = $17
             FROM unnest($9::int8[], $10::int8[], $11::text[]) AS u(id, token, result)
             WHERE f.id = u.id AND f.lease_token = u.token AND f.status = 'executing'
             RETURNING f.id, f.parent_id
         ), stop_rows AS (
             UPDATE {fsm} f
             SET status = 'failed', last_error = u.reason, awaits = NULL, {RELEASE},
                 updated_at = $17
             FROM unnest($12::int8[], $13::int8[], $14::text[]) AS u(id, token, reason)
             WHERE f.id = u.id AND f.lease_token = u.token AND f.status = 'executing'
             RETURNING f.id, f.parent_id
         ), consumed AS (
             DELETE FROM {signals} s
             USING unnest($15::int8[], $16::int8[]) AS r(target_id, id)
             WHERE s.target_id = r.target_id AND s.id = r.id
               AND s.target_id IN (SELECT id FROM next_rows)
         ), ended AS (
             SELECT id, parent_id FROM done_rows
             UNION ALL SELECT id, parent_id FROM stop_rows
         ), cleared AS (
             DELETE FROM {signals} WHERE target_id IN (SELECT id FROM ended)
         ), parents AS (
             SELECT p.id FROM {fsm} p
             WHERE p.id IN (SELECT parent_id FROM ended)
             ORDER BY p.id
             FOR NO KEY UPDATE
         ), joined AS (
             UPDATE {fsm} p
             SET children_pending = p.children_pending - d.ended,
                 status = CASE WHEN p.children_pending - d.ended <= 0
                                    AND p.status = 'awaiting_children'
                               THEN 'runnable' ELSE p.status END::{status},
                 eligible_at = CASE WHEN p.children_pending - d.ended <= 0
                                         AND p.status = 'awaiting_children'
                                    THEN $17 ELSE p.eligible_at END,
                 updated_at = $17
             FROM (SELECT parent_id, count(*)::int4 AS ended FROM ended
                   WHERE parent_id IS NOT NULL GROUP BY parent_id) AS d,
                  parents AS l
             WHERE p.id = d.parent_id AND l.id = d.parent_id
         )
         SELECT id FROM next_rows
         UNION ALL SELECT id FROM retry_rows
         UNION ALL SELECT id FROM ended"
    )
}

/// The columns an outcome releases.
const RELEASE: &str =
    "locked_by = NULL, lease_expires_at = NULL, await_deadline = NULL, concurrency_slot = NULL";

impl Sql {
    pub(super) fn new(tables: &Tables) -> Self {
        let Tables {
            fsm,
            signals,
            status,
            paused,
            ..
        } = tables;
        Self {
            insert: statement(format!(
                "INSERT INTO {fsm} (fsm, fsm_version, step, state, queue, priority, eligible_at,
                                    correlation_key, correlation_scope, parent_id, inserted_at,
                                    updated_at, concurrency_key, concurrency_limit,
                                    rate_limit_key, rate_limit_units)
                 SELECT r.fsm, r.fsm_version, r.step, r.state::jsonb, r.queue, r.priority,
                        r.eligible_at, r.correlation_key,
                        string_to_array(r.scope, ',')::{status}[], r.parent_id, $10, $10,
                        r.concurrency_key, r.concurrency_limit, r.rate_limit_key,
                        r.rate_limit_units
                 FROM unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::text[],
                             $6::int2[], $7::timestamptz[], $8::text[], $9::text[], $11::int8[],
                             $12::text[], $13::int4[], $14::text[], $15::int4[]) WITH ORDINALITY
                      AS r(fsm, fsm_version, step, state, queue, priority, eligible_at,
                           correlation_key, scope, parent_id, concurrency_key, concurrency_limit,
                           rate_limit_key, rate_limit_units, ord)
                 ORDER BY r.correlation_key, r.ord
                 ON CONFLICT (correlation_guard) WHERE correlation_guard IS NOT NULL DO NOTHING
                 RETURNING id, parent_id, correlation_key"
            )),
            // Rows of a saturated key are passed over by the filter; rows with a key are
            // only candidates here: their slot is taken by the statements of a transaction
            // opened for them (`lock_keys`, then `claim_keyed`), so that it is chosen from
            // what every claim of the key before it committed. The version filter (`$7`, the
            // registered `name:version` tags, or NULL for all) is an `IS NOT NULL` test, which
            // the planner takes as keeping nearly every row: almost every runnable row is of a
            // registered version, and an `= ANY` guess of 0.5 % would trade the ordered index
            // scan under the LIMIT for a scan and sort of every due row.
            pick: statement(format!(
                "WITH picked AS (
                     SELECT f.id, f.concurrency_key, f.rate_limit_key, f.rate_limit_units,
                            f.priority, f.eligible_at
                     FROM {fsm} f
                     WHERE f.status = 'runnable' AND f.queue = $1 AND f.eligible_at <= $2
                       AND (f.concurrency_key IS NULL OR {has_free_slot})
                       AND NOT EXISTS (SELECT 1 FROM {paused} p WHERE p.queue = $1)
                       AND ($7::text[] IS NULL
                            OR array_position($7, f.fsm || ':' || f.fsm_version) IS NOT NULL)
                     ORDER BY f.priority, f.eligible_at
                     FOR UPDATE OF f SKIP LOCKED
                     LIMIT $3
                 ), claimed AS (
                     UPDATE {fsm} g
                     SET status = 'executing', locked_by = $4, lease_expires_at = $5,
                         lease_token = g.lease_token + 1, updated_at = $6
                     FROM picked WHERE g.id = picked.id AND picked.concurrency_key IS NULL
                       AND picked.rate_limit_key IS NULL
                     RETURNING {CLAIMED}, {inputs}
                 )
                 SELECT picked.id AS candidate, picked.concurrency_key AS candidate_key,
                        picked.rate_limit_key AS candidate_rate_key,
                        picked.rate_limit_units AS candidate_units,
                        picked.priority AS candidate_priority,
                        picked.eligible_at AS candidate_eligible_at,
                        (picked.concurrency_key IS NOT NULL OR picked.rate_limit_key IS NOT NULL)
                            AS deferred,
                        claimed.*
                 FROM picked LEFT JOIN claimed ON claimed.id = picked.id",
                has_free_slot = HAS_FREE_SLOT.replace("{fsm}", fsm),
                inputs = INPUTS.replace("{fsm}", fsm).replace("{signals}", signals),
            )),
            // A transaction-scoped advisory lock per key (of this table: stores in other
            // schemas do not contend), tried, never waited for: a key another picker is
            // claiming is skipped this time, like a row under SKIP LOCKED.
            lock_keys: statement(format!(
                "SELECT k FROM unnest($1::text[]) AS k
                 WHERE pg_try_advisory_xact_lock(hashtextextended('{fsm}:' || k, 0))"
            )),
            // Runs after `lock_keys`, so its snapshot holds every claim of these keys (claims
            // are made only here, under the key's lock). The i-th candidate of a key, in pick
            // order, takes its i-th free slot if that slot is below its limit; the others
            // stay runnable. The unique index stays the arbiter.
            claim_keyed: statement(format!(
                "WITH cand AS (
                     SELECT f.id, f.concurrency_key AS k, f.concurrency_limit AS lim,
                            f.priority, f.eligible_at
                     FROM {fsm} f
                     WHERE f.id = ANY ($1) AND f.concurrency_key = ANY ($2)
                       AND f.status = 'runnable' AND f.queue = $3 AND f.eligible_at <= $4
                     FOR UPDATE SKIP LOCKED
                 ), ranked AS (
                     SELECT id, k, lim,
                            row_number() OVER (PARTITION BY k ORDER BY priority, eligible_at, id) AS n
                     FROM cand
                 ), free AS (
                     SELECT c.k, s.slot, row_number() OVER (PARTITION BY c.k ORDER BY s.slot) AS n
                     FROM (SELECT k, max(lim) AS lim, count(*) AS wanted FROM cand GROUP BY k) AS c
                     CROSS JOIN LATERAL (
                         SELECT slot FROM generate_series(0, c.lim - 1) AS slots(slot)
                         WHERE NOT EXISTS (
                             SELECT 1 FROM {fsm} e
                             WHERE e.status = 'executing' AND e.concurrency_key = c.k
                               AND e.concurrency_slot = slots.slot)
                         ORDER BY slot
                         LIMIT c.wanted
                     ) AS s
                 ), assigned AS (
                     SELECT r.id, f.slot FROM ranked r
                     JOIN free f ON f.k = r.k AND f.n = r.n
                     WHERE f.slot < r.lim
                 )
                 UPDATE {fsm} g
                 SET status = 'executing', concurrency_slot = a.slot, locked_by = $5,
                     lease_expires_at = $6, lease_token = g.lease_token + 1, updated_at = $7
                 FROM assigned a WHERE g.id = a.id
                 RETURNING {CLAIMED}, {inputs}",
                inputs = INPUTS.replace("{fsm}", fsm).replace("{signals}", signals),
            )),
            inboxes: statement(format!(
                "SELECT target_id, id, name, payload::text AS payload, dedup_key, inserted_at
                 FROM {signals} WHERE target_id = ANY($1) ORDER BY id"
            )),
            children: statement(format!(
                "SELECT parent_id, id, fsm, status::text AS status, state::text AS state,
                        result::text AS result, last_error
                 FROM {fsm} WHERE parent_id = ANY($1) ORDER BY id"
            )),
            heartbeat: statement(format!(
                "UPDATE {fsm} f SET lease_expires_at = $3
                 FROM unnest($1::int8[], $2::int8[]) AS l(id, token)
                 WHERE f.id = l.id AND f.lease_token = l.token AND f.status = 'executing'"
            )),
            lock_held: statement(format!(
                "SELECT f.id FROM {fsm} f
                 JOIN unnest($1::int8[], $2::int8[]) AS l(id, token)
                   ON f.id = l.id AND f.lease_token = l.token
                 WHERE f.status = 'executing'
                 ORDER BY f.id
                 FOR NO KEY UPDATE OF f"
            )),
            consume: statement(format!(
                "DELETE FROM {signals} s
                 USING unnest($1::int8[], $2::int8[]) AS r(target_id, id)
                 WHERE s.target_id = r.target_id AND s.id = r.id"
            )),
            simple: statement(simple_outcomes(fsm, signals, status)),
            // A new statement after `lock_held`, so its snapshot holds every signal whose
            // sender held the row's lock before us: with the sender's lock-then-flip, no
            // interleaving parks an instance whose awaited signal is in its inbox.
            park: statement(format!(
                "UPDATE {fsm} f
                 SET step = u.step, state = u.state::jsonb, awaits = u.names, eligible_at = $7,
                     status = CASE WHEN EXISTS (
                                  SELECT 1 FROM {signals} s
                                  WHERE s.target_id = f.id AND s.name = ANY (u.names)
                                    AND s.id <> ALL (u.received))
                              THEN 'runnable' ELSE 'awaiting_signal' END::{status},
                     locked_by = NULL, lease_expires_at = NULL, await_deadline = u.deadline,
                     concurrency_slot = NULL, updated_at = $7
                 FROM (
                     SELECT p.id, p.step, p.state, p.deadline,
                            ARRAY(SELECT jsonb_array_elements_text(p.names::jsonb)) AS names,
                            ARRAY(SELECT jsonb_array_elements_text(p.received::jsonb)::int8) AS received
                     FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[],
                                 $6::timestamptz[]) AS p(id, step, state, names, received, deadline)
                 ) AS u
                 WHERE f.id = u.id"
            )),
            spawned: statement(format!(
                "UPDATE {fsm} f
                 SET step = u.step, state = u.state::jsonb, children_pending = u.inserted,
                     status = CASE WHEN u.inserted = 0 THEN 'runnable' ELSE 'awaiting_children' END::{status},
                     eligible_at = $5, attempt = 0, awaits = NULL, {RELEASE}, updated_at = $5
                 FROM unnest($1::int8[], $2::text[], $3::text[], $4::int4[]) AS u(id, step, state, inserted)
                 WHERE f.id = u.id"
            )),
            lock_by_id: statement(format!(
                "SELECT id, status::text AS status FROM {fsm} WHERE id = $1 FOR NO KEY UPDATE"
            )),
            lock_by_key: statement(format!(
                "SELECT id, status::text AS status FROM {fsm} WHERE correlation_guard = $1
                 FOR NO KEY UPDATE"
            )),
            deliver: statement(format!(
                "WITH inserted AS (
                     INSERT INTO {signals} (target_id, name, payload, dedup_key, inserted_at)
                     VALUES ($1, $2, $3::jsonb, $4, $5)
                     ON CONFLICT (target_id, dedup_key) DO NOTHING
                     RETURNING id
                 ), woken AS (
                     UPDATE {fsm}
                     SET status = 'runnable', eligible_at = $5, await_deadline = NULL,
                         updated_at = $5
                     WHERE id = $1 AND status = 'awaiting_signal' AND $2 = ANY (awaits)
                     RETURNING id
                 )
                 SELECT (SELECT id FROM inserted) AS signal,
                        EXISTS (SELECT 1 FROM woken) AS woke"
            )),
            get: statement(format!("SELECT {RECORD} FROM {fsm} WHERE id = $1")),
            find: statement(format!("SELECT id FROM {fsm} WHERE correlation_guard = $1")),
            inbox: statement(format!(
                "SELECT target_id, id, name, payload::text AS payload, dedup_key, inserted_at
                 FROM {signals} WHERE target_id = $1 ORDER BY id"
            )),
            list: statement(format!(
                "SELECT {RECORD} FROM {fsm}
                 WHERE ($1::text IS NULL OR fsm = $1)
                   AND ($2::text IS NULL OR status::text = $2)
                   AND id > $3
                 ORDER BY id
                 LIMIT $4"
            )),
            // Rows another transaction holds (an outcome being committed) are left for the
            // next sweep rather than waited for.
            reap_leases: statement(format!(
                "WITH expired AS (
                     SELECT id FROM {fsm}
                     WHERE status = 'executing' AND lease_expires_at < $1
                     FOR UPDATE SKIP LOCKED
                 )
                 UPDATE {fsm} f
                 SET status = 'runnable', locked_by = NULL, lease_expires_at = NULL,
                     concurrency_slot = NULL, attempt = f.attempt + 1, updated_at = $1
                 FROM expired WHERE f.id = expired.id"
            )),
            reap_deadlines: statement(format!(
                "WITH due AS (
                     SELECT id FROM {fsm}
                     WHERE status = 'awaiting_signal' AND await_deadline <= $1
                     FOR UPDATE SKIP LOCKED
                 )
                 UPDATE {fsm} f
                 SET status = 'runnable', eligible_at = $1, await_deadline = NULL, updated_at = $1
                 FROM due WHERE f.id = due.id"
            )),
            gc: statement(format!(
                "DELETE FROM {fsm} WHERE id IN (
                     SELECT c.id FROM {fsm} c
                     WHERE c.status IN ('done', 'failed') AND c.updated_at < $1
                       AND NOT EXISTS (
                           SELECT 1 FROM {fsm} p
                           WHERE p.id = c.parent_id AND p.status NOT IN ('done', 'failed'))
                     LIMIT $2
                     FOR UPDATE SKIP LOCKED
                 )"
            )),
        }
    }
}
