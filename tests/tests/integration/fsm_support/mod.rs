//! What the FSM engine tests share: an FSM store per backend (memory, SQLite on a file of its
//! own, and Postgres in a schema of its own), and a macro declaring each test once per backend.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use durable_runtime::fsm::store::FsmStore;
use durable_runtime::fsm::{Engine, EngineBuilder, MemoryFsmStore};
use durable_sqlx::{PostgresStore, SqliteStore};
use durable_tests::SchemaGuard;
use tempfile::TempDir;

/// An FSM store under test, with what must live as long as it (a Postgres schema or an SQLite
/// file's directory, removed with the backend).
pub struct FsmBackend {
    /// The store.
    pub store: Arc<dyn FsmStore>,
    /// The Postgres schema, if any.
    pub guard: Option<SchemaGuard>,
    /// The SQLite file's directory, if any.
    pub sqlite: Option<TempDir>,
}

impl FsmBackend {
    /// Another handle on the same data, as a second process would open it (its own pool on
    /// Postgres, its own pool and writing connection on the SQLite file; the same store in
    /// memory).
    pub async fn open_again(&self) -> Arc<dyn FsmStore> {
        if let Some(dir) = &self.sqlite {
            return Arc::new(
                SqliteStore::open(sqlite_file(dir))
                    .await
                    .expect("open SQLite again")
                    .fsm(),
            );
        }
        match &self.guard {
            None => Arc::clone(&self.store),
            Some(guard) => Arc::new(
                PostgresStore::builder(&guard.url)
                    .schema(&guard.name)
                    .connect()
                    .await
                    .expect("connect to Postgres again")
                    .fsm(),
            ),
        }
    }

    /// A test engine on this store: no workers, no reaper, no GC (tests drain and sweep
    /// themselves), on a clock tests can move.
    pub fn engine(&self) -> EngineBuilder {
        Engine::builder(Arc::clone(&self.store))
            .clock_follows_tokio()
            .no_reaper()
            .no_gc()
    }
}

/// A fresh in-memory store.
pub async fn memory() -> FsmBackend {
    FsmBackend {
        store: Arc::new(MemoryFsmStore::new()),
        guard: None,
        sqlite: None,
    }
}

fn sqlite_file(dir: &TempDir) -> std::path::PathBuf {
    dir.path().join("durable.db")
}

/// A fresh SQLite database file.
pub async fn sqlite() -> FsmBackend {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(sqlite_file(&dir))
        .await
        .expect("open SQLite");
    FsmBackend {
        store: Arc::new(store.fsm()),
        guard: None,
        sqlite: Some(dir),
    }
}

/// A fresh Postgres schema, or `None` (the test is skipped) without `DATABASE_URL`; with `CI`
/// set, a missing `DATABASE_URL` fails the test.
pub async fn postgres() -> Option<FsmBackend> {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "DATABASE_URL must be set when CI is set: the Postgres tests cannot be skipped"
        );
        eprintln!("skipped: DATABASE_URL not set");
        return None;
    };
    let guard = SchemaGuard::new(&url, durable_tests::unique_prefix().trim_end_matches('_')).await;
    let store = PostgresStore::builder(&url)
        .schema(&guard.name)
        .max_connections(8)
        .connect()
        .await
        .expect("connect to Postgres");
    Some(FsmBackend {
        store: Arc::new(store.fsm()),
        guard: Some(guard),
        sqlite: None,
    })
}

/// Declares, for each listed `async fn(FsmBackend)`, one test per backend, in modules
/// `memory`, `sqlite` and `postgres`.
#[macro_export]
macro_rules! fsm_backend_tests {
    ($($case:ident),+ $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::fsm_support::memory().await).await;
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::fsm_support::sqlite().await).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    if let Some(backend) = $crate::fsm_support::postgres().await {
                        super::$case(backend).await;
                    }
                }
            )+
        }
    };
}
