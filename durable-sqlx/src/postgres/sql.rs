//! [`Sql`]: the texts of the store's statements, built once per store with its table names
//! (schema and prefix) filled in, and the decoding of the alarm rows they return.

use durable_runtime::storage::{AlarmRecord, ObjectKey, StorageError};
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::time::PgTime;
use super::{db_err, states};
use crate::schema::{Names, from_db_attempts};

/// The store's statements, with its table names filled in.
#[derive(Debug)]
pub(super) struct Sql {
    /// A batch of state writes in one statement (see [`states`]).
    pub(super) states: states::Statements,
    pub(super) load: String,
    /// `$1`, `$2`: types and ids; one row per key, in order.
    pub(super) load_many: String,
    pub(super) version: String,
    pub(super) insert: String,
    pub(super) update: String,
    pub(super) touch: String,
    pub(super) insert_many: String,
    pub(super) update_many: String,
    pub(super) finish_many: String,
    /// `$1`–`$4`: types, ids, names and due times of alarms to schedule.
    pub(super) set_many: String,
    /// `$1`–`$3`: types, ids and names of alarms to cancel.
    pub(super) cancel_many: String,
    /// `$1`, `$2`: types and ids of objects whose alarms are all cancelled.
    pub(super) cancel_all_many: String,
    pub(super) alarm_set: String,
    pub(super) alarm_cancel: String,
    pub(super) alarm_cancel_all: String,
    pub(super) delete_object: String,
    pub(super) list_first: String,
    pub(super) list_after: String,
    pub(super) list_alarms: String,
    pub(super) next_due: String,
    pub(super) claim: String,
    /// `$1`–`$4`: types, ids, names and claim times of claims; `$5`: their new lease end.
    pub(super) renew: String,
    pub(super) finish: String,
    pub(super) fail_retry: String,
    pub(super) fail_dead: String,
    pub(super) release: String,
}

