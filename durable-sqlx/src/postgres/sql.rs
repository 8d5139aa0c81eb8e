//! [`Sql`]: the texts of the store's statements, built once per store with its table names
//! (schema and prefix) filled in, and the decoding of the alarm rows they return.

use durable_runtime::storage::{AlarmRecord, ObjectKey, StorageError};
use sqlx::postgres::PgRow;
use sqlx::{Row, SqlStr};

use super::time::PgTime;
use super::{db_err, states};
use crate::dead_alarms::DeadAlarms;
use crate::schema::{Names, from_db_attempts, statement};

/// The store's statements, with its table names filled in.
#[derive(Debug)]
pub(super) struct Sql {
    /// A batch of state writes in one statement (see [`states`]).
    pub(super) states: states::Statements,
    pub(super) load: SqlStr,
    /// `$1`, `$2`: types and ids; one row per key, in order.
    pub(super) load_many: SqlStr,
    /// [`load`](Self::load)'s version alone.
    pub(super) load_version: SqlStr,
    /// [`load_many`](Self::load_many)'s versions alone.
    pub(super) load_versions: SqlStr,
    pub(super) version: SqlStr,
    pub(super) insert: SqlStr,
    pub(super) update: SqlStr,
    pub(super) touch: SqlStr,
    pub(super) insert_many: SqlStr,
    pub(super) update_many: SqlStr,
    pub(super) finish_many: SqlStr,
    /// `$1`–`$4`: types, ids, names and due times of alarms to schedule.
    pub(super) set_many: SqlStr,
    /// `$1`–`$3`: types, ids and names of alarms to cancel.
    pub(super) cancel_many: SqlStr,
    /// `$1`, `$2`: types and ids of objects whose alarms are all cancelled.
    pub(super) cancel_all_many: SqlStr,
    pub(super) alarm_set: SqlStr,
    pub(super) alarm_cancel: SqlStr,
    pub(super) alarm_cancel_all: SqlStr,
    pub(super) delete_object: SqlStr,
    /// Key-value statements (see [`KvSql`]).
    pub(super) kv: KvSql,
    pub(super) list_first: SqlStr,
    pub(super) list_after: SqlStr,
    pub(super) list_alarms: SqlStr,
    /// The types with stored objects, in order.
    pub(super) list_types: SqlStr,
    /// Dead alarms (see [`dead_alarms`]).
    pub(super) dead: DeadAlarms,
    pub(super) next_due: SqlStr,
    pub(super) claim: SqlStr,
    /// `$1`–`$4`: types, ids, names and claim times of claims; `$5`: their new lease end.
    pub(super) renew: SqlStr,
    pub(super) finish: SqlStr,
    pub(super) fail_retry: SqlStr,
    pub(super) fail_dead: SqlStr,
    pub(super) release: SqlStr,
    /// `$1`–`$6`: type, id, key, fingerprint, reply, expiry (µs) of a stored reply.
    pub(super) reply_insert: SqlStr,
    /// `$1`–`$3`: type, id and key of a stored reply.
    pub(super) reply_load: SqlStr,
    /// `$1`: now (µs); `$2`: the most replies to remove.
    pub(super) reply_sweep: SqlStr,
    /// Every stored reply of one object.
    pub(super) reply_delete_all: SqlStr,
}

/// One of the [`DeadAlarms`] statements.
fn dead_alarms(alarms: &str, columns: &str, of_type: bool, after: bool) -> SqlStr {
    let (of_type, position) = match (of_type, after) {
        (true, true) => (
            "AND object_type = $2",
            "AND (object_type, object_id, name) > ($3, $4, $5)",
        ),
        (true, false) => ("AND object_type = $2", ""),
        (false, true) => ("", "AND (object_type, object_id, name) > ($2, $3, $4)"),
        (false, false) => ("", ""),
    };
    statement(format!(
        "SELECT {columns} FROM {alarms}
         WHERE dead {of_type} {position}
         ORDER BY object_type, object_id, name LIMIT $1"
    ))
}

