//! The FSM engine with its background workers, on memory and on Postgres: `await_settled`,
//! queues, the heartbeat that keeps a long step's lease, the reaper recovering a dead
//! worker's claim and firing await timeouts, garbage collection, graceful shutdown, and a
//! fan-out of a thousand children with one failing.
//!
//! Waits are bounded by deadlines that fail the test; the long steps sleep in real time to
//! play slow work, and nothing asserts how long anything took.

use crate::fsm_support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use durable_runtime::fsm::testing::advance;
use durable_runtime::fsm::{
    AnyInstance, Engine, Instance, InstanceId, Outcome, Settled, Status, StepContext, durable_fsm,
};
use fsm_support::FsmBackend;

const PATIENCE: Duration = Duration::from_secs(30);

/// How many times each run's steps executed.
fn executions() -> &'static Mutex<HashMap<String, u32>> {
    static EXECUTIONS: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();
    EXECUTIONS.get_or_init(Mutex::default)
}

fn executed(run: &str) -> u32 {
    executions().lock().unwrap().get(run).copied().unwrap_or(0)
}

/// Sleeps `sleep_ms` (a slow call), counting its executions, and ends with its attempt.
#[durable_fsm(queue = "slow", result = u32)]
pub struct Slow {
    run: String,
    sleep_ms: u64,
}

#[durable_fsm]
impl Slow {
    #[step(initial)]
    async fn work(&mut self, ctx: &StepContext) -> Outcome<Self> {
        *executions()
            .lock()
            .unwrap()
            .entry(self.run.clone())
            .or_default() += 1;
        tokio::time::sleep(Duration::from_millis(self.sleep_ms)).await;
        Outcome::done(ctx.attempt())
    }
}

/// Parks on `go` with an optional timeout; ends with how many signals woke it.
#[durable_fsm(result = usize)]
pub struct Parked {
    timeout_secs: Option<u64>,
}

#[durable_fsm]
impl Parked {
    #[step(initial)]
    fn park(&mut self) -> Outcome<Self> {
        let outcome = Outcome::await_signal(["go"], Self::WOKEN);
        match self.timeout_secs {
            Some(secs) => outcome.timeout(Duration::from_secs(secs)),
            None => outcome,
        }
    }

    #[step]
    fn woken(&mut self, ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(ctx.awaited().len())
    }
}

/// Ends at once.
#[durable_fsm(result = u32)]
pub struct Quick {
    n: u32,
}

#[durable_fsm]
impl Quick {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(self.n)
    }
}

/// A child of the fan-out: fails when told to.
#[durable_fsm(name = "fanout.child", queue = "children", result = u32)]
pub struct FanChild {
    n: u32,
    fail: bool,
}

#[durable_fsm]
impl FanChild {
    #[step(initial)]
    async fn work(&mut self) -> Outcome<Self> {
        if self.fail {
            Outcome::stop("this one fails")
        } else {
            Outcome::done(self.n)
        }
    }
}

/// How many times each run's join ran.
fn joins() -> &'static Mutex<HashMap<String, u32>> {
    static JOINS: OnceLock<Mutex<HashMap<String, u32>>> = OnceLock::new();
    JOINS.get_or_init(Mutex::default)
}

/// Spawns `children` children, one failing, then counts them once.
#[durable_fsm(name = "fanout.parent", result = (u32, u32, u64))]
pub struct FanParent {
    run: String,
    children: u32,
    failing: u32,
}

#[durable_fsm]
impl FanParent {
    #[step(initial)]
    fn spawn(&mut self) -> Outcome<Self> {
        let children: Vec<AnyInstance> = (0..self.children)
            .map(|n| {
                FanChild {
                    n,
                    fail: n == self.failing,
                }
                .into()
            })
            .collect();
        Outcome::schedule_childs(Self::JOIN, children)
    }

    #[step]
    fn join(&mut self, ctx: &StepContext) -> Outcome<Self> {
        *joins().lock().unwrap().entry(self.run.clone()).or_default() += 1;
        let count = |status| {
            ctx.children()
                .iter()
                .filter(|child| child.status() == status)
                .count() as u32
        };
        let sum: u64 = ctx
            .children()
            .iter()
            .filter_map(|child| child.result::<u32>().unwrap())
            .map(u64::from)
            .sum();
        Outcome::done((count(Status::Done), count(Status::Failed), sum))
    }
}

/// An engine running `queues` on `store`, with a short poll and reaper.
fn workers(
    store: Arc<dyn durable_runtime::fsm::store::FsmStore>,
) -> durable_runtime::fsm::EngineBuilder {
    Engine::builder(store)
        .poll_interval(Duration::from_millis(20), Duration::from_millis(100))
        .reaper_interval(Duration::from_millis(50))
        .no_gc()
}