impl Sql {
    pub(super) fn new(names: &Names) -> Self {
        let objects = &names.objects;
        let alarms = &names.alarms;
        let columns =
            "object_type, object_id, name, due_at, attempts, claimed_at, last_error, dead";
        let a_columns = "a.object_type, a.object_id, a.name, a.due_at, a.attempts, a.claimed_at, \
                         a.last_error, a.dead";
        Self {
            states: states::Statements::new(objects, &names.qualifier),
            load: format!(
                "SELECT state, version FROM {objects} WHERE object_type = $1 AND object_id = $2"
            ),
            load_many: format!(
                "SELECT o.state, o.version
                 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(t, i, n)
                 LEFT JOIN {objects} o ON o.object_type = k.t AND o.object_id = k.i
                 ORDER BY k.n"
            ),
            version: format!(
                "SELECT version FROM {objects} WHERE object_type = $1 AND object_id = $2"
            ),
            insert: format!(
                "INSERT INTO {objects} (object_type, object_id, state, version)
                 VALUES ($1, $2, $3, 1)
                 ON CONFLICT (object_type, object_id) DO NOTHING"
            ),
            update: format!(
                "UPDATE {objects} SET state = $3, version = version + 1, updated_at = now()
                 WHERE object_type = $1 AND object_id = $2 AND version = $4"
            ),
            touch: format!(
                "UPDATE {objects} SET version = version + 1, updated_at = now()
                 WHERE object_type = $1 AND object_id = $2 AND version = $3"
            ),
            // The multi-row forms take one array per column, so each is one prepared statement
            // whatever the batch size.
            insert_many: format!(
                "INSERT INTO {objects} (object_type, object_id, state, version)
                 SELECT t, i, s, 1 FROM unnest($1::text[], $2::text[], $3::text[]) AS v(t, i, s)
                 ON CONFLICT (object_type, object_id) DO NOTHING
                 RETURNING object_type, object_id"
            ),
            update_many: format!(
                "UPDATE {objects} o SET state = v.s, version = o.version + 1, updated_at = now()
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[]) AS v(t, i, s, e)
                 WHERE o.object_type = v.t AND o.object_id = v.i AND o.version = v.e
                 RETURNING o.object_type, o.object_id"
            ),
            finish_many: format!(
                "DELETE FROM {alarms} a
                 USING unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
                     AS v(t, i, n, c)
                 WHERE a.object_type = v.t AND a.object_id = v.i AND a.name = v.n
                     AND a.claimed_at = v.c"
            ),
            set_many: format!(
                "INSERT INTO {alarms}
                     (object_type, object_id, name, due_at, claimed_at, attempts, last_error, dead)
                 SELECT t, i, n, d, NULL, 0, NULL, false
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS v(t, i, n, d)
                 ON CONFLICT (object_type, object_id, name) DO UPDATE SET
                     due_at = excluded.due_at, claimed_at = NULL, attempts = 0,
                     last_error = NULL, dead = false"
            ),
            cancel_many: format!(
                "DELETE FROM {alarms} a
                 USING unnest($1::text[], $2::text[], $3::text[]) AS v(t, i, n)
                 WHERE a.object_type = v.t AND a.object_id = v.i AND a.name = v.n"
            ),
            cancel_all_many: format!(
                "DELETE FROM {alarms} a
                 USING unnest($1::text[], $2::text[]) AS v(t, i)
                 WHERE a.object_type = v.t AND a.object_id = v.i"
            ),
            alarm_set: format!(
                "INSERT INTO {alarms}
                     (object_type, object_id, name, due_at, claimed_at, attempts, last_error, dead)
                 VALUES ($1, $2, $3, $4, NULL, 0, NULL, false)
                 ON CONFLICT (object_type, object_id, name) DO UPDATE SET
                     due_at = excluded.due_at, claimed_at = NULL, attempts = 0,
                     last_error = NULL, dead = false"
            ),
            alarm_cancel: format!(
                "DELETE FROM {alarms} WHERE object_type = $1 AND object_id = $2 AND name = $3"
            ),
            alarm_cancel_all: format!(
                "DELETE FROM {alarms} WHERE object_type = $1 AND object_id = $2"
            ),
            delete_object: format!(
                "DELETE FROM {objects} WHERE object_type = $1 AND object_id = $2"
            ),
            list_first: format!(
                "SELECT object_id FROM {objects} WHERE object_type = $1
                 ORDER BY object_id LIMIT $2"
            ),
            list_after: format!(
                "SELECT object_id FROM {objects} WHERE object_type = $1 AND object_id > $3
                 ORDER BY object_id LIMIT $2"
            ),
            list_alarms: format!(
                "SELECT {columns} FROM {alarms} WHERE object_type = $1 AND object_id = $2
                 ORDER BY due_at, name"
            ),
            // Unclaimed alarms by due time (the due index), then the few claimed ones (the
            // claimed index): a claimed alarm is claimable once due and its lease ended
            // (`greatest` skips a missing lease: a claim written before leases has lapsed).
            next_due: format!(
                "SELECT least(
                     (SELECT min(due_at) FROM {alarms} WHERE NOT dead AND claimed_at IS NULL),
                     (SELECT min(greatest(due_at, claim_expires_at)) FROM {alarms}
                      WHERE claimed_at IS NOT NULL AND NOT dead)
                 )"
            ),
            // Rows another scheduler is claiming right now are skipped, and a row claimed and
            // committed meanwhile is re-checked against the WHERE clause before it is locked,
            // so two schedulers never claim one alarm.
            claim: format!(
                "WITH due AS (
                     SELECT object_type, object_id, name FROM {alarms}
                     WHERE NOT dead AND due_at <= $2
                         AND (claimed_at IS NULL OR claim_expires_at IS NULL
                             OR claim_expires_at <= $1)
                     ORDER BY due_at, object_type, object_id, name
                     LIMIT $4
                     FOR UPDATE SKIP LOCKED
                 )
                 UPDATE {alarms} a SET claimed_at = $1, claim_expires_at = $3
                 FROM due
                 WHERE a.object_type = due.object_type AND a.object_id = due.object_id
                     AND a.name = due.name
                 RETURNING {a_columns}"
            ),
            renew: format!(
                "UPDATE {alarms} a SET claim_expires_at = $5
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
                     AS v(t, i, n, c)
                 WHERE a.object_type = v.t AND a.object_id = v.i AND a.name = v.n
                     AND a.claimed_at = v.c"
            ),
            finish: format!(
                "DELETE FROM {alarms}
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            ),
            fail_retry: format!(
                "UPDATE {alarms} SET attempts = $5, last_error = $6, claimed_at = NULL,
                     due_at = $7, dead = false
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            ),
            fail_dead: format!(
                "UPDATE {alarms} SET attempts = $5, last_error = $6, claimed_at = NULL, dead = true
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            ),
            release: format!(
                "UPDATE {alarms} SET claimed_at = NULL
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            ),
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
    })
}
