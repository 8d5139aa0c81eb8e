//! Group commit and the output gate, on virtual time with a storage that delays and fails
//! commits on demand: calls run while earlier writes are in flight, but no reply leaves
//! before the writes it depends on have committed, and a failed write fails every call that
//! saw its state.

use std::time::Duration;

use durable_runtime::storage::{MemoryStorage, ObjectKey, Storage};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{Error, Runtime, durable_object};
use futures_util::future::join_all;
use tokio::time::sleep;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_increment(&mut self) -> i64 {
        self.count += 1;
        self.count
    }

    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }
}

const COMMIT_DELAY: Duration = Duration::from_millis(20);

fn slow_runtime() -> (Runtime, FaultyStorage<MemoryStorage>) {
    let store = FaultyStorage::new(MemoryStorage::new());
    store.delay_commits(COMMIT_DELAY);
    (Runtime::new(store.clone()), store)
}

async fn stored_count(store: &impl Storage, id: &str) -> i64 {
    let stored = store
        .load(&ObjectKey::new("Counter", id))
        .await
        .unwrap()
        .object();
    stored.map_or(0, |s| {
        serde_json::from_slice::<serde_json::Value>(&s.state).unwrap()["count"]
            .as_i64()
            .unwrap()
    })
}

#[tokio::test(start_paused = true)]
async fn a_hot_object_runs_calls_while_its_write_is_in_flight_and_coalesces_writes() {
    let (rt, store) = slow_runtime();
    Counter::get(&rt, "hot").await.unwrap();
    let commits = store.commits();
    let results = join_all((0..50).map(|_| Counter::increment(&rt, "hot"))).await;
    let results: Vec<i64> = results.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        results,
        (1..=50).collect::<Vec<i64>>(),
        "arrival order kept"
    );
    let writes = store.commits() - commits;
    assert!(writes <= 3, "50 calls took {writes} commits");
    assert_eq!(stored_count(store.inner(), "hot").await, 50);
}