/// `await_settled` answers `Done` for an instance that finishes, `Awaiting` for a parked one,
/// `NotFound` for an unknown id, and `Busy` at its deadline for one still working (a later
/// call then completes).
async fn await_settled_answers(backend: FsmBackend) {
    let engine = workers(backend.store.clone())
        .register::<Quick>()
        .register::<Parked>()
        .register::<Slow>()
        .queue("default", 4)
        .queue("slow", 2)
        .build()
        .unwrap();
    let quick = engine.insert(Quick { n: 7 }).await.unwrap();
    let settled = engine.await_settled(quick, PATIENCE).await.unwrap();
    assert_eq!(settled.result::<u32>().unwrap(), Some(7));

    let parked = engine.insert(Parked::default()).await.unwrap();
    let settled = engine.await_settled(parked, PATIENCE).await.unwrap();
    assert!(
        matches!(&settled, Settled::Awaiting(snapshot) if snapshot.status == Status::AwaitingSignal && snapshot.step == "woken"),
        "{settled:?}"
    );
    engine.signal(parked, "go", (), None).await.unwrap();
    let settled = engine.await_settled(parked, PATIENCE).await.unwrap();
    assert_eq!(settled.result::<usize>().unwrap(), Some(1));

    let missing = InstanceId::new(parked.get() + 1_000_000);
    assert_eq!(
        engine.await_settled(missing, PATIENCE).await.unwrap(),
        Settled::NotFound
    );

    let run = durable_tests::unique_prefix();
    let slow = engine
        .insert(Slow {
            run: run.clone(),
            sleep_ms: 1_000,
        })
        .await
        .unwrap();
    let busy = engine
        .await_settled(slow, Duration::from_millis(10))
        .await
        .unwrap();
    assert!(matches!(busy, Settled::Busy(_)), "{busy:?}");
    let settled = engine.await_settled(slow, PATIENCE).await.unwrap();
    assert!(matches!(settled, Settled::Done { .. }), "{settled:?}");
    engine.shutdown().await;
}

