//! The scheduling controls on SQLite: the rate-limit gate of a pick, paused queues, rate
//! limits, and cancel.
//!
//! Everything runs under the database's write lock (`BEGIN IMMEDIATE`), which every process
//! on the file takes for each write: the gate reads a key's bucket, decides, claims and debits
//! with no other writer in between, which is what Postgres' bucket row lock buys. The clock of
//! the buckets is the host's, which every process on the file shares.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use durable_runtime::fsm::InstanceId;
use durable_runtime::fsm::store::{
    CancelOutcome, PausedQueue, RateDecision, RateLimit, RateLimitRecord, Target, TokenBucket,
    decide_rate_limits,
};
use durable_runtime::storage::StorageError;
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlStr, SqliteConnection};

use super::decode::status;
use super::{SqliteFsmStore, encode};
use crate::error::rejected;
use crate::schema::{Names, from_micros, now_micros, statement, to_micros};
use crate::sqlite::db_err;

/// The controls' statements.
#[derive(Debug)]
pub(super) struct ControlSql {
    /// `?1` key.
    bucket: SqlStr,
    /// `?1` JSON array of `[key, tokens, refilled_at]`.
    save_buckets: SqlStr,
    /// `?1` JSON array of `[id, eligible_at]`.
    defer: SqlStr,
    /// `?1` key, `?2` capacity, `?3` period (µs), `?4` now (µs).
    set_rate_limit: SqlStr,
    remove_rate_limit: SqlStr,
    rate_limits: SqlStr,
    /// `?1` queue, `?2` now.
    pause: SqlStr,
    resume: SqlStr,
    paused: SqlStr,
    /// `?1` id: it and its descendants, with status and parent.
    tree: SqlStr,
    /// `?1` ids (JSON array), `?2` reason, `?3` now: ends the live ones.
    cancel: SqlStr,
    /// `?1` ids (JSON array): deletes their inboxes.
    clear: SqlStr,
    /// `?1` parent, `?2` now: one child ended.
    release_parent: SqlStr,
}

impl ControlSql {
    pub(super) fn new(names: &Names) -> Self {
        let fsm = format!("{}durable_fsm", names.qualifier);
        let signals = format!("{}durable_fsm_signals", names.qualifier);
        let buckets = format!("{}durable_fsm_rate_limits", names.qualifier);
        let paused = format!("{}durable_fsm_paused_queues", names.qualifier);
        Self {
            bucket: statement(format!(
                "SELECT key, capacity, per_micros, tokens, refilled_at FROM {buckets}
                 WHERE key = ?1"
            )),
            save_buckets: statement(format!(
                "UPDATE {buckets} AS b SET tokens = u.value ->> 1, refilled_at = u.value ->> 2
                 FROM json_each(?1) AS u WHERE b.key = u.value ->> 0"
            )),
            defer: statement(format!(
                "UPDATE {fsm} AS f SET eligible_at = d.value ->> 1
                 FROM json_each(?1) AS d
                 WHERE f.id = d.value ->> 0 AND f.status = 'runnable'"
            )),
            set_rate_limit: statement(format!(
                "INSERT INTO {buckets} (key, capacity, per_micros, tokens, refilled_at)
                 VALUES (?1, ?2, ?3, ?2, ?4)
                 ON CONFLICT (key) DO UPDATE
                 SET capacity = excluded.capacity, per_micros = excluded.per_micros,
                     tokens = min(tokens, excluded.capacity)"
            )),
            remove_rate_limit: statement(format!("DELETE FROM {buckets} WHERE key = ?1")),
            rate_limits: statement(format!(
                "SELECT key, capacity, per_micros, tokens, refilled_at FROM {buckets}
                 ORDER BY key"
            )),
            pause: statement(format!(
                "INSERT INTO {paused} (queue, paused_at) VALUES (?1, ?2)
                 ON CONFLICT (queue) DO NOTHING"
            )),
            resume: statement(format!("DELETE FROM {paused} WHERE queue = ?1")),
            paused: statement(format!(
                "SELECT queue, paused_at FROM {paused} ORDER BY queue"
            )),
            tree: statement(format!(
                "WITH RECURSIVE tree(id) AS (
                     SELECT ?1
                     UNION SELECT c.id FROM {fsm} c JOIN tree t ON c.parent_id = t.id
                 )
                 SELECT f.id, f.status, f.parent_id FROM {fsm} f
                 WHERE f.id IN (SELECT id FROM tree)"
            )),
            cancel: statement(format!(
                "UPDATE {fsm}
                 SET status = 'failed', last_error = ?2, awaits = NULL, locked_by = NULL,
                     lease_expires_at = NULL, await_deadline = NULL, concurrency_slot = NULL,
                     children_pending = 0, lease_token = lease_token + 1, updated_at = ?3
                 WHERE id IN (SELECT value FROM json_each(?1))
                   AND status NOT IN ('done', 'failed')"
            )),
            clear: statement(format!(
                "DELETE FROM {signals} WHERE target_id IN (SELECT value FROM json_each(?1))"
            )),
            release_parent: statement(format!(
                "UPDATE {fsm}
                 SET children_pending = children_pending - 1,
                     status = CASE WHEN children_pending - 1 <= 0
                                        AND status = 'awaiting_children'
                                   THEN 'runnable' ELSE status END,
                     eligible_at = CASE WHEN children_pending - 1 <= 0
                                             AND status = 'awaiting_children'
                                        THEN ?2 ELSE eligible_at END,
                     updated_at = ?2
                 WHERE id = ?1"
            )),
        }
    }
}

