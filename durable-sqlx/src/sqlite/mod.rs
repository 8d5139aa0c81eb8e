//! [`SqliteStore`]: objects and alarms in an embedded SQLite file.
//!
//! This file holds the store itself: its constructors, its pool, and its [`Storage`]
//! implementation. The rest is one concern per file: the settings it is opened with
//! ([`builder`]), its schema migrations ([`migrate`]), the statements it runs ([`sql`]), how a
//! batch is committed ([`batch`]), how large states are compressed ([`packing`]), the one
//! connection it writes through ([`writer`]) and the background checkpointer
//! ([`checkpoint`]); the FSM engine's store in the same database is [`fsm`] (feature `fsm`).

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use durable_runtime::storage::{
    AlarmClaim, AlarmKey, AlarmPage, AlarmRecord, CommitError, IdPage, IdempotentReply, KvUsage,
    Loaded, ObjectKey, ObjectWrite, Storage, StorageError, prefix_end,
};
use sqlx::SqlStr;
use sqlx::sqlite::SqlitePool;

use crate::error::{Dialect, Error, storage_error};
use crate::schema::{
    Names, alarm_page, claim_limit, claimed_alarms, fetch_limit, from_micros, id_page, loaded,
    loaded_rows, now_micros, to_micros,
};

mod batch;
mod builder;
mod checkpoint;
#[cfg(feature = "fsm")]
pub(crate) mod fsm;
mod migrate;
mod packing;
mod sql;
mod writer;

use builder::Source;
pub use builder::{SqliteStoreBuilder, Synchronous};
use checkpoint::{Checkpointer, Limits};
use packing::{Packer, unpack};
use sql::{Sql, alarm_from_row, claimed_from_row};
use writer::Writer;

fn db_err(err: sqlx::Error) -> StorageError {
    storage_error(Dialect::Sqlite, err)
}

/// Objects and alarms in an SQLite database, usually a file next to the application.
///
/// Every commit runs in one `BEGIN IMMEDIATE` transaction (SQLite has one writer at a time;
/// taking the write lock up front avoids deadlocks between transactions upgrading from read to
/// write). Cloning the store is cheap and shares its connection pool.
///
/// See the [crate documentation](crate) for the table layout.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use durable_runtime::storage::{ObjectKey, ObjectWrite, Storage};
/// use durable_sqlx::SqliteStore;
///
/// let store = SqliteStore::open("sqlite::memory:").await?;
/// let key = ObjectKey::new("Counter", "a");
/// store
///     .commit(&[ObjectWrite {
///         key: key.clone(),
///         expected_version: 0,
///         state: Some(br#"{"count":1}"#.to_vec()),
///         alarms: vec![],
///         kv: Vec::new(),
///         idempotency: None,
///         fsm: Default::default(),
///     }])
///     .await?;
/// assert_eq!(store.load(&key).await?.version(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    names: Arc<Names>,
    sql: Arc<Sql>,
    /// Every write of this store goes through this one connection.
    writer: Arc<Writer>,
    /// Compresses the large states the store writes.
    packer: Arc<Packer>,
    /// The background checkpointer, stopped when the last clone of the store is dropped.
    checkpointer: Option<Arc<Checkpointer>>,
    /// The FSM store over this store's tables, its statements built once (see `fsm()`).
    #[cfg(feature = "fsm")]
    fsm: Arc<std::sync::OnceLock<fsm::SqliteFsmStore>>,
}

impl SqliteStore {
    /// Opens (creating it if missing) the database at `location` with the default settings and
    /// applies the pending migrations. `location` is a file path (`"data/app.db"`), a `sqlite:`
    /// URL (`"sqlite://data/app.db"`, `"sqlite:app.db?mode=rwc"`) or `"sqlite::memory:"` for a
    /// private in-memory database.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let dir = std::env::temp_dir().join(format!("durable-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let store = durable_sqlx::SqliteStore::open(dir.join("app.db")).await?;
    /// # drop(store); std::fs::remove_dir_all(dir).unwrap();
    /// # Ok(()) }
    /// ```
    pub async fn open(location: impl AsRef<Path>) -> Result<Self, Error> {
        Self::builder(location).open().await
    }

