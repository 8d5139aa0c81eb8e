//! The scheduling controls on Postgres: the claim of a pick's deferred candidates (rate
//! limits, then concurrency slots), paused queues, rate limits, and cancel.
//!
//! Rate limits: the candidates' buckets are locked `FOR UPDATE` in key order (pickers wait
//! for each other only on a shared key, and briefly: the lock is held for the few statements
//! of one claim), read with `clock_timestamp()` taken after the lock, and refilled and
//! debited in Rust (`TokenBucket`) by exactly the claims made in the same transaction. The
//! rows a bucket cannot serve get their `eligible_at` moved to when it will have earned
//! their units. Row locks are only ever tried (`SKIP LOCKED`), so the bucket locks cannot
//! deadlock with them.
//!
//! Cancel locks the instance's tree (it and its descendants) in descending id order, which
//! is the order an outcome commit takes its row and then its parent in, then ends the live
//! members and releases the instance's parent.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use durable_runtime::fsm::InstanceId;
use durable_runtime::fsm::store::{
    CancelOutcome, PausedQueue, RateDecision, RateLimit, RateLimitRecord, Target, TokenBucket,
    decide_rate_limits,
};
use durable_runtime::storage::StorageError;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row, SqlStr};

use super::sql::{CLAIMED, INPUTS, Tables};
use super::{ClaimBy, PostgresFsmStore, Sql, claim_keyed, status};
use crate::error::rejected;
use crate::postgres::db_err;
use crate::postgres::time::PgTime;
use crate::schema::{from_micros, statement, to_micros};

/// The controls' statements.
#[derive(Debug)]
pub(super) struct ControlSql {
    /// `$1` keys: locks their buckets in key order; with the database's clock after the locks.
    lock_buckets: SqlStr,
    /// `$1` keys, `$2` tokens, `$3` refill times: the buckets' new levels.
    save_buckets: SqlStr,
    /// `$1` ids, `$2` eligible times: moves runnable rows a bucket could not serve.
    defer: SqlStr,
    /// `$1` ids, `$2` queue, `$3` eligible by, `$4` worker, `$5` lease end, `$6` now: claims
    /// candidates without a concurrency key.
    claim_plain: SqlStr,
    /// `$1` key, `$2` capacity, `$3` period (µs).
    set_rate_limit: SqlStr,
    remove_rate_limit: SqlStr,
    rate_limits: SqlStr,
    /// `$1` queue, `$2` now.
    pause: SqlStr,
    resume: SqlStr,
    paused: SqlStr,
    /// `$1` id: locks it and its descendants, in descending id order.
    lock_tree: SqlStr,
    /// `$1` id, `$2` reason, `$3` now: ends the live members of its tree; their ids.
    cancel_tree: SqlStr,
    /// `$1` ids: deletes their inboxes.
    clear: SqlStr,
    /// `$1` parent, `$2` now: one child ended.
    release_parent: SqlStr,
}

