//! The scheduling controls with real workers, on memory, SQLite and Postgres: two engines on
//! one database share a rate limit (claims never outrun the bucket), a paused queue holds
//! every engine back until it is resumed, and a cancel wins over a step executing on another
//! engine. On the SQL backends, a write that fails inside a pick or a cancel (a trigger that
//! raises, in the real database) changes nothing.
//!
//! Waits are bounded by deadlines that fail the test.

use crate::fsm_support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use durable_runtime::fsm::store::{CancelOutcome, RateLimit, Target};
use durable_runtime::fsm::{
    CANCELLED, Engine, Error, Instance, InstanceId, Outcome, Settled, Status, durable_fsm,
};
use durable_sqlx::sqlx::{self, AssertSqlSafe, Connection};
use fsm_support::FsmBackend;

const PATIENCE: Duration = Duration::from_secs(60);

/// When each run's steps started.
fn starts() -> &'static Mutex<HashMap<String, Vec<Instant>>> {
    static STARTS: OnceLock<Mutex<HashMap<String, Vec<Instant>>>> = OnceLock::new();
    STARTS.get_or_init(Mutex::default)
}

/// Records when it ran, and ends.
#[durable_fsm(name = "controls.tick", queue = "ticks")]
pub struct Tick {
    run: String,
}

#[durable_fsm]
impl Tick {
    #[step(initial)]
    fn tick(&mut self) -> Outcome<Self> {
        starts()
            .lock()
            .unwrap()
            .entry(self.run.clone())
            .or_default()
            .push(Instant::now());
        Outcome::done(())
    }
}

/// Per run: whether its `Hold` step has started, and whether it may return.
fn holds() -> &'static Mutex<HashMap<String, (bool, bool)>> {
    static HOLDS: OnceLock<Mutex<HashMap<String, (bool, bool)>>> = OnceLock::new();
    HOLDS.get_or_init(Mutex::default)
}

fn hold_state(run: &str) -> (bool, bool) {
    holds()
        .lock()
        .unwrap()
        .get(run)
        .copied()
        .unwrap_or_default()
}

/// A step that holds until released, then ends.
#[durable_fsm(name = "controls.hold", queue = "holds")]
pub struct Hold {
    run: String,
}

#[durable_fsm]
impl Hold {
    #[step(initial)]
    async fn hold(&mut self) -> Outcome<Self> {
        holds()
            .lock()
            .unwrap()
            .entry(self.run.clone())
            .or_default()
            .0 = true;
        let deadline = Instant::now() + PATIENCE;
        while !hold_state(&self.run).1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Outcome::done(())
    }
}

fn backend_name(backend: &FsmBackend) -> &'static str {
    if backend.guard.is_some() {
        "postgres"
    } else if backend.sqlite.is_some() {
        "sqlite"
    } else {
        "memory"
    }
}

/// An engine on `store` running `queue` with room for 8 steps, polling often.
fn worker(store: std::sync::Arc<dyn durable_runtime::fsm::store::FsmStore>) -> Engine {
    Engine::builder(store)
        .register::<Tick>()
        .register::<Hold>()
        .queue("ticks", 8)
        .queue("holds", 2)
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .no_gc()
        .build()
        .unwrap()
}

