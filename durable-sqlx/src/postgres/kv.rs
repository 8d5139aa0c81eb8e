//! The key-value changes of a batch, applied inside its transaction with one array statement
//! per kind of change (clears, removals, new values), each object's counters kept by the same
//! statements; then the limits of its writes (key-value and alarm) checked with one query.

use durable_runtime::storage::{CommitError, StorageError};
use sqlx::PgConnection;

use super::db_err;
use super::sql::KvSql;
use super::writes::Prepared;
use crate::limits::{Limited, Usage, first_exceeded};
use crate::net_alarms::NetAlarms;
use crate::net_kv::NetKv;

/// The columns of the array statements.
#[derive(Default)]
struct Columns<'a> {
    clears: (Vec<&'a str>, Vec<&'a str>),
    /// Keys removed or replaced.
    removed: (Vec<&'a str>, Vec<&'a str>, Vec<&'a [u8]>),
    added: Added<'a>,
}

/// The columns of new values.
#[derive(Default)]
struct Added<'a> {
    types: Vec<&'a str>,
    ids: Vec<&'a str>,
    keys: Vec<&'a [u8]>,
    values: Vec<&'a [u8]>,
    sizes: Vec<i64>,
}

/// Applies the key-value changes of `prepared` (in its lock order) on `conn`, in its open
/// transaction.
pub(super) async fn apply(
    conn: &mut PgConnection,
    sql: &KvSql,
    prepared: &[Prepared<'_>],
) -> Result<(), StorageError> {
    let nets: Vec<NetKv<'_>> = prepared.iter().map(|p| NetKv::of(&p.write.kv)).collect();
    let mut columns = Columns::default();
    for (p, net) in prepared.iter().zip(&nets) {
        let (t, i) = (
            p.write.key.object_type.as_str(),
            p.write.key.object_id.as_str(),
        );
        if net.clear {
            columns.clears.0.push(t);
            columns.clears.1.push(i);
        }
        for (&key, value) in &net.changes {
            // A cleared object has none of its old keys left to remove.
            if !net.clear {
                columns.removed.0.push(t);
                columns.removed.1.push(i);
                columns.removed.2.push(key.as_bytes());
            }
            if let Some(value) = value {
                let added = &mut columns.added;
                added.types.push(t);
                added.ids.push(i);
                added.keys.push(key.as_bytes());
                added.values.push(value);
                added
                    .sizes
                    .push(i64::try_from(key.len() + value.len()).unwrap_or(i64::MAX));
            }
        }
    }
    let Columns {
        clears,
        removed,
        added,
    } = columns;
    if !clears.0.is_empty() {
        sqlx::query(sql.clear_many.clone())
            .bind(clears.0)
            .bind(clears.1)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if !removed.0.is_empty() {
        sqlx::query(sql.remove_many.clone())
            .bind(removed.0)
            .bind(removed.1)
            .bind(removed.2)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if !added.types.is_empty() {
        sqlx::query(sql.insert_many.clone())
            .bind(added.types)
            .bind(added.ids)
            .bind(added.keys)
            .bind(added.values)
            .bind(added.sizes)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    Ok(())
}

/// The first write of `prepared`, in batch order, that leaves its object over one of its
/// limits, read in the open transaction once everything is applied; `None` if no write
/// carries a limit or none goes over.
pub(super) async fn first_over_limit(
    conn: &mut PgConnection,
    sql: &KvSql,
    prepared: &[Prepared<'_>],
) -> Result<Option<CommitError>, StorageError> {
    let limited: Vec<Limited<'_>> = prepared
        .iter()
        .filter_map(|p| {
            let kv = NetKv::of(&p.write.kv);
            let alarms = NetAlarms::of(&p.write.alarms);
            Limited::of(p.index, p.write, &kv, &alarms)
        })
        .collect();
    if limited.is_empty() {
        return Ok(None);
    }
    let types: Vec<&str> = limited.iter().map(|l| l.key.object_type.as_str()).collect();
    let ids: Vec<&str> = limited.iter().map(|l| l.key.object_id.as_str()).collect();
    let max_alarms: Vec<Option<i64>> = limited
        .iter()
        .map(|l| {
            l.alarms
                .map(|max| i64::try_from(max).unwrap_or(i64::MAX - 1))
        })
        .collect();
    let usage: Vec<Usage> = sqlx::query_as(sql.usage_many.clone())
        .bind(types)
        .bind(ids)
        .bind(max_alarms)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?;
    Ok(first_exceeded(&limited, &usage))
}
