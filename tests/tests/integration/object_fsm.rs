//! Objects and FSMs together: a handler's FSM inserts and signals ([`Context::fsm`]) commit
//! in the same transaction as its object's state, on memory, SQLite and Postgres, and neither
//! happens without the other when the handler fails, the commit fails, its outcome is
//! unknown, or another runtime wrote the object first.
//!
//! Postgres is found through `DATABASE_URL`; without it those tests are skipped, unless `CI`
//! is set: then they fail.

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::fsm::store::{FsmStore, ListFilter};
use durable_runtime::fsm::{Engine, Instance, Outcome, Settled, StepContext, durable_fsm};
use durable_runtime::storage::{FsmRefusal, MemoryStorage, ObjectKey, Storage};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{Context, Error, Runtime, durable_object};
use durable_tests::SchemaGuard;

const WAIT: Duration = Duration::from_secs(20);

#[durable_fsm(name = "ship", result = String)]
pub struct Ship {
    order: String,
}

#[durable_fsm]
impl Ship {
    #[step(initial)]
    fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::await_signal(["go"], Self::FINISH)
    }

    #[step]
    fn finish(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(format!("shipped {}", self.order))
    }
}

#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum OrderError {
    #[error("refused after staging the insert")]
    Refused,
    #[error("{0}")]
    Fsm(String),
}

impl From<durable_runtime::fsm::Error> for OrderError {
    fn from(error: durable_runtime::fsm::Error) -> Self {
        Self::Fsm(error.to_string())
    }
}

#[durable_object]
pub struct Order {
    placed: u32,
    signalled: u32,
    touched: u32,
}

#[durable_object]
impl Order {
    /// Counts the order placed and inserts its shipping, keyed `ship:<id>`; fails after
    /// staging the insert if `fail`.
    #[handler]
    fn handle_place(&mut self, ctx: &Context, fail: bool) -> Result<u32, OrderError> {
        self.placed += 1;
        let ship = Ship {
            order: ctx.id().to_owned(),
        };
        ctx.fsm()
            .insert(Instance::new(ship).correlation_key(format!("ship:{}", ctx.id())))?;
        if fail {
            return Err(OrderError::Refused);
        }
        Ok(self.placed)
    }

    /// Signals the shipping of the order `of`.
    #[handler]
    fn handle_go(&mut self, ctx: &Context, of: String) -> Result<u32, OrderError> {
        self.signalled += 1;
        ctx.fsm().signal(
            format!("ship:{of}"),
            "go",
            serde_json::json!({"by": ctx.id()}),
            None,
        )?;
        Ok(self.signalled)
    }

    #[handler]
    fn handle_touch(&mut self) -> u32 {
        self.touched += 1;
        self.touched
    }
}

/// One database: the object storage and the FSM store over the same data, and a second
/// storage handle of its own on the same database (another pool, as another process has).
struct Db {
    storage: Arc<dyn Storage>,
    second: Arc<dyn Storage>,
    fsm: Arc<dyn FsmStore>,
    _keep: Option<Box<dyn std::any::Any + Send>>,
}

fn memory() -> Db {
    let storage = MemoryStorage::with_fsm();
    Db {
        fsm: Arc::new(storage.fsm().expect("linked")),
        second: Arc::new(storage.clone()),
        storage: Arc::new(storage),
        _keep: None,
    }
}

async fn sqlite() -> Db {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let store = durable_sqlx::SqliteStore::open(&path).await.unwrap();
    let second = durable_sqlx::SqliteStore::open(&path).await.unwrap();
    Db {
        fsm: Arc::new(store.fsm()),
        second: Arc::new(second),
        storage: Arc::new(store),
        _keep: Some(Box::new(dir)),
    }
}

async fn postgres(test: &str) -> Option<Db> {
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "DATABASE_URL must be set when CI is set: the Postgres tests cannot be skipped"
            );
            eprintln!("skipped: DATABASE_URL not set");
            return None;
        }
    };
    let guard = SchemaGuard::new(&url, &format!("objfsm_{test}")).await;
    let connect = || {
        durable_sqlx::PostgresStore::builder(&url)
            .schema(&guard.name)
            .max_connections(6)
            .connect()
    };
    let store = connect().await.expect("connect to Postgres");
    let second = connect().await.expect("connect to Postgres");
    Some(Db {
        fsm: Arc::new(store.fsm()),
        second: Arc::new(second),
        storage: Arc::new(store),
        _keep: Some(Box::new(guard)),
    })
}

fn engine(db: &Db) -> Engine {
    Engine::builder(Arc::clone(&db.fsm))
        .register::<Ship>()
        .queue("default", 4)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .build()
        .unwrap()
}

/// Every `ship` instance stored, by correlation key.
async fn ships(db: &Db) -> Vec<String> {
    let rows = db
        .fsm
        .list(&ListFilter::default().fsm("ship").limit(1000))
        .await
        .unwrap();
    rows.into_iter()
        .map(|row| row.correlation_key.unwrap_or_default())
        .collect()
}

