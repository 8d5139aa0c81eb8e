//! A batch of state writes in one statement.
//!
//! The common batch — new and changed states, no alarm changes — needs no explicit
//! transaction: one statement is atomic on its own. Its inserts and updates are data-modifying
//! CTEs over `unnest` of one array per column, and its result checks that every write changed
//! a row; if one did not, it calls `durable_version_mismatch()` (migration 3), whose error
//! aborts the statement, so nothing of the batch is applied. That saves the `BEGIN` and
//! `COMMIT` round trips of a transaction. The store then reads the batch's stored versions to
//! name the write that did not match.

use durable_runtime::storage::{CommitError, StorageError};
use sqlx::{PgConnection, SqlStr};

use super::db_err;
use super::writes::Prepared;
use crate::conflict::{StoredVersion, UNLOCATED_RETRIES, first_conflict, kept_changing, raised_by};
use crate::schema::statement;

/// The name in the error of `durable_version_mismatch()`.
const VERSION_MISMATCH: &str = "durable_version_mismatch";

/// The SQLSTATE of an error raised by PL/pgSQL's `RAISE EXCEPTION` (`raise_exception`).
const RAISE_EXCEPTION: &str = "P0001";

/// The statements, for the given tables and qualifier (schema and prefix).
#[derive(Debug)]
pub(super) struct Statements {
    /// Inserts (`$1`–`$3`: types, ids, states) and updates (`$4`–`$7`: types, ids, states,
    /// expected versions) in one statement.
    write: SqlStr,
    /// The stored versions of the objects named by `$1` (types) and `$2` (ids), and whether
    /// each holds a state.
    versions: SqlStr,
}

impl Statements {
    pub(super) fn new(objects: &str, qualifier: &str) -> Self {
        Self {
            write: statement(format!(
                "WITH inserted AS (
                     INSERT INTO {objects} (object_type, object_id, state, version)
                     SELECT t, i, s, 1 FROM unnest($1::text[], $2::text[], $3::text[]) AS v(t, i, s)
                     ON CONFLICT (object_type, object_id) DO NOTHING
                     RETURNING 1
                 ), updated AS (
                     UPDATE {objects} o SET state = v.s, version = o.version + 1, updated_at = now()
                     FROM unnest($4::text[], $5::text[], $6::text[], $7::int8[]) AS v(t, i, s, e)
                     WHERE o.object_type = v.t AND o.object_id = v.i AND o.version = v.e
                     RETURNING 1
                 )
                 SELECT CASE
                     WHEN (SELECT count(*) FROM inserted) = cardinality($1::text[])
                      AND (SELECT count(*) FROM updated) = cardinality($4::text[]) THEN 0
                     ELSE {qualifier}durable_version_mismatch()
                 END"
            )),
            versions: statement(format!(
                "SELECT o.object_type, o.object_id, o.version, o.state IS NOT NULL
                 FROM {objects} o
                 JOIN unnest($1::text[], $2::text[]) AS k(t, i)
                     ON o.object_type = k.t AND o.object_id = k.i"
            )),
        }
    }
}

/// Whether `prepared` can be written by [`commit`]: every write has a state and no alarm
/// changes.
pub(super) fn applies(prepared: &[Prepared<'_>]) -> bool {
    prepared
        .iter()
        .all(|p| p.state.is_some() && p.alarms.is_empty())
}

/// Commits a batch of state writes (see [`applies`]) in one statement.
pub(super) async fn commit(
    pool: &mut PgConnection,
    statements: &Statements,
    prepared: &[Prepared<'_>],
) -> Result<(), CommitError> {
    let (inserts, updates): (Vec<&Prepared<'_>>, Vec<&Prepared<'_>>) =
        prepared.iter().partition(|p| p.expected == 0);
    let (insert_types, insert_ids, insert_states) = columns(&inserts);
    let (update_types, update_ids, update_states) = columns(&updates);
    let expected: Vec<i64> = updates.iter().map(|p| p.expected).collect();
    for _ in 0..UNLOCATED_RETRIES {
        let written = sqlx::query(statements.write.clone())
            .bind(&insert_types)
            .bind(&insert_ids)
            .bind(&insert_states)
            .bind(&update_types)
            .bind(&update_ids)
            .bind(&update_states)
            .bind(&expected)
            .execute(&mut *pool)
            .await;
        match written {
            Ok(_) => return Ok(()),
            Err(error) if raised_by(&error, RAISE_EXCEPTION, VERSION_MISMATCH) => {
                if let Some(conflict) = locate_conflict(&mut *pool, statements, prepared).await? {
                    return Err(conflict);
                }
            }
            Err(error) => return Err(db_err(error).into()),
        }
    }
    Err(kept_changing())
}

/// The types, ids and states of `writes`, one array each.
fn columns<'a>(writes: &[&Prepared<'a>]) -> (Vec<&'a str>, Vec<&'a str>, Vec<&'a str>) {
    (
        writes
            .iter()
            .map(|p| p.write.key.object_type.as_str())
            .collect(),
        writes
            .iter()
            .map(|p| p.write.key.object_id.as_str())
            .collect(),
        writes.iter().map(|p| p.state.unwrap_or_default()).collect(),
    )
}

/// Reads the stored versions of the batch's objects and names the first write, in batch order,
/// whose expectation does not hold.
async fn locate_conflict(
    pool: &mut PgConnection,
    statements: &Statements,
    prepared: &[Prepared<'_>],
) -> Result<Option<CommitError>, StorageError> {
    let types: Vec<&str> = prepared
        .iter()
        .map(|p| p.write.key.object_type.as_str())
        .collect();
    let ids: Vec<&str> = prepared
        .iter()
        .map(|p| p.write.key.object_id.as_str())
        .collect();
    let stored: Vec<StoredVersion> = sqlx::query_as(statements.versions.clone())
        .bind(types)
        .bind(ids)
        .fetch_all(&mut *pool)
        .await
        .map_err(db_err)?;
    let mut in_batch_order: Vec<&Prepared<'_>> = prepared.iter().collect();
    in_batch_order.sort_by_key(|p| p.index);
    first_conflict(
        in_batch_order.into_iter().map(|p| (p.index, p.write)),
        stored,
    )
}
