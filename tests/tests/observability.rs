//! Metrics through the `metrics` facade: what is recorded, with which labels (never an object
//! id). One test in its own binary, because it installs the process-wide recorder.

use durable_runtime::storage::MemoryStorage;
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{Runtime, durable_object, metrics as names};
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
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");

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

    let snapshot = snapshotter.snapshot().into_vec();
    let counter = |name: &str, labels: &[(&str, &str)]| -> u64 {
        snapshot
            .iter()
            .filter(|(key, ..)| key.key().name() == name)
            .filter(|(key, ..)| {
                labels.iter().all(|(k, v)| {
                    key.key()
                        .labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                })
            })
            .map(|(.., value)| match value {
                DebugValue::Counter(n) => *n,
                _ => 0,
            })
            .sum()
    };
    assert_eq!(
        counter(
            names::CALLS,
            &[("type", "Meter"), ("handler", "tick"), ("outcome", "ok")]
        ),
        5,
        "every tick's handler returned; one of their writes failed afterwards"
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
    let samples = |handler: &str| -> usize {
        snapshot
            .iter()
            .filter(|(key, ..)| key.key().name() == names::CALL_DURATION)
            .filter(|(key, ..)| {
                key.key()
                    .labels()
                    .any(|label| label.key() == "handler" && label.value() == handler)
            })
            .map(|(.., value)| match value {
                DebugValue::Histogram(samples) => samples.len(),
                _ => 0,
            })
            .sum()
    };
    assert_eq!(samples("tick"), 5, "one duration per tick call");
    assert_eq!(
        counter(names::CALLS, &[("handler", "peek"), ("outcome", "ok")]),
        4
    );
    assert_eq!(samples("peek"), 4, "one duration per read");
    assert_eq!(
        samples("checked"),
        3,
        "one duration per call, whatever its outcome"
    );
    assert!(counter(names::PERSISTENCE_FAILURES, &[("type", "Meter")]) >= 1);
    assert_eq!(counter(names::ACTIVATIONS, &[("type", "Meter")]), 2);
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
}