/// The stored `placed` count of the order `id` (0 when not stored).
async fn stored_placed(db: &Db, id: &str) -> u64 {
    let loaded = db.storage.load(&ObjectKey::new("Order", id)).await.unwrap();
    loaded.object().map_or(0, |stored| {
        serde_json::from_slice::<serde_json::Value>(&stored.state).unwrap()["placed"]
            .as_u64()
            .unwrap()
    })
}

async fn inserted_instance_runs_and_a_signal_wakes_it(db: Db) {
    let engine = engine(&db);
    let rt = Runtime::new(Arc::clone(&db.storage));
    assert_eq!(Order::place(&rt, "o1", false).await.unwrap(), 1);
    let id = engine
        .find("ship:o1")
        .await
        .unwrap()
        .expect("inserted with the order");
    let settled = engine.await_settled(id, WAIT).await.unwrap();
    assert!(matches!(settled, Settled::Awaiting(_)), "{settled:?}");
    assert_eq!(Order::go(&rt, "admin", "o1".into()).await.unwrap(), 1);
    let ended = engine.await_ended(id, WAIT).await.unwrap();
    assert_eq!(
        ended.result::<String>().unwrap().as_deref(),
        Some("shipped o1")
    );
    let inbox = engine.store().get(id).await.unwrap().unwrap();
    assert_eq!(inbox.correlation_key.as_deref(), Some("ship:o1"));
    engine.shutdown().await;
}

async fn handler_error_after_insert_writes_nothing(db: Db) {
    let rt = Runtime::new(Arc::clone(&db.storage));
    let error = Order::place(&rt, "o1", true).await.unwrap_err();
    assert!(
        matches!(error, Error::Handler(OrderError::Refused)),
        "{error}"
    );
    assert!(ships(&db).await.is_empty());
    assert_eq!(stored_placed(&db, "o1").await, 0);
    // The next call starts from the rolled-back state and commits both.
    assert_eq!(Order::place(&rt, "o1", false).await.unwrap(), 1);
    assert_eq!(ships(&db).await, ["ship:o1"]);
}

async fn failed_commit_leaves_neither_state_nor_instance(db: Db) {
    let faulty = FaultyStorage::new(Arc::clone(&db.storage));
    let rt = Runtime::new(faulty.clone());
    assert_eq!(Order::touch(&rt, "o1").await.unwrap(), 1);
    faulty.fail_fsm_commits(1);
    let error = Order::place(&rt, "o1", false).await.unwrap_err();
    assert!(matches!(error, Error::OutcomeUnknown { .. }), "{error}");
    assert!(ships(&db).await.is_empty(), "an instance without its state");
    assert_eq!(stored_placed(&db, "o1").await, 0);
    // Reloaded from storage: the failed call left nothing.
    assert_eq!(Order::place(&rt, "o1", false).await.unwrap(), 1);
    assert_eq!(ships(&db).await, ["ship:o1"]);
    assert_eq!(stored_placed(&db, "o1").await, 1);
}

async fn failed_signal_commit_delivers_nothing(db: Db) {
    let engine = engine(&db);
    let faulty = FaultyStorage::new(Arc::clone(&db.storage));
    let rt = Runtime::new(faulty.clone());
    Order::place(&rt, "o1", false).await.unwrap();
    let id = engine.find("ship:o1").await.unwrap().unwrap();
    assert!(matches!(
        engine.await_settled(id, WAIT).await.unwrap(),
        Settled::Awaiting(_)
    ));
    faulty.fail_fsm_commits(1);
    assert!(Order::go(&rt, "admin", "o1".into()).await.is_err());
    assert!(
        engine.inbox(id).await.unwrap().is_empty(),
        "a phantom signal"
    );
    assert!(matches!(
        engine
            .await_settled(id, Duration::from_millis(200))
            .await
            .unwrap(),
        Settled::Awaiting(_)
    ));
    // Sent again, it is delivered once, with the state that counts it.
    assert_eq!(Order::go(&rt, "admin", "o1".into()).await.unwrap(), 1);
    assert!(matches!(
        engine.await_ended(id, WAIT).await.unwrap(),
        Settled::Done { .. }
    ));
    engine.shutdown().await;
}

async fn unknown_outcome_reloads_and_the_instance_exists_once(db: Db) {
    let faulty = FaultyStorage::new(Arc::clone(&db.storage));
    let rt = Runtime::new(faulty.clone());
    faulty.fail_fsm_commits_after_applying(1);
    let error = Order::place(&rt, "o1", false).await.unwrap_err();
    assert!(matches!(error, Error::OutcomeUnknown { .. }), "{error}");
    // Applied with its state: both are there, once.
    assert_eq!(ships(&db).await, ["ship:o1"]);
    assert_eq!(stored_placed(&db, "o1").await, 1);
    // The object reloaded what storage holds: placing again is refused as a duplicate, and
    // refuses the state change with it.
    let error = Order::place(&rt, "o1", false).await.unwrap_err();
    assert!(
        matches!(
            &error,
            Error::FsmRefused { refusal: FsmRefusal::Duplicate { correlation_key }, .. }
                if correlation_key == "ship:o1"
        ),
        "{error}"
    );
    assert_eq!(stored_placed(&db, "o1").await, 1);
    assert_eq!(ships(&db).await, ["ship:o1"]);
    assert_eq!(Order::touch(&rt, "o1").await.unwrap(), 1);
}

