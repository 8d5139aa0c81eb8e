//! The FSM store's statements on SQLite, built once per store with its table names filled in:
//! the Postgres store's SQL in SQLite's dialect. Batches travel as one JSON array parameter,
//! read with `json_each` (SQLite has no array parameters), and times are integer microseconds.

use sqlx::SqlStr;

use crate::schema::{Names, statement};

/// The statements.
#[derive(Debug)]
pub(super) struct Sql {
    /// `?1` rows (JSON array of objects: fsm, version, step, state, queue, priority,
    /// eligible_at, key, scope, parent, concurrency_key, concurrency_limit, rate_limit_key,
    /// rate_limit_units), `?2` now.
    pub(super) insert: SqlStr,
    /// `?1` queue, `?2` eligible by, `?3` limit: the runnable rows to claim, in pick order,
    /// passing over rows whose concurrency key has no free slot below their limit; none from
    /// a paused queue.
    pub(super) candidates: SqlStr,
    /// `?1` concurrency key, `?2` limit: the slots below the limit that executing rows of the
    /// key hold (a probe of the unique index, at most `limit` entries).
    pub(super) taken_slots: SqlStr,
    /// `?1` claims (JSON array of `[id, slot or null]`), `?2` worker, `?3` lease end, `?4` now.
    pub(super) claim: SqlStr,
    /// `?1` ids (JSON array): their inboxes, oldest first.
    pub(super) inboxes: SqlStr,
    /// `?1` parent ids (JSON array): their children.
    pub(super) children: SqlStr,
    /// `?1` leases (JSON array of `[id, token]`), `?2` lease end.
    pub(super) heartbeat: SqlStr,
    /// `?1` leases (JSON array of `[id, token]`): the rows whose claim holds, with their
    /// parents.
    pub(super) held: SqlStr,
    /// `?1` JSON array of `[id, step, state]`, `?2` now.
    pub(super) next: SqlStr,
    /// `?1` JSON array of `[id, state, eligible_at]`, `?2` now.
    pub(super) retry: SqlStr,
    /// `?1` JSON array of `[id, result]`, `?2` now.
    pub(super) done: SqlStr,
    /// `?1` JSON array of `[id, reason]`, `?2` now.
    pub(super) stop: SqlStr,
    /// `?1` JSON array of `[id, step, state, names, received, deadline]` (names and received
    /// as JSON text), `?2` now.
    pub(super) park: SqlStr,
    /// `?1` JSON array of `[id, step, state, children inserted]`, `?2` now.
    pub(super) spawned: SqlStr,
    /// `?1` JSON array of `[target id, signal id]`: consumes received signals.
    pub(super) consume: SqlStr,
    /// `?1` ids (JSON array): deletes their inboxes.
    pub(super) clear_inboxes: SqlStr,
    /// `?1` JSON array of `[parent id, children ended]`, `?2` now: the join decrement.
    pub(super) join: SqlStr,
    /// `?1` id: the target's status.
    pub(super) target_by_id: SqlStr,
    /// `?1` key: the occupant and its status.
    pub(super) target_by_key: SqlStr,
    /// `?1` target, `?2` name, `?3` payload, `?4` dedup key, `?5` now: the new signal's id,
    /// none when the dedup key is already in the inbox.
    pub(super) deliver: SqlStr,
    /// `?1` target, `?2` name, `?3` now: wakes the target if it awaits the name.
    pub(super) wake: SqlStr,
    pub(super) get: SqlStr,
    pub(super) find: SqlStr,
    pub(super) inbox: SqlStr,
    /// `?1` FSM or null, `?2` status or null, `?3` after id (0 for the first page), `?4`
    /// limit: one page of instances in id order, read along the primary key.
    pub(super) list: SqlStr,
    /// `?1` now.
    pub(super) reap_leases: SqlStr,
    /// `?1` now.
    pub(super) reap_deadlines: SqlStr,
    /// `?1` ended before, `?2` limit.
    pub(super) gc: SqlStr,
}