impl ControlSql {
    pub(super) fn new(tables: &Tables) -> Self {
        let Tables {
            fsm,
            signals,
            status,
            rate_limits,
            paused,
        } = tables;
        let inputs = INPUTS.replace("{fsm}", fsm).replace("{signals}", signals);
        let tree = format!(
            "WITH RECURSIVE tree(id) AS (
                 SELECT $1::int8
                 UNION SELECT c.id FROM {fsm} c JOIN tree t ON c.parent_id = t.id
             )"
        );
        Self {
            lock_buckets: statement(format!(
                "WITH locked AS (
                     SELECT key, capacity, per_micros, tokens, refilled_at
                     FROM {rate_limits} WHERE key = ANY ($1)
                     ORDER BY key
                     FOR UPDATE
                 )
                 SELECT locked.*, clock_timestamp() AS clock FROM locked"
            )),
            save_buckets: statement(format!(
                "UPDATE {rate_limits} b SET tokens = u.tokens, refilled_at = u.at
                 FROM unnest($1::text[], $2::float8[], $3::timestamptz[]) AS u(key, tokens, at)
                 WHERE b.key = u.key"
            )),
            defer: statement(format!(
                "WITH d AS (
                     SELECT u.id, u.at FROM unnest($1::int8[], $2::timestamptz[]) AS u(id, at)
                 ), l AS (
                     SELECT f.id FROM {fsm} f WHERE f.id IN (SELECT id FROM d)
                       AND f.status = 'runnable'
                     FOR UPDATE SKIP LOCKED
                 )
                 UPDATE {fsm} f SET eligible_at = d.at
                 FROM d JOIN l ON l.id = d.id WHERE f.id = d.id"
            )),
            claim_plain: statement(format!(
                "WITH c AS (
                     SELECT f.id FROM {fsm} f
                     WHERE f.id = ANY ($1) AND f.status = 'runnable' AND f.queue = $2
                       AND f.eligible_at <= $3
                     FOR UPDATE SKIP LOCKED
                 )
                 UPDATE {fsm} g
                 SET status = 'executing', locked_by = $4, lease_expires_at = $5,
                     lease_token = g.lease_token + 1, updated_at = $6
                 FROM c WHERE g.id = c.id
                 RETURNING {CLAIMED}, {inputs}"
            )),
            set_rate_limit: statement(format!(
                "INSERT INTO {rate_limits} AS b (key, capacity, per_micros, tokens, refilled_at)
                 VALUES ($1, $2, $3, $2, clock_timestamp())
                 ON CONFLICT (key) DO UPDATE
                 SET capacity = EXCLUDED.capacity, per_micros = EXCLUDED.per_micros,
                     tokens = least(b.tokens, EXCLUDED.capacity)"
            )),
            remove_rate_limit: statement(format!("DELETE FROM {rate_limits} WHERE key = $1")),
            rate_limits: statement(format!(
                "SELECT key, capacity, per_micros, tokens, refilled_at FROM {rate_limits}
                 ORDER BY key"
            )),
            pause: statement(format!(
                "INSERT INTO {paused} (queue, paused_at) VALUES ($1, $2)
                 ON CONFLICT (queue) DO NOTHING"
            )),
            resume: statement(format!("DELETE FROM {paused} WHERE queue = $1")),
            paused: statement(format!(
                "SELECT queue, paused_at FROM {paused} ORDER BY queue"
            )),
            lock_tree: statement(format!(
                "{tree}
                 SELECT f.id, f.status::text AS status, f.parent_id FROM {fsm} f
                 WHERE f.id IN (SELECT id FROM tree)
                 ORDER BY f.id DESC
                 FOR NO KEY UPDATE OF f"
            )),
            // A new snapshot: children a member spawned while the tree was being locked are
            // cancelled too.
            cancel_tree: statement(format!(
                "{tree}
                 UPDATE {fsm} f
                 SET status = 'failed', last_error = $2, awaits = NULL, locked_by = NULL,
                     lease_expires_at = NULL, await_deadline = NULL, concurrency_slot = NULL,
                     children_pending = 0, lease_token = f.lease_token + 1, updated_at = $3
                 WHERE f.id IN (SELECT id FROM tree) AND f.status NOT IN ('done', 'failed')
                 RETURNING f.id"
            )),
            clear: statement(format!("DELETE FROM {signals} WHERE target_id = ANY ($1)")),
            release_parent: statement(format!(
                "UPDATE {fsm} p
                 SET children_pending = p.children_pending - 1,
                     status = CASE WHEN p.children_pending - 1 <= 0
                                        AND p.status = 'awaiting_children'
                                   THEN 'runnable' ELSE p.status END::{status},
                     eligible_at = CASE WHEN p.children_pending - 1 <= 0
                                             AND p.status = 'awaiting_children'
                                        THEN $2 ELSE p.eligible_at END,
                     updated_at = $2
                 WHERE p.id = $1"
            )),
        }
    }
}

