//! A batch of writes committed in one round trip to SQLite.
//!
//! sqlx runs each SQLite connection on a thread of its own, and every statement sent to it is a
//! hand-off to that thread and back. A batch is therefore sent as one multi-statement query,
//! `BEGIN IMMEDIATE; ..; COMMIT`, whose text is the same for every batch: each kind of change
//! travels as one JSON array parameter, read with `json_each`. The statement is prepared once
//! per connection and the commit costs one hand-off besides its flush.
//!
//! States do not travel inside the JSON: written there they would be escaped, then parsed and
//! unescaped again by SQLite on its single writer, which for states of some kilobytes costs
//! more than the rest of the commit. They are concatenated into one blob parameter instead,
//! and each row names its state by offset and length (`substr` on a blob counts bytes).
//!
//! Version checks run inside the query. After each statement that checks versions, a guard
//! statement inserts into the always-empty `durable_commit_guard` table if fewer rows changed
//! than writes were checked, and that table's CHECK constraint fails the insert. The query stops
//! at the failure, before its `COMMIT`; the batch is rolled back and its stored versions read to
//! name the write that did not match.
//!
//! Key-value changes and limits travel the same way: each object's touched keys are removed
//! (their count and bytes taken off its counters), its new values inserted (and added), and a
//! last guard fails the query if an object with limits ends above one of them: its key-value
//! counters, or the number of its alarms (counted on the primary key's range of the object,
//! which the limit itself keeps short, and only for writes that set an alarm). Which write went
//! over, and by how much, is found only when one did: the batch is applied again in an open
//! transaction without that guard, the limited objects' usage read, and the transaction
//! committed or rolled back ([`locate_limit`]).

use std::sync::OnceLock;

use durable_runtime::storage::{CommitError, ObjectWrite, StorageError};
use sqlx::{SqlStr, SqliteConnection};

use super::db_err;
use super::packing::Packer;
use super::sql::Sql;
use super::writer::WriterGuard;
use crate::conflict::{StoredVersion, UNLOCATED_RETRIES, first_conflict, kept_changing, raised_by};
use crate::limits::{Limited, Usage, first_exceeded};
use crate::net_alarms::NetAlarms;
use crate::net_kv::NetKv;
use crate::schema::{now_micros, state_text, statement, to_db_version, to_micros};

/// The name of the guard's CHECK constraint, as SQLite reports it when a version did not match.
const VERSION_MISMATCH: &str = "durable_version_mismatch";

/// The extended result code of a failed CHECK constraint (`SQLITE_CONSTRAINT_CHECK`).
const CHECK_FAILED: &str = "275";

/// The kinds of change a batch can hold, in the order its statement applies them.
const KINDS: usize = 11;

/// The bit of the limits guard among the kinds.
const LIMITS: usize = 1 << 10;

/// The batch statements of a store: one per combination of the kinds of change a batch holds,
/// so that a batch runs only the statements it needs (each statement's result is a hand-off
/// back from sqlx's thread), built when first needed. Parameters: `$1` the commit time, then
/// one JSON array per kind of change, then the states' blob (see [`Params`]). They are named
/// `$N`, not `?N`: sqlx binds a statement's `?N` slots by position, which goes wrong in a
/// statement that skips numbers.
#[derive(Debug)]
pub(super) struct Statements {
    parts: [String; KINDS],
    by_kinds: Vec<OnceLock<SqlStr>>,
    /// The same without their `COMMIT`, for [`locate_limit`].
    open_by_kinds: Vec<OnceLock<SqlStr>>,
    /// `$1`: the limits of [`Params`]; each limited object's key-value counters and alarm
    /// count, in the order of the array.
    usage: SqlStr,
    /// The stored versions of the objects named by a JSON array of `[type, id]`, and whether
    /// each holds a state, to name a write that did not match.
    versions: SqlStr,
}

