//! Listings the `Storage` trait has no single query for: the names of the stored types, and
//! the dead alarms across objects. Both live here alone so that they can move to store-level
//! queries without touching the commands.

use durable_runtime::storage::{ObjectKey, Storage};
use durable_sqlx::sqlx;

use crate::client::{DeadAlarm, DeadAlarmPage};

use super::database::{Backend, Database};
use super::failure::Failure;

/// How many ids are read per `list_ids` page while looking for dead alarms.
const SCAN_PAGE: usize = 500;

/// The names of the types that have stored objects (deleted ones left out), in order.
///
/// The `Storage` trait cannot enumerate types, so this reads the store's object table
/// directly.
pub(crate) async fn stored_type_names(database: &Database) -> Result<Vec<String>, Failure> {
    let query = format!(
        "SELECT DISTINCT object_type FROM {} WHERE state IS NOT NULL ORDER BY object_type",
        database.objects_table
    );
    let names = match &database.backend {
        Backend::Sqlite(store) => {
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(query))
                .fetch_all(store.pool())
                .await
        }
        Backend::Postgres(store) => {
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(query))
                .fetch_all(store.pool())
                .await
        }
    };
    names.map_err(|error| {
        Failure::new(
            Some(503),
            "unavailable",
            format!("cannot list the stored types: {error}"),
        )
    })
}

/// A page of the dead alarms of the objects of `types` (by type name, then id), starting after the object named by `cursor`.
///
/// Reads every object's alarms through the `Storage` trait. A page holds whole objects: it
/// stops before an object whose dead alarms would take it past `limit`, unless it is still
/// empty. The cursor is the last object read, as a JSON array `["type", "id"]`.
pub(crate) async fn dead_alarms(
    store: &dyn Storage,
    types: &[String],
    cursor: Option<&str>,
    limit: usize,
) -> Result<DeadAlarmPage, Failure> {
    let after: Option<(String, String)> = cursor
        .map(|cursor| {
            serde_json::from_str(cursor).map_err(|_| {
                Failure::invalid_request(format!("`{cursor}` is not a dead alarm cursor"))
            })
        })
        .transpose()?;
    let unavailable = |error: durable_runtime::storage::StorageError| {
        Failure::new(Some(503), "unavailable", error.to_string())
    };
    let mut types = types.to_vec();
    types.sort();
    let mut alarms = Vec::new();
    for type_name in &types {
        let mut from = match &after {
            Some((after_type, _)) if type_name < after_type => continue,
            Some((after_type, id)) if type_name == after_type => Some(id.clone()),
            _ => None,
        };
        loop {
            let page = store
                .list_ids(type_name, from.as_deref(), SCAN_PAGE)
                .await
                .map_err(unavailable)?;
            for id in page.ids {
                let key = ObjectKey::new(type_name.as_str(), id.as_str());
                let dead: Vec<DeadAlarm> = store
                    .list_alarms(&key)
                    .await
                    .map_err(unavailable)?
                    .into_iter()
                    .filter(|alarm| alarm.dead)
                    .map(|alarm| DeadAlarm {
                        type_name: type_name.clone(),
                        id: id.clone(),
                        name: alarm.name,
                        fire_at: alarm.due_at,
                        attempts: alarm.attempts,
                    })
                    .collect();
                if !alarms.is_empty() && alarms.len() + dead.len() > limit {
                    let last = alarms.last().map(|alarm: &DeadAlarm| {
                        serde_json::json!([alarm.type_name, alarm.id]).to_string()
                    });
                    return Ok(DeadAlarmPage {
                        alarms,
                        next_cursor: last,
                    });
                }
                alarms.extend(dead);
            }
            match page.next {
                Some(next) => from = Some(next),
                None => break,
            }
        }
    }
    Ok(DeadAlarmPage {
        alarms,
        next_cursor: None,
    })
}
