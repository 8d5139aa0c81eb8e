//! Reads in the caller's task: a call of a synchronous `&self` handler to an active, idle object
//! runs where the caller is, and everything the object's task guarantees still holds — one
//! call at a time, no uncommitted state (that is `output_gate.rs`), the idle timer, errors
//! and panics.

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
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

    /// Holds the object (blocking its thread) from [`HOLD_STARTED`] until [`HOLD_RELEASED`].
    #[handler]
    fn handle_hold(&mut self) {
        self.busy = true;
        HOLD_STARTED.store(true, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !HOLD_RELEASED.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "hold never released");
            std::thread::sleep(Duration::from_millis(1));
        }
        self.busy = false;
    }

    /// [`handle_hold`](Self::handle_hold), awaiting instead of blocking.
    #[handler]
    async fn handle_hold_async(&mut self) {
        self.busy = true;
        HOLD_STARTED.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !HOLD_RELEASED.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "hold never released");
            sleep(Duration::from_millis(1)).await;
        }
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

/// Set by a `hold` handler once it runs (and holds the object).
static HOLD_STARTED: AtomicBool = AtomicBool::new(false);
/// Ends a running `hold` handler.
static HOLD_RELEASED: AtomicBool = AtomicBool::new(false);

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
            // The reply may reach us before the object's task has gone idle again: until it
            // has, a read is queued to it.
            let runs_here = |id: &'static str| {
                let (rt, caller) = (rt.clone(), caller.clone());
                move || {
                    let (rt, caller) = (rt.clone(), caller.clone());
                    async move { Probe::task(&rt, id).await.unwrap() == caller }
                }
            };
            durable_tests::eventually(runs_here("p")).await;
            // Not loaded yet: the read goes to the object's task, which loads it.
            assert_ne!(Probe::task(&rt, "cold").await.unwrap(), caller);
            durable_tests::eventually(runs_here("cold")).await;
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
        HOLD_STARTED.store(false, Ordering::SeqCst);
        HOLD_RELEASED.store(false, Ordering::SeqCst);
        let hold = tokio::spawn({
            let rt = rt.clone();
            async move {
                if hold_async {
                    Probe::hold_async(&rt, "p").await
                } else {
                    Probe::hold(&rt, "p").await
                }
            }
        });
        // The hold runs, and runs until released: every read below is sent during it.
        durable_tests::eventually(|| async { HOLD_STARTED.load(Ordering::SeqCst) }).await;
        let mut reads: Vec<_> = (0..3).map(|_| Box::pin(Probe::busy(&rt, "p"))).collect();
        for read in &mut reads {
            // A read decides in its first poll whether it runs here (the object idle) or is
            // queued: it must be queued behind the hold, not answered beside it.
            let first = poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
            assert!(
                first.is_pending(),
                "a read ran during a call (async: {hold_async}): {first:?}"
            );
        }
        HOLD_RELEASED.store(true, Ordering::SeqCst);
        for read in reads {
            assert!(
                !read.await.unwrap(),
                "a read saw a call in progress (async: {hold_async})"
            );
        }
        hold.await.unwrap().unwrap();
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
    let seen = durable_tests::received(&mut events);
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