impl Statements {
    /// The statements for the given tables.
    pub(super) fn new(
        objects: &str,
        alarms: &str,
        guard: &str,
        idempotency: &str,
        kv: &str,
    ) -> Self {
        let guard_rows = |param: &str| {
            format!(
                "INSERT INTO {guard} (mismatch) SELECT 1 WHERE changes() <> json_array_length({param});\n"
            )
        };
        // A row's state, from the states blob (`$14`): its offset (1-based) and length, and
        // whether it is compressed (element `packed`), which stays a BLOB; text is cast back.
        // A blob of no bytes arrives as NULL, and an empty state is a state, not a tombstone.
        let state = |packed: usize| {
            format!(
                "CASE WHEN value->>{packed} THEN substr($14, value->>2, value->>3)
                     ELSE coalesce(CAST(substr($14, value->>2, value->>3) AS TEXT), '') END"
            )
        };
        let (insert_state, update_state) = (state(4), state(5));
        // The alarms of the limit's object `w`.
        let alarm_count = format!(
            "(SELECT count(*) FROM {alarms} AS a
                 WHERE a.object_type = w.value->>0 AND a.object_id = w.value->>1)"
        );
        let parts: [String; KINDS] = [
            format!(
                "INSERT INTO {objects} (object_type, object_id, state, version, created_at, updated_at)
                     SELECT value->>0, value->>1, {insert_state}, 1, $1, $1 FROM json_each($2) WHERE true
                     ON CONFLICT (object_type, object_id) DO NOTHING;\n{}",
                guard_rows("$2")
            ),
            format!(
                "UPDATE {objects} SET state = w.s, version = version + 1, updated_at = $1
                     FROM (SELECT value->>0 AS t, value->>1 AS i, {update_state} AS s, value->>4 AS e
                           FROM json_each($3)) AS w
                     WHERE object_type = w.t AND object_id = w.i AND version = w.e;\n{}",
                guard_rows("$3")
            ),
            // A tombstone has no state to keep: only a write with a state recreates it.
            format!(
                "UPDATE {objects} SET version = version + 1, updated_at = $1
                     FROM (SELECT value->>0 AS t, value->>1 AS i, value->>2 AS e
                           FROM json_each($4)) AS w
                     WHERE object_type = w.t AND object_id = w.i AND version = w.e
                         AND state IS NOT NULL;\n{}",
                guard_rows("$4")
            ),
            format!(
                "DELETE FROM {alarms} WHERE (object_type, object_id) IN
                     (SELECT value->>0, value->>1 FROM json_each($5));\n"
            ),
            format!(
                "DELETE FROM {alarms} WHERE (object_type, object_id, name) IN
                     (SELECT value->>0, value->>1, value->>2 FROM json_each($6));\n"
            ),
            format!(
                "DELETE FROM {alarms} WHERE (object_type, object_id, name, claimed_at) IN
                     (SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each($7));\n"
            ),
            format!(
                "INSERT INTO {alarms}
                     (object_type, object_id, name, due_at, claimed_at, attempts, last_error, dead,
                      created_at, payload)
                     SELECT value->>0, value->>1, value->>2, value->>3, NULL, 0, NULL, 0, $1,
                         unhex(value->>4)
                     FROM json_each($8) WHERE true
                     ON CONFLICT (object_type, object_id, name) DO UPDATE SET
                         due_at = excluded.due_at, claimed_at = NULL, attempts = 0,
                         last_error = NULL, dead = 0, payload = excluded.payload;\n"
            ),
            // Key, fingerprint and reply travel as hex: they are bytes.
            format!(
                "INSERT INTO {idempotency}
                     (object_type, object_id, idempotency_key, fingerprint, reply, expires_at)
                     SELECT value->>0, value->>1, unhex(value->>2), unhex(value->>3),
                         unhex(value->>4), value->>5
                     FROM json_each($9) WHERE true
                     ON CONFLICT (object_type, object_id, idempotency_key) DO UPDATE SET
                         fingerprint = excluded.fingerprint, reply = excluded.reply,
                         expires_at = excluded.expires_at;\n"
            ),
            // Cleared objects: no keys, zero counters.
            format!(
                "DELETE FROM {kv} WHERE (object_type, object_id) IN
                     (SELECT value->>0, value->>1 FROM json_each($10));
                 UPDATE {objects} SET kv_keys = 0, kv_bytes = 0 WHERE (object_type, object_id) IN
                     (SELECT value->>0, value->>1 FROM json_each($10));\n"
            ),
            // Touched keys (`$11`) leave, with their share of the counters; then the new values
            // (`$12`) come in, with theirs.
            format!(
                "UPDATE {objects} SET kv_keys = kv_keys - k.n, kv_bytes = kv_bytes - k.b
                     FROM (SELECT kv.object_type AS t, kv.object_id AS i, count(*) AS n,
                               sum(kv.bytes) AS b
                           FROM json_each($11) AS w
                           JOIN {kv} AS kv ON kv.object_type = w.value->>0
                               AND kv.object_id = w.value->>1 AND kv.key = unhex(w.value->>2)
                           GROUP BY kv.object_type, kv.object_id) AS k
                     WHERE object_type = k.t AND object_id = k.i;
                 DELETE FROM {kv} WHERE (object_type, object_id, key) IN
                     (SELECT value->>0, value->>1, unhex(value->>2) FROM json_each($11));
                 INSERT INTO {kv} (object_type, object_id, key, value, bytes)
                     SELECT value->>0, value->>1, unhex(value->>2), unhex(value->>3), value->>4
                     FROM json_each($12);
                 UPDATE {objects} SET kv_keys = kv_keys + p.n, kv_bytes = kv_bytes + p.b
                     FROM (SELECT value->>0 AS t, value->>1 AS i, count(*) AS n,
                               sum(value->>4) AS b
                           FROM json_each($12) GROUP BY value->>0, value->>1) AS p
                     WHERE object_type = p.t AND object_id = p.i;\n"
            ),
            // Limits (`$13`): `[type, id, max keys, max bytes, max alarms]`, null for none.
            format!(
                "INSERT INTO {guard} (mismatch) SELECT 1 FROM json_each($13) AS w
                     LEFT JOIN {objects} AS o
                         ON o.object_type = w.value->>0 AND o.object_id = w.value->>1
                     WHERE o.kv_keys > w.value->>2 OR o.kv_bytes > w.value->>3
                         OR (w.value->>4 IS NOT NULL AND {alarm_count} > w.value->>4)
                     LIMIT 1;\n"
            ),
        ];
        let usage = statement(format!(
            "SELECT o.kv_keys, o.kv_bytes,
                 CASE WHEN w.value->>4 IS NULL THEN 0 ELSE {alarm_count} END
             FROM json_each($1) AS w
             LEFT JOIN {objects} AS o ON o.object_type = w.value->>0 AND o.object_id = w.value->>1
             ORDER BY w.key"
        ));
        let versions = statement(format!(
            "SELECT o.object_type, o.object_id, o.version, o.state IS NOT NULL
             FROM json_each($1) AS k
             JOIN {objects} AS o ON o.object_type = k.value->>0 AND o.object_id = k.value->>1"
        ));
        let unbuilt = || (0..1usize << KINDS).map(|_| OnceLock::new()).collect();
        Self {
            parts,
            by_kinds: unbuilt(),
            open_by_kinds: unbuilt(),
            usage,
            versions,
        }
    }

    /// The statement applying the kinds of change `kinds`, committing at its end if `commit`.
    fn for_kinds(&self, kinds: usize, commit: bool) -> SqlStr {
        let built = if commit {
            &self.by_kinds[kinds]
        } else {
            &self.open_by_kinds[kinds]
        };
        built
            .get_or_init(|| {
                let mut sql = String::from("BEGIN IMMEDIATE;\n");
                for (kind, part) in self.parts.iter().enumerate() {
                    if kinds & (1 << kind) != 0 {
                        sql.push_str(part);
                    }
                }
                if commit {
                    sql.push_str("COMMIT;");
                }
                statement(sql)
            })
            .clone()
    }
}

