//! Integration, conformance and compile-fail tests of the durable workspace, and the harness
//! that runs runtime-level tests against every storage backend.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use durable_runtime::Event;
use durable_runtime::storage::{MemoryStorage, Storage};
use durable_sqlx::sqlx::{self, AssertSqlSafe, Connection, PgConnection};

/// A storage backend under test, kept alive (with its temporary files or schema) for as long
/// as the test holds it; what it created (a directory, a Postgres schema) goes when it is
/// dropped, also while a failing test unwinds.
pub struct Backend {
    /// The store.
    pub store: Arc<dyn Storage>,
    _guard: Box<dyn Send + Sync>,
    location: Location,
}

/// Where a backend's data lives, to open it again.
enum Location {
    Memory,
    Sqlite(std::path::PathBuf),
    Postgres { url: String, schema: String },
}

impl Backend {
    /// The Postgres schema of the backend's tables; `None` off Postgres.
    pub fn postgres_schema(&self) -> Option<&str> {
        match &self.location {
            Location::Postgres { schema, .. } => Some(schema),
            Location::Memory | Location::Sqlite(_) => None,
        }
    }

    /// A second handle on the same database, as another process would open it: its own
    /// connections to the same SQLite file or Postgres schema (the same store in memory).
    pub async fn open_again(&self) -> Arc<dyn Storage> {
        match &self.location {
            Location::Memory => Arc::clone(&self.store),
            Location::Sqlite(path) => Arc::new(
                durable_sqlx::SqliteStore::open(path)
                    .await
                    .expect("open SQLite again"),
            ),
            Location::Postgres { url, schema } => Arc::new(
                durable_sqlx::PostgresStore::builder(url)
                    .schema(schema)
                    .connect()
                    .await
                    .expect("connect to Postgres again"),
            ),
        }
    }
}

/// A schema private to one test, dropped (with everything in it) when the guard is dropped,
/// also while a failing test unwinds.
pub struct SchemaGuard {
    /// The database URL.
    pub url: String,
    /// The schema's name.
    pub name: String,
}

impl SchemaGuard {
    /// Drops any leftover of a previous run and reserves the name `dt_<test>_<process id>`.
    ///
    /// # Panics
    ///
    /// If the name is longer than Postgres allows or the server cannot be reached.
    pub async fn new(url: &str, test: &str) -> Self {
        let name = format!("dt_{test}_{}", std::process::id());
        assert!(name.len() <= 63, "schema name {name} too long");
        let mut conn = PgConnection::connect(url)
            .await
            .expect("connect to Postgres");
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.ok();
        Self {
            url: url.to_owned(),
            name,
        }
    }
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let url = self.url.clone();
        let schema = self.name.clone();
        // Drop may run while the test's runtime is blocked (a panicking test): use a thread
        // and runtime of our own. Connections of the test still inside a transaction on the
        // schema's tables (which could not finish while we block) are terminated first, so
        // that the drop never waits for them.
        let done = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut conn = PgConnection::connect(&url).await?;
                sqlx::query(
                    "SELECT pg_terminate_backend(l.pid) FROM pg_locks l
                     JOIN pg_class c ON c.oid = l.relation
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = $1 AND l.pid <> pg_backend_pid()",
                )
                .bind(&schema)
                .execute(&mut conn)
                .await?;
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {schema} CASCADE"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        })
        .join();
        if let Ok(Err(err)) = done {
            eprintln!("could not drop schema {}: {err}", self.name);
        }
    }
}

/// A fresh in-memory store.
pub async fn memory() -> Backend {
    Backend {
        store: Arc::new(MemoryStorage::new()),
        _guard: Box::new(()),
        location: Location::Memory,
    }
}

/// A fresh SQLite database in a temporary directory.
pub async fn sqlite() -> Backend {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("durable.db");
    let store = durable_sqlx::SqliteStore::open(&path)
        .await
        .expect("open SQLite");
    Backend {
        store: Arc::new(store),
        _guard: Box::new(dir),
        location: Location::Sqlite(path),
    }
}

/// A fresh set of tables in the Postgres database named by `DATABASE_URL`, or `None` (the
/// test is skipped) when it is unset. When `CI` is set a missing `DATABASE_URL` fails the test.
pub async fn postgres() -> Option<Backend> {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "DATABASE_URL must be set when CI is set"
        );
        eprintln!("skipped: DATABASE_URL not set");
        return None;
    };
    let schema = SchemaGuard::new(&url, unique_prefix().trim_end_matches('_')).await;
    let store = durable_sqlx::PostgresStore::builder(&url)
        .schema(&schema.name)
        .connect()
        .await
        .expect("connect to Postgres");
    Some(Backend {
        store: Arc::new(store),
        location: Location::Postgres {
            url: url.clone(),
            schema: schema.name.clone(),
        },
        _guard: Box::new(schema),
    })
}

/// A table prefix no other test uses.
pub fn unique_prefix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "t{}_{}_{}_",
        std::process::id(),
        nanos,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Waits until `condition` holds, checking every 10 ms, for at most 10 seconds.
///
/// # Panics
///
/// If the condition still does not hold after 10 seconds.
pub async fn eventually<F, Fut>(mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The events `events` holds now, oldest first.
///
/// # Panics
///
/// If the receiver lagged and lost events: a count taken from them would be wrong.
pub fn received(events: &mut tokio::sync::broadcast::Receiver<Event>) -> Vec<Event> {
    use tokio::sync::broadcast::error::TryRecvError;
    let mut received = Vec::new();
    loop {
        match events.try_recv() {
            Ok(event) => received.push(event),
            Err(TryRecvError::Empty | TryRecvError::Closed) => return received,
            Err(TryRecvError::Lagged(lost)) => panic!("the event receiver lost {lost} events"),
        }
    }
}

/// Declares, for each listed `async fn(&Backend)`, one test per backend: in modules `memory`,
/// `sqlite` and `postgres` (skipped without `DATABASE_URL`). For a case that opens the same
/// database again ([`Backend::open_again`]).
#[macro_export]
macro_rules! backend_cases {
    ($($case:ident),+ $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&$crate::memory().await).await;
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&$crate::sqlite().await).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    if let Some(backend) = $crate::postgres().await {
                        super::$case(&backend).await;
                    }
                }
            )+
        }
    };
}

/// Declares, for each listed `async fn(Arc<dyn Storage>)`, one test per backend: in modules
/// `memory`, `sqlite` and `postgres`.
#[macro_export]
macro_rules! backend_tests {
    ($($case:ident),+ $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = $crate::memory().await;
                    super::$case(backend.store.clone()).await;
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = $crate::sqlite().await;
                    super::$case(backend.store.clone()).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    if let Some(backend) = $crate::postgres().await {
                        super::$case(backend.store.clone()).await;
                    }
                }
            )+
        }
    };
}

pub mod large_state;
pub mod shapes;

#[cfg(doctest)]
mod book;
