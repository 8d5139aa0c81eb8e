//! Reads in the caller's task: a call of a synchronous `&self` handler to an active, idle object
//! runs where the caller is, and everything the object's task guarantees still holds — one
//! call at a time, no uncommitted state (that is `output_gate.rs`), the idle timer, errors
//! and panics.

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::storage::MemoryStorage;
use durable_runtime::{Error, Event, ObjectStatus, Runtime, durable_object};
use tokio::time::{Instant, sleep};

#[durable_object(hibernate_after = "1s")]
pub struct Probe {
    n: u64,
    /// Set only while a `hold` handler runs: a read that sees it ran alongside that call.
    busy: bool,
}

#[durable_object]
impl Probe {
    #[handler]
    fn handle_bump(&mut self) -> String {
        self.n += 1;
        current_task()
    }

    #[handler]
    fn handle_task(&self) -> String {
        current_task()
    }

    #[handler]
    fn handle_busy(&self) -> bool {
        self.busy
    }

    #[handler]
    fn handle_n(&self) -> u64 {
        self.n
    }

    #[handler]
    fn handle_hold(&mut self, millis: u64) {
        self.busy = true;
        std::thread::sleep(Duration::from_millis(millis));
        self.busy = false;
    }

    #[handler]
    async fn handle_hold_async(&mut self, millis: u64) {
        self.busy = true;
        sleep(Duration::from_millis(millis)).await;
        self.busy = false;
    }

    #[handler]
    fn handle_checked(&self, fail: bool) -> Result<u64, String> {
        if fail {
            return Err("refused".to_owned());
        }
        Ok(self.n)
    }

    #[handler]
    fn handle_boom(&self) -> u64 {
        panic!("boom")
    }
}

fn current_task() -> String {
    format!("{:?}", tokio::task::try_id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_an_idle_object_runs_in_the_callers_task() {
    let rt = Runtime::new(MemoryStorage::new());
    let caller = tokio::spawn({
        let rt = rt.clone();
        async move {
            let object_task = Probe::bump(&rt, "p").await.unwrap();
            let caller = current_task();
            assert_ne!(object_task, caller, "a write runs in the object's task");
            assert_eq!(Probe::task(&rt, "p").await.unwrap(), caller);
            // Not loaded yet: the read goes to the object's task, which loads it.
            assert_ne!(Probe::task(&rt, "cold").await.unwrap(), caller);
            assert_eq!(Probe::task(&rt, "cold").await.unwrap(), caller);
        }
    });
    caller.await.unwrap();
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_never_run_alongside_another_call_of_their_object() {
    let rt = Runtime::new(MemoryStorage::new());
    Probe::bump(&rt, "p").await.unwrap();
    for hold_async in [false, true] {
        let hold = tokio::spawn({
            let rt = rt.clone();
            async move {
                if hold_async {
                    Probe::hold_async(&rt, "p", 60).await
                } else {
                    Probe::hold(&rt, "p", 60).await
                }
            }
        });
        let until = Instant::now() + Duration::from_millis(120);
        let mut reads = 0;
        while Instant::now() < until {
            assert!(
                !Probe::busy(&rt, "p").await.unwrap(),
                "a read ran during a call (async: {hold_async})"
            );
            reads += 1;
            tokio::task::yield_now().await;
        }
        hold.await.unwrap().unwrap();
        assert!(reads > 1);
    }
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn reads_in_the_callers_task_keep_the_object_awake() {
    let rt = Runtime::new(Arc::new(MemoryStorage::new()));
    let mut events = rt.subscribe();
    Probe::bump(&rt, "p").await.unwrap();
    // Reads every 300 ms for 3 s, against a `hibernate_after` of 1 s.
    for _ in 0..10 {
        sleep(Duration::from_millis(300)).await;
        assert_eq!(Probe::n(&rt, "p").await.unwrap(), 1);
    }
    assert_eq!(rt.status::<Probe>("p").await.unwrap(), ObjectStatus::Active);
    let seen: Vec<Event> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert!(
        !seen.iter().any(|e| matches!(e, Event::Hibernated { .. })),
        "{seen:?}"
    );
    // Then idle: it hibernates a second after the last read.
    sleep(Duration::from_millis(900)).await;
    assert_eq!(rt.status::<Probe>("p").await.unwrap(), ObjectStatus::Active);
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        rt.status::<Probe>("p").await.unwrap(),
        ObjectStatus::Hibernated
    );
}

#[tokio::test]
async fn errors_and_panics_of_reads_in_the_callers_task_reach_their_caller_alone() {
    let rt = Runtime::new(MemoryStorage::new());
    Probe::bump(&rt, "p").await.unwrap();
    assert_eq!(Probe::checked(&rt, "p", false).await.unwrap(), 1);
    assert!(matches!(
        Probe::checked(&rt, "p", true).await,
        Err(Error::Handler(message)) if message == "refused"
    ));
    match Probe::boom(&rt, "p").await {
        Err(Error::Panicked {
            key,
            handler,
            message,
        }) => {
            assert_eq!(key.object_id, "p");
            assert_eq!(handler, "boom");
            assert_eq!(message, "boom");
        }
        other => panic!("expected a panic error, got {other:?}"),
    }
    // The object serves on, with its state intact.
    assert_eq!(Probe::n(&rt, "p").await.unwrap(), 1);
    Probe::bump(&rt, "p").await.unwrap();
    assert_eq!(Probe::n(&rt, "p").await.unwrap(), 2);
    rt.shutdown().await;
}
