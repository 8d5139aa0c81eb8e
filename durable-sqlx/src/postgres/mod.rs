//! [`PostgresStore`]: objects and alarms in a PostgreSQL database.
//!
//! This file holds the store itself: its constructors, its pool, and its [`Storage`]
//! implementation. The rest is one concern per file: the settings it is connected with
//! ([`builder`]), its schema migrations ([`migrate`]), the statements it runs ([`sql`]), the
//! `timestamptz` codec ([`time`]), how a batch is committed ([`writes`], [`states`]) and the
//! connections kept for commits ([`commit_connections`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use durable_runtime::storage::{
    AlarmClaim, AlarmKey, AlarmPage, AlarmRecord, CommitError, IdPage, IdempotentReply, KvUsage,
    Loaded, ObjectKey, ObjectWrite, Storage, StorageError, prefix_end,
};
use sqlx::postgres::PgPool;
use sqlx::{PgConnection, SqlStr};

use crate::error::{Dialect, Error, storage_error};
use crate::schema::{
    Names, alarm_page, claim_limit, claimed_alarms, fetch_limit, from_db_version, id_page, loaded,
};

mod builder;
mod cluster;
mod commit_connections;
#[cfg(feature = "fsm")]
pub(crate) mod fsm;
mod kv;
mod migrate;
mod reshard;
mod sql;
mod states;
mod time;
mod writes;

pub use builder::PostgresStoreBuilder;
use builder::Source;
use commit_connections::CommitConnections;
pub use reshard::{ReshardError, Resharded};
use sql::{Sql, alarm_from_row};
use time::PgTime;
use writes::{attempts_param, commit_on, prepare};

fn db_err(err: sqlx::Error) -> StorageError {
    storage_error(Dialect::Postgres, err)
}

