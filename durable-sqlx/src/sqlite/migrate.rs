//! The store's schema migrations: the embedded SQLite migrations, each applied once, in its own
//! `BEGIN IMMEDIATE` transaction, so that processes opening the store at the same time do not
//! apply one twice.

use durable_runtime::storage::StorageError;
use sqlx::SqlStr;

use super::{SqliteStore, db_err};
use crate::error::Error;
use crate::schema::{Migration, SQLITE_MIGRATIONS, now_micros, statement, to_roll_back};

impl SqliteStore {
    /// Applies the store's pending schema migrations; applying them again is a no-op.
    ///
    /// Migrations are recorded in the store's own table `durable_schema_migrations` (with the
    /// table prefix), never in sqlx's `_sqlx_migrations`, so your own sqlx migrations in the
    /// same database are unaffected. Each migration runs in its own `BEGIN IMMEDIATE`
    /// transaction, so concurrent processes apply each one exactly once.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::SqliteStore::open("sqlite::memory:").await?;
    /// store.migrate().await?; // already applied on open: nothing to do
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
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::SqliteStore::builder("sqlite::memory:")
    ///     .migrate_on_open(false)
    ///     .open()
    ///     .await?;
    /// store.migrate_to(1).await?;
    /// store.migrate().await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)]
    pub async fn migrate_to(&self, version: i64) -> Result<(), Error> {
        let create_table = statement(format!(
            "CREATE TABLE IF NOT EXISTS {} (
                version INTEGER PRIMARY KEY,
                description TEXT NOT NULL,
                applied_at INTEGER NOT NULL
            )",
            self.names.migrations
        ));
        let applied_sql = statement(format!(
            "SELECT version FROM {} ORDER BY version",
            self.names.migrations
        ));
        // Cheap path: read what is applied without taking the write lock.
        // An error here means that the table does not exist yet: everything is pending.
        let applied: Vec<i64> = sqlx::query_scalar(applied_sql)
            .fetch_all(&self.pool)
            .await
            .unwrap_or_default();
        for migration in SQLITE_MIGRATIONS
            .iter()
            .filter(|m| m.version <= version && !applied.contains(&m.version))
        {
            self.apply(migration, &create_table)
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
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::SqliteStore::builder("sqlite::memory:")
    ///     .migrate_on_open(false)
    ///     .open()
    ///     .await?;
    /// assert_eq!(store.schema_version().await?, None);
    /// store.migrate().await?;
    /// assert!(store.schema_version().await? >= Some(6));
    /// # Ok(()) }
    /// ```
    pub async fn schema_version(&self) -> Result<Option<i64>, Error> {
        let exists: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")
                .bind(&self.names.migrations)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
        if exists.is_none() {
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
    /// script, in one `BEGIN IMMEDIATE` transaction, and returns its version (`None` if none
    /// was applied). What the migration added goes, with the data only it could hold (see the
    /// storage chapter of the guide for when that is safe).
    ///
    /// Run it with no runtime on the store, and open the store with
    /// [`migrate_on_open(false)`](crate::SqliteStoreBuilder::migrate_on_open) to do it (or run
    /// the older release the rollback is for): opening it with migrations on applies the
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
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::SqliteStore::builder("sqlite::memory:")
    ///     .migrate_on_open(false)
    ///     .open()
    ///     .await?;
    /// store.migrate_to(2).await?;
    /// assert_eq!(store.rollback_last_migration().await?, Some(2));
    /// assert_eq!(store.schema_version().await?, Some(1));
    /// assert_eq!(store.rollback_last_migration().await?, Some(1));
    /// assert_eq!(store.rollback_last_migration().await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn rollback_last_migration(&self) -> Result<Option<i64>, Error> {
        let Some(version) = self.schema_version().await? else {
            return Ok(None);
        };
        let (migration, down) = to_roll_back(SQLITE_MIGRATIONS, version)?;
        let failed = |source| Error::Rollback {
            version,
            description: migration.description,
            source,
        };
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|err| failed(db_err(err)))?;
        // Under the write lock: another process may have rolled it back since we looked.
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
            "DELETE FROM {} WHERE version = ?1",
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
            "rolled back durable-sqlx SQLite migration"
        );
        Ok(Some(version))
    }

    async fn apply(
        &self,
        migration: &Migration,
        create_table: &SqlStr,
    ) -> Result<(), StorageError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)?;
        sqlx::raw_sql(create_table.clone())
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let done: Option<i64> = sqlx::query_scalar(statement(format!(
            "SELECT version FROM {} WHERE version = ?1",
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
            "INSERT INTO {} (version, description, applied_at) VALUES (?1, ?2, ?3)",
            self.names.migrations
        )))
        .bind(migration.version)
        .bind(migration.description)
        .bind(now_micros())
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        tracing::info!(
            version = migration.version,
            description = migration.description,
            "applied durable-sqlx SQLite migration"
        );
        Ok(())
    }
}