/// Two engines on one database, one bucket of 3 per 500 ms: twelve instances all run, and at
/// every step's start the steps started so far are at most what the bucket held and earned
/// since it was stored.
async fn two_engines_share_a_rate_limit(backend: FsmBackend) {
    let run = format!("rate-{}", backend_name(&backend));
    let first = worker(backend.store.clone());
    let second = worker(backend.open_again().await);
    let limit = RateLimit::new(3, Duration::from_millis(500));
    let since = Instant::now();
    second.set_rate_limit(&run, limit).await.unwrap();
    let ids: Vec<InstanceId> = first
        .insert_all((0..12).map(|_| Instance::new(Tick { run: run.clone() }).rate_limit_key(&run)))
        .await
        .unwrap();
    assert_eq!(ids.len(), 12);
    for id in &ids {
        let settled = first.await_ended(*id, PATIENCE).await.unwrap();
        assert!(matches!(settled, Settled::Done { .. }), "{id}: {settled:?}");
    }
    first.shutdown().await;
    second.shutdown().await;
    let mut starts = starts().lock().unwrap()[&run].clone();
    starts.sort();
    assert_eq!(starts.len(), 12, "every instance ran once");
    for (n, start) in starts.iter().enumerate() {
        let earned = 3.0 + 3.0 * start.duration_since(since).as_secs_f64() / 0.5 + 0.01;
        assert!(
            (n + 1) as f64 <= earned,
            "{} steps had started {:?} after the bucket of 3 per 500 ms was stored",
            n + 1,
            start.duration_since(since)
        );
    }
}

/// A queue paused through one engine is not run by either; resumed through the other, its
/// instances run.
async fn paused_queue_holds_every_engine(backend: FsmBackend) {
    let run = format!("pause-{}", backend_name(&backend));
    let first = worker(backend.store.clone());
    let second = worker(backend.open_again().await);
    assert!(first.pause_queue("ticks").await.unwrap());
    assert_eq!(second.paused_queues().await.unwrap()[0].queue, "ticks");
    let id = second.insert(Tick { run: run.clone() }).await.unwrap();
    // Both engines poll the queue many times over while it is paused.
    let settled = first
        .await_settled(id, Duration::from_millis(400))
        .await
        .unwrap();
    assert!(matches!(settled, Settled::Busy(_)), "{settled:?}");
    assert_eq!(
        first.get(id).await.unwrap().unwrap().status,
        Status::Runnable
    );
    assert!(second.resume_queue("ticks").await.unwrap());
    let settled = first.await_ended(id, PATIENCE).await.unwrap();
    assert!(matches!(settled, Settled::Done { .. }), "{settled:?}");
    first.shutdown().await;
    second.shutdown().await;
}