impl Sql {
    pub(super) fn new(names: &Names) -> Self {
        let objects = &names.objects;
        let alarms = &names.alarms;
        let kv = &names.kv;
        let idempotency = &names.idempotency;
        let columns =
            "object_type, object_id, name, due_at, attempts, claimed_at, last_error, dead, payload";
        let a_columns = "a.object_type, a.object_id, a.name, a.due_at, a.attempts, a.claimed_at, \
                         a.last_error, a.dead, a.payload";
        Self {
            states: states::Statements::new(objects, &names.qualifier),
            load: statement(format!(
                "SELECT state, version FROM {objects} WHERE object_type = $1 AND object_id = $2"
            )),
            load_many: statement(format!(
                "SELECT o.state, o.version
                 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(t, i, n)
                 LEFT JOIN {objects} o ON o.object_type = k.t AND o.object_id = k.i
                 ORDER BY k.n"
            )),
            load_version: statement(format!(
                "SELECT version FROM {objects} WHERE object_type = $1 AND object_id = $2"
            )),
            load_versions: statement(format!(
                "SELECT o.version
                 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(t, i, n)
                 LEFT JOIN {objects} o ON o.object_type = k.t AND o.object_id = k.i
                 ORDER BY k.n"
            )),
            version: statement(format!(
                "SELECT version FROM {objects} WHERE object_type = $1 AND object_id = $2"
            )),
            insert: statement(format!(
                "INSERT INTO {objects} (object_type, object_id, state, version)
                 VALUES ($1, $2, $3, 1)
                 ON CONFLICT (object_type, object_id) DO NOTHING"
            )),
            update: statement(format!(
                "UPDATE {objects} SET state = $3, version = version + 1, updated_at = now()
                 WHERE object_type = $1 AND object_id = $2 AND version = $4"
            )),
            // A tombstone has no state to keep: only a write with a state recreates it.
            touch: statement(format!(
                "UPDATE {objects} SET version = version + 1, updated_at = now()
                 WHERE object_type = $1 AND object_id = $2 AND version = $3
                     AND state IS NOT NULL"
            )),
            // The multi-row forms take one array per column, so each is one prepared statement
            // whatever the batch size.
            insert_many: statement(format!(
                "INSERT INTO {objects} (object_type, object_id, state, version)
                 SELECT t, i, s, 1 FROM unnest($1::text[], $2::text[], $3::text[]) AS v(t, i, s)
                 ON CONFLICT (object_type, object_id) DO NOTHING
                 RETURNING object_type, object_id"
            )),
            update_many: statement(format!(
                "UPDATE {objects} o SET state = v.s, version = o.version + 1, updated_at = now()
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[]) AS v(t, i, s, e)
                 WHERE o.object_type = v.t AND o.object_id = v.i AND o.version = v.e
                 RETURNING o.object_type, o.object_id"
            )),
            finish_many: statement(format!(
                "DELETE FROM {alarms} a
                 USING unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
                     AS v(t, i, n, c)
                 WHERE a.object_type = v.t AND a.object_id = v.i AND a.name = v.n
                     AND a.claimed_at = v.c"
            )),
            set_many: statement(format!(
                "INSERT INTO {alarms}
                     (object_type, object_id, name, due_at, claimed_at, attempts, last_error, dead,
                      payload)
                 SELECT t, i, n, d, NULL, 0, NULL, false, p
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::bytea[])
                     AS v(t, i, n, d, p)
                 ON CONFLICT (object_type, object_id, name) DO UPDATE SET
                     due_at = excluded.due_at, claimed_at = NULL, attempts = 0,
                     last_error = NULL, dead = false, payload = excluded.payload"
            )),
            cancel_many: statement(format!(
                "DELETE FROM {alarms} a
                 USING unnest($1::text[], $2::text[], $3::text[]) AS v(t, i, n)
                 WHERE a.object_type = v.t AND a.object_id = v.i AND a.name = v.n"
            )),
            cancel_all_many: statement(format!(
                "DELETE FROM {alarms} a
                 USING unnest($1::text[], $2::text[]) AS v(t, i)
                 WHERE a.object_type = v.t AND a.object_id = v.i"
            )),
            alarm_set: statement(format!(
                "INSERT INTO {alarms}
                     (object_type, object_id, name, due_at, claimed_at, attempts, last_error, dead,
                      payload)
                 VALUES ($1, $2, $3, $4, NULL, 0, NULL, false, $5)
                 ON CONFLICT (object_type, object_id, name) DO UPDATE SET
                     due_at = excluded.due_at, claimed_at = NULL, attempts = 0,
                     last_error = NULL, dead = false, payload = excluded.payload"
            )),
            alarm_cancel: statement(format!(
                "DELETE FROM {alarms} WHERE object_type = $1 AND object_id = $2 AND name = $3"
            )),
            alarm_cancel_all: statement(format!(
                "DELETE FROM {alarms} WHERE object_type = $1 AND object_id = $2"
            )),
            reply_insert: statement(format!(
                "INSERT INTO {idempotency}
                     (object_type, object_id, idempotency_key, fingerprint, reply, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (object_type, object_id, idempotency_key) DO UPDATE SET
                     fingerprint = excluded.fingerprint, reply = excluded.reply,
                     expires_at = excluded.expires_at"
            )),
            reply_load: statement(format!(
                "SELECT fingerprint, reply, expires_at FROM {idempotency}
                 WHERE object_type = $1 AND object_id = $2 AND idempotency_key = $3"
            )),
            reply_sweep: statement(format!(
                "DELETE FROM {idempotency} WHERE ctid IN (
                     SELECT ctid FROM {idempotency} WHERE expires_at <= $1 LIMIT $2
                 )"
            )),
            reply_delete_all: statement(format!(
                "DELETE FROM {idempotency} WHERE object_type = $1 AND object_id = $2"
            )),
            // The row stays as a tombstone, one version up (see migration 4).
            delete_object: statement(format!(
                "UPDATE {objects} SET state = NULL, version = version + 1, updated_at = now(),
                     kv_keys = 0, kv_bytes = 0
                 WHERE object_type = $1 AND object_id = $2 AND state IS NOT NULL"
            )),
            kv: KvSql::new(objects, kv, alarms),
            list_first: statement(format!(
                "SELECT object_id FROM {objects} WHERE object_type = $1 AND state IS NOT NULL
                 ORDER BY object_id LIMIT $2"
            )),
            list_after: statement(format!(
                "SELECT object_id FROM {objects}
                 WHERE object_type = $1 AND object_id > $3 AND state IS NOT NULL
                 ORDER BY object_id LIMIT $2"
            )),
            list_alarms: statement(format!(
                "SELECT {columns} FROM {alarms} WHERE object_type = $1 AND object_id = $2
                 ORDER BY due_at, name"
            )),
            // One step of the primary key per type (a loose index scan), rather than a scan of
            // every object: a type holding only tombstones is left out.
            list_types: statement(format!(
                "WITH RECURSIVE types(t) AS (
                     SELECT (SELECT min(object_type) FROM {objects})
                     UNION ALL
                     SELECT (SELECT min(object_type) FROM {objects} WHERE object_type > types.t)
                     FROM types WHERE types.t IS NOT NULL
                 )
                 SELECT t FROM types
                 WHERE t IS NOT NULL AND EXISTS (
                     SELECT 1 FROM {objects} o WHERE o.object_type = types.t AND o.state IS NOT NULL
                 )
                 ORDER BY t"
            )),
            dead: DeadAlarms::build(|of_type, after| dead_alarms(alarms, columns, of_type, after)),
            // Unclaimed alarms by due time (the due index), then the few claimed ones (the
            // claimed index): a claimed alarm is claimable once due and its lease ended
            // (`greatest` skips a missing lease: a claim written before leases has lapsed).
            // The earliest unclaimed alarm (the first entry of the unclaimed index), and the
            // earliest time a claimed one becomes claimable, due and its lease ended (the first
            // entry of the claimable index).
            next_due: statement(format!(
                "SELECT least(
                     (SELECT min(due_at) FROM {alarms} WHERE NOT dead AND claimed_at IS NULL),
                     (SELECT greatest(due_at, claim_expires_at) FROM {alarms}
                      WHERE claimed_at IS NOT NULL AND NOT dead
                      ORDER BY greatest(due_at, claim_expires_at)
                      LIMIT 1)
                 )"
            )),
            // The first due unclaimed alarms, read in order from the unclaimed index (which
            // holds none of the alarms claimed ahead and not yet fired), and the claims that
            // became claimable (a range of the claimable index, which holds the claims of live
            // runtimes well after it): no claim reads alarms it will not take. Rows another
            // scheduler is claiming right now are skipped, and a row claimed and committed
            // meanwhile is re-checked against the WHERE clause before it is locked, so two
            // schedulers never claim one alarm; of the rows locked, the first `$4` are claimed.
            claim: statement(format!(
                "WITH unclaimed AS (
                     SELECT object_type, object_id, name, due_at FROM {alarms}
                     WHERE NOT dead AND claimed_at IS NULL AND due_at <= $2
                     ORDER BY due_at, object_type, object_id, name
                     LIMIT $4
                     FOR UPDATE SKIP LOCKED
                 ), lapsed AS (
                     SELECT object_type, object_id, name, due_at FROM {alarms}
                     WHERE claimed_at IS NOT NULL AND greatest(due_at, claim_expires_at) <= $2
                         AND claim_expires_at <= $1 AND NOT dead
                     ORDER BY due_at, object_type, object_id, name
                     LIMIT $4
                     FOR UPDATE SKIP LOCKED
                 ), due AS (
                     SELECT object_type, object_id, name FROM (
                         SELECT * FROM unclaimed UNION ALL SELECT * FROM lapsed
                     ) AS both_kinds
                     ORDER BY due_at, object_type, object_id, name
                     LIMIT $4
                 )
                 UPDATE {alarms} a SET claimed_at = $1, claim_expires_at = $3
                 FROM due
                 WHERE a.object_type = due.object_type AND a.object_id = due.object_id
                     AND a.name = due.name
                 RETURNING {a_columns}"
            )),
            renew: statement(format!(
                "UPDATE {alarms} a SET claim_expires_at = $5
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
                     AS v(t, i, n, c)
                 WHERE a.object_type = v.t AND a.object_id = v.i AND a.name = v.n
                     AND a.claimed_at = v.c"
            )),
            finish: statement(format!(
                "DELETE FROM {alarms}
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            )),
            fail_retry: statement(format!(
                "UPDATE {alarms} SET attempts = $5, last_error = $6, claimed_at = NULL,
                     due_at = $7, dead = false
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            )),
            fail_dead: statement(format!(
                "UPDATE {alarms} SET attempts = $5, last_error = $6, claimed_at = NULL, dead = true
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            )),
            release: statement(format!(
                "UPDATE {alarms} SET claimed_at = NULL
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            )),
        }
    }
}

