//! The FSM engine's metrics: steps counted by FSM, step and outcome, errors by kind, picks by
//! queue, group-commit batch sizes, and a stale outcome (its claim reaped and taken by another
//! engine while the step ran) dropped and counted. One test, because it reads the
//! process-wide recorder (the part of it kept for this module: see `global_recorders`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use durable_runtime::fsm::metrics as names;
use durable_runtime::fsm::testing::{advance, drain, sweep};
use durable_runtime::fsm::{Engine, MemoryFsmStore, Outcome, StepContext, StepError, durable_fsm};
use metrics_util::debugging::{DebugValue, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use tokio::sync::Notify;

#[durable_fsm(name = "obs.walk", result = u32)]
pub struct Walk {}

#[durable_fsm]
impl Walk {
    #[step(initial)]
    fn first(&mut self) -> Outcome<Self> {
        Outcome::next(Self::SECOND)
    }

    #[step]
    async fn second(&mut self, ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(ctx.attempt())
    }
}

#[durable_fsm(name = "obs.flaky")]
pub struct Flaky {}

#[durable_fsm]
impl Flaky {
    #[step(initial)]
    fn call(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, String> {
        match ctx.attempt() {
            0 => Err("refused".to_owned()),
            1 => panic!("crashed"),
            _ => Ok(Outcome::done(())),
        }
    }

    #[on_error]
    fn failed(&mut self, _error: StepError) -> Outcome<Self> {
        Outcome::retry(Duration::ZERO)
    }
}

/// The blocking step's signals, by run: it has started, it may end.
#[derive(Default)]
struct Gate {
    started: Notify,
    release: Notify,
}

fn gate(run: &str) -> Arc<Gate> {
    static GATES: OnceLock<Mutex<HashMap<String, Arc<Gate>>>> = OnceLock::new();
    let gates = GATES.get_or_init(Mutex::default);
    Arc::clone(gates.lock().unwrap().entry(run.to_owned()).or_default())
}

/// Its first attempt blocks until released; later attempts end at once, with their attempt.
#[durable_fsm(name = "obs.blocker", result = u32)]
pub struct Blocker {
    run: String,
}

#[durable_fsm]
impl Blocker {
    #[step(initial)]
    async fn work(&mut self, ctx: &StepContext) -> Outcome<Self> {
        if ctx.attempt() == 0 {
            let gate = gate(&self.run);
            gate.started.notify_one();
            gate.release.notified().await;
        }
        Outcome::done(ctx.attempt())
    }
}

fn recorder() -> &'static Snapshotter {
    &crate::global_recorders().fsm_observability
}

type Snapshot = Vec<(
    CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

fn matching<'a>(
    snapshot: &'a Snapshot,
    name: &'a str,
    labels: &'a [(&str, &str)],
) -> impl Iterator<Item = &'a DebugValue> {
    snapshot
        .iter()
        .filter(move |(key, ..)| key.key().name() == name)
        .filter(move |(key, ..)| {
            labels.iter().all(|(k, v)| {
                key.key()
                    .labels()
                    .any(|label| label.key() == *k && label.value() == *v)
            })
        })
        .map(|(.., value)| value)
}

