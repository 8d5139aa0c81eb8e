//! [`PostgresFsmStore`]: the FSM engine's store on Postgres, in the tables of the
//! [`PostgresStore`] it comes from (same pool, schema, table prefix and migrations).
//!
//! Every operation is the specification's SQL (`sql`), with the engine's clock readings
//! as parameters. Outcomes are committed in `complete`, many per transaction.

mod batch;
mod complete;
mod control;
pub(super) mod linked;
mod sql;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use durable_runtime::fsm::store::{
    CancelOutcome, ChildRecord, Claimed, Committed, Delivered, FsmStore, InstanceRecord, Lease,
    ListFilter, NewInstance, NewSignal, OutcomeCommit, PausedQueue, PickRequest, RateLimit,
    RateLimitRecord, SignalRecord, Swept, Target,
};
use durable_runtime::fsm::{InstanceId, SignalId, Status};
use durable_runtime::storage::StorageError;
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{Connection, PgConnection, Row};

use super::time::PgTime;
use super::{PostgresStore, db_err};
use crate::error::rejected;
use control::{ControlSql, Deferred};
use sql::{Sql, Tables};

/// The durable FSM engine's instances and inboxes in Postgres (feature `fsm`).
///
/// Built from a [`PostgresStore`] with [`PostgresStore::fsm`]: it shares the store's pool, its
/// schema and table prefix, and its migrations, which create the tables `durable_fsm` and
/// `durable_fsm_signals` and the enum type `durable_status` (the specification's DDL,
/// plus a per-claim `lease_token` and an `await_deadline`).
///
/// The pick is one statement (`FOR UPDATE SKIP LOCKED` on the partial index of runnable rows;
/// rows with a concurrency key take their slot in two more statements, in a transaction opened
/// only when the pick found such rows),
/// steps run outside any transaction, and each batch of outcomes is one transaction in which
/// every outcome is guarded by its claim token. Cloning is cheap.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use durable_runtime::fsm::Engine;
/// use durable_sqlx::PostgresStore;
///
/// let store = PostgresStore::connect("postgres://postgres@127.0.0.1/app").await?;
/// let engine = Engine::builder(store.fsm()).queue("default", 10).build()?;
/// # drop(engine); Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresFsmStore {
    pool: PgPool,
    sql: Arc<Sql>,
    control: Arc<ControlSql>,
}

impl PostgresStore {
    /// The FSM engine's store in this store's database, schema and table prefix (feature
    /// `fsm`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::PostgresStore::connect("postgres://postgres@127.0.0.1/app").await?;
    /// let fsm = store.fsm();
    /// # drop(fsm); Ok(()) }
    /// ```
    pub fn fsm(&self) -> PostgresFsmStore {
        // Built once per store: commits carrying FSM changes ask for it every time.
        self.fsm
            .get_or_init(|| {
                let tables = Tables::new(&self.names);
                PostgresFsmStore {
                    pool: self.pool.clone(),
                    sql: Arc::new(Sql::new(&tables)),
                    control: Arc::new(ControlSql::new(&tables)),
                }
            })
            .clone()
    }
}

impl PostgresFsmStore {
    /// The connection pool, for your own queries (the FSM tables are `durable_fsm` and
    /// `durable_fsm_signals`, with the store's schema and prefix).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The text of the pick statement, for `EXPLAIN` (parameters: queue, eligible by, limit,
    /// worker, lease end, now, and the `name:version` tags picked, or `NULL` for all).
    #[doc(hidden)]
    pub fn pick_statement(&self) -> &str {
        self.sql.pick.as_str()
    }

    /// The inboxes of `ids` and their children, for the claimed rows that have any.
    async fn inputs(
        &self,
        with_signals: &[i64],
        with_children: &[i64],
    ) -> Result<(Inputs<SignalRecord>, Inputs<ChildRecord>), StorageError> {
        let mut inboxes: Inputs<SignalRecord> = HashMap::new();
        if !with_signals.is_empty() {
            let rows = sqlx::query(self.sql.inboxes.clone())
                .bind(with_signals)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            for row in &rows {
                let target: i64 = row.try_get("target_id").map_err(db_err)?;
                inboxes.entry(target).or_default().push(signal_record(row)?);
            }
        }
        let mut children: Inputs<ChildRecord> = HashMap::new();
        if !with_children.is_empty() {
            let rows = sqlx::query(self.sql.children.clone())
                .bind(with_children)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            for row in &rows {
                let parent: i64 = row.try_get("parent_id").map_err(db_err)?;
                children.entry(parent).or_default().push(child_record(row)?);
            }
        }
        Ok((inboxes, children))
    }

