//! [`SqliteStore`]: objects and alarms in an embedded SQLite file.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use durable_runtime::storage::{
    AlarmRecord, CommitError, IdPage, ObjectKey, ObjectWrite, Storage, StorageError, StoredObject,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Connection, Row};

use crate::error::{Dialect, Error, is_sqlite_lock, storage_error};
use crate::schema::{
    MAX_PREFIX_LEN, Migration, Names, SQLITE_MIGRATIONS, claim_limit, fetch_limit,
    from_db_attempts, from_db_version, from_micros, id_page, now_micros, to_micros, validate_name,
};

mod batch;
mod writer;

use writer::Writer;

fn db_err(err: sqlx::Error) -> StorageError {
    storage_error(Dialect::Sqlite, err)
}

/// How hard SQLite pushes each commit to disk (its `synchronous` setting, in WAL mode).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
/// use durable_sqlx::{SqliteStore, Synchronous};
///
/// let store = SqliteStore::builder("sqlite::memory:")
///     .synchronous(Synchronous::Normal)
///     .open()
///     .await?;
/// # drop(store); Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// `synchronous = FULL` (the default): every commit is flushed to disk before it returns.
    /// An acknowledged write survives a power loss or an OS crash.
    #[default]
    Full,
    /// `synchronous = NORMAL`: commits are written to the WAL but flushed only at checkpoints.
    /// Several times faster; a process crash loses nothing, but a power loss or an OS crash may
    /// lose the most recent acknowledged commits (the database stays consistent).
    Normal,
}

impl From<Synchronous> for SqliteSynchronous {
    fn from(value: Synchronous) -> Self {
        match value {
            Synchronous::Full => SqliteSynchronous::Full,
            Synchronous::Normal => SqliteSynchronous::Normal,
        }
    }
}

/// Settings for opening a [`SqliteStore`], from [`SqliteStore::builder`] or
/// [`SqliteStore::builder_with_pool`].
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
/// use std::time::Duration;
/// use durable_sqlx::SqliteStore;
///
/// let store = SqliteStore::builder("sqlite::memory:")
///     .table_prefix("app1_")
///     .busy_timeout(Duration::from_secs(10))
///     .max_connections(4)
///     .open()
///     .await?;
/// # drop(store); Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `open` is called"]
pub struct SqliteStoreBuilder {
    source: Source,
    table_prefix: String,
    synchronous: Synchronous,
    page_size: u32,
    wal_autocheckpoint: u32,
    busy_timeout: Duration,
    max_connections: u32,
    migrate: bool,
}

/// Where a builder's connections come from.
#[derive(Clone, Debug)]
enum Source {
    Location(PathBuf),
    Pool(SqlitePool),
}

impl SqliteStoreBuilder {
    /// The page size of a database the store creates, in bytes: see
    /// [`page_size`](Self::page_size).
    pub const DEFAULT_PAGE_SIZE: u32 = 1024;

    /// The WAL size, in pages, at which a commit checkpoints: see
    /// [`wal_autocheckpoint`](Self::wal_autocheckpoint).
    pub const DEFAULT_WAL_AUTOCHECKPOINT: u32 = 4096;

    /// Whether SQLite accepts `bytes` as a page size: a power of two from 512 to 65536.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_sqlx::SqliteStoreBuilder;
    ///
    /// assert!(SqliteStoreBuilder::is_valid_page_size(4096));
    /// assert!(!SqliteStoreBuilder::is_valid_page_size(1000));
    /// ```
    pub const fn is_valid_page_size(bytes: u32) -> bool {
        bytes >= 512 && bytes <= 65536 && bytes.is_power_of_two()
    }

    fn new(source: Source) -> Self {
        Self {
            source,
            table_prefix: String::new(),
            synchronous: Synchronous::Full,
            page_size: Self::DEFAULT_PAGE_SIZE,
            wal_autocheckpoint: Self::DEFAULT_WAL_AUTOCHECKPOINT,
            busy_timeout: Duration::from_secs(5),
            max_connections: 8,
            migrate: true,
        }
    }