/// A candidate the pick statement left for a transaction: it has a concurrency key, a
/// rate-limit key, or both.
pub(super) struct Deferred {
    pub(super) id: i64,
    pub(super) concurrency_key: Option<String>,
    pub(super) rate_limit_key: Option<String>,
    pub(super) units: u32,
    /// Its place in the pick's order.
    pub(super) order: (i16, SystemTime, i64),
}

impl Deferred {
    pub(super) fn from_row(row: &PgRow) -> Result<Self, StorageError> {
        let id: i64 = row.try_get("candidate").map_err(db_err)?;
        let units: i32 = row.try_get("candidate_units").map_err(db_err)?;
        Ok(Self {
            id,
            concurrency_key: row.try_get("candidate_key").map_err(db_err)?,
            rate_limit_key: row.try_get("candidate_rate_key").map_err(db_err)?,
            units: units_of(units)?,
            order: (
                row.try_get("candidate_priority").map_err(db_err)?,
                row.try_get::<PgTime, _>("candidate_eligible_at")
                    .map_err(db_err)?
                    .get()?,
                id,
            ),
        })
    }
}

fn units_of(units: i32) -> Result<u32, StorageError> {
    u32::try_from(units).map_err(|_| rejected(format!("rate-limit units {units} out of range")))
}