/// An engine runs only the queues it is given; another engine on the same store runs the rest.
async fn workers_take_only_their_queues(backend: FsmBackend) {
    let default_only = workers(backend.store.clone())
        .register::<Quick>()
        .queue("default", 2)
        .build()
        .unwrap();
    let elsewhere = default_only
        .insert(Instance::new(Quick { n: 1 }).queue("elsewhere"))
        .await
        .unwrap();
    let here = default_only.insert(Quick { n: 2 }).await.unwrap();
    assert!(matches!(
        default_only.await_settled(here, PATIENCE).await.unwrap(),
        Settled::Done { .. }
    ));
    let waiting = default_only
        .await_settled(elsewhere, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(
        matches!(&waiting, Settled::Busy(snapshot) if snapshot.status == Status::Runnable),
        "{waiting:?}"
    );
    let other = workers(backend.open_again().await)
        .register::<Quick>()
        .queue("elsewhere", 1)
        .build()
        .unwrap();
    assert!(matches!(
        other.await_settled(elsewhere, PATIENCE).await.unwrap(),
        Settled::Done { .. }
    ));
    default_only.shutdown().await;
    other.shutdown().await;
}

/// A step running longer than the lease keeps its claim through heartbeats: it runs once,
/// at attempt 0, and is never reaped.
async fn heartbeats_keep_a_long_step(backend: FsmBackend) {
    let engine = workers(backend.store.clone())
        .register::<Slow>()
        .queue("slow", 1)
        .lease_ttl(Duration::from_millis(400))
        .heartbeat(Duration::from_millis(100))
        .build()
        .unwrap();
    let run = durable_tests::unique_prefix();
    let id = engine
        .insert(Slow {
            run: run.clone(),
            sleep_ms: 1_500,
        })
        .await
        .unwrap();
    let settled = engine.await_settled(id, PATIENCE).await.unwrap();
    assert_eq!(settled.result::<u32>().unwrap(), Some(0), "never reaped");
    assert_eq!(executed(&run), 1);
    engine.shutdown().await;
}

/// A claim whose worker died is returned to runnable once its lease ends and runs again,
/// with attempt 1, on a live worker.
async fn the_reaper_recovers_a_dead_claim(backend: FsmBackend) {
    // A worker claims the instance and dies: no heartbeat, no outcome.
    let client = workers(backend.open_again().await).build().unwrap();
    let id = client.insert(Quick { n: 3 }).await.unwrap();
    let now = client.now();
    let claimed = backend
        .store
        .pick(
            "default",
            "dead",
            now,
            now + Duration::from_millis(300),
            1,
            now,
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    client.shutdown().await;
    // A live worker: once the lease is over, its reaper hands the step on.
    let engine = workers(backend.store.clone())
        .register::<Quick>()
        .queue("default", 1)
        .build()
        .unwrap();
    let settled = engine.await_settled(id, PATIENCE).await.unwrap();
    assert_eq!(settled.result::<u32>().unwrap(), Some(3), "{settled:?}");
    let record = engine.get(id).await.unwrap().unwrap();
    assert_eq!(record.attempt, 1, "the reaper counted the lost attempt");
    engine.shutdown().await;
}

/// The reaper fires await timeouts: the instance runs its next step with nothing awaited.
async fn the_reaper_fires_await_timeouts(backend: FsmBackend) {
    let engine = workers(backend.store.clone())
        .register::<Parked>()
        .queue("default", 2)
        .clock_follows_tokio()
        .build()
        .unwrap();
    let id = engine
        .insert(Parked {
            timeout_secs: Some(600),
        })
        .await
        .unwrap();
    assert!(matches!(
        engine.await_settled(id, PATIENCE).await.unwrap(),
        Settled::Awaiting(_)
    ));
    advance(&engine, Duration::from_secs(601));
    durable_tests::eventually(|| async {
        engine.get(id).await.unwrap().unwrap().status == Status::Done
    })
    .await;
    let settled = engine.await_settled(id, PATIENCE).await.unwrap();
    assert_eq!(settled.result::<usize>().unwrap(), Some(0));
    engine.shutdown().await;
}

/// Garbage collection deletes ended rows past their retention and keeps the rest.
async fn garbage_collection_deletes_old_ended_rows(backend: FsmBackend) {
    let engine = Engine::builder(backend.store.clone())
        .register::<Quick>()
        .register::<Parked>()
        .queue("default", 2)
        .poll_interval(Duration::from_millis(20), Duration::from_millis(100))
        .gc(Duration::from_secs(3600), Duration::from_millis(50))
        .clock_follows_tokio()
        .build()
        .unwrap();
    let ended = engine.insert(Quick { n: 1 }).await.unwrap();
    let live = engine.insert(Parked::default()).await.unwrap();
    assert!(
        engine
            .await_settled(ended, PATIENCE)
            .await
            .unwrap()
            .is_terminal()
    );
    assert!(matches!(
        engine.await_settled(live, PATIENCE).await.unwrap(),
        Settled::Awaiting(_)
    ));
    advance(&engine, Duration::from_secs(3601));
    durable_tests::eventually(|| async { engine.get(ended).await.unwrap().is_none() }).await;
    assert!(
        engine.get(live).await.unwrap().is_some(),
        "a live row is kept"
    );
    engine.shutdown().await;
}

/// Shutting down waits for running steps to commit their outcomes.
async fn shutdown_waits_for_running_steps(backend: FsmBackend) {
    let engine = workers(backend.store.clone())
        .register::<Slow>()
        .queue("slow", 1)
        .build()
        .unwrap();
    let run = durable_tests::unique_prefix();
    let id = engine
        .insert(Slow {
            run: run.clone(),
            sleep_ms: 300,
        })
        .await
        .unwrap();
    durable_tests::eventually(|| async { executed(&run) == 1 }).await;
    let handle = engine.clone();
    engine.shutdown().await;
    assert_eq!(
        handle.get(id).await.unwrap().unwrap().status,
        Status::Done,
        "the running step committed before the engine stopped"
    );
}

/// A thousand children, one failing: the parent's join runs once and sees 999 done and one
/// failed, with every result.
async fn a_thousand_children_join_once(backend: FsmBackend) {
    let engine = workers(backend.store.clone())
        .register::<FanParent>()
        .register::<FanChild>()
        .queue("default", 2)
        .queue("children", 16)
        .build()
        .unwrap();
    let run = durable_tests::unique_prefix();
    let id = engine
        .insert(FanParent {
            run: run.clone(),
            children: 1000,
            failing: 123,
        })
        .await
        .unwrap();
    let settled = engine
        .await_ended(id, Duration::from_secs(120))
        .await
        .unwrap();
    let expected_sum: u64 = (0..1000u64).sum::<u64>() - 123;
    assert_eq!(
        settled.result::<(u32, u32, u64)>().unwrap(),
        Some((999, 1, expected_sum)),
        "{settled:?}"
    );
    assert_eq!(joins().lock().unwrap()[&run], 1, "the join ran once");
    let record = engine.get(id).await.unwrap().unwrap();
    assert_eq!(record.children_pending, 0);
    engine.shutdown().await;
}

fsm_backend_tests!(
    await_settled_answers,
    workers_take_only_their_queues,
    heartbeats_keep_a_long_step,
    the_reaper_recovers_a_dead_claim,
    the_reaper_fires_await_timeouts,
    garbage_collection_deletes_old_ended_rows,
    shutdown_waits_for_running_steps,
    a_thousand_children_join_once,
);