    /// Inserts `instances` (children of `parent`, if any) on `conn`; returns the ids inserted
    /// and their parents.
    async fn insert_on(
        &self,
        conn: &mut PgConnection,
        instances: &[(&NewInstance, Option<i64>)],
        now: SystemTime,
    ) -> Result<Vec<(i64, Option<i64>)>, StorageError> {
        let mut columns = InsertColumns::default();
        for (instance, parent) in instances {
            columns.push(instance, *parent)?;
        }
        let rows = sqlx::query(self.sql.insert.clone())
            .bind(columns.fsm)
            .bind(columns.version)
            .bind(columns.step)
            .bind(columns.state)
            .bind(columns.queue)
            .bind(columns.priority)
            .bind(columns.eligible_at)
            .bind(columns.key)
            .bind(columns.scope)
            .bind(PgTime::new(now)?)
            .bind(columns.parent)
            .bind(columns.concurrency_key)
            .bind(columns.concurrency_limit)
            .bind(columns.rate_limit_key)
            .bind(columns.rate_limit_units)
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

    /// Delivers `signal` on `conn`, inside a transaction the caller opened and ends; `None`
    /// without a live target (nothing is written then).
    async fn signal_on(
        &self,
        conn: &mut PgConnection,
        target: &Target,
        signal: &NewSignal,
        now: SystemTime,
    ) -> Result<Option<Delivered>, StorageError> {
        // Resolve and lock the target first: a step parking it concurrently then either sees
        // this signal or is seen parked by the wake-up below (no lost wake-up).
        let locked = match target {
            Target::Id(id) => sqlx::query(self.sql.lock_by_id.clone()).bind(id.get()),
            Target::Key(key) => sqlx::query(self.sql.lock_by_key.clone()).bind(key),
        }
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_err)?;
        let Some(locked) = locked else {
            return Ok(None);
        };
        let id: i64 = locked.try_get("id").map_err(db_err)?;
        if status(locked.try_get("status").map_err(db_err)?)?.is_terminal() {
            return Ok(None);
        }
        let row = sqlx::query(self.sql.deliver.clone())
            .bind(id)
            .bind(&signal.name)
            .bind(&signal.payload)
            .bind(&signal.dedup_key)
            .bind(PgTime::new(now)?)
            .fetch_one(&mut *conn)
            .await
            .map_err(db_err)?;
        let inserted: Option<i64> = row.try_get("signal").map_err(db_err)?;
        let woke: bool = row.try_get("woke").map_err(db_err)?;
        Ok(Some(Delivered {
            target: InstanceId::new(id),
            signal: inserted.map(SignalId::new),
            woke,
        }))
    }
}

type Inputs<T> = HashMap<i64, Vec<T>>;

/// Claims the keyed `candidates` the pick statement returned (their `keys` distinct), each
/// into a free slot of its key, in a transaction opened for them alone: first the claim locks of their keys
/// (a key another picker is claiming is skipped), then, in a statement that sees every claim
/// of those keys committed before the locks, the slots.
async fn claim_keyed(
    sql: &Sql,
    conn: &mut PgConnection,
    candidates: &[i64],
    keys: &[String],
    claim: &ClaimBy<'_>,
) -> Result<Vec<PgRow>, StorageError> {
    let locked: Vec<String> = sqlx::query_scalar(sql.lock_keys.clone())
        .bind(keys)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?;
    if locked.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query(sql.claim_keyed.clone())
        .bind(candidates)
        .bind(&locked)
        .bind(claim.queue)
        .bind(claim.eligible_by)
        .bind(claim.worker)
        .bind(claim.lease_until)
        .bind(claim.now)
        .fetch_all(conn)
        .await
        .map_err(db_err)
}

