//! [`PostgresStoreBuilder`]: the settings a [`PostgresStore`] is connected with, where its
//! connections come from (a URL or a pool of the application's), and how many of them it keeps
//! for its commits beside the pool.

use std::str::FromStr;
use std::time::Duration;

use durable_runtime::storage::StorageError;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use super::commit_connections::TRUSTED_AFTER_USE;
use super::{PostgresStore, db_err};
use crate::error::Error;
use crate::schema::{MAX_PREFIX_LEN, MAX_SCHEMA_LEN, Names, validate_name};

/// The default of [`PostgresStoreBuilder::idle_in_transaction_timeout`].
const DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings for connecting a [`PostgresStore`], from [`PostgresStore::builder`] or
/// [`PostgresStore::builder_with_pool`].
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
/// use std::time::Duration;
/// use durable_sqlx::PostgresStore;
///
/// let store = PostgresStore::builder("postgres://app@db.internal/app")
///     .schema("app1")
///     .max_connections(20)
///     .acquire_timeout(Duration::from_secs(5))
///     .connect()
///     .await?;
/// # drop(store); Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `connect` is called"]
pub struct PostgresStoreBuilder {
    source: Source,
    schema: Option<String>,
    table_prefix: String,
    max_connections: u32,
    acquire_timeout: Duration,
    commit_timeout: Duration,
    idle_in_transaction_timeout: Option<Duration>,
    application_name: String,
    migrate: bool,
}

/// Where a builder's connections come from.
#[derive(Clone)]
pub(super) enum Source {
    Url(String),
    Pool(PgPool),
}

impl std::fmt::Debug for PostgresStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password: never print it.
        f.debug_struct("PostgresStoreBuilder")
            .field(
                "source",
                &match self.source {
                    Source::Url(_) => "url",
                    Source::Pool(_) => "pool",
                },
            )
            .field("schema", &self.schema)
            .field("table_prefix", &self.table_prefix)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("commit_timeout", &self.commit_timeout)
            .field(
                "idle_in_transaction_timeout",
                &self.idle_in_transaction_timeout,
            )
            .field("application_name", &self.application_name)
            .field("migrate", &self.migrate)
            .finish()
    }
}

impl PostgresStoreBuilder {
    pub(super) fn new(source: Source) -> Self {
        Self {
            source,
            schema: None,
            table_prefix: String::new(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            commit_timeout: Duration::from_secs(30),
            idle_in_transaction_timeout: Some(DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT),
            application_name: "durable".to_owned(),
            migrate: true,
        }
    }

    /// Puts the store's tables in `schema` (created by the migrations if missing) instead of
    /// the connection's default schema, so that several applications can share one database.
    /// Lowercase ASCII letters, digits and `_`, at most 63 bytes; anything else fails
    /// [`connect`](Self::connect) with [`Error::InvalidName`].
    ///
    /// # Examples
    ///
    /// ```
    /// // Tables `app1.durable_objects`, `app1.durable_alarms`, ...
    /// let builder = durable_sqlx::PostgresStore::builder("postgres://localhost/app").schema("app1");
    /// # drop(builder);
    /// ```
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Prepends `prefix` to the name of every table and index of the store (default: none).
    /// Lowercase ASCII letters, digits and `_`, at most 32 bytes. Combines with
    /// [`schema`](Self::schema).
    ///
    /// # Examples
    ///
    /// ```
    /// // Tables `app1_durable_objects`, `app1_durable_alarms`, ...
    /// let builder = durable_sqlx::PostgresStore::builder("postgres://localhost/app").table_prefix("app1_");
    /// # drop(builder);
    /// ```
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// The most connections the store opens (default 10; at least 1): a few of them, a quarter
    /// from 1 to 4, are kept for commits, and the pool opens the others (at least one). With
    /// one connection, commits take it from the pool like everything else. Not
    /// applied to a pool given to [`PostgresStore::builder_with_pool`], beside which the store
    /// keeps a quarter of the pool's size, from 1 to 4.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::PostgresStore::builder("postgres://localhost/app").max_connections(32);
    /// # drop(builder);
    /// ```
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// How long an operation waits for a connection (opening one if needed) before failing
    /// with a retryable [`StorageError`](durable_runtime::storage::StorageError) (default
    /// 10 s). Not applied to a pool given to [`PostgresStore::builder_with_pool`].
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::PostgresStore::builder("postgres://localhost/app")
    ///     .acquire_timeout(std::time::Duration::from_secs(3));
    /// # drop(builder);
    /// ```
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// How long the server lets one of the store's connections sit inside a transaction
    /// without sending anything before it ends the session and rolls the transaction back
    /// (PostgreSQL's `idle_in_transaction_session_timeout`; default 5 s, `None` for the
    /// server's setting). The store's transactions never wait between their statements, so
    /// only a client that stalled mid-transaction (a paused process, a cut network) reaches
    /// it, and its row locks are then released instead of blocking the object's next writer
    /// until it comes back. In cluster mode keep it below the lease TTL, so that the node
    /// taking over a shard is not held up by the locks of the node that lost it. Not applied
    /// to a pool given to [`PostgresStore::builder_with_pool`] (set it on that pool's
    /// connect options).
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::PostgresStore::builder("postgres://localhost/app")
    ///     .idle_in_transaction_timeout(Some(std::time::Duration::from_secs(1)));
    /// # drop(builder);
    /// ```
    pub fn idle_in_transaction_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_in_transaction_timeout = timeout;
        self
    }

