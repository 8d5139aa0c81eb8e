//! The store's schema migrations: the embedded Postgres migrations, each applied once, in its
//! own transaction, under an advisory lock keyed by the store's migrations table, so that
//! processes opening the store at the same time do not apply one twice.

use durable_runtime::storage::StorageError;

use super::{PostgresStore, db_err};
use crate::error::Error;
use crate::schema::{Migration, POSTGRES_MIGRATIONS, statement, to_roll_back};

impl PostgresStore {
    /// Applies the store's pending schema migrations; applying them again is a no-op.
    ///
    /// Migrations are recorded in the store's own table `durable_schema_migrations` (in the
    /// store's schema, with its table prefix), never in sqlx's `_sqlx_migrations`, so your own
    /// sqlx migrations in the same database are unaffected. Each migration runs in its own
    /// transaction under an advisory lock, so concurrent processes apply each one exactly once.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::PostgresStore::builder("postgres://postgres@127.0.0.1/app")
    ///     .migrate_on_open(false)
    ///     .connect()
    ///     .await?;
    /// store.migrate().await?;
    /// # Ok(()) }
    /// ```
    pub async fn migrate(&self) -> Result<(), Error> {
        self.migrate_to(i64::MAX).await
    }

    /// Applies the pending migrations up to and including `version` only. For testing
    /// upgrades from an older schema; applications call [`migrate`](Self::migrate).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::PostgresStore::builder("postgres://postgres@127.0.0.1/app")
    ///     .migrate_on_open(false)
    ///     .connect()
    ///     .await?;
    /// store.migrate_to(1).await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)]
    pub async fn migrate_to(&self, version: i64) -> Result<(), Error> {
        let applied_sql = statement(format!(
            "SELECT version FROM {} ORDER BY version",
            self.names.migrations
        ));
        // Cheap path: read what is applied without taking the lock. Before the first
        // migration the table does not exist (asked first, so that the server logs no error).
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(&self.names.migrations)
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        let applied: Vec<i64> = if exists {
            sqlx::query_scalar(applied_sql)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?
        } else {
            Vec::new()
        };
        for migration in POSTGRES_MIGRATIONS
            .iter()
            .filter(|m| m.version <= version && !applied.contains(&m.version))
        {
            self.apply(migration)
                .await
                .map_err(|source| Error::Migration {
                    version: migration.version,
                    description: migration.description,
                    source,
                })?;
        }
        Ok(())
    }