/// The columns a claimed row returns.
const CLAIMED: &str = "id, lease_token, fsm, fsm_version, step, state, attempt, correlation_key, \
     awaits, priority, eligible_at";

/// Every column of an instance, for reads.
const RECORD: &str = "id, fsm, fsm_version, step, status, state, result, awaits, queue, priority, \
     eligible_at, attempt, last_error, await_deadline, locked_by, lease_expires_at, parent_id, \
     children_pending, correlation_key, correlation_scope, concurrency_key, concurrency_limit, \
     concurrency_slot, rate_limit_key, rate_limit_units, inserted_at, updated_at";

/// The columns an outcome releases.
const RELEASE: &str =
    "locked_by = NULL, lease_expires_at = NULL, await_deadline = NULL, concurrency_slot = NULL";

/// A batch parameter `?1` as rows of `columns` (each the array element at its position).
fn rows(columns: &[&str]) -> String {
    let columns: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(at, name)| format!("j.value ->> {at} AS {name}"))
        .collect();
    format!("(SELECT {} FROM json_each(?1) AS j)", columns.join(", "))
}

impl Sql {
    pub(super) fn new(names: &Names) -> Self {
        let fsm = format!("{}durable_fsm", names.qualifier);
        let signals = format!("{}durable_fsm_signals", names.qualifier);
        let paused = format!("{}durable_fsm_paused_queues", names.qualifier);
        let leases = rows(&["lid", "ltoken"]);
        Self {
            // `WHERE true` tells SQLite's parser that `ON CONFLICT` is the upsert clause, not a
            // join constraint. The conflict target is the guard's partial unique index: an
            // occupied key inserts nothing.
            insert: statement(format!(
                "INSERT INTO {fsm} (fsm, fsm_version, step, state, queue, priority, eligible_at,
                                    correlation_key, correlation_scope, parent_id, inserted_at,
                                    updated_at, concurrency_key, concurrency_limit,
                                    rate_limit_key, rate_limit_units)
                 SELECT r.value ->> 'fsm', r.value ->> 'version', r.value ->> 'step',
                        r.value ->> 'state', r.value ->> 'queue', r.value ->> 'priority',
                        r.value ->> 'eligible_at', r.value ->> 'key', r.value ->> 'scope',
                        r.value ->> 'parent', ?2, ?2, r.value ->> 'concurrency_key',
                        r.value ->> 'concurrency_limit', r.value ->> 'rate_limit_key',
                        r.value ->> 'rate_limit_units'
                 FROM json_each(?1) AS r
                 WHERE true
                 ORDER BY r.value ->> 'key', r.key
                 ON CONFLICT (correlation_guard) WHERE correlation_guard IS NOT NULL DO NOTHING
                 RETURNING id, parent_id, correlation_key"
            )),
            // The free-slot filter counts the entries of the unique index of executing rows
            // for this key below the row's limit: at most `limit` of them, whatever the size of
            // the executing set.
            candidates: statement(format!(
                "SELECT f.id, f.concurrency_key, f.concurrency_limit, f.rate_limit_key,
                        f.rate_limit_units
                 FROM {fsm} f
                 WHERE f.status = 'runnable' AND f.queue = ?1 AND f.eligible_at <= ?2
                   AND NOT EXISTS (SELECT 1 FROM {paused} p WHERE p.queue = ?1)
                   AND (f.concurrency_key IS NULL OR (
                        SELECT count(*) FROM {fsm} e
                        WHERE e.status = 'executing' AND e.concurrency_key = f.concurrency_key
                          AND e.concurrency_slot < f.concurrency_limit) < f.concurrency_limit)
                   AND (?4 IS NULL OR (f.fsm || ':' || f.fsm_version) IN (SELECT value FROM json_each(?4)))
                 ORDER BY f.priority, f.eligible_at, f.id
                 LIMIT ?3"
            )),
            taken_slots: statement(format!(
                "SELECT concurrency_slot FROM {fsm}
                 WHERE status = 'executing' AND concurrency_key = ?1 AND concurrency_slot < ?2"
            )),
            claim: statement(format!(
                "UPDATE {fsm} AS f
                 SET status = 'executing', concurrency_slot = c.slot, locked_by = ?2,
                     lease_expires_at = ?3, lease_token = f.lease_token + 1, updated_at = ?4
                 FROM {claims} AS c
                 WHERE f.id = c.cid AND f.status = 'runnable'
                 RETURNING {CLAIMED}",
                claims = rows(&["cid", "slot"]),
            )),
            inboxes: statement(format!(
                "SELECT target_id, id, name, payload, dedup_key, inserted_at FROM {signals}
                 WHERE target_id IN (SELECT value FROM json_each(?1)) ORDER BY id"
            )),
            children: statement(format!(
                "SELECT parent_id, id, fsm, status, state, result, last_error FROM {fsm}
                 WHERE parent_id IN (SELECT value FROM json_each(?1)) ORDER BY id"
            )),
            heartbeat: statement(format!(
                "UPDATE {fsm} AS f SET lease_expires_at = ?2
                 FROM {leases} AS l
                 WHERE f.id = l.lid AND f.lease_token = l.ltoken AND f.status = 'executing'"
            )),
            held: statement(format!(
                "SELECT f.id, f.parent_id FROM {fsm} f
                 JOIN {leases} AS l ON f.id = l.lid AND f.lease_token = l.ltoken
                 WHERE f.status = 'executing'"
            )),
            next: statement(format!(
                "UPDATE {fsm} AS f
                 SET step = u.step, state = u.state, status = 'runnable', eligible_at = ?2,
                     attempt = 0, awaits = NULL, {RELEASE}, updated_at = ?2
                 FROM {u} AS u WHERE f.id = u.uid",
                u = rows(&["uid", "step", "state"]),
            )),
            retry: statement(format!(
                "UPDATE {fsm} AS f
                 SET state = u.state, status = 'runnable', eligible_at = u.eligible_at,
                     attempt = f.attempt + 1, {RELEASE}, updated_at = ?2
                 FROM {u} AS u WHERE f.id = u.uid",
                u = rows(&["uid", "state", "eligible_at"]),
            )),
            done: statement(format!(
                "UPDATE {fsm} AS f
                 SET result = u.result, status = 'done', awaits = NULL, {RELEASE},
                     updated_at = ?2
                 FROM {u} AS u WHERE f.id = u.uid",
                u = rows(&["uid", "result"]),
            )),
            stop: statement(format!(
                "UPDATE {fsm} AS f
                 SET status = 'failed', last_error = u.reason, awaits = NULL, {RELEASE},
                     updated_at = ?2
                 FROM {u} AS u WHERE f.id = u.uid",
                u = rows(&["uid", "reason"]),
            )),
            // Runs under the write lock that every sender takes too: a signal is either in the
            // inbox already (and the park turns runnable) or is delivered after the park and
            // sees the row awaiting.
            park: statement(format!(
                "UPDATE {fsm} AS f
                 SET step = u.step, state = u.state, awaits = u.names, eligible_at = ?2,
                     status = CASE WHEN EXISTS (
                                  SELECT 1 FROM {signals} s
                                  WHERE s.target_id = f.id
                                    AND s.name IN (SELECT value FROM json_each(u.names))
                                    AND s.id NOT IN (SELECT value FROM json_each(u.received)))
                              THEN 'runnable' ELSE 'awaiting_signal' END,
                     locked_by = NULL, lease_expires_at = NULL, await_deadline = u.deadline,
                     concurrency_slot = NULL, updated_at = ?2
                 FROM {u} AS u WHERE f.id = u.uid",
                u = rows(&["uid", "step", "state", "names", "received", "deadline"]),
            )),
            spawned: statement(format!(
                "UPDATE {fsm} AS f
                 SET step = u.step, state = u.state, children_pending = u.inserted,
                     status = CASE WHEN u.inserted = 0 THEN 'runnable'
                                   ELSE 'awaiting_children' END,
                     eligible_at = ?2, attempt = 0, awaits = NULL, {RELEASE}, updated_at = ?2
                 FROM {u} AS u WHERE f.id = u.uid",
                u = rows(&["uid", "step", "state", "inserted"]),
            )),
            consume: statement(format!(
                "DELETE FROM {signals}
                 WHERE (target_id, id) IN (SELECT j.value ->> 0, j.value ->> 1 FROM json_each(?1) AS j)"
            )),
            clear_inboxes: statement(format!(
                "DELETE FROM {signals} WHERE target_id IN (SELECT value FROM json_each(?1))"
            )),
            join: statement(format!(
                "UPDATE {fsm} AS p
                 SET children_pending = p.children_pending - d.ended,
                     status = CASE WHEN p.children_pending - d.ended <= 0
                                        AND p.status = 'awaiting_children'
                                   THEN 'runnable' ELSE p.status END,
                     eligible_at = CASE WHEN p.children_pending - d.ended <= 0
                                             AND p.status = 'awaiting_children'
                                        THEN ?2 ELSE p.eligible_at END,
                     updated_at = ?2
                 FROM {d} AS d WHERE p.id = d.pid",
                d = rows(&["pid", "ended"]),
            )),
            target_by_id: statement(format!("SELECT id, status FROM {fsm} WHERE id = ?1")),
            target_by_key: statement(format!(
                "SELECT id, status FROM {fsm} WHERE correlation_guard = ?1"
            )),
            deliver: statement(format!(
                "INSERT INTO {signals} (target_id, name, payload, dedup_key, inserted_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (target_id, dedup_key) DO NOTHING
                 RETURNING id"
            )),
            wake: statement(format!(
                "UPDATE {fsm}
                 SET status = 'runnable', eligible_at = ?3, await_deadline = NULL, updated_at = ?3
                 WHERE id = ?1 AND status = 'awaiting_signal'
                   AND EXISTS (SELECT 1 FROM json_each(awaits) WHERE value = ?2)"
            )),
            get: statement(format!("SELECT {RECORD} FROM {fsm} WHERE id = ?1")),
            find: statement(format!("SELECT id FROM {fsm} WHERE correlation_guard = ?1")),
            inbox: statement(format!(
                "SELECT target_id, id, name, payload, dedup_key, inserted_at FROM {signals}
                 WHERE target_id = ?1 ORDER BY id"
            )),
            list: statement(format!(
                "SELECT {RECORD} FROM {fsm}
                 WHERE (?1 IS NULL OR fsm = ?1)
                   AND (?2 IS NULL OR status = ?2)
                   AND id > ?3
                 ORDER BY id
                 LIMIT ?4"
            )),
            reap_leases: statement(format!(
                "UPDATE {fsm}
                 SET status = 'runnable', locked_by = NULL, lease_expires_at = NULL,
                     concurrency_slot = NULL, attempt = attempt + 1, updated_at = ?1
                 WHERE status = 'executing' AND lease_expires_at < ?1"
            )),
            reap_deadlines: statement(format!(
                "UPDATE {fsm}
                 SET status = 'runnable', eligible_at = ?1, await_deadline = NULL, updated_at = ?1
                 WHERE status = 'awaiting_signal' AND await_deadline <= ?1"
            )),
            gc: statement(format!(
                "DELETE FROM {fsm} WHERE id IN (
                     SELECT c.id FROM {fsm} c
                     WHERE c.status IN ('done', 'failed') AND c.updated_at < ?1
                       AND NOT EXISTS (
                           SELECT 1 FROM {fsm} p
                           WHERE p.id = c.parent_id AND p.status NOT IN ('done', 'failed'))
                     LIMIT ?2
                 )"
            )),
        }
    }
}