/// Who claims, for what, until when: the pick's parameters.
struct ClaimBy<'a> {
    queue: &'a str,
    worker: &'a str,
    eligible_by: PgTime,
    lease_until: PgTime,
    now: PgTime,
}

/// The rows a pick claimed, with what their steps need to read.
#[derive(Default)]
struct Picked {
    claimed: Vec<Claimed>,
    /// Each claim's place in the pick's order: priority, eligibility, id.
    order: Vec<(i16, SystemTime, i64)>,
    with_signals: Vec<i64>,
    with_children: Vec<i64>,
}

impl Picked {
    fn add(&mut self, row: &PgRow) -> Result<(), StorageError> {
        let id: i64 = row.try_get("id").map_err(db_err)?;
        let priority: i16 = row.try_get("priority").map_err(db_err)?;
        let eligible_at = row
            .try_get::<PgTime, _>("eligible_at")
            .map_err(db_err)?
            .get()?;
        self.order.push((priority, eligible_at, id));
        if row.try_get::<bool, _>("has_signals").map_err(db_err)? {
            self.with_signals.push(id);
        }
        if row.try_get::<bool, _>("has_children").map_err(db_err)? {
            self.with_children.push(id);
        }
        self.claimed.push(Claimed {
            id: InstanceId::new(id),
            token: row.try_get("lease_token").map_err(db_err)?,
            fsm: row.try_get("fsm").map_err(db_err)?,
            fsm_version: row.try_get("fsm_version").map_err(db_err)?,
            step: row.try_get("step").map_err(db_err)?,
            state: row.try_get("state").map_err(db_err)?,
            attempt: attempt(row.try_get("attempt").map_err(db_err)?)?,
            correlation_key: row.try_get("correlation_key").map_err(db_err)?,
            awaits: row.try_get("awaits").map_err(db_err)?,
            inbox: Vec::new(),
            children: Vec::new(),
        });
        Ok(())
    }
}

/// The columns of a batch insert, one array each.
#[derive(Default)]
struct InsertColumns {
    fsm: Vec<String>,
    version: Vec<i32>,
    step: Vec<String>,
    state: Vec<String>,
    queue: Vec<String>,
    priority: Vec<i16>,
    eligible_at: Vec<PgTime>,
    key: Vec<Option<String>>,
    scope: Vec<String>,
    parent: Vec<Option<i64>>,
    concurrency_key: Vec<Option<String>>,
    concurrency_limit: Vec<i32>,
    rate_limit_key: Vec<Option<String>>,
    rate_limit_units: Vec<i32>,
}

impl InsertColumns {
    fn push(&mut self, instance: &NewInstance, parent: Option<i64>) -> Result<(), StorageError> {
        self.fsm.push(instance.fsm.clone());
        self.version.push(instance.fsm_version);
        self.step.push(instance.step.clone());
        self.state.push(instance.state.clone());
        self.queue.push(instance.queue.clone());
        self.priority.push(instance.priority);
        self.eligible_at.push(PgTime::new(instance.eligible_at)?);
        self.key.push(instance.correlation_key.clone());
        self.scope.push(
            instance
                .correlation_scope
                .iter()
                .map(|status| status.as_str())
                .collect::<Vec<_>>()
                .join(","),
        );
        self.parent.push(parent);
        self.concurrency_key.push(instance.concurrency_key.clone());
        self.concurrency_limit
            .push(i32::from(instance.concurrency_limit.max(1)));
        self.rate_limit_key.push(instance.rate_limit_key.clone());
        self.rate_limit_units
            .push(
                i32::try_from(instance.rate_limit_units.max(1)).map_err(|_| {
                    rejected(format!(
                        "rate-limit units {} out of range",
                        instance.rate_limit_units
                    ))
                })?,
            );
        Ok(())
    }
}

fn status(text: &str) -> Result<Status, StorageError> {
    text.parse()
        .map_err(|_| rejected(format!("unknown FSM status {text:?} in storage")))
}

fn attempt(value: i32) -> Result<u32, StorageError> {
    u32::try_from(value).map_err(|_| rejected(format!("negative attempt count {value}")))
}

