//! The batch insert that answers per position (`insert_batch`): the insert statement, which
//! inserts in key order then position order and returns each row's key, in one `BEGIN
//! IMMEDIATE` transaction, mapped back to the positions of the batch.

use std::time::SystemTime;

use durable_runtime::fsm::InstanceId;
use durable_runtime::fsm::store::{NewInstance, positions};
use durable_runtime::storage::StorageError;
use serde_json::json;
use sqlx::Row;

use super::{SqliteFsmStore, encode, scope_mask};
use crate::schema::to_micros;
use crate::sqlite::db_err;

/// Inserts `instances` in one statement and answers per position.
pub(super) async fn insert_batch(
    store: &SqliteFsmStore,
    instances: &[NewInstance],
    now: SystemTime,
) -> Result<Vec<Option<InstanceId>>, StorageError> {
    if instances.is_empty() {
        return Ok(Vec::new());
    }
    let rows = instances
        .iter()
        .map(|instance| {
            Ok(json!({
                "fsm": instance.fsm,
                "version": instance.fsm_version,
                "step": instance.step,
                "state": instance.state,
                "queue": instance.queue,
                "priority": instance.priority,
                "eligible_at": to_micros(instance.eligible_at)?,
                "key": instance.correlation_key,
                "scope": scope_mask(&instance.correlation_scope),
                "parent": None::<i64>,
                "concurrency_key": instance.concurrency_key,
                "concurrency_limit": instance.concurrency_limit.max(1),
            }))
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    let now = to_micros(now)?;
    let mut writer = store.writer.lock().await?;
    let mut tx = writer.begin_immediate().await?;
    let inserted = sqlx::query(store.sql.insert.clone())
        .bind(encode(&rows)?)
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
    tx.commit().await.map_err(db_err)?;
    let returned = inserted
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