/// A pick's candidate as the rate-limit gate sees it.
pub(super) struct RateCandidate {
    pub(super) id: i64,
    pub(super) key: Option<String>,
    pub(super) units: u32,
}

/// The buckets a pick read, refilled, to debit for the claims it makes.
#[derive(Default)]
pub(super) struct Gate {
    buckets: HashMap<String, TokenBucket>,
    /// The rate-limited candidates let through: id, key, units.
    granted: HashMap<i64, (String, u32)>,
}

/// Decides, in pick order, which `candidates` their buckets serve; moves the others to when
/// their buckets will have earned their units (the engine's `now` plus the wait). Returns
/// whether each may be claimed, and the gate to debit.
pub(super) async fn gate(
    store: &SqliteFsmStore,
    conn: &mut SqliteConnection,
    candidates: &[RateCandidate],
    now: i64,
) -> Result<(Vec<bool>, Gate), StorageError> {
    let mut gate = Gate::default();
    if candidates.iter().all(|candidate| candidate.key.is_none()) {
        return Ok((vec![true; candidates.len()], gate));
    }
    let clock = now_micros();
    for key in candidates.iter().filter_map(|c| c.key.as_deref()) {
        if gate.buckets.contains_key(key) {
            continue;
        }
        if let Some(row) = sqlx::query(store.control.bucket.clone())
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?
        {
            let mut bucket = bucket_of(&row)?;
            bucket.refill(clock);
            gate.buckets.insert(key.to_owned(), bucket);
        }
    }
    let decisions = decide_rate_limits(
        &candidates
            .iter()
            .map(|candidate| (candidate.key.as_deref(), candidate.units))
            .collect::<Vec<_>>(),
        &gate.buckets,
    );
    let mut allowed = Vec::with_capacity(candidates.len());
    let mut deferred: Vec<(i64, i64)> = Vec::new();
    for (candidate, decision) in candidates.iter().zip(decisions) {
        match decision {
            RateDecision::Free => allowed.push(true),
            RateDecision::Granted => {
                if let Some(key) = &candidate.key {
                    gate.granted
                        .insert(candidate.id, (key.clone(), candidate.units));
                }
                allowed.push(true);
            }
            RateDecision::Deferred { wait } => {
                let wait = i64::try_from(wait.as_micros()).unwrap_or(i64::MAX);
                deferred.push((candidate.id, now.saturating_add(wait)));
                allowed.push(false);
            }
        }
    }
    if !deferred.is_empty() {
        sqlx::query(store.control.defer.clone())
            .bind(encode(&deferred)?)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    Ok((allowed, gate))
}

/// Takes the units of the rows claimed (`claimed`) from their buckets, and stores the buckets.
pub(super) async fn debit(
    store: &SqliteFsmStore,
    conn: &mut SqliteConnection,
    mut gate: Gate,
    claimed: &[i64],
) -> Result<(), StorageError> {
    if gate.buckets.is_empty() {
        return Ok(());
    }
    for id in claimed {
        if let Some((key, units)) = gate.granted.get(id)
            && let Some(bucket) = gate.buckets.get_mut(key)
        {
            bucket.take(*units);
        }
    }
    let saved: Vec<(String, f64, i64)> = gate
        .buckets
        .iter()
        .map(|(key, bucket)| (key.clone(), bucket.tokens, bucket.refilled_at))
        .collect();
    sqlx::query(store.control.save_buckets.clone())
        .bind(encode(&saved)?)
        .execute(conn)
        .await
        .map_err(db_err)?;
    Ok(())
}

fn bucket_of(row: &SqliteRow) -> Result<TokenBucket, StorageError> {
    let capacity: i64 = row.try_get("capacity").map_err(db_err)?;
    let per_micros: i64 = row.try_get("per_micros").map_err(db_err)?;
    let limit = RateLimit::new(
        u32::try_from(capacity)
            .map_err(|_| rejected(format!("rate-limit capacity {capacity} out of range")))?,
        Duration::from_micros(
            u64::try_from(per_micros)
                .map_err(|_| rejected(format!("rate-limit period {per_micros} out of range")))?,
        ),
    );
    Ok(TokenBucket {
        limit,
        tokens: row.try_get("tokens").map_err(db_err)?,
        refilled_at: row.try_get("refilled_at").map_err(db_err)?,
    })
}

impl SqliteFsmStore {
    pub(super) async fn set_rate_limit_on(
        &self,
        key: &str,
        limit: RateLimit,
    ) -> Result<(), StorageError> {
        limit.check().map_err(rejected)?;
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        sqlx::query(self.control.set_rate_limit.clone())
            .bind(key)
            .bind(i64::from(limit.capacity))
            .bind(limit.per_micros())
            .bind(now_micros())
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(())
    }

    pub(super) async fn remove_rate_limit_on(&self, key: &str) -> Result<bool, StorageError> {
        self.write_one(&self.control.remove_rate_limit, key, None)
            .await
    }

    pub(super) async fn rate_limits_on(&self) -> Result<Vec<RateLimitRecord>, StorageError> {
        sqlx::query(self.control.rate_limits.clone())
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?
            .iter()
            .map(|row| {
                let bucket = bucket_of(row)?;
                Ok(RateLimitRecord {
                    key: row.try_get("key").map_err(db_err)?,
                    limit: bucket.limit,
                    tokens: bucket.tokens,
                    refilled_at: from_micros(bucket.refilled_at)?,
                })
            })
            .collect()
    }

    pub(super) async fn pause_on(
        &self,
        queue: &str,
        now: SystemTime,
    ) -> Result<bool, StorageError> {
        self.write_one(&self.control.pause, queue, Some(to_micros(now)?))
            .await
    }

    pub(super) async fn resume_on(&self, queue: &str) -> Result<bool, StorageError> {
        self.write_one(&self.control.resume, queue, None).await
    }

    pub(super) async fn paused_on(&self) -> Result<Vec<PausedQueue>, StorageError> {
        sqlx::query(self.control.paused.clone())
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?
            .iter()
            .map(|row| {
                Ok(PausedQueue {
                    queue: row.try_get("queue").map_err(db_err)?,
                    paused_at: from_micros(row.try_get("paused_at").map_err(db_err)?)?,
                })
            })
            .collect()
    }

    /// Runs `statement` with `text` (and `at`) in a write transaction: whether it changed a
    /// row.
    async fn write_one(
        &self,
        statement: &SqlStr,
        text: &str,
        at: Option<i64>,
    ) -> Result<bool, StorageError> {
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        let mut query = sqlx::query(statement.clone()).bind(text);
        if let Some(at) = at {
            query = query.bind(at);
        }
        let done = query.execute(&mut *tx).await.map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn cancel_on(
        &self,
        target: &Target,
        reason: &str,
        now: SystemTime,
    ) -> Result<CancelOutcome, StorageError> {
        let now = to_micros(now)?;
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        let id = match target {
            Target::Id(id) => id.get(),
            Target::Key(key) => {
                let found: Option<i64> = sqlx::query_scalar(self.sql.find.clone())
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_err)?;
                match found {
                    Some(id) => id,
                    None => return Ok(CancelOutcome::NotFound),
                }
            }
        };
        let tree = sqlx::query(self.control.tree.clone())
            .bind(id)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        let mut parent = None;
        let mut found = false;
        let mut members = Vec::with_capacity(tree.len());
        for row in &tree {
            let member: i64 = row.try_get("id").map_err(db_err)?;
            members.push(member);
            if member != id {
                continue;
            }
            found = true;
            let state = status(row.try_get("status").map_err(db_err)?)?;
            if state.is_terminal() {
                return Ok(CancelOutcome::Ended {
                    id: InstanceId::new(id),
                    status: state,
                });
            }
            parent = row.try_get::<Option<i64>, _>("parent_id").map_err(db_err)?;
        }
        if !found {
            return Ok(CancelOutcome::NotFound);
        }
        let members = encode(&members)?;
        let ended = sqlx::query(self.control.cancel.clone())
            .bind(&members)
            .bind(reason)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
        sqlx::query(self.control.clear.clone())
            .bind(&members)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        if let Some(parent) = parent {
            sqlx::query(self.control.release_parent.clone())
                .bind(parent)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        tx.commit().await.map_err(db_err)?;
        Ok(CancelOutcome::Cancelled {
            id: InstanceId::new(id),
            instances: ended,
        })
    }
}