/// A concurrency limit or slot, which the engine keeps within `u16`.
fn small(value: i32) -> Result<u16, StorageError> {
    u16::try_from(value)
        .map_err(|_| rejected(format!("concurrency limit or slot {value} out of range")))
}

fn signal_record(row: &PgRow) -> Result<SignalRecord, StorageError> {
    Ok(SignalRecord {
        id: SignalId::new(row.try_get("id").map_err(db_err)?),
        name: row.try_get("name").map_err(db_err)?,
        payload: row.try_get("payload").map_err(db_err)?,
        dedup_key: row.try_get("dedup_key").map_err(db_err)?,
        inserted_at: row
            .try_get::<PgTime, _>("inserted_at")
            .map_err(db_err)?
            .get()?,
    })
}

fn child_record(row: &PgRow) -> Result<ChildRecord, StorageError> {
    Ok(ChildRecord {
        id: InstanceId::new(row.try_get("id").map_err(db_err)?),
        fsm: row.try_get("fsm").map_err(db_err)?,
        status: status(row.try_get("status").map_err(db_err)?)?,
        state: row.try_get("state").map_err(db_err)?,
        result: row.try_get("result").map_err(db_err)?,
        last_error: row.try_get("last_error").map_err(db_err)?,
    })
}

fn optional_time(row: &PgRow, column: &str) -> Result<Option<SystemTime>, StorageError> {
    row.try_get::<Option<PgTime>, _>(column)
        .map_err(db_err)?
        .map(PgTime::get)
        .transpose()
}

fn instance_record(row: &PgRow) -> Result<InstanceRecord, StorageError> {
    let scope: Vec<String> = row.try_get("correlation_scope").map_err(db_err)?;
    Ok(InstanceRecord {
        id: InstanceId::new(row.try_get("id").map_err(db_err)?),
        fsm: row.try_get("fsm").map_err(db_err)?,
        fsm_version: row.try_get("fsm_version").map_err(db_err)?,
        step: row.try_get("step").map_err(db_err)?,
        status: status(row.try_get("status").map_err(db_err)?)?,
        state: row.try_get("state").map_err(db_err)?,
        result: row.try_get("result").map_err(db_err)?,
        awaits: row.try_get("awaits").map_err(db_err)?,
        queue: row.try_get("queue").map_err(db_err)?,
        priority: row.try_get("priority").map_err(db_err)?,
        eligible_at: row
            .try_get::<PgTime, _>("eligible_at")
            .map_err(db_err)?
            .get()?,
        attempt: attempt(row.try_get("attempt").map_err(db_err)?)?,
        last_error: row.try_get("last_error").map_err(db_err)?,
        await_deadline: optional_time(row, "await_deadline")?,
        locked_by: row.try_get("locked_by").map_err(db_err)?,
        lease_expires_at: optional_time(row, "lease_expires_at")?,
        parent_id: row
            .try_get::<Option<i64>, _>("parent_id")
            .map_err(db_err)?
            .map(InstanceId::new),
        children_pending: row.try_get("children_pending").map_err(db_err)?,
        correlation_key: row.try_get("correlation_key").map_err(db_err)?,
        correlation_scope: scope
            .iter()
            .map(|text| status(text))
            .collect::<Result<_, _>>()?,
        concurrency_key: row.try_get("concurrency_key").map_err(db_err)?,
        concurrency_limit: small(row.try_get("concurrency_limit").map_err(db_err)?)?,
        concurrency_slot: row
            .try_get::<Option<i32>, _>("concurrency_slot")
            .map_err(db_err)?
            .map(small)
            .transpose()?,
        rate_limit_key: row.try_get("rate_limit_key").map_err(db_err)?,
        rate_limit_units: u32::try_from(row.try_get::<i32, _>("rate_limit_units").map_err(db_err)?)
            .map_err(|_| rejected("negative rate-limit units"))?,
        inserted_at: row
            .try_get::<PgTime, _>("inserted_at")
            .map_err(db_err)?
            .get()?,
        updated_at: row
            .try_get::<PgTime, _>("updated_at")
            .map_err(db_err)?
            .get()?,
    })
}

fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