pub(super) fn alarm_from_row(row: &PgRow) -> Result<AlarmRecord, StorageError> {
    let claimed_at: Option<PgTime> = row.try_get("claimed_at").map_err(db_err)?;
    Ok(AlarmRecord {
        key: ObjectKey::new(
            row.try_get::<String, _>("object_type").map_err(db_err)?,
            row.try_get::<String, _>("object_id").map_err(db_err)?,
        ),
        name: row.try_get("name").map_err(db_err)?,
        due_at: row.try_get::<PgTime, _>("due_at").map_err(db_err)?.get()?,
        attempts: from_db_attempts(i64::from(
            row.try_get::<i32, _>("attempts").map_err(db_err)?,
        ))?,
        claimed_at: claimed_at.map(PgTime::get).transpose()?,
        last_error: row.try_get("last_error").map_err(db_err)?,
        dead: row.try_get("dead").map_err(db_err)?,
        payload: row.try_get("payload").map_err(db_err)?,
    })
}

/// The key-value statements. A key is found by its primary key, `(key_head, key_hash)`
/// computed from it (see migration 7); `$1`, `$2` are the object's type and id.
#[derive(Debug)]
pub(super) struct KvSql {
    /// `$3`: the key.
    pub(super) get: SqlStr,
    /// `$3`: the prefix; `$4`: the end of its range (or NULL); `$5`: the key to start after
    /// (or NULL); `$6`: the limit.
    pub(super) list: SqlStr,
    pub(super) usage: SqlStr,
    pub(super) clear: SqlStr,
    /// `$1`, `$2`: types and ids of objects whose keys are all removed.
    pub(super) clear_many: SqlStr,
    /// `$1`–`$3`: types, ids and keys removed or replaced, taken off their objects' counters.
    pub(super) remove_many: SqlStr,
    /// `$1`–`$5`: types, ids, keys, values and sizes of new values, added to their objects'
    /// counters.
    pub(super) insert_many: SqlStr,
    /// `$1`–`$3`: types, ids and alarm limits (NULL: none) of limited objects; one row per
    /// element, in order: the object's key count and bytes, and its alarm count (counted up to
    /// one past its limit, 0 without one).
    pub(super) usage_many: SqlStr,
}

