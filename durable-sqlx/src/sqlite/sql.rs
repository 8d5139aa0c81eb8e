//! [`Sql`]: the texts of the store's statements, built once per store with its table prefix
//! filled in, and the decoding of the alarm rows they return. A batch's statements are built
//! in [`batch`].

use std::time::SystemTime;

use durable_runtime::storage::{AlarmRecord, ObjectKey, StorageError};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlStr};

use super::{batch, db_err};
use crate::dead_alarms::DeadAlarms;
use crate::schema::{Names, from_db_attempts, from_micros, statement};

/// The store's statements, with its table names filled in.
#[derive(Debug)]
pub(super) struct Sql {
    /// A whole batch, in one round trip (see [`batch`]).
    pub(super) commit_batch: batch::Statements,
    /// `?1`–`?3`: type, id and idempotency key (bytes) of a stored reply.
    pub(super) load_reply: SqlStr,
    /// `?1`: now (µs); `?2`: the most replies to remove.
    pub(super) sweep_replies: SqlStr,
    /// Every stored reply of one object.
    pub(super) delete_replies: SqlStr,
    pub(super) load: SqlStr,
    /// `$1`: a JSON array of `[type, id]`; one row per element, in order.
    pub(super) load_many: SqlStr,
    /// [`load`](Self::load)'s version alone.
    pub(super) load_version: SqlStr,
    /// [`load_many`](Self::load_many)'s versions alone.
    pub(super) load_versions: SqlStr,
    pub(super) alarm_cancel_all: SqlStr,
    pub(super) delete_object: SqlStr,
    pub(super) list_first: SqlStr,
    pub(super) list_after: SqlStr,
    pub(super) list_alarms: SqlStr,
    /// The types with stored objects, in order.
    pub(super) list_types: SqlStr,
    /// Dead alarms (see [`dead_alarms`]).
    pub(super) dead: DeadAlarms,
    pub(super) next_due: SqlStr,
    /// `?1`: now; `?2`: due by; `?3`: the lease's end; `?4`: the limit. Its commit is not
    /// flushed to disk (the connection runs it at `synchronous = NORMAL`, then goes back to its
    /// level): a claim is a lease, and the WAL is written in order, so the flush of any later
    /// commit (an alarm's firing among them) takes the claim's frames with it, and a power loss
    /// that drops a claim drops every later commit too, leaving the alarm unclaimed, as when a
    /// lease runs out. Who else reads the database sees the claim at once, flushed or not. A
    /// claim that fails leaves the level unknown: its connection is discarded.
    pub(super) claim: SqlStr,
    /// `?1`–`?4`: type, id, name and claim time of a claim; `?5`: its new lease end.
    pub(super) renew: SqlStr,
    pub(super) finish: SqlStr,
    pub(super) fail_retry: SqlStr,
    pub(super) fail_dead: SqlStr,
    pub(super) release: SqlStr,
    /// `?1`, `?2`: the object; `?3`: the key.
    pub(super) kv_get: SqlStr,
    /// `?1`, `?2`: the object; `?3`: the prefix; `?4`: the end of its range (or NULL); `?5`:
    /// the key to start after (or NULL); `?6`: the limit.
    pub(super) kv_list: SqlStr,
    pub(super) kv_usage: SqlStr,
    pub(super) kv_clear: SqlStr,
}

/// One of the [`DeadAlarms`] statements.
fn dead_alarms(alarms: &str, of_type: bool, after: bool) -> SqlStr {
    let (of_type, position) = match (of_type, after) {
        (true, true) => (
            "AND object_type = ?2",
            "AND (object_type, object_id, name) > (?3, ?4, ?5)",
        ),
        (true, false) => ("AND object_type = ?2", ""),
        (false, true) => ("", "AND (object_type, object_id, name) > (?2, ?3, ?4)"),
        (false, false) => ("", ""),
    };
    statement(format!(
        "SELECT {ALARM_COLUMNS} FROM {alarms}
         WHERE dead = 1 {of_type} {position}
         ORDER BY object_type, object_id, name LIMIT ?1"
    ))
}

