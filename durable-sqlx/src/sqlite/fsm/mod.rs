//! [`SqliteFsmStore`]: the FSM engine's store in SQLite, in the database of the
//! [`SqliteStore`] it comes from (same file, pool, writing connection, table prefix and
//! migrations).
//!
//! The tables and rules are the Postgres store's. What differs is how writers are kept apart:
//! SQLite has one writer at a time, so every write of this store runs in one `BEGIN IMMEDIATE`
//! transaction on the store's writing connection, which takes the database's write lock before
//! its first read. Postgres needs `FOR UPDATE SKIP LOCKED` and per-key advisory locks so that
//! concurrent pickers neither take the same row nor the same slot of a concurrency key; here a
//! pick reads the candidates, the slots its keys hold and writes its claims with no other
//! writer in between, in this process or another, which is what those locks buy: a row another
//! picker holds is already `executing` when the next pick reads, and a slot another pick took
//! is already in the unique index. The index stays the arbiter all the same.

mod batch;
mod complete;
mod control;
mod decode;
pub(super) mod linked;
mod pick;
mod sql;

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use durable_runtime::fsm::store::{
    CancelOutcome, Claimed, Committed, Delivered, FsmStore, InstanceRecord, Lease, ListFilter,
    NewInstance, NewSignal, OutcomeCommit, PausedQueue, PickRequest, RateLimit, RateLimitRecord,
    SignalRecord, Swept, Target,
};
use durable_runtime::fsm::{InstanceId, SignalId, Status};
use durable_runtime::storage::StorageError;
use serde_json::json;
use sqlx::sqlite::SqlitePool;
use sqlx::{Row, SqliteConnection};

use super::writer::Writer;
use super::{SqliteStore, db_err};
use crate::error::rejected;
use crate::schema::to_micros;
use decode::{instance_record, signal_record, status};
use sql::Sql;

/// The durable FSM engine's instances and inboxes in SQLite (features `sqlite` and `fsm`).
///
/// Built from a [`SqliteStore`] with [`SqliteStore::fsm`]: it shares the store's database,
/// pool, writing connection, table prefix and migrations, which create the tables `durable_fsm`
/// and `durable_fsm_signals` (the Postgres layout in SQLite's types: status as checked text,
/// JSON as text, times as integer microseconds, the correlation scope as a bit mask).
///
/// Every write is one `BEGIN IMMEDIATE` transaction on the store's one writing connection:
/// SQLite's single writer orders picks, outcomes and signals, in this process and in others
/// sharing the file. Steps run outside any transaction. Cloning is cheap.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use durable_runtime::fsm::Engine;
/// use durable_sqlx::SqliteStore;
///
/// let store = SqliteStore::open("sqlite::memory:").await?;
/// let engine = Engine::builder(store.fsm()).queue("default", 10).build()?;
/// # drop(engine); Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqliteFsmStore {
    pool: SqlitePool,
    writer: Arc<Writer>,
    sql: Arc<Sql>,
    control: Arc<control::ControlSql>,
}

impl SqliteStore {
    /// The FSM engine's store in this store's database, with its table prefix (feature
    /// `fsm`). Its writes share this store's writing connection.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::SqliteStore::open("sqlite::memory:").await?;
    /// let fsm = store.fsm();
    /// # drop(fsm); Ok(()) }
    /// ```
    pub fn fsm(&self) -> SqliteFsmStore {
        // Built once per store: commits carrying FSM changes ask for it every time.
        self.fsm
            .get_or_init(|| SqliteFsmStore {
                pool: self.pool.clone(),
                writer: Arc::clone(&self.writer),
                sql: Arc::new(Sql::new(&self.names)),
                control: Arc::new(control::ControlSql::new(&self.names)),
            })
            .clone()
    }
}

