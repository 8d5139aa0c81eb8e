//! [`PostgresStore`]: objects and alarms in a PostgreSQL database.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use durable_runtime::storage::{
    AlarmChange, AlarmRecord, CommitError, IdPage, ObjectKey, ObjectWrite, Storage, StorageError,
    StoredObject,
};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{
    PgArgumentBuffer, PgConnectOptions, PgHasArrayType, PgPool, PgPoolOptions, PgRow, PgTypeInfo,
    PgValueFormat, PgValueRef, Postgres,
};
use sqlx::{Connection, Decode, Encode, PgConnection, Row, Type};

use crate::error::{Dialect, Error, storage_error};
use crate::net_alarms::NetAlarms;
use crate::schema::{
    MAX_PREFIX_LEN, MAX_SCHEMA_LEN, Migration, Names, POSTGRES_MIGRATIONS, claim_limit,
    fetch_limit, first_missing, from_db_attempts, from_db_version, from_micros, id_page,
    state_text, to_db_version, to_micros, validate_name,
};

mod commit_connections;
mod states;

use commit_connections::{CommitConnections, TRUSTED_AFTER_USE};

fn db_err(err: sqlx::Error) -> StorageError {
    storage_error(Dialect::Postgres, err)
}

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
    application_name: String,
    migrate: bool,
}

/// Where a builder's connections come from.
#[derive(Clone)]
enum Source {
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
            .field("application_name", &self.application_name)
            .field("migrate", &self.migrate)
            .finish()
    }
}

impl PostgresStoreBuilder {
    fn new(source: Source) -> Self {
        Self {
            source,
            schema: None,
            table_prefix: String::new(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
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
    /// from 1 to 4, are kept for commits, and the pool opens the others (at least one). Not
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
    /// with a retryable [`StorageError`] (default 10 s). Not applied to a pool given
    /// to [`PostgresStore::builder_with_pool`].
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
    /// operations fail with a retryable [`StorageError`] while the server is unreachable and
    /// work again once it is back, without restarting anything.
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
        PostgresStore::finish(pool, kept, names, self.migrate).await
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
    names: Arc<Names>,
    sql: Arc<Sql>,
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

    async fn finish(pool: PgPool, kept: usize, names: Names, migrate: bool) -> Result<Self, Error> {
        let store = Self {
            commits: Arc::new(CommitConnections::new(pool.clone(), kept)),
            pool,
            sql: Arc::new(Sql::new(&names)),
            names: Arc::new(names),
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
        let applied_sql = format!(
            "SELECT version FROM {} ORDER BY version",
            self.names.migrations
        );
        // Cheap path: read what is applied without taking the lock. Before the first
        // migration the table does not exist (asked first, so that the server logs no error).
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(&self.names.migrations)
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        let applied: Vec<i64> = if exists {
            sqlx::query_scalar(&applied_sql)
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

    async fn apply(&self, migration: &Migration) -> Result<(), StorageError> {
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        // Serializes migrations of this store (same schema and prefix) across processes; the
        // lock is released with the transaction.
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key(&self.names.migrations))
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        if let Some(schema) = &self.names.schema {
            let exists: Option<i32> =
                sqlx::query_scalar("SELECT 1 FROM pg_namespace WHERE nspname = $1")
                    .bind(schema)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db_err)?;
            if exists.is_none() {
                sqlx::raw_sql(&format!("CREATE SCHEMA {schema}"))
                    .execute(&mut *tx)
                    .await
                    .map_err(db_err)?;
            }
        }
        sqlx::raw_sql(&format!(
            "CREATE TABLE IF NOT EXISTS {} (
                version BIGINT PRIMARY KEY,
                description TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
            self.names.migrations
        ))
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        let done: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT version FROM {} WHERE version = $1",
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
            "INSERT INTO {} (version, description) VALUES ($1, $2)",
            self.names.migrations
        ))
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

    async fn found_version(
        conn: &mut PgConnection,
        sql: &Sql,
        key: &ObjectKey,
    ) -> Result<Option<u64>, StorageError> {
        let found: Option<i64> = sqlx::query_scalar(&sql.version)
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
        sql: &str,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        let changed = sqlx::query(sql)
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

/// How many connections a store of `max_connections` keeps for commits: a quarter, from 1 to 4.
/// More commits in flight make each batch smaller, and a batch costs about the same round trips
/// whatever its size, so a few large batches commit more calls per second than many small ones.
fn kept_for_commits(max_connections: u32) -> usize {
    (max_connections as usize / 4).clamp(1, 4)
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

/// A `timestamptz` as microseconds since the Unix epoch, sent and read in Postgres' binary
/// format (microseconds since 2000-01-01), so that every microsecond round-trips exactly.
#[derive(Clone, Copy, Debug)]
struct PgTime(i64);

/// Microseconds from the Unix epoch to the Postgres epoch (2000-01-01T00:00:00Z).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// `timestamptz`'s fixed OID.
const TIMESTAMPTZ_OID: u32 = 1184;

/// `timestamptz[]`'s fixed OID.
const TIMESTAMPTZ_ARRAY_OID: u32 = 1185;

impl PgTime {
    fn new(time: SystemTime) -> Result<Self, StorageError> {
        to_micros(time).map(Self)
    }

    fn get(self) -> Result<SystemTime, StorageError> {
        from_micros(self.0)
    }
}

impl Type<Postgres> for PgTime {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(TIMESTAMPTZ_OID))
    }
}

impl PgHasArrayType for PgTime {
    fn array_type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(TIMESTAMPTZ_ARRAY_OID))
    }
}

impl Encode<'_, Postgres> for PgTime {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        let since_pg_epoch = self
            .0
            .checked_sub(PG_EPOCH_MICROS)
            .ok_or("time out of range for timestamptz")?;
        <i64 as Encode<'_, Postgres>>::encode_by_ref(&since_pg_epoch, buf)
    }