#[async_trait]
impl FsmStore for PostgresFsmStore {
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
        let mut conn = self.pool.acquire().await.map_err(db_err)?;
        let inserted = self.insert_on(&mut conn, &rows, now).await?;
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
        self.pick_rows(
            queue,
            worker,
            eligible_by,
            lease_until,
            limit_rows,
            now,
            None,
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
        let ids: Vec<i64> = leases.iter().map(|lease| lease.id.get()).collect();
        let tokens: Vec<i64> = leases.iter().map(|lease| lease.token).collect();
        let done = sqlx::query(self.sql.heartbeat.clone())
            .bind(ids)
            .bind(tokens)
            .bind(PgTime::new(lease_until)?)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
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
        let mut tx = self.pool.begin().await.map_err(db_err)?;
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
        let now = PgTime::new(now)?;
        let leases = sqlx::query(self.sql.reap_leases.clone())
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        let deadlines = sqlx::query(self.sql.reap_deadlines.clone())
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(Swept {
            expired_leases: leases.rows_affected(),
            await_timeouts: deadlines.rows_affected(),
        })
    }

    async fn gc(&self, ended_before: SystemTime, limit_rows: usize) -> Result<u64, StorageError> {
        let deleted = sqlx::query(self.sql.gc.clone())
            .bind(PgTime::new(ended_before)?)
            .bind(limit(limit_rows))
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
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
        self.pick_rows(
            request.queue,
            request.worker,
            request.eligible_by,
            request.lease_until,
            request.limit,
            request.now,
            Some(request.tags()),
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

impl PostgresFsmStore {
    /// The pick, restricted to the `name:version` tags of `only` when given.
    #[allow(clippy::too_many_arguments)]
    async fn pick_rows(
        &self,
        queue: &str,
        worker: &str,
        eligible_by: SystemTime,
        lease_until: SystemTime,
        limit_rows: usize,
        now: SystemTime,
        only: Option<Vec<String>>,
    ) -> Result<Vec<Claimed>, StorageError> {
        if limit_rows == 0 {
            return Ok(Vec::new());
        }
        let claim = ClaimBy {
            queue,
            worker,
            eligible_by: PgTime::new(eligible_by)?,
            lease_until: PgTime::new(lease_until)?,
            now: PgTime::new(now)?,
        };
        // The pick statement commits on its own: a pick without keyed candidates (the common
        // case) is one round trip, with no transaction around it. Keyed candidates are claimed
        // in a transaction of their own, which checks again that each is still runnable.
        let mut conn = self.pool.acquire().await.map_err(db_err)?;
        let rows = sqlx::query(self.sql.pick.clone())
            .bind(queue)
            .bind(claim.eligible_by)
            .bind(limit(limit_rows))
            .bind(worker)
            .bind(claim.lease_until)
            .bind(claim.now)
            .bind(only)
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        let mut picked = Picked::default();
        let mut deferred = Vec::new();
        for row in &rows {
            if row.try_get::<bool, _>("deferred").map_err(db_err)? {
                deferred.push(Deferred::from_row(row)?);
            } else {
                picked.add(row)?;
            }
        }
        if !deferred.is_empty() {
            let mut tx = Connection::begin(&mut *conn).await.map_err(db_err)?;
            let rows =
                control::claim_deferred(&self.sql, &self.control, &mut tx, deferred, &claim, now)
                    .await?;
            for row in &rows {
                picked.add(row)?;
            }
            tx.commit().await.map_err(db_err)?;
        }
        drop(conn);
        let Picked {
            mut claimed,
            order,
            with_signals,
            with_children,
        } = picked;
        let (mut inboxes, mut children) = self.inputs(&with_signals, &with_children).await?;
        for claim in &mut claimed {
            claim.inbox = inboxes.remove(&claim.id.get()).unwrap_or_default();
            claim.children = children.remove(&claim.id.get()).unwrap_or_default();
        }
        // RETURNING does not keep the pick's order: restore it.
        let mut ordered: Vec<((i16, SystemTime, i64), Claimed)> =
            order.into_iter().zip(claimed).collect();
        ordered.sort_by_key(|(order, _)| *order);
        Ok(ordered.into_iter().map(|(_, claim)| claim).collect())
    }
}
