//! A batch of writes committed in one round trip to SQLite.
//!
//! sqlx runs each SQLite connection on a thread of its own, and every statement sent to it is a
//! hand-off to that thread and back. A batch is therefore sent as one multi-statement query,
//! `BEGIN IMMEDIATE; ..; COMMIT`, whose text is the same for every batch: each kind of change
//! travels as one JSON array parameter, read with `json_each`. The statement is prepared once
//! per connection and the commit costs one hand-off besides its flush.
//!
//! Version checks run inside the query. After each statement that checks versions, a guard
//! statement inserts into the always-empty `durable_commit_guard` table if fewer rows changed
//! than writes were checked, and that table's CHECK constraint fails the insert. The query stops
//! at the failure, before its `COMMIT`; the batch is rolled back and its stored versions read to
//! name the write that did not match.

use durable_runtime::storage::{CommitError, ObjectWrite, StorageError};
use sqlx::{SqlStr, SqliteConnection};

use super::db_err;
use super::sql::Sql;
use super::writer::WriterGuard;
use crate::conflict::{StoredVersion, UNLOCATED_RETRIES, first_conflict, kept_changing, raised_by};
use crate::net_alarms::NetAlarms;
use crate::schema::{now_micros, state_text, statement, to_db_version, to_micros};

/// The name of the guard's CHECK constraint, as SQLite reports it when a version did not match.
const VERSION_MISMATCH: &str = "durable_version_mismatch";

/// The extended result code of a failed CHECK constraint (`SQLITE_CONSTRAINT_CHECK`).
const CHECK_FAILED: &str = "275";

/// The kinds of change a batch can hold, in the order its statement applies them.
const KINDS: usize = 8;

/// The batch statements of a store: one per combination of the kinds of change a batch holds,
/// so that a batch runs only the statements it needs (each statement's result is a hand-off
/// back from sqlx's thread). Parameters: `$1` the commit time, then one JSON array per kind of
/// change (see [`Params`]). They are named `$N`, not `?N`: sqlx binds a statement's `?N` slots
/// by position, which goes wrong in a statement that skips numbers.
#[derive(Debug)]
pub(super) struct Statements {
    by_kinds: Vec<SqlStr>,
    /// The same without their `COMMIT`: a batch with key-value changes applies them in the
    /// transaction left open, then commits.
    open_by_kinds: Vec<SqlStr>,
    /// The stored versions of the objects named by a JSON array of `[type, id]`, and whether
    /// each holds a state, to name a write that did not match.
    versions: SqlStr,
}