    /// Builds a store on an existing pool with the default settings and applies the pending
    /// migrations. The pool's own settings (journal mode, `synchronous`, busy timeout) are kept;
    /// WAL mode and a busy timeout are recommended.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// use durable_sqlx::sqlx::sqlite::SqlitePoolOptions;
    ///
    /// let pool = SqlitePoolOptions::new()
    ///     .max_connections(1)
    ///     .connect("sqlite::memory:")
    ///     .await
    ///     .expect("in-memory database");
    /// let store = durable_sqlx::SqliteStore::from_pool(pool).await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub async fn from_pool(pool: SqlitePool) -> Result<Self, Error> {
        Self::builder_with_pool(pool).open().await
    }

    /// Settings for opening the database at `location` (see [`open`](Self::open) for the
    /// accepted forms): table prefix, durability, timeouts, pool size.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// use durable_sqlx::{SqliteStore, Synchronous};
    ///
    /// let store = SqliteStore::builder("sqlite::memory:")
    ///     .table_prefix("app1_")
    ///     .synchronous(Synchronous::Normal)
    ///     .open()
    ///     .await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub fn builder(location: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(Source::Location(location.as_ref().to_path_buf()))
    }

    /// Settings for a store on an existing pool: table prefix, whether to migrate on open.
    /// The connection settings of the builder do not apply; the pool keeps its own.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let pool = durable_sqlx::sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
    /// let store = durable_sqlx::SqliteStore::builder_with_pool(pool)
    ///     .table_prefix("durable_")
    ///     .open()
    ///     .await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub fn builder_with_pool(pool: SqlitePool) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(Source::Pool(pool))
    }

    async fn finish(
        pool: SqlitePool,
        names: Names,
        migrate: bool,
        checkpoints: Option<Limits>,
        packer: Packer,
    ) -> Result<Self, Error> {
        let writer = Writer::new(&pool);
        // The level of the writer's `synchronous` (the builder's, or the pool's own), which a
        // claim lowers for itself and sets back.
        let level: i64 = {
            let mut guard = writer.lock().await?;
            sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(guard.connection())
                .await
                .map_err(db_err)?
        };
        let mut store = Self {
            pool: pool.clone(),
            sql: Arc::new(Sql::new(&names, level)),
            names: Arc::new(names),
            writer: Arc::new(writer),
            packer: Arc::new(packer),
            checkpointer: None,
            #[cfg(feature = "fsm")]
            fsm: Arc::default(),
        };
        if migrate {
            store.migrate().await?;
        }
        store.checkpointer = checkpoints.map(|limits| {
            Arc::new(Checkpointer::start(
                pool.connect_options(),
                limits,
                Arc::downgrade(&store.writer),
            ))
        });
        Ok(store)
    }

    /// Closes the store: stops its background checkpointer and waits until it is done, closes
    /// the writing connection and the pool. Calls on any clone of the store fail afterwards.
    /// Dropping the last clone also stops the checkpointer and closes the connections, without
    /// waiting; closing makes sure that nothing of the store has the database open any more,
    /// closing the connections one after another so that the last one finds itself last (SQLite
    /// then checkpoints the WAL a last time and removes it). Connections closed by a drop close
    /// together, and each may still see another open: the WAL can then stay behind, for the next
    /// open to read.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let dir = std::env::temp_dir().join(format!("durable-doc-close-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let store = durable_sqlx::SqliteStore::open(dir.join("app.db")).await?;
    /// store.close().await;
    /// assert!(!dir.join("app.db-wal").exists());
    /// # std::fs::remove_dir_all(dir).unwrap();
    /// # Ok(()) }
    /// ```
    pub async fn close(&self) {
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.stop().await;
        }
        self.writer.close().await;
        self.pool.close().await;
    }

    /// The connection pool, for your own queries (on your own tables) in the same database.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = durable_sqlx::SqliteStore::open("sqlite::memory:").await?;
    /// let (count,): (i64,) = durable_sqlx::sqlx::query_as("SELECT count(*) FROM durable_objects")
    ///     .fetch_one(store.pool())
    ///     .await?;
    /// assert_eq!(count, 0);
    /// # Ok(()) }
    /// ```
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
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
        let claimed_at = to_micros(claimed_at)?;
        let mut writer = self.writer.lock().await?;
        let changed = sqlx::query(sql.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(name)
            .bind(claimed_at)
            .execute(writer.connection())
            .await
            .map_err(db_err)?
            .rows_affected();
        Ok(changed > 0)
    }
}