const ALARM_COLUMNS: &str =
    "object_type, object_id, name, due_at, attempts, claimed_at, last_error, dead, payload";

/// What a claim returns of each alarm it claims ([`claimed_from_row`]): one JSON array of its
/// type, id, name, due time, attempts, last error and payload (in hex, `null` for none), not its
/// claim time, which the claim sets, nor `dead`, which the claim requires to be 0. Every column
/// returned is a value the connection's thread copies and the runtime's frees, and a burst of
/// due alarms is claimed a batch of hundreds of rows at a time: one column a row, not seven.
const CLAIMED_ROW: &str = "json_array(object_type, object_id, name, due_at, attempts, last_error,
                               CASE WHEN payload IS NULL THEN NULL ELSE hex(payload) END)";

impl Sql {
    /// The statements of a store whose connections run with `synchronous = level` (SQLite's
    /// number for it: 2 is FULL, 3 EXTRA).
    pub(super) fn new(names: &Names, level: i64) -> Self {
        // A claim flushes nothing when commits do not either.
        let (unflushed, flushed) = if level >= 2 {
            (
                "PRAGMA synchronous = NORMAL; ".to_owned(),
                format!(" PRAGMA synchronous = {level};"),
            )
        } else {
            (String::new(), String::new())
        };
        let objects = &names.objects;
        let alarms = &names.alarms;
        let guard = &names.commit_guard;
        let kv = &names.kv;
        let idempotency = &names.idempotency;
        Self {
            commit_batch: batch::Statements::new(objects, alarms, guard, idempotency, kv),
            load_reply: statement(format!(
                "SELECT fingerprint, reply, expires_at FROM {idempotency}
                 WHERE object_type = ?1 AND object_id = ?2 AND idempotency_key = ?3"
            )),
            sweep_replies: statement(format!(
                "DELETE FROM {idempotency} WHERE rowid IN (
                     SELECT rowid FROM {idempotency} WHERE expires_at <= ?1 LIMIT ?2
                 )"
            )),
            delete_replies: statement(format!(
                "DELETE FROM {idempotency} WHERE object_type = ?1 AND object_id = ?2"
            )),
            load: statement(format!(
                "SELECT state, version FROM {objects} WHERE object_type = ?1 AND object_id = ?2"
            )),
            load_many: statement(format!(
                "SELECT o.state, o.version FROM json_each($1) AS k
                 LEFT JOIN {objects} AS o
                     ON o.object_type = k.value->>0 AND o.object_id = k.value->>1
                 ORDER BY k.key"
            )),
            load_version: statement(format!(
                "SELECT version FROM {objects} WHERE object_type = ?1 AND object_id = ?2"
            )),
            load_versions: statement(format!(
                "SELECT o.version FROM json_each($1) AS k
                 LEFT JOIN {objects} AS o
                     ON o.object_type = k.value->>0 AND o.object_id = k.value->>1
                 ORDER BY k.key"
            )),
            alarm_cancel_all: statement(format!(
                "DELETE FROM {alarms} WHERE object_type = ?1 AND object_id = ?2"
            )),
            // The row stays as a tombstone, one version up (see migration 4).
            delete_object: statement(format!(
                "UPDATE {objects} SET state = NULL, version = version + 1, updated_at = ?3,
                     kv_keys = 0, kv_bytes = 0
                 WHERE object_type = ?1 AND object_id = ?2 AND state IS NOT NULL"
            )),
            list_first: statement(format!(
                "SELECT object_id FROM {objects} WHERE object_type = ?1 AND state IS NOT NULL
                 ORDER BY object_id LIMIT ?2"
            )),
            list_after: statement(format!(
                "SELECT object_id FROM {objects}
                 WHERE object_type = ?1 AND object_id > ?3 AND state IS NOT NULL
                 ORDER BY object_id LIMIT ?2"
            )),
            list_alarms: statement(format!(
                "SELECT {ALARM_COLUMNS} FROM {alarms} WHERE object_type = ?1 AND object_id = ?2
                 ORDER BY due_at, name"
            )),
            // One step of the primary key per type (a loose index scan), rather than a scan of
            // every object: a type holding only tombstones is left out.
            list_types: statement(format!(
                "WITH RECURSIVE types(t) AS (
                     SELECT (SELECT object_type FROM {objects} ORDER BY object_type LIMIT 1)
                     UNION ALL
                     SELECT (SELECT object_type FROM {objects} WHERE object_type > types.t
                             ORDER BY object_type LIMIT 1)
                     FROM types WHERE types.t IS NOT NULL
                 )
                 SELECT t FROM types
                 WHERE t IS NOT NULL AND EXISTS (
                     SELECT 1 FROM {objects} AS o WHERE o.object_type = types.t AND o.state IS NOT NULL
                 )
                 ORDER BY t"
            )),
            dead: DeadAlarms::build(|of_type, after| {
                dead_alarms(alarms, of_type, after)
            }),
            // The earliest unclaimed alarm (the first entry of the unclaimed index), and the
            // earliest time a claimed one becomes claimable, due and its lease ended (the first
            // entry of the claimable index).
            next_due: statement(format!(
                "SELECT min(t) FROM (
                     SELECT min(due_at) AS t FROM {alarms} WHERE dead = 0 AND claimed_at IS NULL
                     UNION ALL
                     SELECT * FROM (
                         SELECT max(due_at, claim_expires_at) FROM {alarms}
                         WHERE claimed_at IS NOT NULL AND dead = 0
                         ORDER BY max(due_at, claim_expires_at)
                         LIMIT 1
                     )
                 )"
            )),
            // The first due unclaimed alarms, read in order from the unclaimed index (which
            // holds none of the alarms claimed ahead and not yet fired), merged with the
            // claims that became claimable (a range of the claimable index, which holds the
            // claims of live runtimes well after it): no claim reads alarms it will not take.
            // In an immediate transaction of its own, sent with it in one round trip: no other
            // writer claims the same rows between the selection and the update. Not flushed
            // to disk on its own (see [`Sql::claim`]).
            claim: statement(format!(
                "{unflushed}BEGIN IMMEDIATE;
                 UPDATE {alarms} SET claimed_at = ?1, claim_expires_at = ?3
                 WHERE rowid IN (
                     SELECT rowid FROM (
                         SELECT * FROM (
                             SELECT rowid, due_at, object_type, object_id, name FROM {alarms}
                             WHERE dead = 0 AND claimed_at IS NULL AND due_at <= ?2
                             ORDER BY due_at, object_type, object_id, name
                             LIMIT ?4
                         )
                         UNION ALL
                         SELECT * FROM (
                             SELECT rowid, due_at, object_type, object_id, name FROM {alarms}
                             WHERE claimed_at IS NOT NULL AND max(due_at, claim_expires_at) <= ?2
                                 AND claim_expires_at <= ?1 AND dead = 0
                             ORDER BY due_at, object_type, object_id, name
                             LIMIT ?4
                         )
                     )
                     ORDER BY due_at, object_type, object_id, name
                     LIMIT ?4
                 )
                 RETURNING {CLAIMED_ROW};
                 COMMIT;{flushed}"
            )),
            // `$1`: the claims, a JSON array of `[type, id, name, claimed at]`; `$2`: the end
            // of their new lease. One statement for any number of claims: each row is found by
            // its primary key.
            renew: statement(format!(
                "UPDATE {alarms} SET claim_expires_at = $2
                 FROM (SELECT value->>0 AS t, value->>1 AS i, value->>2 AS n, value->>3 AS c
                       FROM json_each($1)) AS w
                 WHERE object_type = w.t AND object_id = w.i AND name = w.n AND claimed_at = w.c"
            )),
            finish: statement(format!(
                "DELETE FROM {alarms}
                 WHERE object_type = ?1 AND object_id = ?2 AND name = ?3 AND claimed_at = ?4"
            )),
            fail_retry: statement(format!(
                "UPDATE {alarms} SET attempts = ?5, last_error = ?6, claimed_at = NULL,
                     due_at = ?7, dead = 0
                 WHERE object_type = ?1 AND object_id = ?2 AND name = ?3 AND claimed_at = ?4"
            )),
            fail_dead: statement(format!(
                "UPDATE {alarms} SET attempts = ?5, last_error = ?6, claimed_at = NULL, dead = 1
                 WHERE object_type = ?1 AND object_id = ?2 AND name = ?3 AND claimed_at = ?4"
            )),
            release: statement(format!(
                "UPDATE {alarms} SET claimed_at = NULL
                 WHERE object_type = ?1 AND object_id = ?2 AND name = ?3 AND claimed_at = ?4"
            )),
            kv_get: statement(format!(
                "SELECT value FROM {kv} WHERE object_type = ?1 AND object_id = ?2 AND key = ?3"
            )),
            kv_list: statement(format!(
                "SELECT key, value FROM {kv}
                 WHERE object_type = ?1 AND object_id = ?2 AND key >= ?3
                     AND (?4 IS NULL OR key < ?4) AND (?5 IS NULL OR key > ?5)
                 ORDER BY key LIMIT ?6"
            )),
            kv_usage: statement(format!(
                "SELECT kv_keys, kv_bytes FROM {objects}
                 WHERE object_type = ?1 AND object_id = ?2 AND state IS NOT NULL"
            )),
            kv_clear: statement(format!(
                "DELETE FROM {kv} WHERE object_type = ?1 AND object_id = ?2"
            )),
        }
    }
}

