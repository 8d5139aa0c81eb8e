//! What a caller is told when storage fails during a commit: a write that may have been
//! applied is an unknown outcome, never a retryable error that says nothing was written.
//! On virtual time, with a storage that delays commits and applies a batch before failing it.

use std::time::Duration;

use durable_runtime::storage::{MemoryStorage, ObjectKey, Storage, StorageError};
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

async fn stored_count(store: &impl Storage, id: &str) -> i64 {
    let stored = store.load(&ObjectKey::new("Counter", id)).await.unwrap();
    stored.object().map_or(0, |s| {
        serde_json::from_slice::<serde_json::Value>(&s.state).unwrap()["count"]
            .as_i64()
            .unwrap()
    })
}

#[tokio::test(start_paused = true)]
async fn writes_of_a_batch_applied_then_failed_are_unknown_outcomes_not_conflicts() {
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::new(store.clone());
    for id in ["a", "b", "c", "slow"] {
        Counter::increment(&rt, id).await.unwrap();
    }
    store.delay_commits(COMMIT_DELAY);
    // A slow commit holds the committer; the next writes queue into one batch behind it.
    let slow = tokio::spawn({
        let rt = rt.clone();
        async move { Counter::increment(&rt, "slow").await }
    });
    sleep(Duration::from_millis(1)).await;
    let batch = tokio::spawn({
        let rt = rt.clone();
        async move { join_all(["a", "b", "c"].map(|id| Counter::increment(&rt, id))).await }
    });
    assert_eq!(slow.await.unwrap().unwrap(), 2);
    // The batch is being committed now: it is applied, then reported failed.
    store.fail_commits_after_applying(1);
    let commits = store.commits();
    let results = batch.await.unwrap();
    assert_eq!(store.commits(), commits + 1, "the batch went as one commit");
    for (id, result) in ["a", "b", "c"].iter().zip(&results) {
        let Err(err @ Error::OutcomeUnknown { key, .. }) = result else {
            panic!("{id}: expected an unknown outcome, got {result:?}");
        };
        assert_eq!(key, &ObjectKey::new("Counter", *id));
        assert!(!err.is_retryable(), "{id}: {err}");
        // The write did land: a retry would have counted it twice.
        assert_eq!(stored_count(store.inner(), id).await, 2);
        // The object reloads what storage holds.
        assert_eq!(Counter::get(&rt, id).await.unwrap(), 2);
        assert_eq!(Counter::increment(&rt, id).await.unwrap(), 3);
    }
}

#[tokio::test(start_paused = true)]
async fn a_lone_write_applied_then_failed_is_an_unknown_outcome() {
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::new(store.clone());
    Counter::increment(&rt, "a").await.unwrap();
    store.fail_commits_after_applying(1);
    let err = Counter::increment(&rt, "a").await.unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown { .. }), "{err:?}");
    assert!(!err.is_retryable());
    assert_eq!(stored_count(store.inner(), "a").await, 2);
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_read_held_behind_a_failed_write_was_not_applied_and_may_be_retried() {
    let store = FaultyStorage::new(MemoryStorage::new());
    store.delay_commits(COMMIT_DELAY);
    let rt = Runtime::new(store.clone());
    Counter::increment(&rt, "a").await.unwrap();
    store.fail_commits(1);
    let write = tokio::spawn({
        let rt = rt.clone();
        async move { Counter::increment(&rt, "a").await }
    });
    sleep(Duration::from_millis(1)).await;
    // Runs on the uncommitted 2, so it waits for that write and fails with it.
    let read = Counter::get(&rt, "a").await.unwrap_err();
    assert!(
        matches!(write.await.unwrap(), Err(Error::OutcomeUnknown { .. })),
        "the write's own outcome is unknown"
    );
    assert!(matches!(read, Error::Storage { .. }), "{read:?}");
    assert!(read.is_retryable());
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 1);
}

#[test]
fn the_messages_name_the_object_the_version_and_the_cause() {
    let key = ObjectKey::new("Counter", "a");
    let conflict: Error = Error::Conflict {
        key: key.clone(),
        found: Some(226),
    };
    assert_eq!(
        conflict.to_string(),
        "version conflict on Counter/a: another writer committed version 226 first"
    );
    let gone: Error = Error::Conflict {
        key: key.clone(),
        found: None,
    };
    assert_eq!(
        gone.to_string(),
        "version conflict on Counter/a: another writer deleted the object first"
    );
    let unknown: Error = Error::OutcomeUnknown {
        key,
        source: StorageError::unavailable(std::io::Error::other("connection reset")),
    };
    assert_eq!(
        unknown.to_string(),
        "the write of Counter/a may or may not have been applied: \
         storage unavailable: connection reset"
    );
    assert!(std::error::Error::source(&unknown).is_some());
}
