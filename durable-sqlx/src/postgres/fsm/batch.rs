//! The batch insert that answers per position (`insert_batch`): the insert statement, which
//! inserts in key order then position order and returns each row's key, mapped back to the
//! positions of the batch.

use std::time::SystemTime;

use durable_runtime::fsm::InstanceId;
use durable_runtime::fsm::store::{NewInstance, positions};
use durable_runtime::storage::StorageError;
use sqlx::Row;

use super::{InsertColumns, PostgresFsmStore};
use crate::postgres::db_err;
use crate::postgres::time::PgTime;

/// Inserts `instances` in one statement and answers per position.
pub(super) async fn insert_batch(
    store: &PostgresFsmStore,
    instances: &[NewInstance],
    now: SystemTime,
) -> Result<Vec<Option<InstanceId>>, StorageError> {
    if instances.is_empty() {
        return Ok(Vec::new());
    }
    let mut columns = InsertColumns::default();
    for instance in instances {
        columns.push(instance, None)?;
    }
    let rows = sqlx::query(store.sql.insert.clone())
        .bind(columns.fsm)
        .bind(columns.version)
        .bind(columns.step)
        .bind(columns.state)
        .bind(columns.queue)
        .bind(columns.priority)
        .bind(columns.eligible_at)
        .bind(columns.key)
        .bind(columns.scope)
        .bind(PgTime::new(now)?)
        .bind(columns.parent)
        .bind(columns.concurrency_key)
        .bind(columns.concurrency_limit)
        .bind(columns.rate_limit_key)
        .bind(columns.rate_limit_units)
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)?;
    let returned = rows
        .iter()
        .map(|row| {
            Ok((
                InstanceId::new(row.try_get::<i64, _>("id").map_err(db_err)?),
                row.try_get::<Option<String>, _>("correlation_key")
                    .map_err(db_err)?,
            ))
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    Ok(positions(instances, returned))
}
