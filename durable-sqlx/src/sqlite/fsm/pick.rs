//! The pick: one `BEGIN IMMEDIATE` transaction that reads the candidates (none from a paused
//! queue), lets through those their rate limits serve (`control::gate`), gives each keyed
//! candidate a free slot of its key, claims them all in one statement, debits the buckets for
//! the claims made, and reads their inboxes and children.
//!
//! Postgres' pick skips rows other pickers hold (`SKIP LOCKED`) and serializes the slot choice
//! of a key with an advisory lock, because pickers run side by side there. A SQLite pick holds
//! the database's write lock from its first read to its commit, so no other pick, outcome or
//! reaper (of this process or another on the same file) runs in between: the candidates it
//! reads are still runnable when it claims them, and the slots it reads taken are all the
//! slots taken. The same exclusion, from the database's single writer. The slots are only
//! looked up when a candidate has a key.

use std::collections::HashMap;
use std::time::SystemTime;

use durable_runtime::fsm::store::{ChildRecord, Claimed, SignalRecord};
use durable_runtime::storage::StorageError;
use sqlx::{Row, SqliteConnection};

use super::control::{self, RateCandidate};
use super::decode::{child_record, claimed, signal_record};
use super::{SqliteFsmStore, encode};
use crate::sqlite::db_err;

/// Who picks, what, until when: the pick's parameters, times in microseconds.
pub(super) struct PickBy<'a> {
    pub(super) queue: &'a str,
    pub(super) worker: &'a str,
    pub(super) eligible_by: i64,
    pub(super) lease_until: i64,
    pub(super) now: i64,
    pub(super) limit: i64,
    /// Only rows of these `name:version` tags (a JSON array), when given.
    pub(super) only: Option<String>,
}

/// A runnable row the pick may claim.
struct Candidate {
    id: i64,
    key: Option<String>,
    limit: i64,
}

pub(super) async fn pick(
    store: &SqliteFsmStore,
    by: &PickBy<'_>,
) -> Result<Vec<Claimed>, StorageError> {
    let sql = &store.sql;
    let mut writer = store.writer.lock().await?;
    let mut tx = writer.begin_immediate().await?;
    let (candidates, rates): (Vec<Candidate>, Vec<RateCandidate>) =
        sqlx::query(sql.candidates.clone())
            .bind(by.queue)
            .bind(by.eligible_by)
            .bind(by.limit)
            .bind(by.only.as_deref())
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(|row| {
                let id = row.try_get("id").map_err(db_err)?;
                let units: i64 = row.try_get("rate_limit_units").map_err(db_err)?;
                Ok((
                    Candidate {
                        id,
                        key: row.try_get("concurrency_key").map_err(db_err)?,
                        limit: row.try_get("concurrency_limit").map_err(db_err)?,
                    },
                    RateCandidate {
                        id,
                        key: row.try_get("rate_limit_key").map_err(db_err)?,
                        units: u32::try_from(units).unwrap_or(1),
                    },
                ))
            })
            .collect::<Result<Vec<_>, StorageError>>()?
            .into_iter()
            .unzip();
    if candidates.is_empty() {
        tx.commit().await.map_err(db_err)?;
        return Ok(Vec::new());
    }
    // Rate limits first: a candidate its bucket cannot serve takes no slot.
    let (allowed, gate) = control::gate(store, &mut tx, &rates, by.now).await?;
    let candidates: Vec<Candidate> = candidates
        .into_iter()
        .zip(allowed)
        .filter_map(|(candidate, allowed)| allowed.then_some(candidate))
        .collect();
    let claims = slots(store, &mut tx, &candidates).await?;
    let rows = sqlx::query(sql.claim.clone())
        .bind(encode(&claims)?)
        .bind(by.worker)
        .bind(by.lease_until)
        .bind(by.now)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
    let mut picked: Vec<((i16, SystemTime, i64), Claimed)> =
        rows.iter().map(claimed).collect::<Result<_, _>>()?;
    let ids = encode(
        &picked
            .iter()
            .map(|(_, claim)| claim.id.get())
            .collect::<Vec<_>>(),
    )?;
    let claimed_ids: Vec<i64> = picked.iter().map(|(_, claim)| claim.id.get()).collect();
    control::debit(store, &mut tx, gate, &claimed_ids).await?;
    let (mut inboxes, mut children) = inputs(store, &mut tx, &ids).await?;
    tx.commit().await.map_err(db_err)?;
    for (_, claim) in &mut picked {
        claim.inbox = inboxes.remove(&claim.id.get()).unwrap_or_default();
        claim.children = children.remove(&claim.id.get()).unwrap_or_default();
    }
    // RETURNING does not keep the pick's order: restore it.
    picked.sort_by_key(|(order, _)| *order);
    Ok(picked.into_iter().map(|(_, claim)| claim).collect())
}

/// The claims to make, `(id, slot)`: every keyless candidate, and each keyed candidate that
/// finds a slot of its key below its limit, taken by no executing row nor by an earlier
/// candidate of the pick (candidates come in pick order, so a key's rows are claimed in
/// order). A keyed candidate with no free slot stays runnable.
async fn slots(
    store: &SqliteFsmStore,
    conn: &mut SqliteConnection,
    candidates: &[Candidate],
) -> Result<Vec<(i64, Option<i64>)>, StorageError> {
    let mut taken: HashMap<&str, Vec<i64>> = HashMap::new();
    for candidate in candidates {
        let Some(key) = candidate.key.as_deref() else {
            continue;
        };
        if taken.contains_key(key) {
            continue;
        }
        let widest = candidates
            .iter()
            .filter(|other| other.key.as_deref() == Some(key))
            .map(|other| other.limit)
            .max()
            .unwrap_or(1);
        let held: Vec<i64> = sqlx::query_scalar(store.sql.taken_slots.clone())
            .bind(key)
            .bind(widest)
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        taken.insert(key, held);
    }
    let mut claims = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        let Some(key) = candidate.key.as_deref() else {
            claims.push((candidate.id, None));
            continue;
        };
        let held = taken.get_mut(key).expect("every key's slots were read");
        if let Some(slot) = (0..candidate.limit).find(|slot| !held.contains(slot)) {
            held.push(slot);
            claims.push((candidate.id, Some(slot)));
        }
    }
    Ok(claims)
}

type Inputs<T> = HashMap<i64, Vec<T>>;

/// The inboxes and children of the claimed rows `ids` (a JSON array).
async fn inputs(
    store: &SqliteFsmStore,
    conn: &mut SqliteConnection,
    ids: &str,
) -> Result<(Inputs<SignalRecord>, Inputs<ChildRecord>), StorageError> {
    let mut inboxes: Inputs<SignalRecord> = HashMap::new();
    for row in &sqlx::query(store.sql.inboxes.clone())
        .bind(ids)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?
    {
        let target: i64 = row.try_get("target_id").map_err(db_err)?;
        inboxes.entry(target).or_default().push(signal_record(row)?);
    }
    let mut children: Inputs<ChildRecord> = HashMap::new();
    for row in &sqlx::query(store.sql.children.clone())
        .bind(ids)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?
    {
        let parent: i64 = row.try_get("parent_id").map_err(db_err)?;
        children.entry(parent).or_default().push(child_record(row)?);
    }
    Ok((inboxes, children))
}
