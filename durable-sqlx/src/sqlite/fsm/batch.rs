//! The batch insert that answers per position (`insert_batch`): the insert statement, which
//! inserts in key order then position order and returns each row's key, in one `BEGIN
//! IMMEDIATE` transaction, mapped back to the positions of the batch.

use std::time::SystemTime;

use durable_runtime::fsm::InstanceId;
use durable_runtime::fsm::store::{NewInstance, positions};
use durable_runtime::storage::StorageError;
use sqlx::Row;

use super::{SqliteFsmStore, encode};
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
        .map(|instance| super::instance_row(instance, None))
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
