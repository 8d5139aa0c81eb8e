//! Committing a batch of outcomes, each guarded by its claim.
//!
//! A batch of `next`, `retry`, `done` and `stop` outcomes (the common case) is one statement,
//! atomic on its own: each update is guarded by its claim token, and the consumption of
//! received signals, the deletion of ended inboxes and the parents' join decrement ride the
//! same statement for the rows that held (see `sql::simple_outcomes`).
//!
//! A batch holding an `await` or a `schedule_childs` is a transaction. It first locks, in id
//! order, every row whose claim holds; then the simple outcomes' statement; then the parks,
//! in a statement that starts after the locks, so that it sees every signal whose sender
//! locked the row before us (senders lock the row before inserting: no lost wake-up); then the
//! spawns: received signals consumed, children inserted, parents parked on the number
//! actually inserted.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use durable_runtime::fsm::store::{Committed, NewInstance, OutcomeCommit, Transition};
use durable_runtime::storage::StorageError;
use sqlx::PgConnection;

use super::PostgresFsmStore;
use crate::postgres::db_err;
use crate::postgres::time::PgTime;

/// The `next`, `retry`, `done` and `stop` outcomes of a batch, column by column.
#[derive(Default)]
struct Simple<'a> {
    next: (Vec<i64>, Vec<i64>, Vec<&'a str>, Vec<&'a str>),
    retry: (Vec<i64>, Vec<i64>, Vec<&'a str>, Vec<PgTime>),
    done: (Vec<i64>, Vec<i64>, Vec<&'a str>),
    stop: (Vec<i64>, Vec<i64>, Vec<&'a str>),
    received: (Vec<i64>, Vec<i64>),
}

impl Simple<'_> {
    fn is_empty(&self) -> bool {
        self.next.0.is_empty()
            && self.retry.0.is_empty()
            && self.done.0.is_empty()
            && self.stop.0.is_empty()
    }
}

/// The parks of a batch.
#[derive(Default)]
struct Parks<'a> {
    ids: Vec<i64>,
    steps: Vec<&'a str>,
    states: Vec<&'a str>,
    names: Vec<String>,
    received: Vec<String>,
    deadlines: Vec<Option<PgTime>>,
}

/// A batch sorted by kind of change.
#[derive(Default)]
struct Changes<'a> {
    simple: Simple<'a>,
    parks: Parks<'a>,
    spawns: Vec<&'a OutcomeCommit>,
}

impl<'a> Changes<'a> {
    fn add(&mut self, outcome: &'a OutcomeCommit) -> Result<(), StorageError> {
        let id = outcome.lease.id.get();
        let token = outcome.lease.token;
        let simple = &mut self.simple;
        match &outcome.transition {
            Transition::Next { step, state } => {
                simple.next.0.push(id);
                simple.next.1.push(token);
                simple.next.2.push(step);
                simple.next.3.push(state);
                for signal in &outcome.received {
                    simple.received.0.push(id);
                    simple.received.1.push(signal.get());
                }
            }
            Transition::Retry { state, eligible_at } => {
                simple.retry.0.push(id);
                simple.retry.1.push(token);
                simple.retry.2.push(state);
                simple.retry.3.push(PgTime::new(*eligible_at)?);
            }
            Transition::Done { result } => {
                simple.done.0.push(id);
                simple.done.1.push(token);
                simple.done.2.push(result);
            }
            Transition::Stop { reason } => {
                simple.stop.0.push(id);
                simple.stop.1.push(token);
                simple.stop.2.push(reason);
            }
            Transition::Await {
                step,
                state,
                names,
                deadline,
            } => {
                let parks = &mut self.parks;
                parks.ids.push(id);
                parks.steps.push(step);
                parks.states.push(state);
                parks.names.push(json_array(names));
                let received: Vec<i64> = outcome.received.iter().map(|s| s.get()).collect();
                parks.received.push(json_array(&received));
                parks.deadlines.push(deadline.map(PgTime::new).transpose()?);
            }
            Transition::ScheduleChildren { .. } => self.spawns.push(outcome),
        }
        Ok(())
    }
}