/// A step executing on one engine is cancelled through another: the instance ends failed
/// with the cancel's error, the step's outcome is fenced out, and the engine runs on.
async fn cancel_wins_over_an_executing_step(backend: FsmBackend) {
    let run = format!("hold-{}", backend_name(&backend));
    let first = worker(backend.store.clone());
    // An engine running no queue: only the first runs the step.
    let second = Engine::builder(backend.open_again().await)
        .no_reaper()
        .no_gc()
        .build()
        .unwrap();
    let id = first.insert(Hold { run: run.clone() }).await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    while !hold_state(&run).0 {
        assert!(Instant::now() < deadline, "the step never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cancelled = second.cancel(id).await.unwrap();
    assert_eq!((cancelled.id, cancelled.instances), (id, 1));
    holds().lock().unwrap().entry(run.clone()).or_default().1 = true;
    let settled = first.await_ended(id, PATIENCE).await.unwrap();
    assert!(
        matches!(&settled, Settled::Failed { error } if error == CANCELLED),
        "{settled:?}"
    );
    assert!(matches!(
        second.cancel(id).await,
        Err(Error::AlreadyEnded {
            status: Status::Failed,
            ..
        })
    ));
    assert!(matches!(
        second.cancel(InstanceId::new(id.get() + 1_000)).await,
        Err(Error::UnknownInstance { .. })
    ));
    // The fenced outcome changed nothing, and the engine runs on.
    let record = first.get(id).await.unwrap().unwrap();
    assert_eq!((record.status, record.result), (Status::Failed, None));
    let run = format!("after-cancel-{}", backend_name(&backend));
    let next = first.insert(Tick { run }).await.unwrap();
    let settled = first.await_ended(next, PATIENCE).await.unwrap();
    assert!(matches!(settled, Settled::Done { .. }), "{settled:?}");
    first.shutdown().await;
    second.shutdown().await;
}

/// Runs `sql` on the backend's database (its schema on Postgres); `None` in memory.
async fn execute(backend: &FsmBackend, sql: &str) -> Option<()> {
    if let Some(guard) = &backend.guard {
        let mut conn = sqlx::PgConnection::connect(&guard.url).await.unwrap();
        sqlx::query(AssertSqlSafe(format!("SET search_path TO {}", guard.name)))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .unwrap();
        return Some(());
    }
    let dir = backend.sqlite.as_ref()?;
    let url = format!("sqlite://{}", dir.path().join("durable.db").display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .unwrap();
    Some(())
}

/// A trigger that makes every `op` on `table` fail, in the backend's dialect.
async fn fail_writes(backend: &FsmBackend, table: &str, op: &str) -> Option<()> {
    if backend.guard.is_some() {
        execute(
            backend,
            &format!(
                "CREATE FUNCTION injected_{op}() RETURNS trigger LANGUAGE plpgsql AS
                     $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
                 CREATE TRIGGER injected_{op} BEFORE {op} ON {table}
                     FOR EACH ROW EXECUTE FUNCTION injected_{op}();"
            ),
        )
        .await
    } else {
        execute(
            backend,
            &format!(
                "CREATE TRIGGER injected_{op} BEFORE {op} ON {table}
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END;"
            ),
        )
        .await
    }
}

async fn heal(backend: &FsmBackend, table: &str, op: &str) {
    if backend.guard.is_some() {
        execute(
            backend,
            &format!("DROP TRIGGER injected_{op} ON {table}; DROP FUNCTION injected_{op}();"),
        )
        .await;
    } else {
        execute(backend, &format!("DROP TRIGGER injected_{op};")).await;
    }
}

/// A pick whose bucket write fails claims nothing and takes no token; a cancel whose inbox
/// deletion fails cancels nothing. Once the database heals, both go through.
async fn failed_control_writes_change_nothing(backend: FsmBackend) {
    let store = backend.store.clone();
    store
        .set_rate_limit("api", RateLimit::new(1, Duration::from_secs(3600)))
        .await
        .unwrap();
    let engine = Engine::builder(store.clone()).build().unwrap();
    let id = engine
        .insert(
            Instance::new(Tick {
                run: "failed".into(),
            })
            .rate_limit_key("api"),
        )
        .await
        .unwrap();
    if fail_writes(&backend, "durable_fsm_rate_limits", "UPDATE")
        .await
        .is_none()
    {
        return; // Memory has no database to fail.
    }
    let now = engine.now();
    let until = now + Duration::from_secs(60);
    assert!(store.pick("ticks", "w", now, until, 10, now).await.is_err());
    assert_eq!(
        engine.get(id).await.unwrap().unwrap().status,
        Status::Runnable
    );
    assert_eq!(
        store.rate_limits().await.unwrap()[0].tokens,
        1.0,
        "no token taken"
    );
    heal(&backend, "durable_fsm_rate_limits", "UPDATE").await;
    let claimed = store.pick("ticks", "w", now, until, 10, now).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(store.rate_limits().await.unwrap()[0].tokens < 1.0);

    engine.signal(id, "note", 1, None).await.unwrap();
    fail_writes(&backend, "durable_fsm_signals", "DELETE").await;
    assert!(engine.cancel(id).await.is_err());
    let record = engine.get(id).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        Status::Executing,
        "the failed cancel changed nothing"
    );
    assert_eq!(engine.inbox(id).await.unwrap().len(), 1);
    heal(&backend, "durable_fsm_signals", "DELETE").await;
    assert_eq!(
        store
            .cancel(&Target::Id(id), "cancelled", engine.now())
            .await
            .unwrap(),
        CancelOutcome::Cancelled { id, instances: 1 }
    );
    engine.shutdown().await;
}

fsm_backend_tests!(
    two_engines_share_a_rate_limit,
    paused_queue_holds_every_engine,
    cancel_wins_over_an_executing_step,
    failed_control_writes_change_nothing,
);