impl SqliteFsmStore {
    /// The connection pool, for your own queries (the FSM tables are `durable_fsm` and
    /// `durable_fsm_signals`, with the store's prefix).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let fsm = durable_sqlx::SqliteStore::open("sqlite::memory:").await?.fsm();
    /// let (count,): (i64,) = durable_sqlx::sqlx::query_as("SELECT count(*) FROM durable_fsm")
    ///     .fetch_one(fsm.pool())
    ///     .await?;
    /// assert_eq!(count, 0);
    /// # Ok(()) }
    /// ```
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Inserts `instances` (children of `parent`, if any) on `conn`; returns the ids inserted
    /// and their parents.
    async fn insert_on(
        &self,
        conn: &mut SqliteConnection,
        instances: &[(&NewInstance, Option<i64>)],
        now: i64,
    ) -> Result<Vec<(i64, Option<i64>)>, StorageError> {
        let rows = instances
            .iter()
            .map(|(instance, parent)| instance_row(instance, *parent))
            .collect::<Result<Vec<_>, StorageError>>()?;
        let rows = sqlx::query(self.sql.insert.clone())
            .bind(encode(&rows)?)
            .bind(now)
            .fetch_all(conn)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<i64, _>("id").map_err(db_err)?,
                    row.try_get::<Option<i64>, _>("parent_id").map_err(db_err)?,
                ))
            })
            .collect()
    }

    /// Delivers `signal` on `conn`, inside a write transaction the caller opened and ends;
    /// `None` without a live target (nothing is written then).
    async fn signal_on(
        &self,
        conn: &mut SqliteConnection,
        target: &Target,
        signal: &NewSignal,
        now: i64,
    ) -> Result<Option<Delivered>, StorageError> {
        let found = match target {
            Target::Id(id) => sqlx::query(self.sql.target_by_id.clone()).bind(id.get()),
            Target::Key(key) => sqlx::query(self.sql.target_by_key.clone()).bind(key),
        }
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_err)?;
        let Some(found) = found else {
            return Ok(None);
        };
        let id: i64 = found.try_get("id").map_err(db_err)?;
        if status(found.try_get("status").map_err(db_err)?)?.is_terminal() {
            return Ok(None);
        }
        let inserted: Option<i64> = sqlx::query_scalar(self.sql.deliver.clone())
            .bind(id)
            .bind(&signal.name)
            .bind(&signal.payload)
            .bind(&signal.dedup_key)
            .bind(now)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
        let woke = sqlx::query(self.sql.wake.clone())
            .bind(id)
            .bind(&signal.name)
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?
            .rows_affected()
            > 0;
        Ok(Some(Delivered {
            target: InstanceId::new(id),
            signal: inserted.map(SignalId::new),
            woke,
        }))
    }
}

/// The correlation scope as stored: bit `i` set for the `i`-th of [`Status::ALL`] (the
/// migration's generated guard reads the same bits).
fn scope_mask(scope: &[Status]) -> i64 {
    Status::ALL
        .iter()
        .enumerate()
        .filter(|(_, status)| scope.contains(status))
        .map(|(bit, _)| 1 << bit)
        .sum()
}

/// A batch parameter: `value` as JSON text.
fn encode(value: &impl serde::Serialize) -> Result<String, StorageError> {
    serde_json::to_string(value)
        .map_err(|err| rejected(format!("FSM batch could not be encoded: {err}")))
}

fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

#[async_trait]
impl FsmStore for SqliteFsmStore {
    async fn insert(
        &self,
        instances: &[NewInstance],
        now: SystemTime,
    ) -> Result<Vec<InstanceId>, StorageError> {
        if instances.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(&NewInstance, Option<i64>)> =
            instances.iter().map(|instance| (instance, None)).collect();
        let now = to_micros(now)?;
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        let inserted = self.insert_on(&mut tx, &rows, now).await?;
        tx.commit().await.map_err(db_err)?;
        Ok(inserted
            .into_iter()
            .map(|(id, _)| InstanceId::new(id))
            .collect())
    }

    async fn pick(
        &self,
        queue: &str,
        worker: &str,
        eligible_by: SystemTime,
        lease_until: SystemTime,
        limit_rows: usize,
        now: SystemTime,
    ) -> Result<Vec<Claimed>, StorageError> {
        if limit_rows == 0 {
            return Ok(Vec::new());
        }
        pick::pick(
            self,
            &pick::PickBy {
                queue,
                worker,
                eligible_by: to_micros(eligible_by)?,
                lease_until: to_micros(lease_until)?,
                now: to_micros(now)?,
                limit: limit(limit_rows),
                only: None,
            },
        )
        .await
    }

