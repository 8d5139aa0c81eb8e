//! Per-call options through the typed caller `<Object>::with(&runtime)`: a timeout fails the
//! call with `Error::Timeout` when its reply is not there in time (the call still runs and
//! commits), and a caller without options behaves as the plain client.

use std::time::Duration;

use durable_runtime::{CallOptions, Error, MemoryStorage, ObjectOptions, Runtime, durable_object};

#[durable_object]
pub struct Slow {
    done: u32,
}

#[durable_object]
impl Slow {
    /// Takes `millis` of (virtual) time, then counts itself.
    #[handler]
    async fn handle_work(&mut self, millis: u64) -> u32 {
        tokio::time::sleep(Duration::from_millis(millis)).await;
        self.done += 1;
        self.done
    }

    #[handler]
    fn handle_done(&self) -> u32 {
        self.done
    }

    /// An error type that is not serde: callable with options other than a key.
    #[handler]
    fn handle_refuse(&self) -> Result<(), NotSerde> {
        Err(NotSerde)
    }
}

#[derive(Debug)]
pub struct NotSerde;

#[tokio::test(start_paused = true)]
async fn a_timeout_fails_the_call_but_not_the_handler() {
    let rt = Runtime::new(MemoryStorage::new());
    let started = tokio::time::Instant::now();
    let slow = Slow::with(&rt)
        .timeout(Duration::from_millis(500))
        .work("a", 2_000)
        .await;
    assert!(
        matches!(&slow, Err(Error::Timeout { handler: "work", key }) if key.object_id == "a"),
        "{slow:?}"
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(500),
        "failed at the deadline"
    );
    // The call was not cancelled: it commits, and the next call sees it.
    assert_eq!(Slow::done(&rt, "a").await.unwrap(), 1);
    // In time, the reply arrives as usual.
    let quick = Slow::with(&rt)
        .timeout(Duration::from_millis(500))
        .work("a", 100)
        .await;
    assert_eq!(quick.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_per_call_timeout_may_be_longer_than_the_wait_of_the_queue() {
    let rt = Runtime::builder(MemoryStorage::new())
        .register_with::<Slow>(ObjectOptions::new().with_call_timeout(Duration::from_secs(60)))
        .build();
    // The first call holds the object; the second waits behind it and times out in the queue.
    let first = tokio::spawn({
        let rt = rt.clone();
        async move { Slow::work(&rt, "q", 1_000).await }
    });
    tokio::task::yield_now().await;
    let queued = Slow::with(&rt)
        .timeout(Duration::from_millis(200))
        .work("q", 1)
        .await;
    assert!(matches!(queued, Err(Error::Timeout { .. })));
    assert_eq!(first.await.unwrap().unwrap(), 1);
    assert_eq!(
        Slow::done(&rt, "q").await.unwrap(),
        2,
        "the queued call still ran"
    );
}

#[tokio::test]
async fn a_caller_without_options_is_the_plain_client() {
    let rt = Runtime::new(MemoryStorage::new());
    assert_eq!(Slow::with(&rt).options(), &CallOptions::new());
    assert_eq!(Slow::with(&rt).work("p", 0).await.unwrap(), 1);
    assert_eq!(Slow::work(&rt, "p", 0).await.unwrap(), 2);
    assert_eq!(Slow::with(&rt).done("p").await.unwrap(), 2);
    let refused = Slow::with(&rt)
        .timeout(Duration::from_secs(5))
        .refuse("p")
        .await;
    assert!(matches!(refused, Err(Error::Handler(NotSerde))));
    let invalid = Slow::with(&rt).done("").await;
    assert!(matches!(invalid, Err(Error::InvalidId(_))));
}