    fn size_hint(&self) -> usize {
        8
    }
}

impl<'r> Decode<'r, Postgres> for PgTime {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        match value.format() {
            PgValueFormat::Binary => {
                let since_pg_epoch = <i64 as Decode<'r, Postgres>>::decode(value)?;
                if since_pg_epoch == i64::MAX || since_pg_epoch == i64::MIN {
                    return Err("infinite timestamptz".into());
                }
                Ok(Self(
                    since_pg_epoch
                        .checked_add(PG_EPOCH_MICROS)
                        .ok_or("timestamptz out of range")?,
                ))
            }
            PgValueFormat::Text => Err("timestamptz in text format is not supported".into()),
        }
    }
}

/// The store's statements, with its table names filled in.
#[derive(Debug)]
struct Sql {
    /// A batch of state writes in one statement (see [`states`]).
    states: states::Statements,
    load: String,
    /// `$1`, `$2`: types and ids; one row per key, in order.
    load_many: String,
    version: String,
    insert: String,
    update: String,
    touch: String,
    insert_many: String,
    update_many: String,
    finish_many: String,
    /// `$1`–`$4`: types, ids, names and due times of alarms to schedule.
    set_many: String,
    /// `$1`–`$3`: types, ids and names of alarms to cancel.
    cancel_many: String,
    /// `$1`, `$2`: types and ids of objects whose alarms are all cancelled.
    cancel_all_many: String,
    alarm_set: String,
    alarm_cancel: String,
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

impl Sql {
    fn new(names: &Names) -> Self {
        let objects = &names.objects;
        let alarms = &names.alarms;
        let columns =
            "object_type, object_id, name, due_at, attempts, claimed_at, last_error, dead";
        let a_columns = "a.object_type, a.object_id, a.name, a.due_at, a.attempts, a.claimed_at, \
                         a.last_error, a.dead";
        Self {
            states: states::Statements::new(objects, &names.qualifier),
            load: format!(
                "SELECT state, version FROM {objects} WHERE object_type = $1 AND object_id = $2"
            ),
            load_many: format!(
                "SELECT o.state, o.version
                 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(t, i, n)
                 LEFT JOIN {objects} o ON o.object_type = k.t AND o.object_id = k.i
                 ORDER BY k.n"
            ),
            version: format!(
                "SELECT version FROM {objects} WHERE object_type = $1 AND object_id = $2"
            ),
            insert: format!(
                "INSERT INTO {objects} (object_type, object_id, state, version)
                 VALUES ($1, $2, $3, 1)
                 ON CONFLICT (object_type, object_id) DO NOTHING"
            ),
            update: format!(
                "UPDATE {objects} SET state = $3, version = version + 1, updated_at = now()
                 WHERE object_type = $1 AND object_id = $2 AND version = $4"
            ),
            touch: format!(
                "UPDATE {objects} SET version = version + 1, updated_at = now()
                 WHERE object_type = $1 AND object_id = $2 AND version = $3"
            ),
            // The multi-row forms take one array per column, so each is one prepared statement
            // whatever the batch size.
            insert_many: format!(
                "INSERT INTO {objects} (object_type, object_id, state, version)
                 SELECT t, i, s, 1 FROM unnest($1::text[], $2::text[], $3::text[]) AS v(t, i, s)
                 ON CONFLICT (object_type, object_id) DO NOTHING
                 RETURNING object_type, object_id"
            ),
            update_many: format!(
                "UPDATE {objects} o SET state = v.s, version = o.version + 1, updated_at = now()
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[]) AS v(t, i, s, e)
                 WHERE o.object_type = v.t AND o.object_id = v.i AND o.version = v.e
                 RETURNING o.object_type, o.object_id"
            ),
            finish_many: format!(
                "DELETE FROM {alarms} a
                 USING unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
                     AS v(t, i, n, c)
                 WHERE a.object_type = v.t AND a.object_id = v.i AND a.name = v.n
                     AND a.claimed_at = v.c"
            ),
            set_many: format!(
                "INSERT INTO {alarms}
                     (object_type, object_id, name, due_at, claimed_at, attempts, last_error, dead)
                 SELECT t, i, n, d, NULL, 0, NULL, false
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS v(t, i, n, d)
                 ON CONFLICT (object_type, object_id, name) DO UPDATE SET
                     due_at = excluded.due_at, claimed_at = NULL, attempts = 0,
                     last_error = NULL, dead = false"
            ),
            cancel_many: format!(
                "DELETE FROM {alarms} a
                 USING unnest($1::text[], $2::text[], $3::text[]) AS v(t, i, n)
                 WHERE a.object_type = v.t AND a.object_id = v.i AND a.name = v.n"
            ),
            cancel_all_many: format!(
                "DELETE FROM {alarms} a
                 USING unnest($1::text[], $2::text[]) AS v(t, i)
                 WHERE a.object_type = v.t AND a.object_id = v.i"
            ),
            alarm_set: format!(
                "INSERT INTO {alarms}
                     (object_type, object_id, name, due_at, claimed_at, attempts, last_error, dead)
                 VALUES ($1, $2, $3, $4, NULL, 0, NULL, false)
                 ON CONFLICT (object_type, object_id, name) DO UPDATE SET
                     due_at = excluded.due_at, claimed_at = NULL, attempts = 0,
                     last_error = NULL, dead = false"
            ),
            alarm_cancel: format!(
                "DELETE FROM {alarms} WHERE object_type = $1 AND object_id = $2 AND name = $3"
            ),
            alarm_cancel_all: format!(
                "DELETE FROM {alarms} WHERE object_type = $1 AND object_id = $2"
            ),
            delete_object: format!(
                "DELETE FROM {objects} WHERE object_type = $1 AND object_id = $2"
            ),
            list_first: format!(
                "SELECT object_id FROM {objects} WHERE object_type = $1
                 ORDER BY object_id LIMIT $2"
            ),
            list_after: format!(
                "SELECT object_id FROM {objects} WHERE object_type = $1 AND object_id > $3
                 ORDER BY object_id LIMIT $2"
            ),
            list_alarms: format!(
                "SELECT {columns} FROM {alarms} WHERE object_type = $1 AND object_id = $2
                 ORDER BY due_at, name"
            ),
            next_due: format!(
                "SELECT min(due_at) FROM {alarms} WHERE NOT dead AND claimed_at IS NULL"
            ),
            // Rows another scheduler is claiming right now are skipped, and a row claimed and
            // committed meanwhile is re-checked against the WHERE clause before it is locked,
            // so two schedulers never claim one alarm.
            claim: format!(
                "WITH due AS (
                     SELECT object_type, object_id, name FROM {alarms}
                     WHERE NOT dead AND due_at <= $1 AND (claimed_at IS NULL OR claimed_at < $2)
                     ORDER BY due_at, object_type, object_id, name
                     LIMIT $3
                     FOR UPDATE SKIP LOCKED
                 )
                 UPDATE {alarms} a SET claimed_at = $1
                 FROM due
                 WHERE a.object_type = due.object_type AND a.object_id = due.object_id
                     AND a.name = due.name
                 RETURNING {a_columns}"
            ),
            finish: format!(
                "DELETE FROM {alarms}
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            ),
            fail_retry: format!(
                "UPDATE {alarms} SET attempts = $5, last_error = $6, claimed_at = NULL,
                     due_at = $7, dead = false
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            ),
            fail_dead: format!(
                "UPDATE {alarms} SET attempts = $5, last_error = $6, claimed_at = NULL, dead = true
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            ),
            release: format!(
                "UPDATE {alarms} SET claimed_at = NULL
                 WHERE object_type = $1 AND object_id = $2 AND name = $3 AND claimed_at = $4"
            ),
        }
    }
}