/// A claimed alarm as [`CLAIMED_ROW`] encodes it.
type ClaimedRow = (
    String,
    String,
    String,
    i64,
    i64,
    Option<String>,
    Option<String>,
);

/// An alarm claimed at `claimed_at`, from a row of [`CLAIMED_ROW`].
pub(super) fn claimed_from_row(
    row: &SqliteRow,
    claimed_at: SystemTime,
) -> Result<AlarmRecord, StorageError> {
    let decode =
        |error: Box<dyn std::error::Error + Send + Sync>| db_err(sqlx::Error::Decode(error));
    let text: &str = row.try_get(0).map_err(db_err)?;
    let (object_type, object_id, name, due_at, attempts, last_error, payload): ClaimedRow =
        serde_json::from_str(text).map_err(|error| decode(error.into()))?;
    Ok(AlarmRecord {
        key: ObjectKey::new(object_type, object_id),
        name,
        due_at: from_micros(due_at)?,
        attempts: from_db_attempts(attempts)?,
        claimed_at: Some(claimed_at),
        last_error,
        dead: false,
        payload: payload
            .map(hex::decode)
            .transpose()
            .map_err(|error| decode(error.into()))?,
    })
}

pub(super) fn alarm_from_row(row: &SqliteRow) -> Result<AlarmRecord, StorageError> {
    let get_err = |err: sqlx::Error| db_err(err);
    let claimed_at: Option<i64> = row.try_get("claimed_at").map_err(get_err)?;
    Ok(AlarmRecord {
        key: ObjectKey::new(
            row.try_get::<String, _>("object_type").map_err(get_err)?,
            row.try_get::<String, _>("object_id").map_err(get_err)?,
        ),
        name: row.try_get("name").map_err(get_err)?,
        due_at: from_micros(row.try_get("due_at").map_err(get_err)?)?,
        attempts: from_db_attempts(row.try_get("attempts").map_err(get_err)?)?,
        claimed_at: claimed_at.map(from_micros).transpose()?,
        last_error: row.try_get("last_error").map_err(get_err)?,
        dead: row.try_get("dead").map_err(get_err)?,
        payload: row.try_get("payload").map_err(get_err)?,
    })
}