impl KvSql {
    fn new(objects: &str, kv: &str, alarms: &str) -> Self {
        const BY_KEY: &str = "object_type = $1 AND object_id = $2
             AND key_head = substring($3::bytea FROM 1 FOR 1024) AND key_hash = sha256($3::bytea)";
        Self {
            get: statement(format!("SELECT value FROM {kv} WHERE {BY_KEY}")),
            list: statement(format!(
                "SELECT key, value FROM {kv}
                 WHERE object_type = $1 AND object_id = $2
                     AND key_head >= substring($3::bytea FROM 1 FOR 1024) AND key >= $3
                     AND ($4::bytea IS NULL OR key < $4)
                     AND ($5::bytea IS NULL OR
                         (key_head >= substring($5::bytea FROM 1 FOR 1024) AND key > $5))
                 ORDER BY key_head, key LIMIT $6"
            )),
            usage: statement(format!(
                "SELECT kv_keys, kv_bytes FROM {objects}
                 WHERE object_type = $1 AND object_id = $2 AND state IS NOT NULL"
            )),
            clear: statement(format!(
                "DELETE FROM {kv} WHERE object_type = $1 AND object_id = $2"
            )),
            clear_many: statement(format!(
                "WITH c AS (SELECT * FROM unnest($1::text[], $2::text[]) AS c(t, i)),
                 gone AS (DELETE FROM {kv} USING c
                          WHERE {kv}.object_type = c.t AND {kv}.object_id = c.i)
                 UPDATE {objects} AS o SET kv_keys = 0, kv_bytes = 0
                 FROM c WHERE o.object_type = c.t AND o.object_id = c.i"
            )),
            remove_many: statement(format!(
                "WITH w AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[]) AS w(t, i, k)),
                 gone AS (DELETE FROM {kv} AS kv USING w
                          WHERE kv.object_type = w.t AND kv.object_id = w.i
                              AND kv.key_head = substring(w.k FROM 1 FOR 1024)
                              AND kv.key_hash = sha256(w.k)
                          RETURNING kv.object_type AS t, kv.object_id AS i, kv.bytes AS b),
                 d AS (SELECT t, i, count(*) AS n, sum(b) AS b FROM gone GROUP BY t, i)
                 UPDATE {objects} AS o SET kv_keys = o.kv_keys - d.n, kv_bytes = o.kv_bytes - d.b
                 FROM d WHERE o.object_type = d.t AND o.object_id = d.i"
            )),
            insert_many: statement(format!(
                "WITH w AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[],
                                                 $5::bigint[]) AS w(t, i, k, v, b)),
                 added AS (INSERT INTO {kv} (object_type, object_id, key, value, bytes)
                           SELECT t, i, k, v, b FROM w),
                 p AS (SELECT t, i, count(*) AS n, sum(b) AS b FROM w GROUP BY t, i)
                 UPDATE {objects} AS o SET kv_keys = o.kv_keys + p.n, kv_bytes = o.kv_bytes + p.b
                 FROM p WHERE o.object_type = p.t AND o.object_id = p.i"
            )),
            usage_many: statement(format!(
                "SELECT o.kv_keys, o.kv_bytes,
                     CASE WHEN w.m IS NULL THEN 0 ELSE
                         (SELECT count(*) FROM (SELECT 1 FROM {alarms} AS a
                              WHERE a.object_type = w.t AND a.object_id = w.i
                              LIMIT w.m + 1) AS s)
                     END
                 FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS w(t, i, m, n)
                 LEFT JOIN {objects} AS o ON o.object_type = w.t AND o.object_id = w.i
                 ORDER BY w.n"
            )),
        }
    }
}