/// Claims the `deferred` candidates, in a transaction of their own (`conn`): those their rate
/// limits serve, each (if it has a concurrency key) into a free slot of its key; debits the
/// buckets for the claims made, and moves the candidates their buckets cannot serve to when
/// they can.
pub(super) async fn claim_deferred(
    sql: &Sql,
    control: &ControlSql,
    conn: &mut PgConnection,
    mut deferred: Vec<Deferred>,
    claim: &ClaimBy<'_>,
    now: SystemTime,
) -> Result<Vec<PgRow>, StorageError> {
    deferred.sort_by_key(|candidate| candidate.order);
    let mut keys: Vec<String> = deferred
        .iter()
        .filter_map(|candidate| candidate.rate_limit_key.clone())
        .collect();
    keys.sort();
    keys.dedup();
    let mut buckets: HashMap<String, TokenBucket> = HashMap::new();
    if !keys.is_empty() {
        for row in sqlx::query(control.lock_buckets.clone())
            .bind(&keys)
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?
        {
            let clock = to_micros(row.try_get::<PgTime, _>("clock").map_err(db_err)?.get()?)?;
            let mut bucket = bucket_of(&row)?;
            bucket.refill(clock);
            buckets.insert(row.try_get("key").map_err(db_err)?, bucket);
        }
    }
    let decisions = decide_rate_limits(
        &deferred
            .iter()
            .map(|candidate| (candidate.rate_limit_key.as_deref(), candidate.units))
            .collect::<Vec<_>>(),
        &buckets,
    );
    let (mut keyed, mut keyed_keys, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    let (mut deferred_ids, mut deferred_until) = (Vec::new(), Vec::new());
    for (candidate, decision) in deferred.iter().zip(&decisions) {
        match decision {
            RateDecision::Deferred { wait } => {
                deferred_ids.push(candidate.id);
                deferred_until.push(PgTime::new(later(now, *wait))?);
            }
            RateDecision::Free | RateDecision::Granted => match &candidate.concurrency_key {
                Some(key) => {
                    keyed.push(candidate.id);
                    if !keyed_keys.contains(key) {
                        keyed_keys.push(key.clone());
                    }
                }
                None => plain.push(candidate.id),
            },
        }
    }
    if !deferred_ids.is_empty() {
        sqlx::query(control.defer.clone())
            .bind(&deferred_ids)
            .bind(&deferred_until)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    let mut rows = Vec::new();
    if !plain.is_empty() {
        rows = sqlx::query(control.claim_plain.clone())
            .bind(&plain)
            .bind(claim.queue)
            .bind(claim.eligible_by)
            .bind(claim.worker)
            .bind(claim.lease_until)
            .bind(claim.now)
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if !keyed.is_empty() {
        rows.extend(claim_keyed(sql, conn, &keyed, &keyed_keys, claim).await?);
    }
    if !buckets.is_empty() {
        let by_id: HashMap<i64, &Deferred> = deferred.iter().map(|c| (c.id, c)).collect();
        for row in &rows {
            let id: i64 = row.try_get("id").map_err(db_err)?;
            if let Some(candidate) = by_id.get(&id)
                && let Some(key) = &candidate.rate_limit_key
                && let Some(bucket) = buckets.get_mut(key)
            {
                bucket.take(candidate.units);
            }
        }
        let mut saved = (Vec::new(), Vec::new(), Vec::new());
        for (key, bucket) in &buckets {
            saved.0.push(key.clone());
            saved.1.push(bucket.tokens);
            saved.2.push(PgTime::new(from_micros(bucket.refilled_at)?)?);
        }
        sqlx::query(control.save_buckets.clone())
            .bind(saved.0)
            .bind(saved.1)
            .bind(saved.2)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    Ok(rows)
}

/// `now + wait`, in whole microseconds.
fn later(now: SystemTime, wait: Duration) -> SystemTime {
    durable_runtime::storage::truncate_to_micros(now.checked_add(wait).unwrap_or(now))
}

fn bucket_of(row: &PgRow) -> Result<TokenBucket, StorageError> {
    let capacity: i32 = row.try_get("capacity").map_err(db_err)?;
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
        refilled_at: to_micros(
            row.try_get::<PgTime, _>("refilled_at")
                .map_err(db_err)?
                .get()?,
        )?,
    })
}

impl PostgresFsmStore {
    pub(super) async fn set_rate_limit_on(
        &self,
        key: &str,
        limit: RateLimit,
    ) -> Result<(), StorageError> {
        limit.check().map_err(rejected)?;
        let capacity = i32::try_from(limit.capacity)
            .map_err(|_| rejected(format!("rate-limit capacity {} too large", limit.capacity)))?;
        sqlx::query(self.control.set_rate_limit.clone())
            .bind(key)
            .bind(capacity)
            .bind(limit.per_micros())
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    pub(super) async fn remove_rate_limit_on(&self, key: &str) -> Result<bool, StorageError> {
        let done = sqlx::query(self.control.remove_rate_limit.clone())
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(done.rows_affected() > 0)
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
        let done = sqlx::query(self.control.pause.clone())
            .bind(queue)
            .bind(PgTime::new(now)?)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(done.rows_affected() > 0)
    }

    pub(super) async fn resume_on(&self, queue: &str) -> Result<bool, StorageError> {
        let done = sqlx::query(self.control.resume.clone())
            .bind(queue)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(done.rows_affected() > 0)
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
                    paused_at: row
                        .try_get::<PgTime, _>("paused_at")
                        .map_err(db_err)?
                        .get()?,
                })
            })
            .collect()
    }

    pub(super) async fn cancel_on(
        &self,
        target: &Target,
        reason: &str,
        now: SystemTime,
    ) -> Result<CancelOutcome, StorageError> {
        let id = match target {
            Target::Id(id) => id.get(),
            Target::Key(key) => {
                let found: Option<i64> = sqlx::query_scalar(self.sql.find.clone())
                    .bind(key)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(db_err)?;
                match found {
                    Some(id) => id,
                    None => return Ok(CancelOutcome::NotFound),
                }
            }
        };
        let now = PgTime::new(now)?;
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let tree = sqlx::query(self.control.lock_tree.clone())
            .bind(id)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        let mut parent = None;
        let mut found = false;
        for row in &tree {
            if row.try_get::<i64, _>("id").map_err(db_err)? != id {
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
        let ended: Vec<i64> = sqlx::query_scalar(self.control.cancel_tree.clone())
            .bind(id)
            .bind(reason)
            .bind(now)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(self.control.clear.clone())
            .bind(&ended)
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
            instances: u64::try_from(ended.len()).unwrap_or(u64::MAX),
        })
    }
}
