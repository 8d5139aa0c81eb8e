//! Concurrency keys with real workers, on memory and on Postgres: two engines on one database
//! run instances sharing a key, each step records when it ran, and no more steps of one key
//! overlap than its limit allows.
//!
//! Waits are bounded by deadlines that fail the test; the steps sleep in real time to play
//! slow work, and nothing asserts how long anything took.

use crate::fsm_support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use durable_runtime::fsm::{Engine, Instance, InstanceId, Outcome, Settled, durable_fsm};
use fsm_support::FsmBackend;

const PATIENCE: Duration = Duration::from_secs(60);

/// When each step of each run started and ended, by run.
type Intervals = Mutex<HashMap<String, Vec<(Instant, Instant)>>>;

fn intervals() -> &'static Intervals {
    static INTERVALS: OnceLock<Intervals> = OnceLock::new();
    INTERVALS.get_or_init(Mutex::default)
}

/// Runs `steps` slow steps, recording when each ran.
#[durable_fsm(name = "keyed.work", queue = "keyed")]
pub struct Keyed {
    run: String,
    steps: u32,
}

#[durable_fsm]
impl Keyed {
    #[step(initial)]
    async fn work(&mut self) -> Outcome<Self> {
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(20)).await;
        intervals()
            .lock()
            .unwrap()
            .entry(self.run.clone())
            .or_default()
            .push((started, Instant::now()));
        self.steps = self.steps.saturating_sub(1);
        if self.steps == 0 {
            Outcome::done(())
        } else {
            Outcome::next(Self::WORK)
        }
    }
}

/// Two engines on the backend's data, each running the queue with room for 8 steps.
async fn engines(backend: &FsmBackend) -> (Engine, Engine) {
    let first = backend
        .engine()
        .register::<Keyed>()
        .queue("keyed", 8)
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .build()
        .unwrap();
    let second = Engine::builder(backend.open_again().await)
        .register::<Keyed>()
        .queue("keyed", 8)
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .no_reaper()
        .no_gc()
        .build()
        .unwrap();
    (first, second)
}

/// The most steps of `run` that ran at once.
fn most_at_once(run: &str) -> usize {
    let intervals = intervals().lock().unwrap();
    let mut events: Vec<(Instant, i32)> = intervals[run]
        .iter()
        .flat_map(|(start, end)| [(*start, 1), (*end, -1)])
        .collect();
    // An end and a start at the same instant do not overlap: ends first.
    events.sort();
    let mut now = 0;
    let mut most = 0;
    for (_, change) in events {
        now += change;
        most = most.max(now);
    }
    usize::try_from(most).unwrap()
}

/// Inserts `count` instances of `run` with the key `key` and limit `limit`, each running
/// `steps` steps, and waits for all to end.
async fn run_keyed(backend: &FsmBackend, run: &str, count: usize, limit: u16, steps: u32) {
    let (first, second) = engines(backend).await;
    let instances = (0..count).map(|_| {
        Instance::new(Keyed {
            run: run.to_owned(),
            steps,
        })
        .concurrency_key(format!("{run}:key"))
        .concurrency_limit(limit)
    });
    let ids: Vec<InstanceId> = first.insert_all(instances).await.unwrap();
    assert_eq!(ids.len(), count);
    for id in ids {
        let settled = first.await_ended(id, PATIENCE).await.unwrap();
        assert!(matches!(settled, Settled::Done { .. }), "{id}: {settled:?}");
    }
    first.shutdown().await;
    second.shutdown().await;
    let executions = intervals().lock().unwrap()[run].len();
    assert_eq!(executions, count * steps as usize, "every step ran once");
}

/// Four instances of one key, three steps each, on two engines with room for sixteen steps:
/// no two steps ever overlap.
async fn four_on_one_key_never_overlap(backend: FsmBackend) {
    let run = format!("one-{}", backend_name(&backend));
    run_keyed(&backend, &run, 4, 1, 3).await;
    assert_eq!(most_at_once(&run), 1, "steps of one key overlapped");
}

/// Six instances of one key of limit 2: never more than two steps at once.
async fn limit_two_runs_at_most_two(backend: FsmBackend) {
    let run = format!("two-{}", backend_name(&backend));
    run_keyed(&backend, &run, 6, 2, 3).await;
    let most = most_at_once(&run);
    assert!(most <= 2, "{most} steps of a key of limit 2 ran at once");
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

fsm_backend_tests!(four_on_one_key_never_overlap, limit_two_runs_at_most_two);