/// Objects and alarms in a PostgreSQL database, shared by any number of processes.
///
/// Every commit runs in one transaction; versions are checked with conditional updates, so a
/// process that lost a race gets a [`CommitError::Conflict`] instead of overwriting a newer
/// state. Scheduler claims use `FOR UPDATE SKIP LOCKED`, so two processes never claim the same
/// alarm. Cloning the store is cheap and shares its connection pool.
///
/// See the [crate documentation](crate) for the table layout.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use durable_runtime::storage::{ObjectKey, Storage};
/// use durable_sqlx::PostgresStore;
///
/// let url = std::env::var("DATABASE_URL")?;
/// let store = PostgresStore::connect(&url).await?;
/// let stored = store.load(&ObjectKey::new("Counter", "a")).await?;
/// # drop(stored); Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
    commits: Arc<CommitConnections>,
    /// How long a commit waits for the server.
    commit_timeout: Duration,
    names: Arc<Names>,
    sql: Arc<Sql>,
    /// Cluster mode: the node's shard table once attached (see [`cluster`]).
    cluster: Arc<cluster::ClusterState>,
    /// The FSM store over this store's tables, its statements built once (see `fsm()`).
    #[cfg(feature = "fsm")]
    fsm: Arc<std::sync::OnceLock<fsm::PostgresFsmStore>>,
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`) with
    /// the default settings and applies the pending migrations; see
    /// [`PostgresStoreBuilder::connect`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::PostgresStore::connect("postgres://postgres@127.0.0.1/app").await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Self::builder(url).connect().await
    }

    /// Builds a store on an existing pool with the default settings and applies the pending
    /// migrations. The pool keeps its own settings; keep `test_before_acquire` on (sqlx's
    /// default), or an equivalent `before_acquire` check, so that connections the server
    /// dropped are replaced. Beside the pool, the store keeps a quarter of its size (from 1 to
    /// 4) of connections of its own for commits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let pool = durable_sqlx::sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app")
    ///     .await
    ///     .expect("database");
    /// let store = durable_sqlx::PostgresStore::from_pool(pool).await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub async fn from_pool(pool: PgPool) -> Result<Self, Error> {
        Self::builder_with_pool(pool).connect().await
    }

    /// Settings for connecting to the database at `url`: schema, table prefix, pool size,
    /// timeouts.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::PostgresStore::builder("postgres://postgres@127.0.0.1/shared")
    ///     .schema("app1")
    ///     .connect()
    ///     .await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub fn builder(url: impl AsRef<str>) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Source::Url(url.as_ref().to_owned()))
    }

    /// Settings for a store on an existing pool: schema, table prefix, whether to migrate.
    /// The builder's connection settings do not apply; the pool keeps its own.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let pool = durable_sqlx::sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app")
    ///     .await
    ///     .expect("database");
    /// let store = durable_sqlx::PostgresStore::builder_with_pool(pool)
    ///     .schema("durable")
    ///     .connect()
    ///     .await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub fn builder_with_pool(pool: PgPool) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Source::Pool(pool))
    }

    async fn finish(
        pool: PgPool,
        kept: usize,
        commit_timeout: Duration,
        names: Names,
        migrate: bool,
    ) -> Result<Self, Error> {
        let store = Self {
            commits: Arc::new(CommitConnections::new(pool.clone(), kept)),
            commit_timeout,
            pool,
            sql: Arc::new(Sql::new(&names)),
            names: Arc::new(names),
            cluster: Arc::default(),
            #[cfg(feature = "fsm")]
            fsm: Arc::default(),
        };
        if migrate {
            store.migrate().await?;
        }
        Ok(store)
    }

    /// The connection pool, for your own queries (on your own tables) in the same database.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = durable_sqlx::PostgresStore::connect("postgres://postgres@127.0.0.1/app").await?;
    /// let count: i64 = durable_sqlx::sqlx::query_scalar("SELECT count(*) FROM durable_objects")
    ///     .fetch_one(store.pool())
    ///     .await?;
    /// # drop(count); Ok(()) }
    /// ```
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn found_version(
        conn: &mut PgConnection,
        sql: &Sql,
        key: &ObjectKey,
    ) -> Result<Option<u64>, StorageError> {
        let found: Option<i64> = sqlx::query_scalar(sql.version.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .fetch_optional(conn)
            .await
            .map_err(db_err)?;
        found.map(from_db_version).transpose()
    }

    /// Runs a statement on the alarm `name` of `key` if it is still claimed at `claimed_at`
    /// (parameters: type, id, name, claim time). Returns whether a row changed.
    async fn under_claim(
        &self,
        sql: &SqlStr,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        let changed = sqlx::query(sql.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(name)
            .bind(PgTime::new(claimed_at)?)
            .execute(&self.pool)
            .await
            .map_err(db_err)?
            .rows_affected();
        Ok(changed > 0)
    }
}

#[async_trait]
impl Storage for PostgresStore {
    /// One batch in flight per connection kept for commits: a quarter of
    /// [`max_connections`](PostgresStoreBuilder::max_connections), from 1 to 4 (2 by default).
    fn max_concurrent_commits(&self) -> usize {
        self.commits.capacity().max(1)
    }

    async fn load(&self, key: &ObjectKey) -> Result<Loaded, StorageError> {
        if let Some(table) = self.cluster.fencing() {
            return self.fenced_load(table, key).await;
        }
        let row: Option<(Option<String>, i64)> = sqlx::query_as(self.sql.load.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map_or(Ok(Loaded::Absent), |(state, version)| {
            loaded(state.map(String::into_bytes), Some(version))
        })
    }

    /// One query: the keys travel as two arrays.
    async fn load_many(&self, keys: &[ObjectKey]) -> Result<Vec<Loaded>, StorageError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(table) = self.cluster.fencing() {
            return self.fenced_load_many(table, keys).await;
        }
        let (types, ids) = key_arrays(keys);
        let rows: Vec<(Option<String>, Option<i64>)> = sqlx::query_as(self.sql.load_many.clone())
            .bind(types)
            .bind(ids)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        let rows = rows
            .into_iter()
            .map(|(state, version)| (state.map(String::into_bytes), version))
            .collect();
        crate::schema::loaded_rows(rows, keys.len())
    }

    /// One query selecting the versions alone: by primary key for one object, with the keys
    /// as two arrays for several.
    async fn load_versions(&self, keys: &[ObjectKey]) -> Result<Vec<Option<u64>>, StorageError> {
        let versions: Vec<Option<i64>> = match keys {
            [] => return Ok(Vec::new()),
            [key] => vec![
                sqlx::query_scalar(self.sql.load_version.clone())
                    .bind(&key.object_type)
                    .bind(&key.object_id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(db_err)?,
            ],
            keys => {
                let (types, ids) = key_arrays(keys);
                sqlx::query_scalar(self.sql.load_versions.clone())
                    .bind(types)
                    .bind(ids)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(db_err)?
            }
        };
        crate::schema::stored_versions(versions, keys.len())
    }

    async fn commit(&self, batch: &[ObjectWrite]) -> Result<(), CommitError> {
        if batch.is_empty() {
            return Ok(());
        }
        if let Some(table) = self.cluster.fencing() {
            return self.fenced_commit(table, batch).await;
        }
        let prepared = prepare(batch)?;
        let carrying_fsm = batch.iter().position(|write| !write.fsm.is_empty());
        #[cfg(not(feature = "fsm"))]
        if let Some(index) = carrying_fsm {
            return Err(CommitError::Fsm {
                index,
                key: batch[index].key.clone(),
                refusal: durable_runtime::storage::FsmRefusal::Unsupported,
            });
        }
        // FSM changes are written in the batch's transaction with the FSM store's statements.
        #[cfg(feature = "fsm")]
        let linked = carrying_fsm.map(|_| self.fsm());
        let mut lease = self.commits.lend().await?;
        let conn = lease.conn();
        let committed = tokio::time::timeout(self.commit_timeout, async {
            #[cfg(feature = "fsm")]
            if let Some(fsm) = &linked {
                return fsm::linked::commit_on(conn, &self.sql, fsm, &prepared).await;
            }
            commit_on(conn, &self.sql, &prepared).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(CommitError::Storage(StorageError::unavailable(format!(
                "no answer from the server within {} ms; the commit's outcome is unknown",
                self.commit_timeout.as_millis()
            ))))
        });
        // A conflict is the server's answer; after any other error the connection may be
        // broken or in the middle of an exchange, and is not used again.
        if matches!(
            committed,
            Ok(())
                | Err(CommitError::Conflict { .. }
                    | CommitError::KvLimit { .. }
                    | CommitError::Fsm { .. })
        ) {
            lease.release();
        }
        committed
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool, StorageError> {
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        if let Some(table) = self.cluster.fencing() {
            self.check_fence(&mut tx, table, key).await?;
        }
        // The object's row first: a commit locks it before it changes the object's alarms, so
        // this waits for a commit in progress, and the alarms' delete (a statement with a
        // snapshot of its own) then sees every alarm that commit set.
        let deleted = sqlx::query(self.sql.delete_object.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
        sqlx::query(self.sql.alarm_cancel_all.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(self.sql.kv.clear.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(self.sql.reply_delete_all.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        Ok(deleted > 0)
    }

    async fn list_ids(
        &self,
        object_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, StorageError> {
        let query = match after {
            Some(after) => sqlx::query_scalar(self.sql.list_after.clone())
                .bind(object_type)
                .bind(fetch_limit(limit))
                .bind(after),
            None => sqlx::query_scalar(self.sql.list_first.clone())
                .bind(object_type)
                .bind(fetch_limit(limit)),
        };
        let ids: Vec<String> = query.fetch_all(&self.pool).await.map_err(db_err)?;
        Ok(id_page(ids, limit))
    }

    async fn list_alarms(&self, key: &ObjectKey) -> Result<Vec<AlarmRecord>, StorageError> {
        let rows = sqlx::query(self.sql.list_alarms.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter().map(alarm_from_row).collect()
    }

    async fn list_object_types(&self) -> Result<Vec<String>, StorageError> {
        sqlx::query_scalar(self.sql.list_types.clone())
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)
    }

    async fn list_dead_alarms(
        &self,
        object_type: Option<&str>,
        after: Option<&AlarmKey>,
        limit: usize,
    ) -> Result<AlarmPage, StorageError> {
        let sql = self.sql.dead.pick(object_type.is_some(), after.is_some());
        let mut query = sqlx::query(sql.clone()).bind(fetch_limit(limit));
        if let Some(object_type) = object_type {
            query = query.bind(object_type);
        }
        if let Some(after) = after {
            query = query
                .bind(&after.key.object_type)
                .bind(&after.key.object_id)
                .bind(&after.name);
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_err)?;
        alarm_page(&rows, limit, alarm_from_row)
    }

    async fn next_alarm_due(&self) -> Result<Option<SystemTime>, StorageError> {
        if let Some(table) = self.cluster.fencing() {
            return self.fenced_next_due(table).await;
        }
        let due: Option<PgTime> = sqlx::query_scalar(self.sql.next_due.clone())
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        due.map(PgTime::get).transpose()
    }

    async fn claim_due_alarms(
        &self,
        now: SystemTime,
        due_by: SystemTime,
        lease_until: SystemTime,
        limit: usize,
    ) -> Result<Vec<AlarmRecord>, StorageError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        if let Some(table) = self.cluster.fencing() {
            return self
                .fenced_claim(table, now, due_by, lease_until, limit)
                .await;
        }
        let rows = sqlx::query(self.sql.claim.clone())
            .bind(PgTime::new(now)?)
            .bind(PgTime::new(due_by)?)
            .bind(PgTime::new(lease_until)?)
            .bind(claim_limit(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(claimed_alarms(&rows, alarm_from_row))
    }

    async fn renew_alarm_claims(
        &self,
        claims: &[AlarmClaim],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError> {
        if claims.is_empty() {
            return Ok(0);
        }
        let mut columns: (Vec<&str>, Vec<&str>, Vec<&str>, Vec<PgTime>) = Default::default();
        for claim in claims {
            columns.0.push(&claim.key.object_type);
            columns.1.push(&claim.key.object_id);
            columns.2.push(&claim.name);
            columns.3.push(PgTime::new(claim.claimed_at)?);
        }
        let renewed = sqlx::query(self.sql.renew.clone())
            .bind(columns.0)
            .bind(columns.1)
            .bind(columns.2)
            .bind(columns.3)
            .bind(PgTime::new(lease_until)?)
            .execute(&self.pool)
            .await
            .map_err(db_err)?
            .rows_affected();
        Ok(usize::try_from(renewed).unwrap_or(usize::MAX))
    }

    async fn finish_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        self.under_claim(&self.sql.finish, key, name, claimed_at)
            .await
    }

    async fn fail_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
        attempts: u32,
        error: &str,
        retry_at: Option<SystemTime>,
    ) -> Result<bool, StorageError> {
        let sql = if retry_at.is_some() {
            &self.sql.fail_retry
        } else {
            &self.sql.fail_dead
        };
        let mut query = sqlx::query(sql.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(name)
            .bind(PgTime::new(claimed_at)?)
            .bind(attempts_param(attempts)?)
            // TEXT cannot hold NUL; keep the rest of the message.
            .bind(error.replace('\0', "\u{fffd}"));
        if let Some(retry_at) = retry_at {
            query = query.bind(PgTime::new(retry_at)?);
        }
        let updated = query
            .execute(&self.pool)
            .await
            .map_err(db_err)?
            .rows_affected();
        Ok(updated > 0)
    }

    async fn release_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        self.under_claim(&self.sql.release, key, name, claimed_at)
            .await
    }

    async fn kv_get(&self, key: &ObjectKey, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        sqlx::query_scalar(self.sql.kv.get.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(name.as_bytes())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)
    }

    async fn kv_list(
        &self,
        key: &ObjectKey,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        let rows: Vec<(Vec<u8>, Vec<u8>)> = sqlx::query_as(self.sql.kv.list.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(prefix.as_bytes())
            .bind(prefix_end(prefix.as_bytes()))
            .bind(start_after.map(str::as_bytes))
            .bind(crate::net_kv::list_limit(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.into_iter()
            .map(|(k, v)| Ok((crate::net_kv::key_text(k)?, v)))
            .collect()
    }

    async fn kv_usage(&self, key: &ObjectKey) -> Result<KvUsage, StorageError> {
        let row: Option<(i64, i64)> = sqlx::query_as(self.sql.kv.usage.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(crate::net_kv::usage(row))
    }

    async fn load_idempotent_reply(
        &self,
        key: &ObjectKey,
        idempotency_key: &str,
    ) -> Result<Option<IdempotentReply>, StorageError> {
        let row: Option<(Vec<u8>, Vec<u8>, i64)> = sqlx::query_as(self.sql.reply_load.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(idempotency_key.as_bytes())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        crate::schema::stored_reply(idempotency_key, row)
    }

    async fn sweep_idempotency(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> Result<usize, StorageError> {
        let removed = sqlx::query(self.sql.reply_sweep.clone())
            .bind(crate::schema::to_micros(now)?)
            .bind(claim_limit(limit))
            .execute(&self.pool)
            .await
            .map_err(db_err)?
            .rows_affected();
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    /// Postgres arbitrates a cluster: see the [`cluster`] module.
    fn cluster_backend(&self) -> Option<Arc<dyn durable_runtime::cluster::ClusterBackend>> {
        Some(Arc::new(self.clone()))
    }
}

/// Keys as the two arrays (types, ids) the batched reads take.
fn key_arrays(keys: &[ObjectKey]) -> (Vec<&str>, Vec<&str>) {
    keys.iter()
        .map(|key| (key.object_type.as_str(), key.object_id.as_str()))
        .unzip()
}