    /// How long a commit waits for the server's answer before failing with a retryable
    /// [`StorageError`](durable_runtime::storage::StorageError) (default 30 s). A server that
    /// falls silent (a failover, a network partition) would otherwise hold the commit until the
    /// kernel gives up on the connection, which takes minutes. When the time is up the
    /// connection is closed, so whether the commit happened is unknown: the runtime then
    /// reloads the object from storage. Applies to pools given to
    /// [`PostgresStore::builder_with_pool`] too.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::PostgresStore::builder("postgres://localhost/app")
    ///     .commit_timeout(std::time::Duration::from_secs(5));
    /// # drop(builder);
    /// ```
    pub fn commit_timeout(mut self, timeout: Duration) -> Self {
        self.commit_timeout = timeout;
        self
    }

    /// The `application_name` the connections report in `pg_stat_activity` (default
    /// `"durable"`). Not applied to a pool given to
    /// [`PostgresStore::builder_with_pool`].
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::PostgresStore::builder("postgres://localhost/app").application_name("billing");
    /// # drop(builder);
    /// ```
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = name.into();
        self
    }

    /// Whether connecting applies the store's pending schema migrations (default `true`).
    /// With `false`, call [`PostgresStore::migrate`] yourself before using the store.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = durable_sqlx::PostgresStore::builder("postgres://localhost/app").migrate_on_open(false);
    /// # drop(builder);
    /// ```
    pub fn migrate_on_open(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// Connects and applies the pending migrations unless
    /// [`migrate_on_open`](Self::migrate_on_open) is off.
    ///
    /// The pool checks each connection before handing it out, so connections the server
    /// dropped (restart, `pg_terminate_backend`, network loss) are replaced transparently:
    /// operations fail with a retryable
    /// [`StorageError`](durable_runtime::storage::StorageError) while the server is
    /// unreachable and work again once it is back, without restarting anything.
    ///
    /// Connecting itself does not wait: a server that refuses the connection or cannot be
    /// reached fails it at once (within `acquire_timeout` at most) with [`Error::Open`],
    /// which names the server and database and carries the driver's error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_sqlx::Error> {
    /// let store = durable_sqlx::PostgresStore::builder("postgres://postgres@127.0.0.1:5432/app")
    ///     .connect()
    ///     .await?;
    /// # drop(store); Ok(()) }
    /// ```
    pub async fn connect(self) -> Result<PostgresStore, Error> {
        let names = self.names()?;
        let (pool, kept) = match &self.source {
            Source::Pool(pool) => (
                pool.clone(),
                kept_for_commits(pool.options().get_max_connections()),
            ),
            Source::Url(url) => {
                let options = PgConnectOptions::from_str(url)
                    .map_err(|err| Error::InvalidLocation(Box::new(err)))?
                    .application_name(&self.application_name);
                let options = match self.idle_in_transaction_timeout {
                    Some(timeout) => options.options([(
                        "idle_in_transaction_session_timeout",
                        format!("{}ms", timeout.as_millis().max(1)),
                    )]),
                    None => options,
                };
                // The pool retries a refused connection until its acquire timeout and then
                // reports only that it timed out: one direct connection first fails at once,
                // with the cause.
                check_reachable(&options, self.acquire_timeout).await?;
                let kept = kept_for_commits(self.max_connections);
                let pooled = (self.max_connections - kept as u32).max(1);
                let pool = PgPoolOptions::new()
                    .max_connections(pooled)
                    .acquire_timeout(self.acquire_timeout)
                    .test_before_acquire(false)
                    // Ping only a connection idle for a while: one used a moment ago is
                    // most likely alive, and the ping would add a round trip to every query.
                    .before_acquire(|conn, meta| {
                        Box::pin(async move {
                            if meta.idle_for >= TRUSTED_AFTER_USE {
                                conn.ping().await?;
                            }
                            Ok(true)
                        })
                    })
                    .connect_with(options)
                    .await
                    .map_err(db_err)?;
                (pool, kept)
            }
        };
        PostgresStore::finish(pool, kept, self.commit_timeout, names, self.migrate).await
    }

    fn names(&self) -> Result<Names, Error> {
        validate_name("table prefix", &self.table_prefix, MAX_PREFIX_LEN, true)?;
        if let Some(schema) = &self.schema {
            validate_name("schema", schema, MAX_SCHEMA_LEN, false)?;
            if schema.starts_with("pg_") {
                return Err(Error::InvalidName {
                    what: "schema",
                    value: schema.clone(),
                    reason: "names starting with `pg_` are reserved by PostgreSQL",
                });
            }
        }
        Ok(Names::new(self.schema.as_deref(), &self.table_prefix))
    }
}

