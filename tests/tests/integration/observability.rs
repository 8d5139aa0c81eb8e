//! Metrics through the `metrics` facade: what is recorded, with which labels (never an object
//! id). One test reads the process-wide recorder (the part of it kept for this module: see
//! `global_recorders`); the others record on their own thread, with a local recorder.

use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
use durable_runtime::testing::FaultyStorage;
use std::time::Duration;

use durable_runtime::{LiveStatus, Runtime, durable_object, metrics as names};
use metrics::{SharedString, Unit};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[durable_object(queue_capacity = 1)]
pub struct Meter {
    n: u64,
}

#[durable_object]
impl Meter {
    #[handler]
    fn handle_tick(&mut self) -> u64 {
        self.n += 1;
        self.n
    }

    #[handler]
    fn handle_checked(&mut self, fail: bool) -> Result<u64, String> {
        if fail {
            return Err("refused".to_owned());
        }
        self.n += 1;
        Ok(self.n)
    }

    #[handler]
    fn handle_peek(&self) -> u64 {
        self.n
    }

    #[handler]
    fn handle_boom(&mut self) {
        panic!("boom");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_outcomes_and_failures_are_counted_without_object_ids() {
    if !crate::alone_in_process(
        "observability::calls_outcomes_and_failures_are_counted_without_object_ids",
    ) {
        return;
    }
    let snapshotter = &crate::global_recorders().observability;

    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::new(store.clone());
    for _ in 0..3 {
        Meter::tick(&rt, "secret-id-1").await.unwrap();
    }
    assert!(Meter::boom(&rt, "secret-id-1").await.is_err());
    // One handler, two outcomes: each gets its own counter.
    Meter::checked(&rt, "secret-id-1", false).await.unwrap();
    assert!(Meter::checked(&rt, "secret-id-1", true).await.is_err());
    Meter::checked(&rt, "secret-id-1", false).await.unwrap();
    Meter::tick(&rt, "secret-id-2").await.unwrap();
    // Reads of an idle object, run in this task, are counted the same way.
    for _ in 0..4 {
        Meter::peek(&rt, "secret-id-2").await.unwrap();
    }
    // The handler runs, its commit fails: the call fails and the object reloads.
    store.fail_commits(1);
    assert!(Meter::tick(&rt, "secret-id-2").await.is_err());
    // A write behind the runtime's back: the next commit of that object conflicts.
    Meter::tick(&rt, "secret-id-3").await.unwrap();
    let key = ObjectKey::new("Meter", "secret-id-3");
    let stored = store.inner().load(&key).await.unwrap().object().unwrap();
    let behind_the_back = ObjectWrite {
        key,
        expected_version: stored.version,
        state: Some(stored.state),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    store.inner().commit(&[behind_the_back]).await.unwrap();
    assert!(Meter::tick(&rt, "secret-id-3").await.is_err());

    let snapshot = snapshotter.snapshot().into_vec();
    let counter = |name: &str, labels: &[(&str, &str)]| counter(&snapshot, name, labels);
    let samples = |name: &str, labels: &[(&str, &str)]| samples(&snapshot, name, labels);
    // Counted when the reply goes out, with the outcome the caller saw.
    assert_eq!(
        counter(
            names::CALLS,
            &[("type", "Meter"), ("handler", "tick"), ("outcome", "ok")]
        ),
        5,
        "every tick's handler returned, but the writes of two failed"
    );
    assert_eq!(
        counter(
            names::CALLS,
            &[("handler", "tick"), ("outcome", "persistence_failed")]
        ),
        2,
        "one failed commit and one conflict"
    );
    assert_eq!(
        counter(
            names::CALLS,
            &[("handler", "boom"), ("outcome", "panicked")]
        ),
        1
    );
    assert_eq!(
        counter(names::CALLS, &[("handler", "checked"), ("outcome", "ok")]),
        2
    );
    assert_eq!(
        counter(
            names::CALLS,
            &[("handler", "checked"), ("outcome", "handler_error")]
        ),
        1
    );
    assert_eq!(
        samples(names::CALL_DURATION, &[("handler", "tick")]).len(),
        7,
        "one duration per tick call"
    );
    assert_eq!(
        counter(names::CALLS, &[("handler", "peek"), ("outcome", "ok")]),
        4
    );
    assert_eq!(
        samples(names::CALL_DURATION, &[("handler", "peek")]).len(),
        4,
        "one duration per read"
    );
    assert_eq!(
        samples(names::CALL_DURATION, &[("handler", "checked")]).len(),
        3,
        "one duration per call, whatever its outcome"
    );
    // Group commit: every batch's size and every commit's duration, by outcome. The calls
    // above wait for each other, so each write is a batch of its own: 3 + 2 + 1 ticks and
    // checks committed (each object's first one creating it), one tick failed, and two ticks
    // of the third object, the second conflicting. Reads, panics and handler errors wrote
    // nothing.
    assert_eq!(samples(names::COMMIT_BATCH_WRITES, &[]), vec![1.0; 9]);
    assert_eq!(
        samples(names::COMMIT_DURATION, &[("outcome", "ok")]).len(),
        7
    );
    assert_eq!(
        samples(names::COMMIT_DURATION, &[("outcome", "error")]).len(),
        1
    );
    assert_eq!(
        samples(names::COMMIT_DURATION, &[("outcome", "conflict")]).len(),
        1
    );
    assert!(
        samples(names::COMMIT_DURATION, &[])
            .iter()
            .all(|&seconds| (0.0..10.0).contains(&seconds))
    );
    assert!(counter(names::PERSISTENCE_FAILURES, &[("type", "Meter")]) >= 1);
    assert_eq!(counter(names::ACTIVATIONS, &[("type", "Meter")]), 3);
    for (key, ..) in &snapshot {
        for label in key.key().labels() {
            assert!(
                !label.value().contains("secret-id"),
                "label {}={} names an object",
                label.key(),
                label.value()
            );
        }
    }

    // Concurrent calls on different objects share batches: while a slow commit is in flight
    // the others queue up, and the batch sizes add up to every write (32 objects, each
    // created by its tick).
    store.delay_commits(std::time::Duration::from_millis(20));
    let calls: Vec<_> = (0..32)
        .map(|i| {
            let rt = rt.clone();
            tokio::spawn(async move { Meter::tick(&rt, &format!("batched-{i}")).await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), 1);
    }
    let snapshot = snapshotter.snapshot().into_vec();
    let batches = self::samples(&snapshot, names::COMMIT_BATCH_WRITES, &[]);
    assert_eq!(batches.iter().sum::<f64>(), 32.0, "{batches:?}");
    assert!(batches.iter().any(|&writes| writes > 1.0), "{batches:?}");
    // A call's duration runs to its reply, so it includes the commit it waited for.
    let durations = self::samples(&snapshot, names::CALL_DURATION, &[("handler", "tick")]);
    assert_eq!(durations.len(), 32);
    assert!(
        durations.iter().all(|&seconds| seconds >= 0.02),
        "{durations:?}"
    );
}

#[durable_object(hibernate_after = "1m", shutdown_after = "1h")]
pub struct Idler {
    n: u64,
}

#[durable_object]
impl Idler {
    #[handler]
    fn handle_tick(&mut self) -> u64 {
        self.n += 1;
        self.n
    }

    #[handler]
    fn handle_peek(&self) -> u64 {
        self.n
    }
}

/// The active objects (live, not hibernated) are counted exactly: as objects load, wake,
/// hibernate, fail a commit, are deleted, shut down when idle, and leave with the runtime;
/// and the count is always the registry's.
#[tokio::test(start_paused = true)]
async fn active_objects_are_counted_exactly() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // This test's tasks all run on this thread (a current-thread runtime).
    let _local = metrics::set_default_local_recorder(&recorder);
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::new(store.clone());
    // A snapshot drains what it reports: each holds the gauges' moves since the one before.
    let totals = std::cell::Cell::new((0.0, 0.0));
    let counts = || {
        let snapshot = snapshotter.snapshot().into_vec();
        let (active, live) = totals.get();
        let active = active + gauge(&snapshot, names::ACTIVE_OBJECTS, &[("type", "Idler")]);
        let live = live + gauge(&snapshot, names::LIVE_OBJECTS, &[("type", "Idler")]);
        totals.set((active, live));
        let listed = rt
            .list_live::<Idler>(LiveStatus::Active, None, 100)
            .ids
            .len();
        assert_eq!(active, listed as f64, "the gauge and the registry disagree");
        assert_eq!(live, rt.live_objects::<Idler>() as f64);
        (active, live)
    };
    for id in ["a", "b", "c"] {
        Idler::tick(&rt, id).await.unwrap();
    }
    assert_eq!(counts(), (3.0, 3.0), "loaded");
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(counts(), (0.0, 3.0), "hibernated");
    Idler::peek(&rt, "a").await.unwrap();
    assert_eq!(counts(), (1.0, 3.0), "woken by a read");
    assert!(rt.delete::<Idler>("a").await.unwrap());
    assert_eq!(
        counts(),
        (0.0, 3.0),
        "deleted while active: live, nothing loaded"
    );
    assert!(rt.delete::<Idler>("b").await.unwrap());
    assert_eq!(counts(), (0.0, 3.0), "deleted while hibernated");
    Idler::tick(&rt, "c").await.unwrap();
    assert_eq!(counts(), (1.0, 3.0), "woken by a write");
    store.fail_commits(1);
    assert!(Idler::tick(&rt, "c").await.is_err());
    assert_eq!(counts(), (0.0, 3.0), "a failed commit drops the state");
    assert_eq!(
        Idler::tick(&rt, "c").await.unwrap(),
        3,
        "the failed write was not applied"
    );
    assert_eq!(counts(), (1.0, 3.0), "loaded again");
    tokio::time::sleep(Duration::from_secs(2 * 3600)).await;
    assert_eq!(counts(), (0.0, 0.0), "shut down when idle");
    for id in ["d", "e"] {
        Idler::tick(&rt, id).await.unwrap();
    }
    assert_eq!(counts(), (2.0, 2.0));
    rt.shutdown().await;
    assert_eq!(counts(), (0.0, 0.0), "left with the runtime");
}

/// The gauges tell live objects apart: the hibernated ones (with or without a task) are
/// counted exactly, as the registry lists them, through hibernation, wakes by a read and by a
/// write, deletion, a failed commit, shutdown when idle and the runtime's shutdown; and every
/// live object not loading is either active or hibernated.
#[tokio::test(start_paused = true)]
async fn hibernated_objects_are_counted_apart_from_active_ones() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::new(store.clone());
    // A snapshot drains what it reports: each holds the gauges' moves since the one before.
    let totals = std::cell::Cell::new((0.0, 0.0, 0.0));
    let counts = || {
        let snapshot = snapshotter.snapshot().into_vec();
        let (active, hibernated, live) = totals.get();
        let of = |name| gauge(&snapshot, name, &[("type", "Idler")]);
        let active = active + of(names::ACTIVE_OBJECTS);
        let hibernated = hibernated + of(names::HIBERNATED_OBJECTS);
        let live = live + of(names::LIVE_OBJECTS);
        totals.set((active, hibernated, live));
        let listed = |status| rt.list_live::<Idler>(status, None, 100).ids.len() as f64;
        assert_eq!(
            active,
            listed(LiveStatus::Active),
            "active: gauge and registry"
        );
        assert_eq!(
            hibernated,
            listed(LiveStatus::Hibernated),
            "hibernated: gauge and registry"
        );
        assert_eq!(live, rt.live_objects::<Idler>() as f64);
        (active, hibernated, live)
    };
    for id in ["a", "b", "c"] {
        Idler::tick(&rt, id).await.unwrap();
    }
    assert_eq!(counts(), (3.0, 0.0, 3.0), "loaded");
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(counts(), (0.0, 3.0, 3.0), "hibernated");
    Idler::peek(&rt, "a").await.unwrap();
    assert_eq!(counts(), (1.0, 2.0, 3.0), "woken by a read");
    Idler::tick(&rt, "b").await.unwrap();
    assert_eq!(counts(), (2.0, 1.0, 3.0), "woken by a write");
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(counts(), (0.0, 3.0, 3.0), "hibernated again");
    assert!(rt.delete::<Idler>("a").await.unwrap());
    assert_eq!(counts(), (0.0, 2.0, 3.0), "deleted while hibernated");
    Idler::tick(&rt, "c").await.unwrap();
    store.fail_commits(1);
    assert!(Idler::tick(&rt, "c").await.is_err());
    assert_eq!(counts(), (0.0, 1.0, 3.0), "a failed commit drops the state");
    tokio::time::sleep(Duration::from_secs(2 * 3600)).await;
    assert_eq!(counts(), (0.0, 0.0, 0.0), "shut down when idle");
    for id in ["d", "e"] {
        Idler::tick(&rt, id).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(counts(), (0.0, 2.0, 2.0));
    rt.shutdown().await;
    assert_eq!(counts(), (0.0, 0.0, 0.0), "left with the runtime");
}

/// A recorder's snapshot: each metric's key, unit, description and value.
type Snapshot = [(CompositeKey, Option<Unit>, Option<SharedString>, DebugValue)];

/// The values of the metric `name` whose labels include every one of `labels`.
fn values<'a>(
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

/// The sum of the matching counters.
fn counter(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    values(snapshot, name, labels)
        .map(|value| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

/// The sum of the matching gauges' moves since the last snapshot.
fn gauge(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> f64 {
    values(snapshot, name, labels)
        .map(|value| match value {
            DebugValue::Gauge(value) => value.into_inner(),
            _ => 0.0,
        })
        .sum()
}

/// Every sample of the matching histograms.
fn samples(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    values(snapshot, name, labels)
        .flat_map(|value| match value {
            DebugValue::Histogram(samples) => samples.iter().map(|s| s.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect()
}