    /// The version of the last schema migration applied to the store's tables (the highest
    /// applied), or `None` before the first one.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::PostgresStore::connect("postgres://postgres@127.0.0.1/app").await?;
    /// assert!(store.schema_version().await? >= Some(6));
    /// # Ok(()) }
    /// ```
    pub async fn schema_version(&self) -> Result<Option<i64>, Error> {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(&self.names.migrations)
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        if !exists {
            return Ok(None);
        }
        let version: Option<i64> = sqlx::query_scalar(statement(format!(
            "SELECT MAX(version) FROM {}",
            self.names.migrations
        )))
        .fetch_one(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(version)
    }

    /// Rolls back the last schema migration applied to the store's tables with its down
    /// script, in one transaction under the lock migrations take, and returns its version
    /// (`None` if none was applied). What the migration added goes, with the data only it
    /// could hold (see the storage chapter of the guide for when that is safe).
    ///
    /// Run it with no runtime on the store, and connect with
    /// [`migrate_on_open(false)`](crate::PostgresStoreBuilder::migrate_on_open) to do it (or
    /// run the older release the rollback is for): connecting with migrations on applies the
    /// migration again.
    ///
    /// # Errors
    ///
    /// [`Error::Irreversible`] for a migration without a down script,
    /// [`Error::UnknownMigration`] for one a later release applied, [`Error::Rollback`] if
    /// the database refused the script (nothing changed then).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::PostgresStore::builder("postgres://postgres@127.0.0.1/app")
    ///     .migrate_on_open(false)
    ///     .connect()
    ///     .await?;
    /// let before = store.schema_version().await?;
    /// if let Some(version) = store.rollback_last_migration().await? {
    ///     assert_eq!(before, Some(version));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn rollback_last_migration(&self) -> Result<Option<i64>, Error> {
        let Some(version) = self.schema_version().await? else {
            return Ok(None);
        };
        let (migration, down) = to_roll_back(POSTGRES_MIGRATIONS, version)?;
        let failed = |source| Error::Rollback {
            version,
            description: migration.description,
            source,
        };
        let mut tx = self.pool.begin().await.map_err(|err| failed(db_err(err)))?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key(&self.names.migrations.replace('"', "")))
            .execute(&mut *tx)
            .await
            .map_err(|err| failed(db_err(err)))?;
        // Under the lock: another process may have rolled it back since we looked.
        let last: Option<i64> = sqlx::query_scalar(statement(format!(
            "SELECT MAX(version) FROM {}",
            self.names.migrations
        )))
        .fetch_one(&mut *tx)
        .await
        .map_err(|err| failed(db_err(err)))?;
        if last != Some(version) {
            tx.commit().await.map_err(|err| failed(db_err(err)))?;
            return Box::pin(self.rollback_last_migration()).await;
        }
        sqlx::raw_sql(statement(self.names.render(down)))
            .execute(&mut *tx)
            .await
            .map_err(|err| failed(db_err(err)))?;
        sqlx::query(statement(format!(
            "DELETE FROM {} WHERE version = $1",
            self.names.migrations
        )))
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(|err| failed(db_err(err)))?;
        tx.commit().await.map_err(|err| failed(db_err(err)))?;
        tracing::warn!(
            version,
            description = migration.description,
            "rolled back durable-sqlx Postgres migration"
        );
        Ok(Some(version))
    }

    async fn apply(&self, migration: &Migration) -> Result<(), StorageError> {
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        // Serializes migrations of this store (same schema and prefix) across processes; the
        // lock is released with the transaction.
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            // Unquoted, as in earlier releases: processes of both agree on the lock.
            .bind(lock_key(&self.names.migrations.replace('"', "")))
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        if let Some(schema) = &self.names.schema {
            // Stores with other table prefixes in the same schema take other locks above:
            // this one keeps them from creating the schema at the same moment.
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(lock_key(&format!("schema {schema}")))
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
            let exists: Option<i32> =
                sqlx::query_scalar("SELECT 1 FROM pg_namespace WHERE nspname = $1")
                    .bind(schema)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_err)?;
            if exists.is_none() {
                sqlx::raw_sql(statement(format!("CREATE SCHEMA \"{schema}\"")))
                    .execute(&mut *tx)
                    .await
                    .map_err(db_err)?;
            }
        }
        sqlx::raw_sql(statement(format!(
            "CREATE TABLE IF NOT EXISTS {} (
                version BIGINT PRIMARY KEY,
                description TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
            self.names.migrations
        )))
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        let done: Option<i64> = sqlx::query_scalar(statement(format!(
            "SELECT version FROM {} WHERE version = $1",
            self.names.migrations
        )))
        .bind(migration.version)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_err)?;
        if done.is_some() {
            // Another process applied it since we looked.
            return tx.commit().await.map_err(db_err);
        }
        let sql = self.names.render(migration.sql);
        sqlx::raw_sql(statement(sql))
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(statement(format!(
            "INSERT INTO {} (version, description) VALUES ($1, $2)",
            self.names.migrations
        )))
        .bind(migration.version)
        .bind(migration.description)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        tracing::info!(
            version = migration.version,
            description = migration.description,
            "applied durable-sqlx Postgres migration"
        );
        Ok(())
    }
}

/// A stable advisory-lock key for a migrations table (FNV-1a of its qualified name).
fn lock_key(table: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in "durable-sqlx:".bytes().chain(table.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}
