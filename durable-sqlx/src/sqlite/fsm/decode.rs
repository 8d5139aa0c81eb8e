//! Reading the FSM tables' rows back: statuses from their checked text, the scope from its bit
//! mask, awaited names from their JSON array, times from integer microseconds. Anything out
//! of range is a typed rejection, never a guess.

use std::time::SystemTime;

use durable_runtime::fsm::store::{ChildRecord, Claimed, InstanceRecord, SignalRecord};
use durable_runtime::fsm::{InstanceId, SignalId, Status};
use durable_runtime::storage::StorageError;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::error::rejected;
use crate::schema::{from_db_attempts, from_micros};
use crate::sqlite::db_err;

pub(super) fn status(text: &str) -> Result<Status, StorageError> {
    text.parse()
        .map_err(|_| rejected(format!("unknown FSM status {text:?} in storage")))
}

/// The statuses of a stored scope mask, in [`Status::ALL`] order.
fn scope(mask: i64) -> Result<Vec<Status>, StorageError> {
    if !(0..1 << Status::ALL.len()).contains(&mask) {
        return Err(rejected(format!(
            "correlation scope mask {mask} out of range"
        )));
    }
    Ok(Status::ALL
        .iter()
        .enumerate()
        .filter(|(bit, _)| mask & (1 << bit) != 0)
        .map(|(_, status)| *status)
        .collect())
}

fn names(text: Option<String>) -> Result<Option<Vec<String>>, StorageError> {
    text.map(|text| {
        serde_json::from_str(&text).map_err(|err| {
            rejected(format!(
                "awaited names {text:?} are not a JSON array: {err}"
            ))
        })
    })
    .transpose()
}

fn int<T: TryFrom<i64>>(row: &SqliteRow, column: &str) -> Result<T, StorageError> {
    let value: i64 = row.try_get(column).map_err(db_err)?;
    T::try_from(value).map_err(|_| rejected(format!("stored {column} {value} is out of range")))
}

fn optional_int<T: TryFrom<i64>>(row: &SqliteRow, column: &str) -> Result<Option<T>, StorageError> {
    let value: Option<i64> = row.try_get(column).map_err(db_err)?;
    value
        .map(|value| {
            T::try_from(value)
                .map_err(|_| rejected(format!("stored {column} {value} is out of range")))
        })
        .transpose()
}

fn time(row: &SqliteRow, column: &str) -> Result<SystemTime, StorageError> {
    from_micros(row.try_get(column).map_err(db_err)?)
}

fn optional_time(row: &SqliteRow, column: &str) -> Result<Option<SystemTime>, StorageError> {
    row.try_get::<Option<i64>, _>(column)
        .map_err(db_err)?
        .map(from_micros)
        .transpose()
}

/// A claimed row (its inbox and children are read apart), and its place in the pick's order.
pub(super) fn claimed(row: &SqliteRow) -> Result<((i16, SystemTime, i64), Claimed), StorageError> {
    let id: i64 = row.try_get("id").map_err(db_err)?;
    let order = (int(row, "priority")?, time(row, "eligible_at")?, id);
    let claim = Claimed {
        id: InstanceId::new(id),
        token: row.try_get("lease_token").map_err(db_err)?,
        fsm: row.try_get("fsm").map_err(db_err)?,
        fsm_version: int(row, "fsm_version")?,
        step: row.try_get("step").map_err(db_err)?,
        state: row.try_get("state").map_err(db_err)?,
        attempt: from_db_attempts(row.try_get("attempt").map_err(db_err)?)?,
        correlation_key: row.try_get("correlation_key").map_err(db_err)?,
        awaits: names(row.try_get("awaits").map_err(db_err)?)?,
        inbox: Vec::new(),
        children: Vec::new(),
    };
    Ok((order, claim))
}

pub(super) fn signal_record(row: &SqliteRow) -> Result<SignalRecord, StorageError> {
    Ok(SignalRecord {
        id: SignalId::new(row.try_get("id").map_err(db_err)?),
        name: row.try_get("name").map_err(db_err)?,
        payload: row.try_get("payload").map_err(db_err)?,
        dedup_key: row.try_get("dedup_key").map_err(db_err)?,
        inserted_at: time(row, "inserted_at")?,
    })
}

pub(super) fn child_record(row: &SqliteRow) -> Result<ChildRecord, StorageError> {
    Ok(ChildRecord {
        id: InstanceId::new(row.try_get("id").map_err(db_err)?),
        fsm: row.try_get("fsm").map_err(db_err)?,
        status: status(row.try_get("status").map_err(db_err)?)?,
        state: row.try_get("state").map_err(db_err)?,
        result: row.try_get("result").map_err(db_err)?,
        last_error: row.try_get("last_error").map_err(db_err)?,
    })
}

pub(super) fn instance_record(row: &SqliteRow) -> Result<InstanceRecord, StorageError> {
    Ok(InstanceRecord {
        id: InstanceId::new(row.try_get("id").map_err(db_err)?),
        fsm: row.try_get("fsm").map_err(db_err)?,
        fsm_version: int(row, "fsm_version")?,
        step: row.try_get("step").map_err(db_err)?,
        status: status(row.try_get("status").map_err(db_err)?)?,
        state: row.try_get("state").map_err(db_err)?,
        result: row.try_get("result").map_err(db_err)?,
        awaits: names(row.try_get("awaits").map_err(db_err)?)?,
        queue: row.try_get("queue").map_err(db_err)?,
        priority: int(row, "priority")?,
        eligible_at: time(row, "eligible_at")?,
        attempt: from_db_attempts(row.try_get("attempt").map_err(db_err)?)?,
        last_error: row.try_get("last_error").map_err(db_err)?,
        await_deadline: optional_time(row, "await_deadline")?,
        locked_by: row.try_get("locked_by").map_err(db_err)?,
        lease_expires_at: optional_time(row, "lease_expires_at")?,
        parent_id: row
            .try_get::<Option<i64>, _>("parent_id")
            .map_err(db_err)?
            .map(InstanceId::new),
        children_pending: int(row, "children_pending")?,
        correlation_key: row.try_get("correlation_key").map_err(db_err)?,
        correlation_scope: scope(row.try_get("correlation_scope").map_err(db_err)?)?,
        concurrency_key: row.try_get("concurrency_key").map_err(db_err)?,
        concurrency_limit: int(row, "concurrency_limit")?,
        concurrency_slot: optional_int(row, "concurrency_slot")?,
        rate_limit_key: row.try_get("rate_limit_key").map_err(db_err)?,
        rate_limit_units: int(row, "rate_limit_units")?,
        inserted_at: time(row, "inserted_at")?,
        updated_at: time(row, "updated_at")?,
    })
}