    /// Prepends `prefix` to the name of every table and index of the store (default: none), so
    /// that several applications can share one database file. Lowercase ASCII letters, digits
    /// and `_`, at most 32 bytes; anything else fails [`open`](Self::open) with
    /// [`Error::InvalidName`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// // Tables `app1_durable_objects`, `app1_durable_alarms`, ...
    /// let store = durable_sqlx::SqliteStore::builder("sqlite::memory:")
    ///     .table_prefix("app1_")
    ///     .open()
    ///     .await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// Sets SQLite's durability level (default [`Synchronous::Full`]). Not applied to a pool
    /// given to [`SqliteStore::builder_with_pool`], which keeps its own settings.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_sqlx::{SqliteStore, Synchronous};
    ///
    /// let builder = SqliteStore::builder("app.db").synchronous(Synchronous::Normal);
    /// # drop(builder);
    /// ```
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// The page size, in bytes, of a database the store creates (default
    /// [`DEFAULT_PAGE_SIZE`](Self::DEFAULT_PAGE_SIZE), 1 KiB): a power of two from 512 to
    /// 65536; anything else fails [`open`](Self::open) with [`Error::InvalidPageSize`]. An
    /// existing database keeps the page size it was created with, and a pool given to
    /// [`SqliteStore::builder_with_pool`] is used as it is.
    ///
    /// A commit writes every page it changed to the WAL, whole, and calls on different objects
    /// change different pages: with small states, the page size is what a write costs. 1 KiB
    /// holds a state of up to about 1,000 bytes in its row's page; a store of larger states
    /// (several KiB each) spreads each over fewer pages with 4096 (SQLite's own default).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::SqliteStore::builder("app.db").page_size(4096);
    /// # drop(builder);
    /// ```
    pub fn page_size(mut self, bytes: u32) -> Self {
        self.page_size = bytes;
        self
    }

    /// How many pages the WAL holds before a commit copies them into the database file (a
    /// checkpoint; SQLite's `wal_autocheckpoint`): default
    /// [`DEFAULT_WAL_AUTOCHECKPOINT`](Self::DEFAULT_WAL_AUTOCHECKPOINT), 4096 pages: 4 MiB
    /// with the default 1 KiB pages, the WAL size SQLite's own default of 1000 pages gives
    /// with its 4 KiB pages. Not applied to a pool given to [`SqliteStore::builder_with_pool`].
    ///
    /// A checkpoint copies each page once however many times the WAL holds it, so when calls
    /// write objects all over the table, a longer WAL copies fewer pages per call: with 10,000
    /// objects written at random by 64 callers, 4096 pages instead of 1000 gave 40–50 % more
    /// calls per second, and 10,000 pages more again with a third of the tail latency. The
    /// price: a WAL file of that size, which a commit grows (a slower flush than one that
    /// overwrites it) until it first fills after the database is opened; recently written pages
    /// read from the WAL; and up to that much WAL to read when the database is opened after a
    /// crash. `0` turns automatic checkpoints off: the WAL then grows until something else
    /// checkpoints it.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::SqliteStore::builder("app.db").wal_autocheckpoint(10_000);
    /// # drop(builder);
    /// ```
    pub fn wal_autocheckpoint(mut self, pages: u32) -> Self {
        self.wal_autocheckpoint = pages;
        self
    }

    /// How long a connection waits for another writer (possibly in another process) to finish
    /// before failing with a retryable error (default 5 s). Not applied to a pool given to
    /// [`SqliteStore::builder_with_pool`].
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::SqliteStore::builder("app.db")
    ///     .busy_timeout(std::time::Duration::from_secs(30));
    /// # drop(builder);
    /// ```
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// The most connections the store opens (default 8; at least 1). SQLite runs one writer at
    /// a time; more connections let reads run beside it. An in-memory database always uses one
    /// connection. Not applied to a pool given to [`SqliteStore::builder_with_pool`].
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::SqliteStore::builder("app.db").max_connections(2);
    /// # drop(builder);
    /// ```
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// Whether opening the store applies its pending schema migrations (default `true`). With
    /// `false`, call [`SqliteStore::migrate`] yourself before using the store.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::SqliteStore::builder("sqlite::memory:")
    ///     .migrate_on_open(false)
    ///     .open()
    ///     .await?;
    /// store.migrate().await?;
    /// # Ok(()) }
    /// ```
    pub fn migrate_on_open(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Opens the store: connects (creating the database file if missing) and applies the
    /// pending migrations unless [`migrate_on_open`](Self::migrate_on_open) is off.
    ///
    /// The connections use WAL mode, the configured `synchronous` level and busy timeout
    /// (except for a pool given to [`SqliteStore::builder_with_pool`], used as it is).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::SqliteStore::builder("sqlite::memory:").open().await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub async fn open(self) -> Result<SqliteStore, Error> {
        let names = self.names()?;
        if !Self::is_valid_page_size(self.page_size) {
            return Err(Error::InvalidPageSize(self.page_size));
        }
        let pool = match &self.source {
            Source::Pool(pool) => pool.clone(),
            Source::Location(location) => self.connect(location).await?,
        };
        SqliteStore::finish(pool, names, self.migrate).await
    }