/// A batch as the statement's parameters: JSON arrays of rows, one per kind of change.
///
/// Alarm changes are reduced to their net effect per write ([`NetAlarms`]), so the statement
/// applies them kind by kind: cancel-alls first, then per-name cancels, finishes and sets.
pub(super) struct Params<'a> {
    /// The kinds of change present: bit `k` set if the `k`-th array below is not empty.
    kinds: usize,
    /// New objects: `[type, id, state offset, state length, compressed]`.
    inserts: String,
    /// Changed states: `[type, id, state offset, state length, expected version, compressed]`.
    updates: String,
    /// The states of `inserts` and `updates`, one after another, as stored (large ones
    /// compressed: see [`Packer`]); offsets are 1-based, as SQLite's `substr` counts.
    states: Vec<u8>,
    /// Version-only writes (alarm changes without a state): `[type, id, expected version]`.
    touches: String,
    /// Objects whose alarms are all cancelled: `[type, id]`.
    cancel_alls: String,
    /// Cancelled alarms: `[type, id, name]`.
    cancels: String,
    /// Fired alarms removed under their claim: `[type, id, name, claimed at (µs)]`.
    finishes: String,
    /// Scheduled alarms: `[type, id, name, due at (µs), payload (hex, or null)]`: JSON holds
    /// no bytes, and SQLite's `unhex` turns them back into a blob.
    sets: String,
    /// Stored replies: `[type, id, key (hex), fingerprint (hex), reply (hex), expires at (µs)]`.
    replies: String,
    /// Objects whose keys are all removed: `[type, id]`.
    kv_clears: String,
    /// Keys removed or replaced: `[type, id, key (hex)]`.
    kv_touched: String,
    /// New values: `[type, id, key (hex), value (hex), bytes]`.
    kv_puts: String,
    /// Limits: `[type, id, max keys, max bytes, max alarms]` (null: none).
    limits: String,
    /// The limits again, with the index of their write, in the same order.
    limited: Vec<Limited<'a>>,
}

