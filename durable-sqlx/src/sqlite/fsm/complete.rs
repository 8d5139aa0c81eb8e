//! Committing a batch of outcomes, each guarded by its claim, in one `BEGIN IMMEDIATE`
//! transaction.
//!
//! The transaction first reads which claims still hold (same row, `executing`, same token);
//! holding the write lock, nothing can change that before the commit, so the statements that
//! follow apply the held outcomes only, one statement per kind of outcome for the whole batch:
//! `next` (and the consumption of its received signals), `retry`, `done` and `stop` (and the
//! deletion of the ended rows' inboxes and their parents' join decrement), the parks (which
//! turn runnable when an awaited signal they were not handed is in the inbox), then the
//! spawns: received signals consumed, children inserted, parents parked on the number actually
//! inserted.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use durable_runtime::fsm::store::{Committed, NewInstance, OutcomeCommit, Transition};
use durable_runtime::storage::StorageError;
use serde_json::{Value, json};
use sqlx::{Row, SqlStr, SqliteConnection};

use super::{SqliteFsmStore, encode, lease_pairs};
use crate::schema::to_micros;
use crate::sqlite::db_err;

/// The held outcomes of a batch, sorted by kind, each as the row its statement takes.
#[derive(Default)]
struct Changes<'a> {
    next: Vec<Value>,
    retry: Vec<Value>,
    done: Vec<Value>,
    stop: Vec<Value>,
    parks: Vec<Value>,
    spawns: Vec<(i64, &'a str, &'a str, &'a [NewInstance])>,
    /// `[target, signal]`: the received signals `next` and `schedule_childs` consume.
    consumed: Vec<[i64; 2]>,
    /// Rows that ended.
    ended: Vec<i64>,
}

impl<'a> Changes<'a> {
    fn add(&mut self, outcome: &'a OutcomeCommit) -> Result<(), StorageError> {
        let id = outcome.lease.id.get();
        let received = || {
            outcome
                .received
                .iter()
                .map(move |signal| [id, signal.get()])
        };
        match &outcome.transition {
            Transition::Next { step, state } => {
                self.next.push(json!([id, step, state]));
                self.consumed.extend(received());
            }
            Transition::Retry { state, eligible_at } => {
                self.retry
                    .push(json!([id, state, to_micros(*eligible_at)?]));
            }
            Transition::Done { result } => {
                self.done.push(json!([id, result]));
                self.ended.push(id);
            }
            Transition::Stop { reason } => {
                self.stop.push(json!([id, reason]));
                self.ended.push(id);
            }
            Transition::Await {
                step,
                state,
                names,
                deadline,
            } => {
                let seen: Vec<i64> = outcome.received.iter().map(|s| s.get()).collect();
                self.parks.push(json!([
                    id,
                    step,
                    state,
                    encode(names)?,
                    encode(&seen)?,
                    deadline.map(to_micros).transpose()?,
                ]));
            }
            Transition::ScheduleChildren {
                step,
                state,
                children,
            } => {
                self.spawns.push((id, step, state, children));
                self.consumed.extend(received());
            }
        }
        Ok(())
    }
}

/// Runs `sql` with the batch `rows` and `now`, unless there are none.
async fn apply(
    conn: &mut SqliteConnection,
    sql: &SqlStr,
    rows: &[impl serde::Serialize],
    now: i64,
) -> Result<(), StorageError> {
    if rows.is_empty() {
        return Ok(());
    }
    sqlx::query(sql.clone())
        .bind(encode(&rows)?)
        .bind(now)
        .execute(conn)
        .await
        .map_err(db_err)?;
    Ok(())
}

pub(super) async fn complete(
    store: &SqliteFsmStore,
    outcomes: &[OutcomeCommit],
    now: SystemTime,
) -> Result<Vec<Committed>, StorageError> {
    if outcomes.is_empty() {
        return Ok(Vec::new());
    }
    let sql = &store.sql;
    let micros = to_micros(now)?;
    let leases: Vec<_> = outcomes.iter().map(|outcome| outcome.lease).collect();
    let leases = encode(&lease_pairs(&leases))?;

    let mut writer = store.writer.lock().await?;
    let mut tx = writer.begin_immediate().await?;
    let mut parents: HashMap<i64, Option<i64>> = HashMap::new();
    for row in &sqlx::query(sql.held.clone())
        .bind(leases)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?
    {
        parents.insert(
            row.try_get("id").map_err(db_err)?,
            row.try_get("parent_id").map_err(db_err)?,
        );
    }
    let mut changes = Changes::default();
    for outcome in outcomes {
        if parents.contains_key(&outcome.lease.id.get()) {
            changes.add(outcome)?;
        }
    }

    apply(&mut tx, &sql.next, &changes.next, micros).await?;
    apply(&mut tx, &sql.retry, &changes.retry, micros).await?;
    apply(&mut tx, &sql.done, &changes.done, micros).await?;
    apply(&mut tx, &sql.stop, &changes.stop, micros).await?;
    if !changes.consumed.is_empty() {
        sqlx::query(sql.consume.clone())
            .bind(encode(&changes.consumed)?)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    if !changes.ended.is_empty() {
        sqlx::query(sql.clear_inboxes.clone())
            .bind(encode(&changes.ended)?)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let mut joins: HashMap<i64, i64> = HashMap::new();
        for parent in changes.ended.iter().filter_map(|id| parents[id]) {
            *joins.entry(parent).or_default() += 1;
        }
        let joins: Vec<[i64; 2]> = joins.into_iter().map(|(p, n)| [p, n]).collect();
        apply(&mut tx, &sql.join, &joins, micros).await?;
    }
    apply(&mut tx, &sql.park, &changes.parks, micros).await?;
    if !changes.spawns.is_empty() {
        let children: Vec<(&NewInstance, Option<i64>)> = changes
            .spawns
            .iter()
            .flat_map(|(parent, _, _, children)| {
                children.iter().map(move |child| (child, Some(*parent)))
            })
            .collect();
        let mut inserted: HashMap<i64, i64> = HashMap::new();
        if !children.is_empty() {
            for (_, parent) in store.insert_on(&mut tx, &children, micros).await? {
                if let Some(parent) = parent {
                    *inserted.entry(parent).or_default() += 1;
                }
            }
        }
        let spawned: Vec<Value> = changes
            .spawns
            .iter()
            .map(|(id, step, state, _)| {
                json!([id, step, state, inserted.get(id).copied().unwrap_or(0)])
            })
            .collect();
        apply(&mut tx, &sql.spawned, &spawned, micros).await?;
    }
    tx.commit().await.map_err(db_err)?;

    let held: HashSet<i64> = parents.into_keys().collect();
    Ok(outcomes
        .iter()
        .map(|outcome| {
            if held.contains(&outcome.lease.id.get()) {
                Committed::Applied
            } else {
                Committed::Stale
            }
        })
        .collect())
}