/// A JSON array of `items`, for a per-row array parameter (Postgres arrays of arrays must be
/// rectangular).
fn json_array<T: serde::Serialize>(items: &[T]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

/// Runs the simple outcomes' statement on `conn`; returns the ids that held.
async fn simple(
    store: &PostgresFsmStore,
    conn: &mut PgConnection,
    simple: &Simple<'_>,
    now: PgTime,
) -> Result<Vec<i64>, StorageError> {
    sqlx::query_scalar(store.sql.simple.clone())
        .bind(&simple.next.0)
        .bind(&simple.next.1)
        .bind(&simple.next.2)
        .bind(&simple.next.3)
        .bind(&simple.retry.0)
        .bind(&simple.retry.1)
        .bind(&simple.retry.2)
        .bind(&simple.retry.3)
        .bind(&simple.done.0)
        .bind(&simple.done.1)
        .bind(&simple.done.2)
        .bind(&simple.stop.0)
        .bind(&simple.stop.1)
        .bind(&simple.stop.2)
        .bind(&simple.received.0)
        .bind(&simple.received.1)
        .bind(now)
        .fetch_all(conn)
        .await
        .map_err(db_err)
}

fn results(outcomes: &[OutcomeCommit], held: &HashSet<i64>) -> Vec<Committed> {
    outcomes
        .iter()
        .map(|outcome| {
            if held.contains(&outcome.lease.id.get()) {
                Committed::Applied
            } else {
                Committed::Stale
            }
        })
        .collect()
}

pub(super) async fn complete(
    store: &PostgresFsmStore,
    outcomes: &[OutcomeCommit],
    now: SystemTime,
) -> Result<Vec<Committed>, StorageError> {
    if outcomes.is_empty() {
        return Ok(Vec::new());
    }
    let pg_now = PgTime::new(now)?;
    let mut changes = Changes::default();
    for outcome in outcomes {
        changes.add(outcome)?;
    }

    if changes.parks.ids.is_empty() && changes.spawns.is_empty() {
        let mut conn = store.pool.acquire().await.map_err(db_err)?;
        let held: HashSet<i64> = simple(store, &mut conn, &changes.simple, pg_now)
            .await?
            .into_iter()
            .collect();
        return Ok(results(outcomes, &held));
    }

    let sql = &store.sql;
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
    if !changes.simple.is_empty() {
        simple(store, &mut tx, &changes.simple, pg_now).await?;
    }
    let parks = &changes.parks;
    let held_parks: Vec<usize> = (0..parks.ids.len())
        .filter(|&at| held.contains(&parks.ids[at]))
        .collect();
    if !held_parks.is_empty() {
        let ids: Vec<i64> = held_parks.iter().map(|&at| parks.ids[at]).collect();
        let steps: Vec<&str> = held_parks.iter().map(|&at| parks.steps[at]).collect();
        let states: Vec<&str> = held_parks.iter().map(|&at| parks.states[at]).collect();
        let names: Vec<&str> = held_parks
            .iter()
            .map(|&at| parks.names[at].as_str())
            .collect();
        let received: Vec<&str> = held_parks
            .iter()
            .map(|&at| parks.received[at].as_str())
            .collect();
        let deadlines: Vec<Option<PgTime>> =
            held_parks.iter().map(|&at| parks.deadlines[at]).collect();
        sqlx::query(sql.park.clone())
            .bind(&ids)
            .bind(&steps)
            .bind(&states)
            .bind(&names)
            .bind(&received)
            .bind(&deadlines)
            .bind(pg_now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    let spawns: Vec<(i64, &str, &str, &[NewInstance], &OutcomeCommit)> = changes
        .spawns
        .iter()
        .filter(|outcome| held.contains(&outcome.lease.id.get()))
        .filter_map(|outcome| match &outcome.transition {
            Transition::ScheduleChildren {
                step,
                state,
                children,
            } => Some((
                outcome.lease.id.get(),
                step.as_str(),
                state.as_str(),
                children.as_slice(),
                *outcome,
            )),
            _ => None,
        })
        .collect();
    if !spawns.is_empty() {
        let (targets, signals): (Vec<i64>, Vec<i64>) = spawns
            .iter()
            .flat_map(|(id, .., outcome)| {
                outcome
                    .received
                    .iter()
                    .map(move |signal| (*id, signal.get()))
            })
            .unzip();
        if !targets.is_empty() {
            sqlx::query(sql.consume.clone())
                .bind(&targets)
                .bind(&signals)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        let children: Vec<(&NewInstance, Option<i64>)> = spawns
            .iter()
            .flat_map(|(parent, _, _, children, _)| {
                children.iter().map(move |child| (child, Some(*parent)))
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
        let ids: Vec<i64> = spawns.iter().map(|spawn| spawn.0).collect();
        let steps: Vec<&str> = spawns.iter().map(|spawn| spawn.1).collect();
        let states: Vec<&str> = spawns.iter().map(|spawn| spawn.2).collect();
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
    tx.commit().await.map_err(db_err)?;
    Ok(results(outcomes, &held))
}