#[async_trait]
impl Storage for SqliteStore {
    async fn load(&self, key: &ObjectKey) -> Result<Loaded, StorageError> {
        let row: Option<(Option<Vec<u8>>, i64)> = sqlx::query_as(self.sql.load.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map_or(Ok(Loaded::Absent), |(state, version)| {
            loaded(
                state.map(|state| unpack(state, || key.to_string())),
                Some(version),
            )
        })
    }

    /// One query: the keys travel as one JSON array.
    async fn load_many(&self, keys: &[ObjectKey]) -> Result<Vec<Loaded>, StorageError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(Option<Vec<u8>>, Option<i64>)> = sqlx::query_as(self.sql.load_many.clone())
            .bind(key_pairs(keys)?)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        let rows = rows
            .into_iter()
            .enumerate()
            .map(|(index, (state, version))| {
                let key = || keys.get(index).map(ToString::to_string).unwrap_or_default();
                (state.map(|state| unpack(state, key)), version)
            })
            .collect();
        loaded_rows(rows, keys.len())
    }

    /// One query selecting the versions alone: by primary key for one object, with the keys
    /// as one JSON array for several.
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
            keys => sqlx::query_scalar(self.sql.load_versions.clone())
                .bind(key_pairs(keys)?)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?,
        };
        crate::schema::stored_versions(versions, keys.len())
    }

    async fn commit(&self, batch: &[ObjectWrite]) -> Result<(), CommitError> {
        if batch.is_empty() {
            return Ok(());
        }
        let params = batch::Params::new(batch, &self.packer)?;
        let carrying_fsm = batch.iter().position(|write| !write.fsm.is_empty());
        #[cfg(not(feature = "fsm"))]
        if let Some(index) = carrying_fsm {
            return Err(CommitError::Fsm {
                index,
                key: batch[index].key.clone(),
                refusal: durable_runtime::storage::FsmRefusal::Unsupported,
            });
        }
        let writer = self.writer.lock().await?;
        #[cfg(feature = "fsm")]
        if carrying_fsm.is_some() {
            return fsm::linked::commit(self, writer, batch, &params).await;
        }
        batch::commit(writer, &self.sql, batch, &params).await
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool, StorageError> {
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        sqlx::query(self.sql.alarm_cancel_all.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(self.sql.kv_clear.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(self.sql.delete_replies.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let deleted = sqlx::query(self.sql.delete_object.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(now_micros())
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
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
        let due: Option<i64> = sqlx::query_scalar(self.sql.next_due.clone())
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        due.map(from_micros).transpose()
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
        let now = to_micros(now)?;
        let due_by = to_micros(due_by)?;
        let lease_until = to_micros(lease_until)?;
        let claimed_at = from_micros(now)?;
        // One statement in one immediate transaction: no other writer can claim the same rows
        // between the selection and the update.
        let mut writer = self.writer.lock().await?;
        // `BEGIN IMMEDIATE; UPDATE ..; COMMIT` in one round trip to the connection's thread:
        // the writer is not left idle between the three while this task waits for its turn.
        writer.transaction_started();
        let claimed = sqlx::query(self.sql.claim.clone())
            .bind(now)
            .bind(due_by)
            .bind(lease_until)
            .bind(claim_limit(limit))
            .fetch_all(writer.connection())
            .await;
        let rows = match claimed {
            Ok(rows) => rows,
            Err(error) => {
                // Stopped at its first failure, maybe inside its transaction and with its
                // `synchronous` level lowered: the transaction is still marked open, so the
                // guard closes the connection, and the next writer opens a new one.
                return Err(db_err(error));
            }
        };
        writer.transaction_ended();
        // The rows are this task's: the writer goes to whoever waits for it (a group commit,
        // most often) before they are decoded.
        drop(writer);
        // And that waiter runs first. Woken from this task, it sits in this worker's next-task
        // slot, which no other worker takes from, until this task yields; decoding the rows
        // and starting their objects would otherwise keep the writer idle for milliseconds.
        tokio::task::yield_now().await;
        Ok(claimed_alarms(&rows, |row| {
            claimed_from_row(row, claimed_at)
        }))
    }

    async fn renew_alarm_claims(
        &self,
        claims: &[AlarmClaim],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError> {
        if claims.is_empty() {
            return Ok(0);
        }
        let lease_until = to_micros(lease_until)?;
        let claims = claims
            .iter()
            .map(|claim| {
                Ok((
                    claim.key.object_type.as_str(),
                    claim.key.object_id.as_str(),
                    claim.name.as_str(),
                    to_micros(claim.claimed_at)?,
                ))
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        let claims = serde_json::to_string(&claims)
            .map_err(|err| crate::error::rejected(format!("claims could not be encoded: {err}")))?;
        // One statement, so one hand-off to the connection's thread and one sync to disk,
        // however many claims: renewals come in bulk when many alarms are held ahead.
        let mut writer = self.writer.lock().await?;
        let renewed = sqlx::query(self.sql.renew.clone())
            .bind(claims)
            .bind(lease_until)
            .execute(writer.connection())
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
            .bind(to_micros(claimed_at)?)
            .bind(i64::from(attempts))
            .bind(error);
        if let Some(retry_at) = retry_at {
            query = query.bind(to_micros(retry_at)?);
        }
        let mut writer = self.writer.lock().await?;
        let updated = query
            .execute(writer.connection())
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
        sqlx::query_scalar(self.sql.kv_get.clone())
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
        let rows: Vec<(Vec<u8>, Vec<u8>)> = sqlx::query_as(self.sql.kv_list.clone())
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
        let row: Option<(i64, i64)> = sqlx::query_as(self.sql.kv_usage.clone())
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
        let row: Option<(Vec<u8>, Vec<u8>, i64)> = sqlx::query_as(self.sql.load_reply.clone())
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
        let mut writer = self.writer.lock().await?;
        let mut tx = writer.begin_immediate().await?;
        let removed = sqlx::query(self.sql.sweep_replies.clone())
            .bind(to_micros(now)?)
            .bind(claim_limit(limit))
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
        tx.commit().await.map_err(db_err)?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }
}

/// Keys as the JSON array of `[type, id]` pairs the batched reads take.
fn key_pairs(keys: &[ObjectKey]) -> Result<String, StorageError> {
    let pairs: Vec<(&str, &str)> = keys
        .iter()
        .map(|key| (key.object_type.as_str(), key.object_id.as_str()))
        .collect();
    serde_json::to_string(&pairs)
        .map_err(|err| crate::error::rejected(format!("keys could not be encoded: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Row;

    /// The details of SQLite's plan for `sql` run with `binds` integer parameters.
    async fn plan(store: &SqliteStore, sql: &SqlStr, binds: usize) -> Vec<String> {
        plan_text(store, sql.as_str(), binds).await
    }

    async fn plan_text(store: &SqliteStore, sql: &str, binds: usize) -> Vec<String> {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")));
        for _ in 0..binds {
            query = query.bind(0_i64);
        }
        query
            .fetch_all(store.pool())
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<String, _>("detail"))
            .collect()
    }

    /// The scheduler's queries read alarms through their partial indexes, by range or in
    /// index order: no claim or look at the next due time scans the table, or every claimed
    /// alarm, so their cost does not grow with the alarms stored for later or claimed ahead.
    #[tokio::test]
    async fn claim_queries_search_their_indexes() {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        let store = SqliteStore::builder_with_pool(pool).open().await.unwrap();
        // The claim runs in a transaction of its own, sent with it: its plan is its `UPDATE`'s.
        let update = store
            .sql
            .claim
            .as_str()
            .split_once("BEGIN IMMEDIATE;")
            .and_then(|(_, sql)| sql.split_once("COMMIT;"))
            .expect("a claim carries its own immediate transaction")
            .0
            .trim()
            .trim_end_matches(';');
        let claim = plan_text(&store, update, 4).await;
        let reads: Vec<&String> = claim
            .iter()
            .filter(|detail| detail.contains("durable_alarms "))
            .collect();
        assert!(
            reads.iter().any(|d| d.starts_with(
                "SEARCH durable_alarms USING INDEX durable_alarms_unclaimed (due_at<?)"
            )),
            "{claim:#?}"
        );
        assert!(
            reads.iter().any(|d| d.starts_with(
                "SEARCH durable_alarms USING INDEX durable_alarms_claimable (<expr><?)"
            )),
            "{claim:#?}"
        );
        assert!(
            reads.iter().all(|d| d.starts_with("SEARCH")),
            "no scan: {claim:#?}"
        );
        // The unclaimed alarms come in claiming order: no sort of every due alarm.
        assert!(
            !claim.iter().any(|d| d.contains("RIGHT PART OF ORDER BY")),
            "{claim:#?}"
        );
        let next = plan(&store, &store.sql.next_due, 0).await;
        assert!(
            next.iter().any(
                |d| d.starts_with("SEARCH durable_alarms USING INDEX durable_alarms_unclaimed")
            ),
            "{next:#?}"
        );
        // The earliest claimable claim is the first entry of its index (read in order, one
        // row), not the least of every claim.
        assert!(
            next.iter()
                .any(|d| d.starts_with("SCAN durable_alarms USING INDEX durable_alarms_claimable")),
            "{next:#?}"
        );
        assert!(!next.iter().any(|d| d.contains("TEMP B-TREE")), "{next:#?}");
        // A renewal of any number of claims finds each by its primary key.
        let renew = plan(&store, &store.sql.renew, 2).await;
        assert!(
            renew
                .iter()
                .any(|d| d.starts_with("SEARCH durable_alarms USING INDEX")
                    && d.contains("object_type=? AND object_id=? AND name=?")),
            "{renew:#?}"
        );
        assert!(
            !renew.iter().any(|d| d.starts_with("SCAN durable_alarms")),
            "{renew:#?}"
        );
    }

    /// The level of `synchronous` on the store's writing connection, or None if it has none
    /// open.
    async fn writer_level(store: &SqliteStore) -> Option<i64> {
        let mut writer = store.writer.hold().await;
        let connection = writer.as_mut()?;
        Some(
            sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(connection)
                .await
                .unwrap(),
        )
    }

    /// Claims the alarms of `store` due at `secs` (since the epoch), leased for a minute.
    async fn claim_at(
        store: &SqliteStore,
        secs: u64,
    ) -> Result<Vec<durable_runtime::storage::AlarmRecord>, StorageError> {
        use durable_runtime::storage::Storage;
        use std::time::{Duration, UNIX_EPOCH};
        let now = UNIX_EPOCH + Duration::from_secs(secs);
        store
            .claim_due_alarms(now, now, now + Duration::from_secs(60), 10)
            .await
    }

    async fn rename_table(store: &SqliteStore, from: &str, to: &str) {
        let rename = format!("ALTER TABLE {from} RENAME TO {to}");
        sqlx::query(sqlx::AssertSqlSafe(rename))
            .execute(store.pool())
            .await
            .unwrap();
    }

    /// A claim commits at `synchronous = NORMAL` and leaves the writer at the store's level
    /// (FULL, EXTRA); a failed claim discards the connection, whose level it may have lowered;
    /// a store at NORMAL claims as it commits.
    #[tokio::test]
    async fn claims_are_not_flushed_and_leave_the_writer_at_its_level() {
        use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
        use std::time::{Duration, UNIX_EPOCH};

        let dir = std::env::temp_dir().join(format!("durable-sqlx-claims-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (synchronous, level) in [(Synchronous::Full, 2), (Synchronous::Normal, 1)] {
            let path = dir.join(format!("claims-{level}.db"));
            let store = SqliteStore::builder(&path)
                .synchronous(synchronous)
                .open()
                .await
                .unwrap();
            let claim = store.sql.claim.as_str();
            assert_eq!(
                claim.starts_with("PRAGMA synchronous = NORMAL;"),
                level == 2,
                "{claim}"
            );
            let due = |s| UNIX_EPOCH + Duration::from_secs(s);
            let write = |name: &str, at| ObjectWrite {
                key: ObjectKey::new("Job", "j1"),
                expected_version: 0,
                state: Some(b"{}".to_vec()),
                alarms: vec![AlarmChange::Set {
                    name: name.to_owned(),
                    due_at: due(at),
                    payload: None,
                }],
                kv: Vec::new(),
                idempotency: None,
                fsm: Default::default(),
            };
            store.commit(&[write("run", 10)]).await.unwrap();
            assert_eq!(writer_level(&store).await, Some(level));
            let claimed = claim_at(&store, 10).await.unwrap();
            assert_eq!(claimed.len(), 1);
            assert_eq!(writer_level(&store).await, Some(level));

            // A claim that fails past its first statement: the alarms' table is gone.
            let alarms = store.names.alarms.clone();
            rename_table(&store, &alarms, "moved_alarms").await;
            assert!(claim_at(&store, 20).await.is_err());
            assert_eq!(
                writer_level(&store).await,
                None,
                "the connection is discarded"
            );
            rename_table(&store, "moved_alarms", &alarms).await;
            // The next write opens a connection at the store's level, and the claim lost
            // nothing: the alarm is still claimed, then claimable when its lease ends.
            let again = claim_at(&store, 20).await.unwrap();
            assert!(again.is_empty(), "still leased: {again:?}");
            assert_eq!(writer_level(&store).await, Some(level));
            let after_lease = claim_at(&store, 71).await.unwrap();
            assert_eq!(after_lease.len(), 1);
            store.close().await;
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