fn alarm_from_row(row: &PgRow) -> Result<AlarmRecord, StorageError> {
    let claimed_at: Option<PgTime> = row.try_get("claimed_at").map_err(db_err)?;
    Ok(AlarmRecord {
        key: ObjectKey::new(
            row.try_get::<String, _>("object_type").map_err(db_err)?,
            row.try_get::<String, _>("object_id").map_err(db_err)?,
        ),
        name: row.try_get("name").map_err(db_err)?,
        due_at: row.try_get::<PgTime, _>("due_at").map_err(db_err)?.get()?,
        attempts: from_db_attempts(i64::from(
            row.try_get::<i32, _>("attempts").map_err(db_err)?,
        ))?,
        claimed_at: claimed_at.map(PgTime::get).transpose()?,
        last_error: row.try_get("last_error").map_err(db_err)?,
        dead: row.try_get("dead").map_err(db_err)?,
    })
}

/// A write checked and converted before the transaction starts.
struct Prepared<'a> {
    index: usize,
    write: &'a ObjectWrite,
    state: Option<&'a str>,
    expected: i64,
    alarms: Vec<(&'a AlarmChange, Option<PgTime>)>,
}

fn prepare(batch: &[ObjectWrite]) -> Result<Vec<Prepared<'_>>, StorageError> {
    let mut prepared = batch
        .iter()
        .enumerate()
        .map(|(index, write)| {
            Ok(Prepared {
                index,
                write,
                state: write.state.as_deref().map(state_text).transpose()?,
                expected: to_db_version(write.expected_version)?,
                alarms: write
                    .alarms
                    .iter()
                    .map(|change| match change {
                        AlarmChange::Set { due_at, .. } => {
                            Ok((change, Some(PgTime::new(*due_at)?)))
                        }
                        AlarmChange::Finish { claimed_at, .. } => {
                            Ok((change, Some(PgTime::new(*claimed_at)?)))
                        }
                        _ => Ok((change, None)),
                    })
                    .collect::<Result<_, StorageError>>()?,
            })
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    // Concurrent batches lock their rows in one global order (by key), so they never deadlock.
    prepared.sort_by(|a, b| a.write.key.cmp(&b.write.key));
    Ok(prepared)
}

/// Applies each write with one statement per row, then its alarm changes in order.
/// `Err(position)` names the first write, in `prepared`, whose version did not match.
async fn apply_each(
    conn: &mut PgConnection,
    sql: &Sql,
    prepared: &[Prepared<'_>],
) -> Result<Result<(), usize>, StorageError> {
    for (position, p) in prepared.iter().enumerate() {
        if !apply_object_row(conn, sql, p).await? {
            return Ok(Err(position));
        }
        apply_alarm_changes(conn, sql, p).await?;
    }
    Ok(Ok(()))
}

/// Writes one object's row, checking its version. Returns whether it matched.
async fn apply_object_row(
    conn: &mut PgConnection,
    sql: &Sql,
    p: &Prepared<'_>,
) -> Result<bool, StorageError> {
    let key = &p.write.key;
    let query = match (p.state, p.expected) {
        (Some(state), 0) => sqlx::query(&sql.insert)
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(state),
        (Some(state), expected) => sqlx::query(&sql.update)
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(state)
            .bind(expected),
        (None, expected) => sqlx::query(&sql.touch)
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(expected),
    };
    let affected = query
        .execute(&mut *conn)
        .await
        .map_err(db_err)?
        .rows_affected();
    Ok(affected == 1)
}

/// Applies one write's alarm changes, in order.
async fn apply_alarm_changes(
    conn: &mut PgConnection,
    sql: &Sql,
    p: &Prepared<'_>,
) -> Result<(), StorageError> {
    let key = &p.write.key;
    for (change, time) in &p.alarms {
        let query = match change {
            AlarmChange::Set { name, .. } => sqlx::query(&sql.alarm_set)
                .bind(&key.object_type)
                .bind(&key.object_id)
                .bind(name)
                .bind(*time),
            AlarmChange::Cancel { name } => sqlx::query(&sql.alarm_cancel)
                .bind(&key.object_type)
                .bind(&key.object_id)
                .bind(name),
            AlarmChange::CancelAll => sqlx::query(&sql.alarm_cancel_all)
                .bind(&key.object_type)
                .bind(&key.object_id),
            // The time bound here is the claim time.
            AlarmChange::Finish { name, .. } => sqlx::query(&sql.finish)
                .bind(&key.object_type)
                .bind(&key.object_id)
                .bind(name)
                .bind(*time),
        };
        query.execute(&mut *conn).await.map_err(db_err)?;
    }
    Ok(())
}

/// Applies a batch with array statements: new objects in one `INSERT ... SELECT FROM unnest`,
/// updated ones in one `UPDATE ... FROM unnest`, the removal of fired alarms in one `DELETE`.
/// Version checks come from `RETURNING`: a row missing from it did not match. Writes that only
/// touch the version, and alarm changes other than removals of fired alarms, keep one
/// statement each (in order per object). `Err(position)` names the first write, in
/// `prepared`, whose version did not match.
async fn apply_bulk(
    conn: &mut PgConnection,
    sql: &Sql,
    prepared: &[Prepared<'_>],
) -> Result<Result<(), usize>, StorageError> {
    let positions = |keep: &dyn Fn(&Prepared<'_>) -> bool| -> Vec<usize> {
        (0..prepared.len())
            .filter(|&i| keep(&prepared[i]))
            .collect()
    };
    let columns = |chunk: &[usize]| {
        let types: Vec<&str> = chunk
            .iter()
            .map(|&i| prepared[i].write.key.object_type.as_str())
            .collect();
        let ids: Vec<&str> = chunk
            .iter()
            .map(|&i| prepared[i].write.key.object_id.as_str())
            .collect();
        let states: Vec<&str> = chunk
            .iter()
            .map(|&i| prepared[i].state.unwrap_or_default())
            .collect();
        (types, ids, states)
    };
    let inserts = positions(&|p| p.state.is_some() && p.expected == 0);
    if !inserts.is_empty() {
        let (types, ids, states) = columns(&inserts);
        let written: Vec<(String, String)> = sqlx::query_as(&sql.insert_many)
            .bind(types)
            .bind(ids)
            .bind(states)
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        if let Some(missing) = first_missing(keys_at(prepared, &inserts), &written) {
            return Ok(Err(missing));
        }
    }
    let updates = positions(&|p| p.state.is_some() && p.expected != 0);
    if !updates.is_empty() {
        let (types, ids, states) = columns(&updates);
        let expected: Vec<i64> = updates.iter().map(|&i| prepared[i].expected).collect();
        let written: Vec<(String, String)> = sqlx::query_as(&sql.update_many)
            .bind(types)
            .bind(ids)
            .bind(states)
            .bind(expected)
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        if let Some(missing) = first_missing(keys_at(prepared, &updates), &written) {
            return Ok(Err(missing));
        }
    }
    for (position, p) in prepared.iter().enumerate() {
        if p.state.is_none() && !apply_object_row(conn, sql, p).await? {
            return Ok(Err(position));
        }
    }
    apply_alarms_bulk(conn, sql, prepared).await?;
    Ok(Ok(()))
}

/// Applies the alarm changes of a batch with one statement per kind of change. Each write's
/// changes are reduced to their net effect ([`NetAlarms`]: after any cancel-all, each name is
/// touched once), and writes are for distinct objects, so applying cancel-alls first and then
/// the per-name changes, kind by kind, does what applying each write's changes in order does.
async fn apply_alarms_bulk(
    conn: &mut PgConnection,
    sql: &Sql,
    prepared: &[Prepared<'_>],
) -> Result<(), StorageError> {
    let mut cancel_alls: (Vec<&str>, Vec<&str>) = Default::default();
    let mut cancels: (Vec<&str>, Vec<&str>, Vec<&str>) = Default::default();
    let mut finishes: (Vec<&str>, Vec<&str>, Vec<&str>, Vec<PgTime>) = Default::default();
    let mut sets: (Vec<&str>, Vec<&str>, Vec<&str>, Vec<PgTime>) = Default::default();
    for p in prepared {
        let net = NetAlarms::of(&p.write.alarms);
        let (t, i) = (
            p.write.key.object_type.as_str(),
            p.write.key.object_id.as_str(),
        );
        if net.cancel_all {
            cancel_alls.0.push(t);
            cancel_alls.1.push(i);
        }
        for name in net.cancels {
            cancels.0.push(t);
            cancels.1.push(i);
            cancels.2.push(name);
        }
        for (name, claimed_at) in net.finishes {
            finishes.0.push(t);
            finishes.1.push(i);
            finishes.2.push(name);
            finishes.3.push(PgTime::new(claimed_at)?);
        }
        for (name, due_at) in net.sets {
            sets.0.push(t);
            sets.1.push(i);
            sets.2.push(name);
            sets.3.push(PgTime::new(due_at)?);
        }
    }
    if !cancel_alls.0.is_empty() {
        sqlx::query(&sql.cancel_all_many)
            .bind(cancel_alls.0)
            .bind(cancel_alls.1)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if !cancels.0.is_empty() {
        sqlx::query(&sql.cancel_many)
            .bind(cancels.0)
            .bind(cancels.1)
            .bind(cancels.2)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    for (statement, (types, ids, names, times)) in
        [(&sql.finish_many, finishes), (&sql.set_many, sets)]
    {
        if !types.is_empty() {
            sqlx::query(statement)
                .bind(types)
                .bind(ids)
                .bind(names)
                .bind(times)
                .execute(&mut *conn)
                .await
                .map_err(db_err)?;
        }
    }
    Ok(())
}

/// The positions of `chunk` with the keys of their writes.
fn keys_at<'a>(
    prepared: &'a [Prepared<'_>],
    chunk: &'a [usize],
) -> impl ExactSizeIterator<Item = (usize, &'a ObjectKey)> {
    chunk.iter().map(|&i| (i, &prepared[i].write.key))
}

fn attempts_param(attempts: u32) -> Result<i32, StorageError> {
    i32::try_from(attempts)
        .map_err(|_| crate::error::rejected(format!("attempt count {attempts} is out of range")))
}

/// Commits `prepared` on `conn`.
async fn commit_on(
    conn: &mut PgConnection,
    sql: &Sql,
    prepared: &[Prepared<'_>],
) -> Result<(), CommitError> {
    if let [single] = prepared {
        if single.alarms.is_empty() {
            // One statement is a transaction of its own: no BEGIN and COMMIT round trips.
            if apply_object_row(conn, sql, single).await? {
                return Ok(());
            }
            let found = PostgresStore::found_version(conn, sql, &single.write.key).await?;
            return Err(CommitError::Conflict {
                index: single.index,
                key: single.write.key.clone(),
                expected: single.write.expected_version,
                found,
            });
        }
    }
    if states::applies(prepared) {
        return states::commit(conn, &sql.states, prepared).await;
    }
    let mut tx = conn.begin().await.map_err(db_err)?;
    // A batch of several writes goes through a few array statements: one round trip to
    // the server per statement is most of what a commit costs.
    let applied = if prepared.len() == 1 {
        apply_each(&mut tx, sql, prepared).await?
    } else {
        apply_bulk(&mut tx, sql, prepared).await?
    };
    if let Err(position) = applied {
        let p = &prepared[position];
        let found = PostgresStore::found_version(&mut tx, sql, &p.write.key).await?;
        tx.rollback().await.map_err(db_err)?;
        return Err(CommitError::Conflict {
            index: p.index,
            key: p.write.key.clone(),
            expected: p.write.expected_version,
            found,
        });
    }
    tx.commit().await.map_err(db_err)?;
    Ok(())
}

#[async_trait]
impl Storage for PostgresStore {
    /// One batch in flight per connection kept for commits: a quarter of
    /// [`max_connections`](PostgresStoreBuilder::max_connections), from 1 to 4 (2 by default).
    fn max_concurrent_commits(&self) -> usize {
        self.commits.capacity()
    }

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

    /// One query: the keys travel as two arrays.
    async fn load_many(
        &self,
        keys: &[ObjectKey],
    ) -> Result<Vec<Option<StoredObject>>, StorageError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let types: Vec<&str> = keys.iter().map(|key| key.object_type.as_str()).collect();
        let ids: Vec<&str> = keys.iter().map(|key| key.object_id.as_str()).collect();
        let rows: Vec<(Option<String>, Option<i64>)> = sqlx::query_as(&self.sql.load_many)
            .bind(types)
            .bind(ids)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        crate::schema::stored_objects(rows, keys.len())
    }

    async fn commit(&self, batch: &[ObjectWrite]) -> Result<(), CommitError> {
        if batch.is_empty() {
            return Ok(());
        }
        let prepared = prepare(batch)?;
        let mut lease = self.commits.lend().await?;
        let committed = commit_on(lease.conn(), &self.sql, &prepared).await;
        // A conflict is the server's answer; after any other error the connection may be
        // broken or in the middle of an exchange, and is not used again.
        if matches!(committed, Ok(()) | Err(CommitError::Conflict { .. })) {
            lease.release();
        }
        committed
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool, StorageError> {
        let mut tx = self.pool.begin().await.map_err(db_err)?;
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
        let due: Option<PgTime> = sqlx::query_scalar(&self.sql.next_due)
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        due.map(PgTime::get).transpose()
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
        let rows = sqlx::query(&self.sql.claim)
            .bind(PgTime::new(now)?)
            .bind(PgTime::new(claim_expired_before)?)
            .bind(claim_limit(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
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
}
