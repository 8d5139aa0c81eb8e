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
use metrics_util::debugging::DebugValue;
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
    let (rt, store) = runtime(ObjectOptions::new().with_hibernate_after(Duration::from_secs(3)));
    // The runtime's own tasks (the committer, the idle timers) start with a first object, whose
    // task ends once it has been idle for a second.
    Tally::bump(&rt, "first").await.unwrap();
    sleep(Duration::from_millis(1500)).await;
    let runtime_tasks = alive_tasks();
    for id in ["a", "b", "c"] {
        Tally::bump(&rt, id).await.unwrap();
        Tally::bump(&rt, id).await.unwrap();
    }
    assert_eq!(
        alive_tasks(),
        runtime_tasks + 3,
        "objects used just now have a task"
    );
    sleep(Duration::from_millis(1500)).await;
    assert_eq!(alive_tasks(), runtime_tasks, "idle objects have no task");
    assert_eq!(
        rt.status::<Tally>("a").await.unwrap(),
        ObjectStatus::Active,
        "an idle object without a task is still active"
    );
    let loads = store.loads();

    sleep(Duration::from_secs(3)).await;
    assert_eq!(alive_tasks(), runtime_tasks, "dormant objects have no task");
    assert_eq!(
        rt.live_objects::<Tally>(),
        4,
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
/// channel holds, and a subscriber that lags loses some. (The only test of this module that
/// reads the process-wide recorder.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_with_dormancy_are_never_lost() {
    let snapshotter = &crate::global_recorders().dormancy;
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

/// An object idle for a second parks its task, and its next call starts one again: calls and
/// reads from both worker threads land just before, while and just after it parks (the pauses
/// straddle that second), and none is lost, runs twice or sees a state older than one it
/// already saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_with_parking_are_never_lost() {
    let (rt, store) = runtime(ObjectOptions::new().with_hibernate_after(Duration::from_secs(3600)));
    let mut callers = tokio::task::JoinSet::new();
    for object in 0..4u64 {
        for caller in 0..4u64 {
            let rt = rt.clone();
            callers.spawn(async move {
                let id = format!("p{object}");
                let mut last = 0;
                for round in 0..4u64 {
                    for _ in 0..25 {
                        let seen = Tally::bump(&rt, &id).await.unwrap();
                        assert!(seen > last, "each bump sees its own and every earlier one");
                        last = seen;
                        let read = Tally::get(&rt, &id).await.unwrap();
                        assert!(read >= last, "a read never goes back");
                    }
                    // 950–1,150 ms: around the second after which an idle object parks.
                    // Every object has rounds where all its callers pause past it (it parks)
                    // and rounds where some come back just before or just after.
                    let pause = 950 + (round * 37 + caller * 23 + object * 11) % 200;
                    sleep(Duration::from_millis(pause)).await;
                }
            });
        }
    }
    while let Some(result) = callers.join_next().await {
        result.unwrap();
    }
    for object in 0..4 {
        assert_eq!(Tally::get(&rt, &format!("p{object}")).await.unwrap(), 400);
    }
    let reads = store.loads() + store.batch_loads();
    assert!(
        (1..=4).contains(&reads),
        "parked objects keep their state: {reads} reads"
    );
    rt.shutdown().await;
    assert_eq!(rt.live_objects::<Tally>(), 0);
}