    async fn heartbeat(
        &self,
        leases: &[Lease],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError> {
        if leases.is_empty() {
            return Ok(0);
        }
        let leases = encode(&lease_pairs(leases))?;
        let lease_until = to_micros(lease_until)?;
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        let done = sqlx::query(self.sql.heartbeat.clone())
            .bind(leases)
            .bind(lease_until)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
    }

    async fn complete(
        &self,
        outcomes: &[OutcomeCommit],
        now: SystemTime,
    ) -> Result<Vec<Committed>, StorageError> {
        complete::complete(self, outcomes, now).await
    }

    async fn signal(
        &self,
        target: &Target,
        signal: &NewSignal,
        now: SystemTime,
    ) -> Result<Option<Delivered>, StorageError> {
        let now = to_micros(now)?;
        // Resolving, inserting and waking under the write lock: a step parking the target
        // commits either before (the wake-up below sees it parked) or after (its park sees
        // this signal). No lost wake-up.
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        let delivered = self.signal_on(&mut tx, target, signal, now).await?;
        if delivered.is_some() {
            tx.commit().await.map_err(db_err)?;
        }
        Ok(delivered)
    }

    async fn get(&self, id: InstanceId) -> Result<Option<InstanceRecord>, StorageError> {
        sqlx::query(self.sql.get.clone())
            .bind(id.get())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?
            .as_ref()
            .map(instance_record)
            .transpose()
    }

    async fn find(&self, key: &str) -> Result<Option<InstanceId>, StorageError> {
        let id: Option<i64> = sqlx::query_scalar(self.sql.find.clone())
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(id.map(InstanceId::new))
    }

    async fn inbox(&self, id: InstanceId) -> Result<Vec<SignalRecord>, StorageError> {
        sqlx::query(self.sql.inbox.clone())
            .bind(id.get())
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?
            .iter()
            .map(signal_record)
            .collect()
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<InstanceRecord>, StorageError> {
        let limit = i64::try_from(filter.bounded_limit()).unwrap_or(i64::MAX);
        sqlx::query(self.sql.list.clone())
            .bind(filter.fsm.as_deref())
            .bind(filter.status.map(Status::as_str))
            .bind(filter.after.map_or(0, InstanceId::get))
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?
            .iter()
            .map(instance_record)
            .collect()
    }

    async fn reap(&self, now: SystemTime) -> Result<Swept, StorageError> {
        let now = to_micros(now)?;
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        let leases = sqlx::query(self.sql.reap_leases.clone())
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let deadlines = sqlx::query(self.sql.reap_deadlines.clone())
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(Swept {
            expired_leases: leases.rows_affected(),
            await_timeouts: deadlines.rows_affected(),
        })
    }

    async fn gc(&self, ended_before: SystemTime, limit_rows: usize) -> Result<u64, StorageError> {
        let ended_before = to_micros(ended_before)?;
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        let deleted = sqlx::query(self.sql.gc.clone())
            .bind(ended_before)
            .bind(limit(limit_rows))
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(deleted.rows_affected())
    }

    async fn set_rate_limit(&self, key: &str, limit: RateLimit) -> Result<(), StorageError> {
        self.set_rate_limit_on(key, limit).await
    }

    async fn remove_rate_limit(&self, key: &str) -> Result<bool, StorageError> {
        self.remove_rate_limit_on(key).await
    }

    async fn rate_limits(&self) -> Result<Vec<RateLimitRecord>, StorageError> {
        self.rate_limits_on().await
    }

    async fn pause_queue(&self, queue: &str, now: SystemTime) -> Result<bool, StorageError> {
        self.pause_on(queue, now).await
    }

    async fn resume_queue(&self, queue: &str) -> Result<bool, StorageError> {
        self.resume_on(queue).await
    }

    async fn paused_queues(&self) -> Result<Vec<PausedQueue>, StorageError> {
        self.paused_on().await
    }

    async fn cancel(
        &self,
        target: &Target,
        reason: &str,
        now: SystemTime,
    ) -> Result<CancelOutcome, StorageError> {
        self.cancel_on(target, reason, now).await
    }

    async fn pick_registered(
        &self,
        request: &PickRequest<'_>,
    ) -> Result<Vec<Claimed>, StorageError> {
        if request.limit == 0 {
            return Ok(Vec::new());
        }
        pick::pick(
            self,
            &pick::PickBy {
                queue: request.queue,
                worker: request.worker,
                eligible_by: to_micros(request.eligible_by)?,
                lease_until: to_micros(request.lease_until)?,
                now: to_micros(request.now)?,
                limit: limit(request.limit),
                only: Some(encode(&request.tags())?),
            },
        )
        .await
    }

    async fn insert_batch(
        &self,
        instances: &[NewInstance],
        now: SystemTime,
    ) -> Result<Vec<Option<InstanceId>>, StorageError> {
        batch::insert_batch(self, instances, now).await
    }
}

/// Leases as the `[id, token]` pairs the batched statements take.
fn lease_pairs(leases: &[Lease]) -> Vec<[i64; 2]> {
    leases
        .iter()
        .map(|lease| [lease.id.get(), lease.token])
        .collect()
}

/// One instance as a row of the insert statement's JSON array.
pub(super) fn instance_row(
    instance: &NewInstance,
    parent: Option<i64>,
) -> Result<serde_json::Value, StorageError> {
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
        "parent": parent,
        "concurrency_key": instance.concurrency_key,
        "concurrency_limit": instance.concurrency_limit.max(1),
        "rate_limit_key": instance.rate_limit_key,
        "rate_limit_units": instance.rate_limit_units.max(1),
    }))
}