    async fn connect(&self, location: &Path) -> Result<SqlitePool, Error> {
        let (options, in_memory) = connect_options(location)?;
        let mut options = options
            .create_if_missing(true)
            .synchronous(self.synchronous.into())
            .page_size(self.page_size)
            .pragma("wal_autocheckpoint", self.wal_autocheckpoint.to_string())
            .busy_timeout(self.busy_timeout);
        if !in_memory {
            options = options.journal_mode(SqliteJournalMode::Wal);
        }
        let pool_options = if in_memory {
            // The database lives as long as one connection to it: keep exactly one, forever.
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            SqlitePoolOptions::new().max_connections(self.max_connections)
        };
        // A connection to a file cannot be dropped by a server: checking it on every acquire
        // would only add a round trip to the connection's thread.
        let pool_options = pool_options.test_before_acquire(false);
        // Whichever connection first opens a new file sets it up (WAL mode); another one
        // opening it at that moment, in this process or another, can find it locked without
        // SQLite's busy handler being asked. Opening waits and tries again within the busy
        // timeout, as a write would.
        let started = std::time::Instant::now();
        loop {
            match pool_options.clone().connect_with(options.clone()).await {
                Ok(pool) => return Ok(pool),
                Err(err) if is_sqlite_lock(&err) && started.elapsed() < self.busy_timeout => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(err) => return Err(db_err(err).into()),
            }
        }
    }

    fn names(&self) -> Result<Names, Error> {
        validate_name("table prefix", &self.table_prefix, MAX_PREFIX_LEN, true)?;
        Ok(Names::new(None, &self.table_prefix))
    }
}