/// A parked object keeps what it held, the persistence contract included: a commit that fails
/// on its first call after waking throws the state away, the next call reloads what storage
/// holds, and a write another runtime committed meanwhile is seen, not overwritten.
#[tokio::test(start_paused = true)]
async fn a_parked_object_fails_a_commit_and_meets_another_runtimes_write_as_a_live_one_does() {
    let options = ObjectOptions::new().with_hibernate_after(Duration::from_secs(3600));
    let (rt, store) = runtime(options);
    assert_eq!(Tally::bump(&rt, "a").await.unwrap(), 1);
    let runtime_tasks = {
        sleep(Duration::from_millis(1500)).await;
        alive_tasks()
    };

    // Parked, then woken by a call whose commit fails (after applying: the outcome is unknown).
    store.fail_commits_after_applying(1);
    assert!(matches!(
        Tally::bump(&rt, "a").await,
        Err(durable_runtime::Error::OutcomeUnknown { .. })
    ));
    let loads = store.loads();
    // Storage holds 2: the next call reloads it rather than trusting memory.
    assert_eq!(Tally::bump(&rt, "a").await.unwrap(), 3);
    assert_eq!(
        store.loads(),
        loads + 1,
        "reloaded after the unknown outcome"
    );

    // Parked again; another runtime on the same storage commits meanwhile.
    sleep(Duration::from_millis(1500)).await;
    assert_eq!(alive_tasks(), runtime_tasks, "parked again");
    let other = Runtime::builder(store.inner().clone())
        .register_with::<Tally>(options)
        .build();
    assert_eq!(Tally::bump(&other, "a").await.unwrap(), 4);
    other.shutdown().await;
    // The parked object's version is stale: its write conflicts, it reloads, and the call is
    // retried on what storage holds, never overwriting the other runtime's write.
    let result = Tally::bump(&rt, "a").await;
    let after = match result {
        Ok(n) => n,
        Err(durable_runtime::Error::Conflict { .. }) => Tally::bump(&rt, "a").await.unwrap(),
        Err(error) => panic!("unexpected: {error:?}"),
    };
    assert_eq!(after, 5, "built on the other runtime's write");
    rt.shutdown().await;
}

/// A dormant object wakes from the record the registry kept, under the persistence contract: a
/// commit that fails on its first call after waking throws the state away and the next call
/// reloads what storage holds; a write another runtime committed while it was dormant makes
/// its stale version conflict, and is built on, never overwritten.
#[tokio::test(start_paused = true)]
async fn a_dormant_object_fails_a_commit_and_meets_another_runtimes_write_as_a_live_one_does() {
    let options = ObjectOptions::new().with_hibernate_after(Duration::from_secs(2));
    let (rt, store) = runtime(options);
    // An id longer than 127 bytes: the record after it starts past a two-byte length.
    let id = "a".repeat(200);
    assert_eq!(Tally::bump(&rt, &id).await.unwrap(), 1);
    let dormant = || async {
        sleep(Duration::from_secs(3)).await;
        assert_eq!(
            rt.status::<Tally>(&id).await.unwrap(),
            ObjectStatus::Hibernated
        );
    };
    dormant().await;
    let runtime_tasks = alive_tasks();

    // Woken by a call whose commit fails after applying: the outcome is unknown.
    store.fail_commits_after_applying(1);
    assert!(matches!(
        Tally::bump(&rt, &id).await,
        Err(durable_runtime::Error::OutcomeUnknown { .. })
    ));
    let loads = store.loads();
    assert_eq!(Tally::bump(&rt, &id).await.unwrap(), 3, "storage holds 2");
    assert_eq!(
        store.loads(),
        loads + 1,
        "reloaded after the unknown outcome"
    );

    // Dormant again, its record at version 3; another runtime commits meanwhile.
    dormant().await;
    assert_eq!(alive_tasks(), runtime_tasks, "dormant: no task");
    let other = Runtime::builder(store.inner().clone())
        .register_with::<Tally>(options)
        .build();
    assert_eq!(Tally::bump(&other, &id).await.unwrap(), 4);
    other.shutdown().await;
    let result = Tally::bump(&rt, &id).await;
    let after = match result {
        Ok(n) => n,
        Err(durable_runtime::Error::Conflict { .. }) => Tally::bump(&rt, &id).await.unwrap(),
        Err(error) => panic!("unexpected: {error:?}"),
    };
    assert_eq!(after, 5, "built on the other runtime's write");

    // Dormant once more: woken without a storage read, from the version it committed.
    dormant().await;
    let loads = store.loads();
    assert_eq!(Tally::bump(&rt, &id).await.unwrap(), 6);
    assert_eq!(Tally::get(&rt, &id).await.unwrap(), 6);
    assert_eq!(store.loads(), loads, "woken from its record");
    rt.shutdown().await;
}