impl<'a> Params<'a> {
    /// Checks and converts a batch; a state that cannot be stored is rejected here, before
    /// anything is sent.
    pub(super) fn new(batch: &'a [ObjectWrite], packer: &Packer) -> Result<Self, StorageError> {
        let mut rows = Rows::default();
        for (index, write) in batch.iter().enumerate() {
            let key = &write.key;
            let (t, i) = (key.object_type.as_str(), key.object_id.as_str());
            let expected = to_db_version(write.expected_version)?;
            match write.state.as_deref().map(state_text).transpose()? {
                Some(state) => {
                    let packed = packer.pack(state.as_bytes());
                    let stored = packed.as_deref().unwrap_or(state.as_bytes());
                    let at = (db_len(rows.states.len() + 1), db_len(stored.len()));
                    rows.states.extend_from_slice(stored);
                    let packed = packed.is_some();
                    if expected == 0 {
                        rows.inserts.push((t, i, at.0, at.1, packed));
                    } else {
                        rows.updates.push((t, i, at.0, at.1, expected, packed));
                    }
                }
                None => rows.touches.push((t, i, expected)),
            }
            let net = NetAlarms::of(&write.alarms);
            if net.cancel_all {
                rows.cancel_alls.push((t, i));
            }
            rows.cancels
                .extend(net.cancels.iter().map(|&name| (t, i, name)));
            for &(name, claimed_at) in &net.finishes {
                rows.finishes.push((t, i, name, to_micros(claimed_at)?));
            }
            for &(name, due_at, payload) in &net.sets {
                let payload = payload.map(hex::encode);
                rows.sets.push((t, i, name, to_micros(due_at)?, payload));
            }
            let kv = NetKv::of(&write.kv);
            if kv.clear {
                rows.kv_clears.push((t, i));
            }
            for (key, value) in &kv.changes {
                let key_hex = hex::encode(key.as_bytes());
                if let Some(value) = value {
                    let bytes = i64::try_from(key.len() + value.len()).unwrap_or(i64::MAX);
                    rows.kv_puts
                        .push((t, i, key_hex.clone(), hex::encode(value), bytes));
                }
                // A cleared object has none of its old keys left to remove.
                if !kv.clear {
                    rows.kv_touched.push((t, i, key_hex));
                }
            }
            if let Some(limited) = Limited::of(index, write, &kv, &net) {
                let (max_keys, max_bytes) = limited.kv.unzip();
                let max_alarms = limited.alarms;
                rows.limits.push((
                    t,
                    i,
                    max_keys.map(db_int),
                    max_bytes.map(db_int),
                    max_alarms.map(db_int),
                ));
                rows.limited.push(limited);
            }
            if let Some(reply) = &write.idempotency {
                rows.replies.push((
                    t,
                    i,
                    hex::encode(reply.key.as_bytes()),
                    hex::encode(&reply.fingerprint),
                    hex::encode(&reply.reply),
                    to_micros(reply.expires_at)?,
                ));
            }
        }
        let present = [
            !rows.inserts.is_empty(),
            !rows.updates.is_empty(),
            !rows.touches.is_empty(),
            !rows.cancel_alls.is_empty(),
            !rows.cancels.is_empty(),
            !rows.finishes.is_empty(),
            !rows.sets.is_empty(),
            !rows.replies.is_empty(),
            !rows.kv_clears.is_empty(),
            !rows.kv_touched.is_empty() || !rows.kv_puts.is_empty(),
            !rows.limits.is_empty(),
        ];
        let kinds = (0..KINDS)
            .filter(|&kind| present[kind])
            .fold(0, |kinds, kind| kinds | 1 << kind);
        Ok(Self {
            kinds,
            inserts: json(&rows.inserts)?,
            updates: json(&rows.updates)?,
            states: rows.states,
            touches: json(&rows.touches)?,
            cancel_alls: json(&rows.cancel_alls)?,
            cancels: json(&rows.cancels)?,
            finishes: json(&rows.finishes)?,
            sets: json(&rows.sets)?,
            replies: json(&rows.replies)?,
            kv_clears: json(&rows.kv_clears)?,
            kv_touched: json(&rows.kv_touched)?,
            kv_puts: json(&rows.kv_puts)?,
            limits: json(&rows.limits)?,
            limited: rows.limited,
        })
    }
}