fn counter(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    matching(snapshot, name, labels)
        .map(|value| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

fn samples(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    matching(snapshot, name, labels)
        .flat_map(|value| match value {
            DebugValue::Histogram(samples) => samples.iter().map(|s| s.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_errors_picks_commits_and_stale_outcomes_are_counted() {
    if !crate::alone_in_process(
        "fsm_observability::steps_errors_picks_commits_and_stale_outcomes_are_counted",
    ) {
        return;
    }
    let snapshotter = recorder();
    let store = MemoryFsmStore::new();
    let engine = Engine::builder(store.clone())
        .register::<Walk>()
        .register::<Flaky>()
        .register::<Blocker>()
        .queue("default", 8)
        .no_reaper()
        .clock_follows_tokio()
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .build()
        .unwrap();
    let walk = engine.insert(Walk {}).await.unwrap();
    let flaky = engine.insert(Flaky {}).await.unwrap();
    for id in [walk, flaky] {
        assert!(
            engine
                .await_settled(id, Duration::from_secs(30))
                .await
                .unwrap()
                .is_terminal()
        );
    }

    // A step whose claim is reaped while it runs: another engine, whose clock is past the
    // lease, sweeps and runs it again; the first outcome then comes too late.
    let run = durable_tests::unique_prefix();
    let gate = gate(&run);
    let blocked = engine.insert(Blocker { run: run.clone() }).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), gate.started.notified())
        .await
        .expect("the first attempt started");
    let other = Engine::builder(store)
        .register::<Blocker>()
        .no_reaper()
        .no_gc()
        .clock_follows_tokio()
        .build()
        .unwrap();
    advance(&other, Duration::from_secs(3600));
    assert_eq!(sweep(&other).await.unwrap().expired_leases, 1);
    assert_eq!(drain(&other).await.unwrap().done, 1);
    gate.release.notify_one();
    // Snapshots reset what they read: every one is kept and the totals summed over them.
    let mut seen = Vec::new();
    durable_tests::eventually(|| {
        seen.extend(snapshotter.snapshot().into_vec());
        let stale = counter(&seen, names::STALE_OUTCOMES, &[("fsm", "obs.blocker")]);
        async move { stale == 1 }
    })
    .await;
    let settled = engine
        .await_settled(blocked, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        settled.result::<u32>().unwrap(),
        Some(1),
        "the row keeps the outcome of its current claim"
    );

    seen.extend(snapshotter.snapshot().into_vec());
    let snapshot = seen;
    let steps = |labels: &[(&str, &str)]| counter(&snapshot, names::STEPS, labels);
    assert_eq!(
        steps(&[("fsm", "obs.walk"), ("step", "first"), ("outcome", "next")]),
        1
    );
    assert_eq!(
        steps(&[("fsm", "obs.walk"), ("step", "second"), ("outcome", "done")]),
        1
    );
    assert_eq!(
        steps(&[("fsm", "obs.flaky"), ("step", "call"), ("outcome", "retry")]),
        2
    );
    assert_eq!(
        steps(&[("fsm", "obs.flaky"), ("step", "call"), ("outcome", "done")]),
        1
    );
    assert_eq!(
        steps(&[("fsm", "obs.blocker"), ("outcome", "stale")]),
        1,
        "the late outcome of the first engine"
    );
    assert_eq!(
        steps(&[("fsm", "obs.blocker"), ("outcome", "done")]),
        1,
        "the second engine's"
    );
    let errors = |kind| {
        counter(
            &snapshot,
            names::STEP_ERRORS,
            &[("fsm", "obs.flaky"), ("kind", kind)],
        )
    };
    assert_eq!((errors("failed"), errors("panicked")), (1, 1));
    assert!(counter(&snapshot, names::PICKED, &[("queue", "default")]) >= 6);
    assert!(!samples(&snapshot, names::PICK_DURATION, &[("queue", "default")]).is_empty());
    let batches = samples(&snapshot, names::COMMIT_BATCH_OUTCOMES, &[]);
    assert_eq!(
        batches.iter().sum::<f64>(),
        7.0,
        "every outcome of both engines went through a commit: {batches:?}"
    );
    assert_eq!(
        samples(&snapshot, names::STEP_DURATION, &[("fsm", "obs.walk")]).len(),
        2
    );
    for (key, ..) in &snapshot {
        assert_ne!(key.kind(), MetricKind::Gauge, "no gauge is recorded");
        for label in key.key().labels() {
            assert_ne!(label.key(), "id", "no label names an instance");
        }
    }
    engine.shutdown().await;
    other.shutdown().await;
}
