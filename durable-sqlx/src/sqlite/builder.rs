//! [`SqliteStoreBuilder`]: the settings a [`SqliteStore`] is opened with, its durability level
//! ([`Synchronous`]), and how a location (a path or a `sqlite:` URL) becomes connection
//! options and a pool.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection};

use super::checkpoint::Limits;
use super::packing::Packer;
use super::{SqliteStore, db_err};
use crate::error::{Error, is_sqlite_lock};
use crate::schema::{MAX_PREFIX_LEN, Names, validate_name};

/// How many rows a connection's thread hands over before it waits for them to be taken (sqlx's
/// default is 50): a claim or a batched read returns up to a batch of rows, and with a smaller
/// channel the thread that holds the store's writer stops every 50 rows until a busy runtime
/// schedules the task that reads them.
const ROW_BUFFER_SIZE: usize = 1024;

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
    convert_page_size: bool,
    cache_size: u64,
    mmap_size: u64,
    wal_autocheckpoint: u32,
    background_checkpoints: bool,
    wal_size_limit: u64,
    busy_timeout: Duration,
    max_connections: u32,
    migrate: bool,
    compress_states_from: Option<usize>,
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

    /// The page cache of each connection, in bytes (64 MiB): see
    /// [`cache_size`](Self::cache_size).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use durable_sqlx::{SqliteStore, SqliteStoreBuilder};
    ///
    /// let store = SqliteStore::open("sqlite::memory:").await?;
    /// // SQLite counts a negative cache size in KiB.
    /// let (kib,): (i64,) = durable_sqlx::sqlx::query_as("PRAGMA cache_size")
    ///     .fetch_one(store.pool())
    ///     .await?;
    /// assert_eq!(-kib * 1024, SqliteStoreBuilder::DEFAULT_CACHE_SIZE as i64);
    /// # Ok(()) }
    /// ```
    pub const DEFAULT_CACHE_SIZE: u64 = 64 << 20;

    /// How much of the database file each connection maps into memory, in bytes (256 MiB):
    /// see [`mmap_size`](Self::mmap_size).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_sqlx::SqliteStoreBuilder::DEFAULT_MMAP_SIZE, 256 << 20);
    /// ```
    pub const DEFAULT_MMAP_SIZE: u64 = 256 << 20;

    /// The WAL size, in bytes, past which the background checkpointer waits for readers to
    /// start the WAL over (64 MiB): see [`wal_size_limit`](Self::wal_size_limit).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_sqlx::SqliteStoreBuilder::DEFAULT_WAL_SIZE_LIMIT, 64 << 20);
    /// ```
    pub const DEFAULT_WAL_SIZE_LIMIT: u64 = 64 << 20;

    /// The WAL size, in pages, at which the WAL is checkpointed: see
    /// [`wal_autocheckpoint`](Self::wal_autocheckpoint).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use durable_sqlx::{SqliteStore, SqliteStoreBuilder};
    ///
    /// // Without the background checkpointer, commits checkpoint at this size.
    /// let store = SqliteStore::builder("sqlite::memory:")
    ///     .background_checkpoints(false)
    ///     .open()
    ///     .await?;
    /// let (pages,): (i64,) = durable_sqlx::sqlx::query_as("PRAGMA wal_autocheckpoint")
    ///     .fetch_one(store.pool())
    ///     .await?;
    /// assert_eq!(pages, i64::from(SqliteStoreBuilder::DEFAULT_WAL_AUTOCHECKPOINT));
    /// assert_eq!(pages, 4096);
    /// # Ok(()) }
    /// ```
    pub const DEFAULT_WAL_AUTOCHECKPOINT: u32 = 4096;

    /// The encoded size, in bytes, from which states are stored compressed (16 KiB): see
    /// [`compress_states_from`](Self::compress_states_from).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_sqlx::SqliteStoreBuilder::DEFAULT_COMPRESS_STATES_FROM, 16 * 1024);
    /// ```
    pub const DEFAULT_COMPRESS_STATES_FROM: usize = 16 * 1024;

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
            convert_page_size: false,
            cache_size: Self::DEFAULT_CACHE_SIZE,
            mmap_size: Self::DEFAULT_MMAP_SIZE,
            wal_autocheckpoint: Self::DEFAULT_WAL_AUTOCHECKPOINT,
            background_checkpoints: true,
            wal_size_limit: Self::DEFAULT_WAL_SIZE_LIMIT,
            busy_timeout: Duration::from_secs(5),
            max_connections: 8,
            migrate: true,
            compress_states_from: Some(Self::DEFAULT_COMPRESS_STATES_FROM),
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
    /// existing database keeps the page size it was created with unless
    /// [`convert_page_size`](Self::convert_page_size) is on, and a pool given to
    /// [`SqliteStore::builder_with_pool`] is used as it is.
    ///
    /// A commit writes every page it changed to the WAL, whole, and a checkpoint copies it to
    /// the database file: a call writes at least its row's pages, twice. With small states,
    /// 1 KiB pages write about half the bytes per call of 4 KiB pages (SQLite's own default)
    /// and, on a 2-core machine, commit about 1.6× the calls per second of them, because
    /// every flushed commit is smaller; larger pages suit states of several KiB, which then
    /// need fewer overflow pages.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::SqliteStore::builder("app.db").page_size(8192);
    /// # drop(builder);
    /// ```
    pub fn page_size(mut self, bytes: u32) -> Self {
        self.page_size = bytes;
        self
    }

    /// Whether opening an existing database whose page size differs from
    /// [`page_size`](Self::page_size) rewrites it with that page size (default `false`: the
    /// file keeps its own, and works as before).
    ///
    /// SQLite changes the page size of a database only by copying it whole (`VACUUM`, outside
    /// WAL mode): opening takes as long as copying the file and needs as much free disk space
    /// again, and no other connection, in this process or another, may have the database open
    /// (opening then fails with [`Error::Open`] and the file is left as it was).
    /// The copy is atomic: a crash during it leaves the database with its old page size. Turn
    /// it on for one opening, when moving a database to another page size.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use durable_sqlx::SqliteStore;
    ///
    /// let dir = std::env::temp_dir().join(format!("durable-doc-convert-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let old = SqliteStore::open(dir.join("app.db")).await?; // 1 KiB pages
    /// old.close().await;
    ///
    /// let store = SqliteStore::builder(dir.join("app.db"))
    ///     .page_size(4096)
    ///     .convert_page_size(true)
    ///     .open()
    ///     .await?;
    /// let (page_size,): (i64,) = durable_sqlx::sqlx::query_as("PRAGMA page_size")
    ///     .fetch_one(store.pool())
    ///     .await?;
    /// assert_eq!(page_size, 4096);
    /// # store.close().await; std::fs::remove_dir_all(dir)?;
    /// # Ok(()) }
    /// ```
    pub fn convert_page_size(mut self, convert: bool) -> Self {
        self.convert_page_size = convert;
        self
    }

    /// The page cache of each connection, in bytes (default
    /// [`DEFAULT_CACHE_SIZE`](Self::DEFAULT_CACHE_SIZE), 64 MiB; SQLite's `cache_size`, set in
    /// KiB). Memory is taken as pages are read, up to this much per connection. Not applied to
    /// a pool given to [`SqliteStore::builder_with_pool`].
    ///
    /// Every commit descends the table's index to each object it writes: when the pages it
    /// needs are not cached, each costs a read from the operating system, on the one writing
    /// connection. With the [memory map](Self::mmap_size) on, reads of pages that are not
    /// being changed come from the map instead, and this cache mostly holds the writer's
    /// changed pages; without it, size it to the database file (about 100 bytes per small
    /// object: 100 MB for 1,000,000 objects).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::SqliteStore::builder("app.db").cache_size(256 << 20);
    /// # drop(builder);
    /// ```
    pub fn cache_size(mut self, bytes: u64) -> Self {
        self.cache_size = bytes;
        self
    }

    /// How much of the database file each connection maps into memory, in bytes (default
    /// [`DEFAULT_MMAP_SIZE`](Self::DEFAULT_MMAP_SIZE), 256 MiB; SQLite's `mmap_size`); `0`
    /// reads with system calls only. Not applied to a pool given to
    /// [`SqliteStore::builder_with_pool`].
    ///
    /// Mapped pages are read in place from the operating system's cache, shared by all
    /// connections (and counted in the process's resident memory as file pages the system can
    /// take back), without a system call or a copy per page. SQLite caps the map at 2 GiB.
    /// Writes still go through the WAL as without it. The one caveat SQLite documents: an I/O
    /// error while reading a mapped page (a failing disk) stops the process with a signal
    /// instead of failing the query.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::SqliteStore::builder("app.db").mmap_size(1 << 30);
    /// # drop(builder);
    /// ```
    pub fn mmap_size(mut self, bytes: u64) -> Self {
        self.mmap_size = bytes;
        self
    }

    /// How many pages the WAL holds before they are copied into the database file (a
    /// checkpoint): default [`DEFAULT_WAL_AUTOCHECKPOINT`](Self::DEFAULT_WAL_AUTOCHECKPOINT),
    /// 4096 pages (4 MiB with the default 1 KiB pages). Not applied to a pool given to
    /// [`SqliteStore::builder_with_pool`].
    ///
    /// With [background checkpoints](Self::background_checkpoints) (the default), this is the
    /// size at which the checkpointer copies the WAL while commits go on; without them, it is
    /// SQLite's `wal_autocheckpoint`: the commit that passes it copies the WAL before it
    /// returns. A checkpoint copies each page once however many times the WAL holds it, so a
    /// longer WAL copies fewer pages per call when calls come back to the same objects. The
    /// price: a WAL file of that size, recently written pages read from the WAL, and up to
    /// that much WAL to read when the database is opened after a crash. `0` turns checkpoints
    /// off: the WAL then grows until something else checkpoints it.
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

    /// Whether checkpoints run in the background, on a connection of their own (default
    /// `true`), instead of in the commit that fills the WAL. Not applied to an in-memory
    /// database (it has no WAL) nor to a pool given to [`SqliteStore::builder_with_pool`].
    ///
    /// With the default, the store's connections have SQLite's automatic checkpoints off, and
    /// a task started by [`open`](Self::open) copies the WAL into the database file with a
    /// passive checkpoint once it holds [`wal_autocheckpoint`](Self::wal_autocheckpoint)
    /// pages, while commits go on: no commit waits for the bulk of a checkpoint, which with
    /// many objects copies thousands of pages. Once the WAL is four times
    /// `wal_autocheckpoint` long, the pages committed during a checkpoint are copied by
    /// further passive checkpoints, the last of them (at most a quarter of
    /// `wal_autocheckpoint`) holding this store's commits back, so that the next commit
    /// starts the WAL over from its beginning: the file stays about four times
    /// `wal_autocheckpoint` pages long. If readers keep the WAL from being started over until it
    /// passes [`wal_size_limit`](Self::wal_size_limit), the task waits for them (within the
    /// [busy timeout](Self::busy_timeout)), holding back new commits meanwhile, so that the
    /// WAL stays bounded. The task stops with the store: when its last clone is dropped, or
    /// at [`SqliteStore::close`]. Durability is the same either way: a checkpoint flushes the
    /// WAL before it writes the database file.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::SqliteStore::builder("app.db").background_checkpoints(false);
    /// # drop(builder);
    /// ```
    pub fn background_checkpoints(mut self, background: bool) -> Self {
        self.background_checkpoints = background;
        self
    }

    /// The WAL size, in bytes, past which the background checkpointer waits for readers so
    /// that the WAL starts over (default
    /// [`DEFAULT_WAL_SIZE_LIMIT`](Self::DEFAULT_WAL_SIZE_LIMIT), 64 MiB); also the size the
    /// WAL file is truncated to when it starts over (SQLite's `journal_size_limit`). Not
    /// applied to a pool given to [`SqliteStore::builder_with_pool`].
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::SqliteStore::builder("app.db").wal_size_limit(256 << 20);
    /// # drop(builder);
    /// ```
    pub fn wal_size_limit(mut self, bytes: u64) -> Self {
        self.wal_size_limit = bytes;
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

    /// The encoded size, in bytes, from which a state is stored compressed (default
    /// [`DEFAULT_COMPRESS_STATES_FROM`](Self::DEFAULT_COMPRESS_STATES_FROM), 16 KiB); `None`
    /// stores every state as JSON text.
    ///
    /// In WAL mode every page a commit changes is written twice, to the WAL and then to the
    /// database file at the checkpoint, so a large state costs about twice its size in bytes
    /// written per call. A state of this size or more is stored as a zstd frame (level 1) when
    /// that saves at least an eighth of it; JSON states usually shrink to a half or much less.
    /// Loads decompress it: the runtime and the application see the same bytes either way.
    ///
    /// The cost: a compressed state is a BLOB, which SQL cannot read as JSON
    /// (`json_extract(state, ..)` reads the text states below the threshold only). Rows written
    /// before keep their form until they are next written; a store opened with `None` reads
    /// compressed states as well. Postgres needs no such setting: it compresses large values
    /// itself (TOAST).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use durable_runtime::storage::{ObjectKey, ObjectWrite, Storage};
    /// use durable_sqlx::SqliteStore;
    ///
    /// let store = SqliteStore::builder("sqlite::memory:")
    ///     .compress_states_from(Some(4096))
    ///     .open()
    ///     .await?;
    /// let state = format!(r#"{{"log":"{}"}}"#, "entry; ".repeat(1000)).into_bytes();
    /// let key = ObjectKey::new("Journal", "j1");
    /// store.commit(&[ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(state.clone()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// }]).await?;
    /// // Stored as a BLOB far smaller than the state, read back as the same bytes.
    /// let (form, bytes): (String, i64) =
    ///     durable_sqlx::sqlx::query_as("SELECT typeof(state), length(state) FROM durable_objects")
    ///         .fetch_one(store.pool())
    ///         .await?;
    /// assert_eq!(form, "blob");
    /// assert!(bytes < state.len() as i64 / 10);
    /// assert_eq!(store.load(&key).await?.object().unwrap().state, state);
    /// # Ok(()) }
    /// ```
    pub fn compress_states_from(mut self, bytes: Option<usize>) -> Self {
        self.compress_states_from = bytes;
        self
    }

    /// Opens the store: connects (creating the database file if missing) and applies the
    /// pending migrations unless [`migrate_on_open`](Self::migrate_on_open) is off.
    ///
    /// The connections use WAL mode, the configured `synchronous` level, busy timeout, page
    /// cache and memory map, temporary storage in memory (`temp_store = MEMORY`), and the
    /// store starts its
    /// [background checkpointer](Self::background_checkpoints) (except for a pool given to
    /// [`SqliteStore::builder_with_pool`], used as it is).
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
        let (pool, checkpoints) = match &self.source {
            Source::Pool(pool) => (pool.clone(), None),
            Source::Location(location) => self.connect(location).await?,
        };
        let packer = Packer::new(self.compress_states_from);
        SqliteStore::finish(pool, names, self.migrate, checkpoints, packer).await
    }

    /// The pool, and the checkpointer's limits if it is to run.
    async fn connect(&self, location: &Path) -> Result<(SqlitePool, Option<Limits>), Error> {
        let (options, in_memory) = connect_options(location)?;
        let background = self.background_checkpoints && !in_memory;
        // With background checkpoints, no connection checkpoints when it commits.
        let autocheckpoint = if background {
            0
        } else {
            self.wal_autocheckpoint
        };
        // SQLite reads a negative cache size as KiB.
        let cache_kib = (self.cache_size / 1024).min(i64::MAX as u64);
        let mut options = options
            .create_if_missing(true)
            .synchronous(self.synchronous.into())
            .page_size(self.page_size)
            .pragma("cache_size", format!("-{cache_kib}"))
            .pragma("mmap_size", self.mmap_size.to_string())
            .pragma("wal_autocheckpoint", autocheckpoint.to_string())
            .pragma("journal_size_limit", self.wal_size_limit.to_string())
            // A batch's multi-row statements keep the pages they change in a statement journal,
            // which SQLite spills to a temporary file past 64 KiB: for large states, as many
            // bytes again handed to `write` as the WAL gets. In memory it is bounded by the
            // batch, whose states are in memory already.
            .pragma("temp_store", "memory")
            .row_buffer_size(ROW_BUFFER_SIZE)
            .busy_timeout(self.busy_timeout);
        if !in_memory {
            options = options.journal_mode(SqliteJournalMode::Wal);
            if self.convert_page_size {
                self.convert(&options).await?;
            }
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
                Ok(pool) => {
                    let limits = background.then_some(Limits {
                        threshold: self.wal_autocheckpoint,
                        limit: self.wal_size_limit,
                    });
                    return Ok((pool, limits));
                }
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

    /// Rewrites an existing database whose page size is not the configured one (see
    /// [`convert_page_size`](Self::convert_page_size)), on one connection of its own before
    /// any other is opened.
    async fn convert(&self, options: &SqliteConnectOptions) -> Result<(), Error> {
        let open_err = |err: sqlx::Error| Error::Open {
            location: describe_file(options.get_filename()),
            source: db_err(err),
        };
        let mut conn = options.connect().await.map_err(open_err)?;
        let result = async {
            let current: i64 = sqlx::query_scalar("PRAGMA page_size")
                .fetch_one(&mut conn)
                .await?;
            if current == i64::from(self.page_size) {
                return Ok(());
            }
            // SQLite changes the page size only outside WAL mode; VACUUM copies the database
            // into pages of the new size, atomically under the rollback journal.
            let journal: String = sqlx::query_scalar("PRAGMA journal_mode = DELETE")
                .fetch_one(&mut conn)
                .await?;
            if !journal.eq_ignore_ascii_case("delete") {
                // Another connection has the database open: WAL mode cannot be left.
                return Err(sqlx::Error::Protocol(format!(
                    "cannot change the page size while another connection has the database \
                     open (journal mode stays {journal})"
                )));
            }
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "PRAGMA page_size = {}; VACUUM;",
                self.page_size
            )))
            .execute(&mut conn)
            .await?;
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&mut conn)
                .await?;
            Ok(())
        }
        .await;
        let _ = conn.close().await;
        result.map_err(open_err)
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