/// The rows of [`Params`] before encoding, borrowed from the batch.
#[derive(Default)]
struct Rows<'a> {
    inserts: Vec<(&'a str, &'a str, i64, i64, bool)>,
    updates: Vec<(&'a str, &'a str, i64, i64, i64, bool)>,
    states: Vec<u8>,
    touches: Vec<(&'a str, &'a str, i64)>,
    cancel_alls: Vec<(&'a str, &'a str)>,
    cancels: Vec<(&'a str, &'a str, &'a str)>,
    finishes: Vec<(&'a str, &'a str, &'a str, i64)>,
    sets: Vec<(&'a str, &'a str, &'a str, i64, Option<String>)>,
    replies: Vec<(&'a str, &'a str, String, String, String, i64)>,
    kv_clears: Vec<(&'a str, &'a str)>,
    kv_touched: Vec<(&'a str, &'a str, String)>,
    kv_puts: Vec<(&'a str, &'a str, String, String, i64)>,
    limits: Vec<LimitRow<'a>>,
    limited: Vec<Limited<'a>>,
}

/// `[type, id, max keys, max bytes, max alarms]`.
type LimitRow<'a> = (&'a str, &'a str, Option<i64>, Option<i64>, Option<i64>);

/// A length in a batch as an SQLite integer (a batch is far below `i64::MAX` bytes).
fn db_len(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}

/// A limit as an SQLite integer (a larger one is no limit SQLite could reach).
fn db_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn json(rows: &impl serde::Serialize) -> Result<String, StorageError> {
    serde_json::to_string(rows).map_err(|err| {
        crate::error::rejected(format!("a batch could not be encoded for SQLite: {err}"))
    })
}

/// Commits `batch` (converted as `params`) in one transaction, on the store's writer.
pub(super) async fn commit(
    mut writer: WriterGuard<'_>,
    sql: &Sql,
    batch: &[ObjectWrite],
    params: &Params<'_>,
) -> Result<(), CommitError> {
    for _ in 0..UNLOCATED_RETRIES {
        if send(&mut writer, sql, params, params.kinds, true).await? {
            return Ok(());
        }
        if params.kinds & LIMITS != 0 {
            match locate_limit(&mut writer, sql, params).await? {
                Located::Committed => return Ok(()),
                Located::Exceeded(exceeded) => return Err(exceeded),
                Located::Mismatch => {}
            }
        }
        match locate_conflict(writer.connection(), sql, batch).await? {
            Some(conflict) => return Err(conflict),
            // The row that did not match changed again since: try the batch again.
            None => continue,
        }
    }
    Err(kept_changing())
}

/// Sends the statement for `kinds`, with a `COMMIT` at its end if `commit` (else leaving its
/// transaction open). Returns false if a guard failed it (the transaction is rolled back).
async fn send(
    writer: &mut WriterGuard<'_>,
    sql: &Sql,
    params: &Params<'_>,
    kinds: usize,
    commit: bool,
) -> Result<bool, StorageError> {
    writer.transaction_started();
    let conn = writer.connection();
    let sent = sqlx::query(sql.commit_batch.for_kinds(kinds, commit))
        .bind(now_micros())
        .bind(&params.inserts)
        .bind(&params.updates)
        .bind(&params.touches)
        .bind(&params.cancel_alls)
        .bind(&params.cancels)
        .bind(&params.finishes)
        .bind(&params.sets)
        .bind(&params.replies)
        .bind(&params.kv_clears)
        .bind(&params.kv_touched)
        .bind(&params.kv_puts)
        .bind(&params.limits)
        .bind(&params.states[..])
        .execute(&mut *conn)
        .await;
    let error = match sent {
        Ok(_) => {
            if commit {
                writer.transaction_ended();
            }
            return Ok(true);
        }
        Err(error) => error,
    };
    // The query stopped at its first failure, with its transaction open (unless `BEGIN`
    // itself failed).
    // If it cannot be rolled back, the transaction is left marked open: the writer's guard
    // closes the connection when it is dropped, on the way out.
    if !writer.roll_back().await {
        return Err(db_err(error));
    }
    if raised_by(&error, CHECK_FAILED, VERSION_MISMATCH) {
        Ok(false)
    } else {
        Err(db_err(error))
    }
}

/// What applying a batch without its limits guard found.
enum Located {
    /// No write went over a limit after all (usage changed since): the batch is committed.
    Committed,
    /// This write went over (the batch is rolled back).
    Exceeded(CommitError),
    /// A version did not match (the batch is rolled back).
    Mismatch,
}

/// Applies the batch again in an open transaction, without its limits guard, and reads the
/// usage of its limited objects to name the first write, in batch order, that goes over.
async fn locate_limit(
    writer: &mut WriterGuard<'_>,
    sql: &Sql,
    params: &Params<'_>,
) -> Result<Located, CommitError> {
    if !send(writer, sql, params, params.kinds & !LIMITS, false).await? {
        return Ok(Located::Mismatch);
    }
    let conn = writer.connection();
    let read: Result<Vec<Usage>, _> = sqlx::query_as(sql.commit_batch.usage.clone())
        .bind(&params.limits)
        .fetch_all(&mut *conn)
        .await;
    let finished = match read {
        Ok(usage) => match first_exceeded(&params.limited, &usage) {
            None => sqlx::query("COMMIT")
                .execute(&mut *conn)
                .await
                .map(|_| None),
            Some(exceeded) => Ok(Some(exceeded)),
        },
        Err(error) => Err(error),
    };
    match finished {
        Ok(None) => {
            writer.transaction_ended();
            Ok(Located::Committed)
        }
        outcome => {
            // As in `send`: a connection left in a transaction is closed with the guard.
            if !writer.roll_back().await {
                return Err(crate::error::rejected(
                    "rolling back a batch that exceeded a limit failed",
                )
                .into());
            }
            match outcome {
                Ok(Some(exceeded)) => Ok(Located::Exceeded(exceeded)),
                Ok(None) => unreachable!("a committed batch returned above"),
                Err(error) => Err(db_err(error).into()),
            }
        }
    }
}

/// What applying a batch in an open transaction found ([`apply_open`]).
pub(super) enum Opened {
    /// Every version matched and no limit was exceeded: the transaction is open, for more
    /// statements before its `COMMIT`.
    Applied,
    /// A version did not match (the batch is rolled back).
    Mismatch,
    /// This write went over a limit (the batch is rolled back).
    Exceeded(CommitError),
}

/// Applies the batch in a transaction left open, for writes that carry more than the batch
/// statement holds (FSM changes): checks its versions and limits, rolling back if one fails.
pub(super) async fn apply_open(
    writer: &mut WriterGuard<'_>,
    sql: &Sql,
    params: &Params<'_>,
) -> Result<Opened, CommitError> {
    if !send(writer, sql, params, params.kinds & !LIMITS, false).await? {
        return Ok(Opened::Mismatch);
    }
    if params.kinds & LIMITS == 0 {
        return Ok(Opened::Applied);
    }
    let read: Result<Vec<Usage>, _> = sqlx::query_as(sql.commit_batch.usage.clone())
        .bind(&params.limits)
        .fetch_all(writer.connection())
        .await;
    let exceeded = match read {
        Ok(usage) => match first_exceeded(&params.limited, &usage) {
            None => return Ok(Opened::Applied),
            Some(exceeded) => Ok(exceeded),
        },
        Err(error) => Err(db_err(error)),
    };
    end_open(writer, false).await?;
    Ok(Opened::Exceeded(exceeded?))
}

/// Commits (or rolls back) the transaction [`apply_open`] left open. A connection whose
/// transaction could not be ended is closed with the writer's guard.
pub(super) async fn end_open(
    writer: &mut WriterGuard<'_>,
    commit: bool,
) -> Result<(), StorageError> {
    if commit {
        sqlx::query("COMMIT")
            .execute(writer.connection())
            .await
            .map_err(db_err)?;
        writer.transaction_ended();
    } else if !writer.roll_back().await {
        return Err(crate::error::rejected("rolling back a batch failed"));
    }
    Ok(())
}

/// Reads the stored versions of the batch's objects and names the first write, in batch order,
/// whose expectation does not hold.
pub(super) async fn locate_conflict(
    conn: &mut SqliteConnection,
    sql: &Sql,
    batch: &[ObjectWrite],
) -> Result<Option<CommitError>, StorageError> {
    let keys: Vec<(&str, &str)> = batch
        .iter()
        .map(|write| (write.key.object_type.as_str(), write.key.object_id.as_str()))
        .collect();
    let stored: Vec<StoredVersion> = sqlx::query_as(sql.commit_batch.versions.clone())
        .bind(json(&keys)?)
        .fetch_all(conn)
        .await
        .map_err(db_err)?;
    first_conflict(batch.iter().enumerate(), stored)
}