#[tokio::test(start_paused = true)]
async fn no_reply_leaves_before_the_write_it_depends_on_commits() {
    let (rt, store) = slow_runtime();
    Counter::get(&rt, "gated").await.unwrap();
    let increment = tokio::spawn({
        let rt = rt.clone();
        async move { Counter::increment(&rt, "gated").await }
    });
    sleep(Duration::from_millis(1)).await;
    // The read runs on the uncommitted state, so it waits for that write as well.
    let read = tokio::spawn({
        let rt = rt.clone();
        async move { Counter::get(&rt, "gated").await }
    });
    sleep(COMMIT_DELAY / 2).await;
    assert!(!increment.is_finished(), "replied before its commit");
    assert!(
        !read.is_finished(),
        "a read of uncommitted state replied early"
    );
    assert_eq!(stored_count(store.inner(), "gated").await, 0);
    assert_eq!(increment.await.unwrap().unwrap(), 1);
    assert_eq!(read.await.unwrap().unwrap(), 1);
    assert_eq!(stored_count(store.inner(), "gated").await, 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_fails_every_call_that_saw_its_state_and_the_object_reloads() {
    let (rt, store) = slow_runtime();
    assert_eq!(Counter::increment(&rt, "doomed").await.unwrap(), 1);
    store.fail_commits(1);
    let calls = join_all([
        Box::pin(Counter::increment(&rt, "doomed"))
            as std::pin::Pin<Box<dyn std::future::Future<Output = Result<i64, Error>> + Send>>,
        Box::pin(Counter::increment(&rt, "doomed")),
        Box::pin(Counter::get(&rt, "doomed")),
    ])
    .await;
    // The writes' outcome is unknown; the read only saw the state and was not applied.
    for (i, result) in calls[..2].iter().enumerate() {
        assert!(
            matches!(result, Err(Error::OutcomeUnknown { .. })),
            "call {i} should have failed with the write: {result:?}"
        );
    }
    assert!(
        matches!(calls[2], Err(Error::Storage { .. })),
        "the read should have failed with the write: {:?}",
        calls[2]
    );
    // The object reloaded its last committed state.
    assert_eq!(Counter::get(&rt, "doomed").await.unwrap(), 1);
    assert_eq!(Counter::increment(&rt, "doomed").await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn one_conflicting_write_does_not_fail_its_batch_neighbours() {
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt1 = Runtime::new(store.clone());
    let rt2 = Runtime::new(store.clone());
    for id in ["a", "b", "c", "stale", "slow"] {
        Counter::increment(&rt1, id).await.unwrap();
    }
    // Another runtime moves `stale` on: rt1's activation of it is now behind.
    Counter::increment(&rt2, "stale").await.unwrap();

    store.delay_commits(COMMIT_DELAY);
    // A slow commit holds the committer; the next five writes queue into one batch.
    let slow = tokio::spawn({
        let rt1 = rt1.clone();
        async move { Counter::increment(&rt1, "slow").await }
    });
    sleep(Duration::from_millis(1)).await;
    let commits = store.commits();
    let results = join_all(["a", "b", "stale", "c"].map(|id| Counter::increment(&rt1, id))).await;
    assert!(slow.await.unwrap().is_ok());
    assert_eq!(results[0].as_ref().unwrap(), &2);
    assert_eq!(results[1].as_ref().unwrap(), &2);
    assert!(
        matches!(results[2], Err(Error::Conflict { .. })),
        "{:?}",
        results[2]
    );
    assert_eq!(results[3].as_ref().unwrap(), &2);
    // The batch was retried without the conflicting write: one more commit, not four.
    assert!(
        store.commits() - commits <= 3,
        "{}",
        store.commits() - commits
    );
    assert_eq!(Counter::increment(&rt1, "stale").await.unwrap(), 3);
}

#[durable_object]
pub struct Gauge {
    value: f64,
}

#[durable_object]
impl Gauge {
    #[handler]
    fn handle_set(&mut self, value: f64) -> f64 {
        self.value = value;
        value
    }

    #[handler]
    fn handle_set_then_fail(&mut self, value: f64) -> Result<(), String> {
        self.value = value;
        Err("refused".to_owned())
    }

    #[handler]
    fn handle_get(&self) -> f64 {
        self.value
    }
}

async fn stored_gauge(store: &impl Storage, id: &str) -> f64 {
    let stored = store
        .load(&ObjectKey::new("Gauge", id))
        .await
        .unwrap()
        .object();
    let stored = stored.expect("the gauge is stored");
    serde_json::from_slice::<serde_json::Value>(&stored.state).unwrap()["value"]
        .as_f64()
        .expect("a stored gauge holds a number")
}

#[tokio::test(start_paused = true)]
async fn a_state_that_would_not_decode_back_is_refused_and_never_committed() {
    let (rt, store) = slow_runtime();
    Gauge::set(&rt, "g", 0.5).await.unwrap();
    // JSON has no NaN: it would be stored as `null`, which the `f64` field cannot read back.
    let refused = Gauge::set(&rt, "g", f64::NAN).await;
    assert!(
        matches!(&refused, Err(Error::Encode { message, .. }) if message.contains("decode back")),
        "{refused:?}"
    );
    assert_eq!(Gauge::get(&rt, "g").await.unwrap(), 0.5, "rolled back");
    assert_eq!(stored_gauge(&store, "g").await, 0.5);

    // The same while an earlier write is in flight, followed by a handler error that rolls the
    // object back and a read: every call is answered, the refused state never reaches storage
    // and the acknowledged write survives.
    let calls = async {
        tokio::join!(
            Gauge::set(&rt, "g", 1.0),
            Gauge::set(&rt, "g", f64::INFINITY),
            Gauge::set_then_fail(&rt, "g", 2.0),
            Gauge::get(&rt, "g"),
        )
    };
    let (first, infinite, failed, read) = tokio::time::timeout(Duration::from_secs(5), calls)
        .await
        .expect("every call is answered");
    assert_eq!(first.unwrap(), 1.0);
    assert!(
        matches!(infinite, Err(Error::Encode { .. })),
        "{infinite:?}"
    );
    assert!(matches!(failed, Err(Error::Handler { .. })), "{failed:?}");
    assert_eq!(read.unwrap(), 1.0);
    assert_eq!(stored_gauge(&store, "g").await, 1.0);
    assert_eq!(Gauge::set(&rt, "g", 3.0).await.unwrap(), 3.0);
    assert_eq!(stored_gauge(&store, "g").await, 3.0);
}

/// A value whose hand-written `Serialize` panics on 13.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Deserialize)]
pub struct Touchy(u32);

impl serde::Serialize for Touchy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        assert_ne!(self.0, 13, "unlucky");
        serializer.serialize_u32(self.0)
    }
}

#[durable_object]
pub struct Fragile {
    value: Touchy,
}

#[durable_object]
impl Fragile {
    #[handler]
    fn handle_set(&mut self, value: u32) -> u32 {
        self.value = Touchy(value);
        value
    }

    #[handler]
    fn handle_get(&self) -> u32 {
        self.value.0
    }
}

#[tokio::test]
async fn a_panicking_serialize_fails_its_call_and_the_object_serves_on() {
    let rt = Runtime::new(MemoryStorage::new());
    assert_eq!(Fragile::set(&rt, "f", 7).await.unwrap(), 7);
    let refused = Fragile::set(&rt, "f", 13).await;
    assert!(
        matches!(&refused, Err(Error::Encode { message, .. }) if message.contains("unlucky")),
        "{refused:?}"
    );
    assert_eq!(Fragile::get(&rt, "f").await.unwrap(), 7, "rolled back");
    assert_eq!(Fragile::set(&rt, "f", 8).await.unwrap(), 8);
}