impl Statements {
    /// The statements for the given tables.
    pub(super) fn new(objects: &str, alarms: &str, guard: &str, idempotency: &str) -> Self {
        let guard_rows = |param: &str| {
            format!(
                "INSERT INTO {guard} (mismatch) SELECT 1 WHERE changes() <> json_array_length({param});\n"
            )
        };
        let parts: [String; KINDS] = [
            format!(
                "INSERT INTO {objects} (object_type, object_id, state, version, created_at, updated_at)
                     SELECT value->>0, value->>1, value->>2, 1, $1, $1 FROM json_each($2) WHERE true
                     ON CONFLICT (object_type, object_id) DO NOTHING;\n{}",
                guard_rows("$2")
            ),
            format!(
                "UPDATE {objects} SET state = w.s, version = version + 1, updated_at = $1
                     FROM (SELECT value->>0 AS t, value->>1 AS i, value->>2 AS s, value->>3 AS e
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
        ];
        let build = |kinds: usize, commit: bool| {
            let mut sql = String::from("BEGIN IMMEDIATE;\n");
            for (kind, part) in parts.iter().enumerate() {
                if kinds & (1 << kind) != 0 {
                    sql.push_str(part);
                }
            }
            if commit {
                sql.push_str("COMMIT;");
            }
            statement(sql)
        };
        let by_kinds = (0..1usize << KINDS)
            .map(|kinds| build(kinds, true))
            .collect();
        let open_by_kinds = (0..1usize << KINDS)
            .map(|kinds| build(kinds, false))
            .collect();
        let versions = statement(format!(
            "SELECT o.object_type, o.object_id, o.version, o.state IS NOT NULL
             FROM json_each($1) AS k
             JOIN {objects} AS o ON o.object_type = k.value->>0 AND o.object_id = k.value->>1"
        ));
        Self {
            by_kinds,
            open_by_kinds,
            versions,
        }
    }

    /// The statement for `params`.
    fn for_batch(&self, params: &Params, open: bool) -> SqlStr {
        if open {
            self.open_by_kinds[params.kinds].clone()
        } else {
            self.by_kinds[params.kinds].clone()
        }
    }
}

/// A batch as the statement's parameters: JSON arrays of rows, one per kind of change.
///
/// Alarm changes are reduced to their net effect per write ([`NetAlarms`]), so the statement
/// applies them kind by kind: cancel-alls first, then per-name cancels, finishes and sets.
pub(super) struct Params {
    /// The kinds of change present: bit `k` set if the `k`-th array below is not empty.
    kinds: usize,
    /// New objects: `[type, id, state]`.
    inserts: String,
    /// Changed states: `[type, id, state, expected version]`.
    updates: String,
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
}

impl Params {
    /// Checks and converts a batch; a state that cannot be stored is rejected here, before
    /// anything is sent.
    pub(super) fn new(batch: &[ObjectWrite]) -> Result<Self, StorageError> {
        let mut rows = Rows::default();
        for write in batch {
            let key = &write.key;
            let (t, i) = (key.object_type.as_str(), key.object_id.as_str());
            let expected = to_db_version(write.expected_version)?;
            match write.state.as_deref().map(state_text).transpose()? {
                Some(state) if expected == 0 => rows.inserts.push((t, i, state)),
                Some(state) => rows.updates.push((t, i, state, expected)),
                None => rows.touches.push((t, i, expected)),
            }
            let net = NetAlarms::of(&write.alarms);
            if net.cancel_all {
                rows.cancel_alls.push((t, i));
            }
            rows.cancels
                .extend(net.cancels.iter().map(|&name| (t, i, name)));
            for (name, claimed_at) in net.finishes {
                rows.finishes.push((t, i, name, to_micros(claimed_at)?));
            }
            for (name, due_at, payload) in net.sets {
                let payload = payload.map(hex);
                rows.sets.push((t, i, name, to_micros(due_at)?, payload));
            }
            if let Some(reply) = &write.idempotency {
                rows.replies.push((
                    t,
                    i,
                    hex(reply.key.as_bytes()),
                    hex(&reply.fingerprint),
                    hex(&reply.reply),
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
        ];
        let kinds = (0..KINDS)
            .filter(|&kind| present[kind])
            .fold(0, |kinds, kind| kinds | 1 << kind);
        Ok(Self {
            kinds,
            inserts: json(&rows.inserts)?,
            updates: json(&rows.updates)?,
            touches: json(&rows.touches)?,
            cancel_alls: json(&rows.cancel_alls)?,
            cancels: json(&rows.cancels)?,
            finishes: json(&rows.finishes)?,
            sets: json(&rows.sets)?,
            replies: json(&rows.replies)?,
        })
    }
}

/// The rows of [`Params`] before encoding, borrowed from the batch.
#[derive(Default)]
struct Rows<'a> {
    inserts: Vec<(&'a str, &'a str, &'a str)>,
    updates: Vec<(&'a str, &'a str, &'a str, i64)>,
    touches: Vec<(&'a str, &'a str, i64)>,
    cancel_alls: Vec<(&'a str, &'a str)>,
    cancels: Vec<(&'a str, &'a str, &'a str)>,
    finishes: Vec<(&'a str, &'a str, &'a str, i64)>,
    sets: Vec<(&'a str, &'a str, &'a str, i64, Option<String>)>,
    replies: Vec<(&'a str, &'a str, String, String, String, i64)>,
}

/// `bytes` in hexadecimal, as SQLite's `unhex` reads it.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
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
    params: &Params,
) -> Result<(), CommitError> {
    let with_kv = batch.iter().any(|write| !write.kv.is_empty());
    for _ in 0..UNLOCATED_RETRIES {
        writer.transaction_started();
        let conn = writer.connection();
        let sent = sqlx::query(sql.commit_batch.for_batch(params, with_kv))
            .bind(now_micros())
            .bind(&params.inserts)
            .bind(&params.updates)
            .bind(&params.touches)
            .bind(&params.cancel_alls)
            .bind(&params.cancels)
            .bind(&params.finishes)
            .bind(&params.sets)
            .bind(&params.replies)
            .execute(&mut *conn)
            .await;
        let error = match sent {
            Ok(_) if with_kv => return finish_with_kv(writer, sql, batch).await,
            Ok(_) => {
                writer.transaction_ended();
                return Ok(());
            }
            Err(error) => error,
        };
        // The query stopped at its first failure, with its transaction open (unless `BEGIN`
        // itself failed).
        if !roll_back(conn).await {
            writer.discard();
            return Err(db_err(error).into());
        }
        writer.transaction_ended();
        if !raised_by(&error, CHECK_FAILED, VERSION_MISMATCH) {
            return Err(db_err(error).into());
        }
        match locate_conflict(writer.connection(), sql, batch).await? {
            Some(conflict) => return Err(conflict),
            // The row that did not match changed again since: try the batch again.
            None => continue,
        }
    }
    Err(kept_changing())
}

/// Applies the batch's key-value changes in the transaction its statement left open, then
/// commits it, or rolls it back if a write exceeds a limit.
async fn finish_with_kv(
    mut writer: WriterGuard<'_>,
    sql: &Sql,
    batch: &[ObjectWrite],
) -> Result<(), CommitError> {
    let conn = writer.connection();
    let outcome = match super::kv::apply(conn, sql, batch).await {
        Ok(Ok(())) => sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .map(|_| Ok(()))
            .map_err(db_err),
        Ok(Err(exceeded)) => Ok(Err(exceeded)),
        Err(error) => Err(error),
    };
    match outcome {
        Ok(Ok(())) => {
            writer.transaction_ended();
            Ok(())
        }
        Ok(Err(exceeded)) => {
            if !roll_back(writer.connection()).await {
                writer.discard();
                return Err(crate::error::rejected(
                    "rolling back a batch that exceeded a key-value limit failed",
                )
                .into());
            }
            writer.transaction_ended();
            Err(exceeded)
        }
        Err(error) => {
            if roll_back(writer.connection()).await {
                writer.transaction_ended();
            } else {
                writer.discard();
            }
            Err(error.into())
        }
    }
}

/// Ends the failed query's transaction. Returns false if the connection's state is unknown
/// then, and it must be closed.
async fn roll_back(conn: &mut SqliteConnection) -> bool {
    match sqlx::query("ROLLBACK").execute(conn).await {
        Ok(_) => true,
        Err(error) => {
            let no_transaction = error
                .as_database_error()
                .is_some_and(|db| db.message().contains("no transaction is active"));
            if !no_transaction {
                tracing::warn!(%error, "rolling back a failed SQLite batch failed; closing its connection");
            }
            no_transaction
        }
    }
}

/// Reads the stored versions of the batch's objects and names the first write, in batch order,
/// whose expectation does not hold.
async fn locate_conflict(
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
