//! Integration, conformance and compile-fail tests of the durable workspace, and the harness
//! that runs runtime-level tests against every storage backend.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use durable_runtime::storage::{MemoryStorage, Storage};

/// A storage backend under test, kept alive (with its temporary files or schema) for as long
/// as the test holds it.
pub struct Backend {
    /// The store.
    pub store: Arc<dyn Storage>,
    _guard: Box<dyn Send + Sync>,
    postgres_schema: Option<(durable_sqlx::sqlx::PgPool, String)>,
}

impl Backend {
    /// Removes what the backend created in a shared database (a Postgres schema).
    pub async fn cleanup(self) {
        if let Some((pool, schema)) = self.postgres_schema {
            let drop = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
            let _ = durable_sqlx::sqlx::raw_sql(durable_sqlx::sqlx::AssertSqlSafe(drop))
                .execute(&pool)
                .await;
        }
    }
}

/// A fresh in-memory store.
pub async fn memory() -> Backend {
    Backend {
        store: Arc::new(MemoryStorage::new()),
        _guard: Box::new(()),
        postgres_schema: None,
    }
}

/// A fresh SQLite database in a temporary directory.
pub async fn sqlite() -> Backend {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = durable_sqlx::SqliteStore::open(dir.path().join("durable.db"))
        .await
        .expect("open SQLite");
    Backend {
        store: Arc::new(store),
        _guard: Box::new(dir),
        postgres_schema: None,
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
    let schema = format!("dt_{}", unique_prefix().trim_end_matches('_'));
    let store = durable_sqlx::PostgresStore::builder(&url)
        .schema(&schema)
        .connect()
        .await
        .expect("connect to Postgres");
    let pool = store.pool().clone();
    Some(Backend {
        store: Arc::new(store),
        _guard: Box::new(()),
        postgres_schema: Some((pool, schema)),
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
                        backend.cleanup().await;
                    }
                }
            )+
        }
    };
}

#[cfg(doctest)]
mod book;
