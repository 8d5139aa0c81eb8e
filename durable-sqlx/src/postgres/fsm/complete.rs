//! Committing a batch of outcomes in one transaction, each guarded by its claim.
//!
//! The transaction first locks, in id order, the rows whose claim still holds (executing
//! under the outcome's token): the others are stale and nothing of theirs is written. Then
//! one statement per kind of change applies every held outcome of that kind: consuming the
//! received signals, clearing the inboxes of ended instances, the row updates of §10, the
//! children's insert, and the join decrement of their parents (locked in id order first, so
//! that concurrent batches cannot deadlock on them).

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use durable_runtime::fsm::store::{Committed, NewInstance, OutcomeCommit, Transition};
use durable_runtime::storage::StorageError;

use super::PostgresFsmStore;
use crate::postgres::db_err;
use crate::postgres::time::PgTime;

/// The held outcomes of a batch, column by column per kind of change.
#[derive(Default)]
struct Changes<'a> {
    consume: (Vec<i64>, Vec<i64>),
    ended: Vec<i64>,
    next: (Vec<i64>, Vec<&'a str>, Vec<&'a str>),
    retry: (Vec<i64>, Vec<&'a str>, Vec<PgTime>),
    park: Park<'a>,
    spawn: Vec<(i64, &'a str, &'a str, &'a [NewInstance])>,
    done: (Vec<i64>, Vec<&'a str>),
    stop: (Vec<i64>, Vec<&'a str>),
}

#[derive(Default)]
struct Park<'a> {
    ids: Vec<i64>,
    steps: Vec<&'a str>,
    states: Vec<&'a str>,
    names: Vec<String>,
    received: Vec<String>,
    deadlines: Vec<Option<PgTime>>,
}

impl<'a> Changes<'a> {
    fn add(&mut self, outcome: &'a OutcomeCommit) -> Result<(), StorageError> {
        let id = outcome.lease.id.get();
        let consume = |changes: &mut Self| {
            for signal in &outcome.received {
                changes.consume.0.push(id);
                changes.consume.1.push(signal.get());
            }
        };
        match &outcome.transition {
            Transition::Next { step, state } => {
                consume(self);
                self.next.0.push(id);
                self.next.1.push(step);
                self.next.2.push(state);
            }
            Transition::Retry { state, eligible_at } => {
                self.retry.0.push(id);
                self.retry.1.push(state);
                self.retry.2.push(PgTime::new(*eligible_at)?);
            }
            Transition::Await {
                step,
                state,
                names,
                deadline,
            } => {
                let park = &mut self.park;
                park.ids.push(id);
                park.steps.push(step);
                park.states.push(state);
                park.names.push(json_array(names));
                park.received.push(json_array(
                    &outcome
                        .received
                        .iter()
                        .map(|signal| signal.get())
                        .collect::<Vec<_>>(),
                ));
                park.deadlines.push(deadline.map(PgTime::new).transpose()?);
            }
            Transition::ScheduleChildren {
                step,
                state,
                children,
            } => {
                consume(self);
                self.spawn.push((id, step, state, children));
            }
            Transition::Done { result } => {
                self.ended.push(id);
                self.done.0.push(id);
                self.done.1.push(result);
            }
            Transition::Stop { reason } => {
                self.ended.push(id);
                self.stop.0.push(id);
                self.stop.1.push(reason);
            }
        }
        Ok(())
    }
}

/// A JSON array of `items`, for a per-row array parameter (Postgres arrays of arrays must be
/// rectangular).
fn json_array<T: serde::Serialize>(items: &[T]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

pub(super) async fn complete(
    store: &PostgresFsmStore,
    outcomes: &[OutcomeCommit],
    now: SystemTime,
) -> Result<Vec<Committed>, StorageError> {
    if outcomes.is_empty() {
        return Ok(Vec::new());
    }
    let sql = &store.sql;
    let pg_now = PgTime::new(now)?;
    let mut tx = store.pool.begin().await.map_err(db_err)?;
    let ids: Vec<i64> = outcomes.iter().map(|o| o.lease.id.get()).collect();
    let tokens: Vec<i64> = outcomes.iter().map(|o| o.lease.token).collect();
    let held: HashSet<i64> = sqlx::query_scalar::<_, i64>(sql.lock_held.clone())
        .bind(&ids)
        .bind(&tokens)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?
        .into_iter()
        .collect();
    let results: Vec<Committed> = outcomes
        .iter()
        .map(|outcome| {
            if held.contains(&outcome.lease.id.get()) {
                Committed::Applied
            } else {
                Committed::Stale
            }
        })
        .collect();
    if held.is_empty() {
        tx.commit().await.map_err(db_err)?;
        return Ok(results);
    }
    let mut changes = Changes::default();
    for outcome in outcomes
        .iter()
        .filter(|outcome| held.contains(&outcome.lease.id.get()))
    {
        changes.add(outcome)?;
    }

    if !changes.consume.0.is_empty() {
        sqlx::query(sql.consume.clone())
            .bind(&changes.consume.0)
            .bind(&changes.consume.1)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    if !changes.ended.is_empty() {
        sqlx::query(sql.clear_inboxes.clone())
            .bind(&changes.ended)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    if !changes.next.0.is_empty() {
        sqlx::query(sql.next.clone())
            .bind(&changes.next.0)
            .bind(&changes.next.1)
            .bind(&changes.next.2)
            .bind(pg_now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    if !changes.retry.0.is_empty() {
        sqlx::query(sql.retry.clone())
            .bind(&changes.retry.0)
            .bind(&changes.retry.1)
            .bind(&changes.retry.2)
            .bind(pg_now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    if !changes.park.ids.is_empty() {
        let park = &changes.park;
        sqlx::query(sql.park.clone())
            .bind(&park.ids)
            .bind(&park.steps)
            .bind(&park.states)
            .bind(&park.names)
            .bind(&park.received)
            .bind(&park.deadlines)
            .bind(pg_now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    if !changes.spawn.is_empty() {
        let children: Vec<(&NewInstance, Option<i64>)> = changes
            .spawn
            .iter()
            .flat_map(|(parent, _, _, children)| {
                children.iter().map(|child| (child, Some(*parent)))
            })
            .collect();
        let mut inserted: HashMap<i64, i32> = HashMap::new();
        if !children.is_empty() {
            for (_, parent) in store.insert_on(&mut tx, &children, now).await? {
                if let Some(parent) = parent {
                    *inserted.entry(parent).or_default() += 1;
                }
            }
        }
        let ids: Vec<i64> = changes.spawn.iter().map(|spawn| spawn.0).collect();
        let steps: Vec<&str> = changes.spawn.iter().map(|spawn| spawn.1).collect();
        let states: Vec<&str> = changes.spawn.iter().map(|spawn| spawn.2).collect();
        let counts: Vec<i32> = ids
            .iter()
            .map(|id| inserted.get(id).copied().unwrap_or(0))
            .collect();
        sqlx::query(sql.spawned.clone())
            .bind(&ids)
            .bind(&steps)
            .bind(&states)
            .bind(&counts)
            .bind(pg_now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    if !changes.done.0.is_empty() {
        sqlx::query(sql.done.clone())
            .bind(&changes.done.0)
            .bind(&changes.done.1)
            .bind(pg_now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    if !changes.stop.0.is_empty() {
        sqlx::query(sql.stop.clone())
            .bind(&changes.stop.0)
            .bind(&changes.stop.1)
            .bind(pg_now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    if !changes.ended.is_empty() {
        sqlx::query(sql.lock_parents.clone())
            .bind(&changes.ended)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(sql.join.clone())
            .bind(&changes.ended)
            .bind(pg_now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    tx.commit().await.map_err(db_err)?;
    Ok(results)
}
