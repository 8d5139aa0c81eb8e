//! [`SqliteStoreBuilder`]: the settings a [`SqliteStore`] is opened with, its durability level
//! ([`Synchronous`]), and how a location (a path or a `sqlite:` URL) becomes connection
//! options and a pool.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use super::{SqliteStore, db_err};
use crate::error::{Error, is_sqlite_lock};
use crate::schema::{MAX_PREFIX_LEN, Names, validate_name};

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
pub(super) enum Source {
    Location(PathBuf),
    Pool(SqlitePool),
}

impl SqliteStoreBuilder {
    /// The page size of a database the store creates, in bytes: see
    /// [`page_size`](Self::page_size).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use durable_sqlx::{SqliteStore, SqliteStoreBuilder};
    ///
    /// let store = SqliteStore::open("sqlite::memory:").await?;
    /// let (page_size,): (i64,) = durable_sqlx::sqlx::query_as("PRAGMA page_size")
    ///     .fetch_one(store.pool())
    ///     .await?;
    /// assert_eq!(page_size, i64::from(SqliteStoreBuilder::DEFAULT_PAGE_SIZE));
    /// assert_eq!(page_size, 1024);
    /// # Ok(()) }
    /// ```
    pub const DEFAULT_PAGE_SIZE: u32 = 1024;

    /// The WAL size, in pages, at which a commit checkpoints: see
    /// [`wal_autocheckpoint`](Self::wal_autocheckpoint).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use durable_sqlx::{SqliteStore, SqliteStoreBuilder};
    ///
    /// let store = SqliteStore::open("sqlite::memory:").await?;
    /// let (pages,): (i64,) = durable_sqlx::sqlx::query_as("PRAGMA wal_autocheckpoint")
    ///     .fetch_one(store.pool())
    ///     .await?;
    /// assert_eq!(pages, i64::from(SqliteStoreBuilder::DEFAULT_WAL_AUTOCHECKPOINT));
    /// assert_eq!(pages, 4096);
    /// # Ok(()) }
    /// ```
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

    pub(super) fn new(source: Source) -> Self {
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
                Err(err) => {
                    return Err(Error::Open {
                        location: describe_file(options.get_filename()),
                        source: db_err(err),
                    });
                }
            }
        }
    }

    fn names(&self) -> Result<Names, Error> {
        validate_name("table prefix", &self.table_prefix, MAX_PREFIX_LEN, true)?;
        Ok(Names::new(None, &self.table_prefix))
    }
}

/// The database file named in an [`Error::Open`], with the likeliest cause SQLite's own
/// message ("unable to open database file") leaves out: a directory that does not exist.
fn describe_file(path: &Path) -> String {
    let missing_dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty() && !dir.is_dir());
    match missing_dir {
        Some(dir) => format!(
            "SQLite database {} (directory {} does not exist)",
            path.display(),
            dir.display()
        ),
        None => format!("SQLite database {}", path.display()),
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
