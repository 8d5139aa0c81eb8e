//! Dormant objects: after `hibernate_after` an object's task ends and the registry keeps only
//! its encoded state. It still counts as live, wakes without a storage read, shuts down after
//! `shutdown_after`, can be evicted for room and leaves on runtime shutdown; a call racing
//! with dormancy is never lost.

use std::time::Duration;

use durable_runtime::storage::MemoryStorage;
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{
    Event, ObjectOptions, ObjectStatus, Runtime, durable_object, metrics as metrics_names,
};
use metrics::{SharedString, Unit};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tokio::time::sleep;

/// One metric of a snapshot.
type SnapshotEntry = (CompositeKey, Option<Unit>, Option<SharedString>, DebugValue);

#[durable_object]
pub struct Tally {
    n: u64,
}

#[durable_object]
impl Tally {
    #[handler]
    fn handle_bump(&mut self) -> u64 {
        self.n += 1;
        self.n
    }

    #[handler]
    fn handle_get(&self) -> u64 {
        self.n
    }
}

fn runtime(options: ObjectOptions) -> (Runtime, FaultyStorage<MemoryStorage>) {
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::builder(store.clone())
        .register_with::<Tally>(options)
        .build();
    (rt, store)
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

fn shut_down(events: &mut tokio::sync::broadcast::Receiver<Event>) -> Vec<String> {
    let mut ids: Vec<String> = durable_tests::received(events)
        .into_iter()
        .filter_map(|event| match event {
            Event::ShutDown { key } => Some(key.object_id),
            _ => None,
        })
        .collect();
    ids.sort();
    ids
}

#[tokio::test(start_paused = true)]
async fn a_dormant_object_has_no_task_and_wakes_with_its_state_without_a_storage_read() {
    let (rt, store) = runtime(ObjectOptions::new().with_hibernate_after(Duration::from_secs(1)));
    for id in ["a", "b", "c"] {
        Tally::bump(&rt, id).await.unwrap();
        Tally::bump(&rt, id).await.unwrap();
    }
    let with_tasks = alive_tasks();
    let loads = store.loads();

    sleep(Duration::from_secs(2)).await;
    assert_eq!(
        alive_tasks() + 3,
        with_tasks,
        "dormant objects have no task"
    );
    assert_eq!(
        rt.live_objects::<Tally>(),
        3,
        "dormant objects count as live"
    );
    for id in ["a", "b", "c"] {
        assert_eq!(
            rt.status::<Tally>(id).await.unwrap(),
            ObjectStatus::Hibernated
        );
    }

    let mut events = rt.subscribe();
    assert_eq!(Tally::bump(&rt, "a").await.unwrap(), 3);
    assert_eq!(Tally::get(&rt, "b").await.unwrap(), 2);
    assert_eq!(store.loads(), loads, "waking reads no storage");
    assert_eq!(rt.status::<Tally>("a").await.unwrap(), ObjectStatus::Active);
    let woken = durable_tests::received(&mut events)
        .iter()
        .filter(|event| matches!(event, Event::Woken { .. }))
        .count();
    assert_eq!(woken, 2);

    // A deletion wakes it too, and goes through.
    assert!(rt.delete::<Tally>("c").await.unwrap());
    assert_eq!(Tally::get(&rt, "c").await.unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_dormant_object_shuts_down_after_shutdown_after() {
    let (rt, store) = runtime(
        ObjectOptions::new()
            .with_hibernate_after(Duration::from_secs(1))
            .with_shutdown_after(Duration::from_secs(5)),
    );
    let mut events = rt.subscribe();
    Tally::bump(&rt, "a").await.unwrap();
    sleep(Duration::from_secs(2)).await;
    assert_eq!(
        rt.status::<Tally>("a").await.unwrap(),
        ObjectStatus::Hibernated
    );
    // Woken at 2 s: shuts down at 7 s, not at 5 s.
    assert_eq!(Tally::bump(&rt, "a").await.unwrap(), 2);
    sleep(Duration::from_millis(4500)).await;
    assert_eq!(rt.live_objects::<Tally>(), 1);
    assert!(shut_down(&mut events).is_empty());

    sleep(Duration::from_secs(1)).await;
    assert_eq!(rt.live_objects::<Tally>(), 0);
    assert_eq!(rt.status::<Tally>("a").await.unwrap(), ObjectStatus::Stored);
    assert_eq!(shut_down(&mut events), ["a"]);
    let loads = store.loads();
    assert_eq!(Tally::bump(&rt, "a").await.unwrap(), 3);
    assert_eq!(store.loads(), loads + 1, "a shut-down object reloads");
}

#[tokio::test(start_paused = true)]
async fn a_dormant_object_is_evicted_to_make_room() {
    let store = MemoryStorage::new();
    let rt = Runtime::builder(store)
        .register_with::<Tally>(ObjectOptions::new().with_hibernate_after(Duration::from_secs(1)))
        .max_live_objects(1)
        .build();
    let mut events = rt.subscribe();
    Tally::bump(&rt, "a").await.unwrap();
    sleep(Duration::from_secs(2)).await;
    assert_eq!(
        rt.status::<Tally>("a").await.unwrap(),
        ObjectStatus::Hibernated
    );
    Tally::bump(&rt, "b").await.unwrap();
    assert_eq!(rt.live_objects::<Tally>(), 1);
    assert_eq!(rt.status::<Tally>("a").await.unwrap(), ObjectStatus::Stored);
    assert_eq!(shut_down(&mut events), ["a"]);
    // `b` is idle now: `a` comes back in its place, from storage.
    assert_eq!(Tally::bump(&rt, "a").await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn runtime_shutdown_forgets_dormant_objects() {
    let (rt, _store) = runtime(
        ObjectOptions::new()
            .with_hibernate_after(Duration::from_secs(1))
            .with_shutdown_after(Duration::from_secs(60)),
    );
    for id in ["a", "b"] {
        Tally::bump(&rt, id).await.unwrap();
    }
    sleep(Duration::from_secs(2)).await;
    Tally::bump(&rt, "c").await.unwrap();
    let mut events = rt.subscribe();
    rt.shutdown().await;
    assert_eq!(rt.live_objects::<Tally>(), 0);
    assert_eq!(shut_down(&mut events), ["a", "b", "c"]);
}

/// An object of its own for [`calls_racing_with_dormancy_are_never_lost`], so that its
/// metrics count only that test's objects.
#[durable_object]
pub struct Racer {
    n: u64,
}

#[durable_object]
impl Racer {
    #[handler]
    fn handle_bump(&mut self) -> u64 {
        self.n += 1;
        self.n
    }

    #[handler]
    fn handle_get(&self) -> u64 {
        self.n
    }
}

/// The value of the counter `name` for objects of type `Racer` in `snapshot`.
fn racer_counter(snapshot: &[SnapshotEntry], name: &str) -> u64 {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            let key = key.key();
            key.name() == name
                && key
                    .labels()
                    .any(|label| label.key() == "type" && label.value() == "Racer")
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

/// Counts come from metrics, not from events: the calls send more events than the event
/// channel holds, and a subscriber that lags loses some. (The only test of this binary that
/// installs the process-wide recorder.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_with_dormancy_are_never_lost() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::builder(store.clone())
        .register_with::<Racer>(ObjectOptions::new().with_hibernate_after(Duration::from_millis(1)))
        .build();
    let mut callers = tokio::task::JoinSet::new();
    for object in 0..4 {
        for caller in 0..4u64 {
            let rt = rt.clone();
            callers.spawn(async move {
                let id = format!("o{object}");
                for i in 0..100u64 {
                    Racer::bump(&rt, &id).await.unwrap();
                    // Pauses around `hibernate_after`, so calls land just before, during and
                    // after the object goes dormant.
                    if (i + caller) % 3 != 0 {
                        sleep(Duration::from_micros(300 * ((i + caller) % 7))).await;
                    }
                }
            });
        }
    }
    while let Some(result) = callers.join_next().await {
        result.unwrap();
    }
    for object in 0..4 {
        assert_eq!(Racer::get(&rt, &format!("o{object}")).await.unwrap(), 400);
    }
    // First loads that meet in the load loop share one read: up to four reads in all.
    let reads = store.loads() + store.batch_loads();
    assert!(
        (1..=4).contains(&reads),
        "every object loaded once, then only woken: {reads} reads"
    );
    // One snapshot: taking one resets the counters.
    let snapshot = snapshotter.snapshot().into_vec();
    assert_eq!(
        racer_counter(&snapshot, metrics_names::ACTIVATIONS),
        4,
        "every object loaded once, then only woken"
    );
    assert!(
        racer_counter(&snapshot, metrics_names::HIBERNATIONS) > 0,
        "objects went dormant between calls"
    );
}
