//! The key-value changes of a batch, applied inside its transaction, with each object's
//! counters kept and its limits checked.

use durable_runtime::storage::{CommitError, KvLimitExceeded, KvUsage, ObjectWrite, StorageError};
use sqlx::SqliteConnection;

use super::db_err;
use super::sql::Sql;
use crate::net_kv::{NetKv, to_count};

/// Applies the key-value changes of `batch` on `conn`, in its open transaction. The inner
/// error names the first write, in batch order, that exceeds a limit; the caller rolls back.
pub(super) async fn apply(
    conn: &mut SqliteConnection,
    sql: &Sql,
    batch: &[ObjectWrite],
) -> Result<Result<(), CommitError>, StorageError> {
    for (index, write) in batch.iter().enumerate() {
        let net = NetKv::of(&write.kv);
        if net.is_empty() {
            continue;
        }
        if let Some(limit) = apply_one(conn, sql, write, &net).await? {
            return Ok(Err(CommitError::KvLimit {
                index,
                key: write.key.clone(),
                limit,
            }));
        }
    }
    Ok(Ok(()))
}

/// Applies one write's changes; returns the limit they exceed, if any.
async fn apply_one(
    conn: &mut SqliteConnection,
    sql: &Sql,
    write: &ObjectWrite,
    net: &NetKv<'_>,
) -> Result<Option<KvLimitExceeded>, StorageError> {
    let (t, i) = (&write.key.object_type, &write.key.object_id);
    if net.clear {
        sqlx::query(sql.kv_clear.clone())
            .bind(t)
            .bind(i)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    let (mut keys, mut bytes) = (0i64, 0i64);
    for (key, value) in &net.changes {
        if !net.clear {
            let removed: Option<i64> = sqlx::query_scalar(sql.kv_remove.clone())
                .bind(t)
                .bind(i)
                .bind(key.as_bytes())
                .fetch_optional(&mut *conn)
                .await
                .map_err(db_err)?;
            if let Some(removed) = removed {
                keys -= 1;
                bytes -= removed;
            }
        }
        if let Some(value) = value {
            let size = i64::try_from(key.len() + value.len()).unwrap_or(i64::MAX);
            sqlx::query(sql.kv_insert.clone())
                .bind(t)
                .bind(i)
                .bind(key.as_bytes())
                .bind(*value)
                .bind(size)
                .execute(&mut *conn)
                .await
                .map_err(db_err)?;
            keys += 1;
            bytes += size;
        }
    }
    let (now_keys, now_bytes): (i64, i64) = sqlx::query_as(sql.kv_count.clone())
        .bind(t)
        .bind(i)
        .bind(net.clear)
        .bind(keys)
        .bind(bytes)
        .fetch_one(&mut *conn)
        .await
        .map_err(db_err)?;
    let usage = KvUsage {
        keys: to_count(now_keys),
        bytes: to_count(now_bytes),
    };
    Ok(net
        .limit
        .and_then(|(max_keys, max_bytes)| usage.exceeds(max_keys, max_bytes)))
}