async fn signal_without_target_refuses_the_write(db: Db) {
    let rt = Runtime::new(Arc::clone(&db.storage));
    assert_eq!(Order::touch(&rt, "admin").await.unwrap(), 1);
    let error = Order::go(&rt, "admin", "nobody".into()).await.unwrap_err();
    assert!(
        matches!(
            &error,
            Error::FsmRefused { refusal: FsmRefusal::NoTarget { name, .. }, .. } if name == "go"
        ),
        "{error}"
    );
    // The state change went with it: touched once, never signalled.
    let stored = db
        .storage
        .load(&ObjectKey::new("Order", "admin"))
        .await
        .unwrap()
        .object()
        .unwrap();
    let state: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
    assert_eq!(
        (state["touched"].as_u64(), state["signalled"].as_u64()),
        (Some(1), Some(0))
    );
}

async fn version_conflict_rolls_back_state_and_instance(db: Db) {
    let first = Runtime::new(Arc::clone(&db.storage));
    let second = Runtime::new(Arc::clone(&db.second));
    assert_eq!(Order::touch(&first, "o1").await.unwrap(), 1);
    // The second runtime writes the object; the first still holds version 1.
    assert_eq!(Order::touch(&second, "o1").await.unwrap(), 2);
    let error = Order::place(&first, "o1", false).await.unwrap_err();
    assert!(matches!(error, Error::Conflict { .. }), "{error}");
    assert!(ships(&db).await.is_empty(), "an instance without its state");
    // Reloaded, the first runtime places it once.
    assert_eq!(Order::place(&first, "o1", false).await.unwrap(), 1);
    assert_eq!(ships(&db).await, ["ship:o1"]);
    let error = Order::place(&second, "o1", false).await.unwrap_err();
    assert!(
        matches!(error, Error::Conflict { .. } | Error::FsmRefused { .. }),
        "{error}"
    );
    assert_eq!(ships(&db).await, ["ship:o1"]);
    assert_eq!(stored_placed(&db, "o1").await, 1);
}

async fn a_refused_write_fails_alone_in_its_batch(db: Db) {
    let faulty = FaultyStorage::new(Arc::clone(&db.storage));
    let rt = Runtime::new(faulty.clone());
    assert_eq!(Order::place(&rt, "o0", false).await.unwrap(), 1);
    // Slow commits: the writes of the calls below queue up and share batches.
    faulty.delay_commits(Duration::from_millis(100));
    let ids: Vec<String> = (0..8).map(|i| format!("o{i}")).collect();
    let placed =
        futures_util::future::join_all(ids.iter().map(|id| Order::place(&rt, id, false))).await;
    faulty.delay_commits(Duration::ZERO);
    for (id, placed) in ids.iter().zip(placed) {
        if id == "o0" {
            // Already placed: its shipping's key is occupied.
            let error = placed.unwrap_err();
            assert!(matches!(error, Error::FsmRefused { .. }), "{error}");
        } else {
            assert_eq!(placed.unwrap(), 1, "{id}");
        }
    }
    let mut shipped = ships(&db).await;
    shipped.sort();
    let expected: Vec<String> = ids.iter().map(|id| format!("ship:{id}")).collect();
    assert_eq!(shipped, expected);
    assert_eq!(stored_placed(&db, "o0").await, 1);
    // One commit each would be eight (`o0` and the seven others).
    assert!(
        faulty.commits() < ids.len(),
        "the writes were never batched"
    );
}

macro_rules! on_every_backend {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::memory()).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $scenario() {
                    let Some(db) = super::postgres(&stringify!($scenario)[..20]).await else {
                        return;
                    };
                    super::$scenario(db).await;
                }
            )*
        }
    };
}

on_every_backend!(
    inserted_instance_runs_and_a_signal_wakes_it,
    handler_error_after_insert_writes_nothing,
    failed_commit_leaves_neither_state_nor_instance,
    failed_signal_commit_delivers_nothing,
    unknown_outcome_reloads_and_the_instance_exists_once,
    signal_without_target_refuses_the_write,
    version_conflict_rolls_back_state_and_instance,
    a_refused_write_fails_alone_in_its_batch,
);

#[tokio::test]
async fn a_store_without_fsm_refuses_fsm_changes_with_a_typed_error() {
    let storage = MemoryStorage::new();
    let rt = Runtime::new(storage.clone());
    let error = Order::place(&rt, "o1", false).await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::FsmRefused {
                refusal: FsmRefusal::Unsupported,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        storage
            .load(&ObjectKey::new("Order", "o1"))
            .await
            .unwrap()
            .object()
            .is_none()
    );
}