/// Opens and closes one connection with `options`, failing with [`Error::Open`] (naming the
/// server and database, and carrying the driver's error) if that fails or takes longer than
/// `timeout`.
async fn check_reachable(options: &PgConnectOptions, timeout: Duration) -> Result<(), Error> {
    let open_error = |source| Error::Open {
        location: describe_server(options),
        source,
    };
    match tokio::time::timeout(timeout, PgConnection::connect_with(options)).await {
        Ok(Ok(conn)) => {
            // Closing politely only spares the server a log line; a failure here changes nothing.
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(err)) => Err(open_error(db_err(err))),
        Err(_) => Err(open_error(StorageError::unavailable(format!(
            "no connection within the acquire timeout of {} ms",
            timeout.as_millis()
        )))),
    }
}

/// The server and database of `options`, without credentials.
fn describe_server(options: &PgConnectOptions) -> String {
    let database = match options.get_database() {
        Some(database) => format!("PostgreSQL database `{database}`"),
        None => "PostgreSQL".to_owned(),
    };
    match options.get_socket() {
        Some(socket) => format!("{database} at socket {}", socket.display()),
        None => format!(
            "{database} at {}:{}",
            options.get_host(),
            options.get_port()
        ),
    }
}

/// How many connections a store of `max_connections` keeps for commits: a quarter, from 1 to 4,
/// and none when it may open only one (its commits then take it from the pool).
/// More commits in flight make each batch smaller, and a batch costs about the same round trips
/// whatever its size, so a few large batches commit more calls per second than many small ones.
fn kept_for_commits(max_connections: u32) -> usize {
    if max_connections < 2 {
        return 0;
    }
    (max_connections as usize / 4).clamp(1, 4)
}
