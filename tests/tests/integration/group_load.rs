//! Group load, on every storage backend: objects that start while another object's read is in
//! flight share one batched read; each still gets its own state, and a failed batched read
//! fails the calls that waited on it and nothing else.

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::storage::Storage;
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{Error, Runtime, durable_object};
use durable_tests::backend_tests;
use futures_util::future::join_all;

#[durable_object]
pub struct Meter {
    reading: u64,
}

#[durable_object]
impl Meter {
    #[handler]
    fn handle_set(&mut self, reading: u64) {
        self.reading = reading;
    }

    #[handler]
    fn handle_read(&self) -> u64 {
        self.reading
    }
}

const OBJECTS: u64 = 40;

/// Stores `OBJECTS` meters, meter `i` reading `i * 10`, and returns a fresh runtime on a
/// wrapper of the store whose loads take 50 ms (so that reads overlap), none of them live.
async fn stored_meters(store: Arc<dyn Storage>) -> (Runtime, FaultyStorage<Arc<dyn Storage>>) {
    let rt = Runtime::new(Arc::clone(&store));
    for i in 0..OBJECTS {
        Meter::set(&rt, &format!("m-{i}"), i * 10).await.unwrap();
    }
    rt.shutdown().await;
    let slow = FaultyStorage::new(store);
    slow.delay_loads(Duration::from_millis(50));
    (Runtime::new(slow.clone()), slow)
}

async fn objects_starting_together_share_reads(store: Arc<dyn Storage>) {
    let (rt, slow) = stored_meters(store).await;
    let reads = (0..OBJECTS).map(|i| {
        let rt = rt.clone();
        async move { Meter::read(&rt, &format!("m-{i}")).await }
    });
    let readings: Vec<u64> = join_all(reads)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(readings, (0..OBJECTS).map(|i| i * 10).collect::<Vec<_>>());
    // The first reads go at once; the others queue behind them and share what follows (a
    // server takes two batches at a time; a loaded machine may split the arrivals once more).
    let round_trips = slow.loads() + slow.batch_loads();
    assert!(
        round_trips <= 5,
        "{OBJECTS} objects took {round_trips} reads ({} single, {} batched)",
        slow.loads(),
        slow.batch_loads()
    );
    assert!(slow.batch_loads() >= 1);
    rt.shutdown().await;
}

async fn a_failed_batched_read_fails_only_its_calls(store: Arc<dyn Storage>) {
    let (rt, slow) = stored_meters(store).await;
    // A read in flight, and the rest queued behind it; the next read fails.
    let first = tokio::spawn({
        let rt = rt.clone();
        async move { Meter::read(&rt, "m-0").await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    slow.fail_loads(1);
    let queued = (1..OBJECTS).map(|i| {
        let rt = rt.clone();
        async move { Meter::read(&rt, &format!("m-{i}")).await }
    });
    let queued = join_all(queued).await;
    assert_eq!(
        first.await.unwrap().unwrap(),
        0,
        "the read in flight was not failed"
    );
    // The batch that met the failure fails all its calls, retryably; any other batch (a
    // server takes two at once) answers each its own reading.
    let mut failed = 0;
    for (i, result) in (1..OBJECTS).zip(&queued) {
        match result {
            Ok(reading) => assert_eq!(*reading, i * 10),
            Err(Error::Storage { source, .. }) if source.is_retryable() => failed += 1,
            Err(error) => panic!("m-{i}: {error}"),
        }
    }
    assert!(failed >= 1, "the failed read failed no call");
    // Nothing was lost or overwritten: the next calls load what is stored.
    for i in 1..OBJECTS {
        assert_eq!(Meter::read(&rt, &format!("m-{i}")).await.unwrap(), i * 10);
    }
    rt.shutdown().await;
}

backend_tests!(
    objects_starting_together_share_reads,
    a_failed_batched_read_fails_only_its_calls,
);