fn connect_options(location: &Path) -> Result<(SqliteConnectOptions, bool), Error> {
    let text = location.to_str();
    let text = match text {
        Some(":memory:") => Some("sqlite::memory:"),
        other => other,
    };
    match text {
        Some(url) if url.starts_with("sqlite:") => {
            let options = SqliteConnectOptions::from_str(url)
                .map_err(|err| Error::InvalidLocation(Box::new(err)))?;
            let in_memory = url == "sqlite::memory:"
                || url.starts_with("sqlite::memory:?")
                || url.contains("mode=memory");
            Ok((options, in_memory))
        }
        _ => Ok((SqliteConnectOptions::new().filename(location), false)),
    }
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
///     }])
///     .await?;
/// assert_eq!(store.load(&key).await?.unwrap().version, 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    names: Arc<Names>,
    sql: Arc<Sql>,
    /// Every write of this store goes through this one connection.
    writer: Arc<Writer>,
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

    async fn finish(pool: SqlitePool, names: Names, migrate: bool) -> Result<Self, Error> {
        let store = Self {
            pool: pool.clone(),
            sql: Arc::new(Sql::new(&names)),
            names: Arc::new(names),
            writer: Arc::new(Writer::new(&pool)),
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
        let create_table = format!(
            "CREATE TABLE IF NOT EXISTS {} (
                version INTEGER PRIMARY KEY,
                description TEXT NOT NULL,
                applied_at INTEGER NOT NULL
            )",
            self.names.migrations
        );
        let applied_sql = format!(
            "SELECT version FROM {} ORDER BY version",
            self.names.migrations
        );
        // Cheap path: read what is applied without taking the write lock.
        // An error here means that the table does not exist yet: everything is pending.
        let applied: Vec<i64> = sqlx::query_scalar(&applied_sql)
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

    async fn apply(&self, migration: &Migration, create_table: &str) -> Result<(), StorageError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)?;
        sqlx::raw_sql(create_table)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let done: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT version FROM {} WHERE version = ?1",
            self.names.migrations
        ))
        .bind(migration.version)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_err)?;
        if done.is_some() {
            // Another process applied it since we looked.
            return tx.commit().await.map_err(db_err);
        }
        let sql = self.names.render(migration.sql);
        sqlx::raw_sql(&sql)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(&format!(
            "INSERT INTO {} (version, description, applied_at) VALUES (?1, ?2, ?3)",
            self.names.migrations
        ))
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

    /// Runs a statement on the alarm `name` of `key` if it is still claimed at `claimed_at`
    /// (parameters: type, id, name, claim time). Returns whether a row changed.
    async fn under_claim(
        &self,
        sql: &str,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        let claimed_at = to_micros(claimed_at)?;
        let mut writer = self.writer.lock().await?;
        let changed = sqlx::query(sql)
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

/// The store's statements, with its table names filled in.
#[derive(Debug)]
struct Sql {
    /// A whole batch, in one round trip (see [`batch`]).
    commit_batch: batch::Statements,
    load: String,
    /// `$1`: a JSON array of `[type, id]`; one row per element, in order.
    load_many: String,
    alarm_cancel_all: String,
    delete_object: String,
    list_first: String,
    list_after: String,
    list_alarms: String,
    next_due: String,
    claim: String,
    finish: String,
    fail_retry: String,
    fail_dead: String,
    release: String,
}

const ALARM_COLUMNS: &str =
    "object_type, object_id, name, due_at, attempts, claimed_at, last_error, dead";

impl Sql {
    fn new(names: &Names) -> Self {
        let objects = &names.objects;
        let alarms = &names.alarms;
        let guard = &names.commit_guard;
        Self {
            commit_batch: batch::Statements::new(objects, alarms, guard),
            load: format!(
                "SELECT state, version FROM {objects} WHERE object_type = ?1 AND object_id = ?2"
            ),
            load_many: format!(
                "SELECT o.state, o.version FROM json_each($1) AS k
                 LEFT JOIN {objects} AS o
                     ON o.object_type = k.value->>0 AND o.object_id = k.value->>1
                 ORDER BY k.key"
            ),
            alarm_cancel_all: format!(
                "DELETE FROM {alarms} WHERE object_type = ?1 AND object_id = ?2"
            ),
            delete_object: format!(
                "DELETE FROM {objects} WHERE object_type = ?1 AND object_id = ?2"
            ),
            list_first: format!(
                "SELECT object_id FROM {objects} WHERE object_type = ?1
                 ORDER BY object_id LIMIT ?2"
            ),
            list_after: format!(
                "SELECT object_id FROM {objects} WHERE object_type = ?1 AND object_id > ?3
                 ORDER BY object_id LIMIT ?2"
            ),
            list_alarms: format!(
                "SELECT {ALARM_COLUMNS} FROM {alarms} WHERE object_type = ?1 AND object_id = ?2
                 ORDER BY due_at, name"
            ),
            next_due: format!(
                "SELECT min(due_at) FROM {alarms} WHERE dead = 0 AND claimed_at IS NULL"
            ),
            claim: format!(
                "UPDATE {alarms} SET claimed_at = ?1
                 WHERE rowid IN (
                     SELECT rowid FROM {alarms}
                     WHERE dead = 0 AND due_at <= ?1 AND (claimed_at IS NULL OR claimed_at < ?2)
                     ORDER BY due_at, object_type, object_id, name
                     LIMIT ?3
                 )
                 RETURNING {ALARM_COLUMNS}"
            ),
            finish: format!(
                "DELETE FROM {alarms}
                 WHERE object_type = ?1 AND object_id = ?2 AND name = ?3 AND claimed_at = ?4"
            ),
            fail_retry: format!(
                "UPDATE {alarms} SET attempts = ?5, last_error = ?6, claimed_at = NULL,
                     due_at = ?7, dead = 0
                 WHERE object_type = ?1 AND object_id = ?2 AND name = ?3 AND claimed_at = ?4"
            ),
            fail_dead: format!(
                "UPDATE {alarms} SET attempts = ?5, last_error = ?6, claimed_at = NULL, dead = 1
                 WHERE object_type = ?1 AND object_id = ?2 AND name = ?3 AND claimed_at = ?4"
            ),
            release: format!(
                "UPDATE {alarms} SET claimed_at = NULL
                 WHERE object_type = ?1 AND object_id = ?2 AND name = ?3 AND claimed_at = ?4"
            ),
        }
    }
}

fn alarm_from_row(row: &SqliteRow) -> Result<AlarmRecord, StorageError> {
    let get_err = |err: sqlx::Error| db_err(err);
    let claimed_at: Option<i64> = row.try_get("claimed_at").map_err(get_err)?;
    Ok(AlarmRecord {
        key: ObjectKey::new(
            row.try_get::<String, _>("object_type").map_err(get_err)?,
            row.try_get::<String, _>("object_id").map_err(get_err)?,
        ),
        name: row.try_get("name").map_err(get_err)?,
        due_at: from_micros(row.try_get("due_at").map_err(get_err)?)?,
        attempts: from_db_attempts(row.try_get("attempts").map_err(get_err)?)?,
        claimed_at: claimed_at.map(from_micros).transpose()?,
        last_error: row.try_get("last_error").map_err(get_err)?,
        dead: row.try_get("dead").map_err(get_err)?,
    })
}

#[async_trait]
impl Storage for SqliteStore {
    async fn load(&self, key: &ObjectKey) -> Result<Option<StoredObject>, StorageError> {
        let row: Option<(String, i64)> = sqlx::query_as(&self.sql.load)
            .bind(&key.object_type)
            .bind(&key.object_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.map(|(state, version)| {
            Ok(StoredObject {
                state: state.into_bytes(),
                version: from_db_version(version)?,
            })
        })
        .transpose()
    }

    /// One query: the keys travel as one JSON array.
    async fn load_many(
        &self,
        keys: &[ObjectKey],
    ) -> Result<Vec<Option<StoredObject>>, StorageError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let pairs: Vec<(&str, &str)> = keys
            .iter()
            .map(|key| (key.object_type.as_str(), key.object_id.as_str()))
            .collect();
        let pairs = serde_json::to_string(&pairs)
            .map_err(|err| crate::error::rejected(format!("keys could not be encoded: {err}")))?;
        let rows: Vec<(Option<String>, Option<i64>)> = sqlx::query_as(&self.sql.load_many)
            .bind(pairs)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        crate::schema::stored_objects(rows, keys.len())
    }

    async fn commit(&self, batch: &[ObjectWrite]) -> Result<(), CommitError> {
        if batch.is_empty() {
            return Ok(());
        }
        let params = batch::Params::new(batch)?;
        let writer = self.writer.lock().await?;
        batch::commit(writer, &self.sql, batch, &params).await
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool, StorageError> {
        let mut writer = self.writer.lock().await?;
        let mut tx = writer
            .connection()
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)?;
        sqlx::query(&self.sql.alarm_cancel_all)
            .bind(&key.object_type)
            .bind(&key.object_id)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let deleted = sqlx::query(&self.sql.delete_object)
            .bind(&key.object_type)
            .bind(&key.object_id)
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
            Some(after) => sqlx::query_scalar(&self.sql.list_after)
                .bind(object_type)
                .bind(fetch_limit(limit))
                .bind(after),
            None => sqlx::query_scalar(&self.sql.list_first)
                .bind(object_type)
                .bind(fetch_limit(limit)),
        };
        let ids: Vec<String> = query.fetch_all(&self.pool).await.map_err(db_err)?;
        Ok(id_page(ids, limit))
    }

    async fn list_alarms(&self, key: &ObjectKey) -> Result<Vec<AlarmRecord>, StorageError> {
        let rows = sqlx::query(&self.sql.list_alarms)
            .bind(&key.object_type)
            .bind(&key.object_id)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter().map(alarm_from_row).collect()
    }

    async fn next_alarm_due(&self) -> Result<Option<SystemTime>, StorageError> {
        let due: Option<i64> = sqlx::query_scalar(&self.sql.next_due)
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        due.map(from_micros).transpose()
    }

    async fn claim_due_alarms(
        &self,
        now: SystemTime,
        claim_expired_before: SystemTime,
        limit: usize,
    ) -> Result<Vec<AlarmRecord>, StorageError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let now = to_micros(now)?;
        let expired = to_micros(claim_expired_before)?;
        // One statement in one immediate transaction: no other writer can claim the same rows
        // between the selection and the update.
        let mut writer = self.writer.lock().await?;
        let mut tx = writer
            .connection()
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)?;
        let rows = sqlx::query(&self.sql.claim)
            .bind(now)
            .bind(expired)
            .bind(claim_limit(limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)?;
        let mut alarms = rows
            .iter()
            .map(alarm_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        // RETURNING does not keep the subquery's order.
        alarms.sort_by(|a, b| (a.due_at, &a.key, &a.name).cmp(&(b.due_at, &b.key, &b.name)));
        Ok(alarms)
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
        let mut query = sqlx::query(sql)
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
}
