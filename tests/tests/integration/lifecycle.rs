//! Lifecycle and robustness, in virtual (paused) time on the in-memory store: hibernation,
//! idle shutdown, option precedence, overload, timeouts, call cycles, graceful shutdown,
//! deletion and introspection.

use std::time::Duration;

use durable_runtime::storage::MemoryStorage;
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{
    Context, Error, Event, ObjectOptions, ObjectStatus, Runtime, durable_object,
};
use tokio::time::sleep;

#[durable_object(hibernate_after = "1s", shutdown_after = "10s")]
pub struct Session {
    hits: u32,
}

#[durable_object]
impl Session {
    #[handler]
    fn handle_hit(&mut self) -> u32 {
        self.hits += 1;
        self.hits
    }

    #[handler]
    fn handle_hits(&self) -> u32 {
        self.hits
    }
}

fn faulty() -> (Runtime, FaultyStorage<MemoryStorage>) {
    let store = FaultyStorage::new(MemoryStorage::new());
    (Runtime::new(store.clone()), store)
}

#[tokio::test(start_paused = true)]
async fn idle_objects_hibernate_and_wake_without_a_storage_read() {
    let (rt, store) = faulty();
    let mut events = rt.subscribe();
    Session::hit(&rt, "s").await.unwrap();
    assert_eq!(
        rt.status::<Session>("s").await.unwrap(),
        ObjectStatus::Active
    );
    let loads = store.loads();

    sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        rt.status::<Session>("s").await.unwrap(),
        ObjectStatus::Hibernated
    );
    assert_eq!(Session::hit(&rt, "s").await.unwrap(), 2);
    assert_eq!(
        rt.status::<Session>("s").await.unwrap(),
        ObjectStatus::Active
    );
    assert_eq!(store.loads(), loads, "waking reads no storage");

    let seen = durable_tests::received(&mut events);
    assert!(matches!(seen[0], Event::Created { .. }), "{seen:?}");
    assert!(
        seen.iter().any(|e| matches!(e, Event::Hibernated { .. })),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|e| matches!(e, Event::Woken { .. })),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_before_the_idle_timer_fires_postpones_hibernation_to_its_own_deadline() {
    let (rt, _store) = faulty();
    let status = || rt.status::<Session>("s");
    Session::hit(&rt, "s").await.unwrap();
    sleep(Duration::from_millis(700)).await;
    Session::hit(&rt, "s").await.unwrap();
    // The timer armed after the first call fires at 1 s; the object was used at 0.7 s.
    sleep(Duration::from_millis(900)).await;
    assert_eq!(status().await.unwrap(), ObjectStatus::Active, "at 1.6 s");
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        status().await.unwrap(),
        ObjectStatus::Hibernated,
        "at 1.8 s"
    );
}

#[tokio::test(start_paused = true)]
async fn idle_objects_shut_down_and_reload_from_storage() {
    let (rt, store) = faulty();
    Session::hit(&rt, "s").await.unwrap();
    sleep(Duration::from_secs(11)).await;
    assert_eq!(rt.live_objects::<Session>(), 0);
    assert_eq!(
        rt.status::<Session>("s").await.unwrap(),
        ObjectStatus::Stored
    );
    let loads = store.loads();
    assert_eq!(Session::hit(&rt, "s").await.unwrap(), 2);
    assert_eq!(
        store.loads(),
        loads + 1,
        "a shut-down object reloads from storage"
    );
}

#[tokio::test(start_paused = true)]
async fn every_call_resets_the_shutdown_timer() {
    let (rt, _store) = faulty();
    for _ in 0..4 {
        Session::hit(&rt, "s").await.unwrap();
        sleep(Duration::from_secs(6)).await;
        assert_eq!(rt.live_objects::<Session>(), 1);
    }
    sleep(Duration::from_secs(5)).await;
    assert_eq!(rt.live_objects::<Session>(), 0);
}

#[durable_object]
pub struct Plain {
    n: u32,
}

#[durable_object]
impl Plain {
    #[handler]
    fn handle_bump(&mut self) -> u32 {
        self.n += 1;
        self.n
    }
}

#[tokio::test(start_paused = true)]
async fn options_precedence_runtime_default_then_dsl_then_registration() {
    // Runtime default only (Plain declares nothing).
    let rt = Runtime::builder(MemoryStorage::new())
        .default_options(ObjectOptions::new().with_shutdown_after(Duration::from_secs(3)))
        .build();
    Plain::bump(&rt, "p").await.unwrap();
    sleep(Duration::from_secs(4)).await;
    assert_eq!(rt.live_objects::<Plain>(), 0, "runtime default applies");

    // The DSL value (10 s) beats the runtime default (3 s).
    let rt = Runtime::builder(MemoryStorage::new())
        .default_options(ObjectOptions::new().with_shutdown_after(Duration::from_secs(3)))
        .build();
    Session::hit(&rt, "s").await.unwrap();
    sleep(Duration::from_secs(4)).await;
    assert_eq!(
        rt.live_objects::<Session>(),
        1,
        "DSL value beats the runtime default"
    );
    sleep(Duration::from_secs(7)).await;
    assert_eq!(rt.live_objects::<Session>(), 0);

    // A registration override (2 s) beats the DSL value (10 s).
    let rt = Runtime::builder(MemoryStorage::new())
        .register_with::<Session>(ObjectOptions::new().with_shutdown_after(Duration::from_secs(2)))
        .build();
    Session::hit(&rt, "s").await.unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(
        rt.live_objects::<Session>(),
        0,
        "registration override beats the DSL"
    );
    assert_eq!(
        rt.options_of::<Session>().hibernate_after,
        Some(Duration::from_secs(1)),
        "unset override fields keep the DSL value"
    );
}

#[durable_object(queue_capacity = 2, call_timeout = "2s")]
pub struct Slow {
    value: u32,
}

#[durable_object]
impl Slow {
    #[handler]
    async fn handle_work(&mut self, millis: u64) -> u32 {
        self.value += 1;
        sleep(Duration::from_millis(millis)).await;
        self.value
    }

    #[handler]
    fn handle_value(&self) -> u32 {
        self.value
    }
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_calls_at_once() {
    let (rt, _store) = faulty();
    let running = {
        let rt = rt.clone();
        tokio::spawn(async move { Slow::work(&rt, "busy", 100).await })
    };
    sleep(Duration::from_millis(10)).await;
    let calls = (0..10).map(|_| Slow::work(&rt, "busy", 100));
    let results = futures_util::future::join_all(calls).await;
    let overloaded = results
        .iter()
        .filter(|r| matches!(r, Err(Error::Overloaded { capacity: 2, .. })))
        .count();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    // One call runs and two wait in the queue; the rest are refused at once.
    assert!(running.await.unwrap().is_ok());
    assert_eq!(ok, 2, "{results:?}");
    assert_eq!(overloaded, 8);
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(Error::is_retryable)
    );
    assert_eq!(Slow::value(&rt, "busy").await.unwrap(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_discards_the_activation() {
    let (rt, _store) = faulty();
    assert_eq!(Slow::work(&rt, "t", 1).await.unwrap(), 1);
    match Slow::work(&rt, "t", 5_000).await {
        Err(Error::Timeout { handler, .. }) => assert_eq!(handler, "work"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The half-run handler's increment is not kept.
    assert_eq!(Slow::value(&rt, "t").await.unwrap(), 1);
}

#[durable_object]
pub struct Caller {
    calls: u32,
}

#[durable_object]
impl Caller {
    /// Calls another handler of its own object: it would wait for itself.
    #[handler]
    async fn handle_call_self(&mut self, ctx: &Context) -> Result<u32, String> {
        Caller::count(ctx.runtime(), ctx.id())
            .await
            .map_err(|e| e.to_string())
    }

    #[handler]
    async fn handle_ping_pong(&mut self, ctx: &Context, peer: String) -> Result<u32, String> {
        self.calls += 1;
        Callee::bounce(ctx.runtime(), &peer, ctx.id().to_owned())
            .await
            .map_err(|e| e.to_string())
    }

    #[handler]
    fn handle_count(&self) -> u32 {
        self.calls
    }

    /// Deleting its own object from inside a handler would wait for that handler.
    #[handler]
    async fn handle_delete_self(&mut self, ctx: &Context) -> Result<bool, String> {
        ctx.runtime()
            .delete::<Caller>(ctx.id())
            .await
            .map_err(|e| e.to_string())
    }
}

#[durable_object]
pub struct Callee {}

#[durable_object]
impl Callee {
    #[handler]
    async fn handle_bounce(&mut self, ctx: &Context, back_to: String) -> Result<u32, String> {
        match Caller::count(ctx.runtime(), &back_to).await {
            Err(Error::CallCycle { chain, .. }) => {
                Err(format!("cycle through {} objects", chain.len()))
            }
            Ok(n) => Ok(n),
            Err(other) => Err(other.to_string()),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn self_calls_and_cycles_fail_at_once_instead_of_deadlocking() {
    let (rt, _store) = faulty();
    let err = Caller::call_self(&rt, "a").await.unwrap_err();
    match err {
        Error::Handler(message) => assert!(message.contains("call cycle"), "{message}"),
        other => panic!("expected the handler to report a cycle, got {other:?}"),
    }
    // A -> B -> A: B's call back to A is refused.
    match Caller::ping_pong(&rt, "a", "b".to_owned()).await {
        Err(Error::Handler(message)) => {
            assert!(message.ends_with("cycle through 2 objects"), "{message}")
        }
        other => panic!("expected a cycle, got {other:?}"),
    }
    // The ping-pong call failed, so its increment was rolled back.
    assert_eq!(Caller::count(&rt, "a").await.unwrap(), 0);
    match Caller::delete_self(&rt, "a").await {
        Err(Error::Handler(message)) => assert!(message.contains("call cycle"), "{message}"),
        other => panic!("expected a cycle, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_finishes_queued_calls_and_refuses_new_ones() {
    let (rt, store) = faulty();
    let queued: Vec<_> = (0..2)
        .map(|_| {
            let rt = rt.clone();
            tokio::spawn(async move { Slow::work(&rt, "g", 500).await })
        })
        .collect();
    tokio::task::yield_now().await;
    rt.shutdown().await;
    for call in queued {
        assert!(call.await.unwrap().is_ok());
    }
    assert!(matches!(
        Slow::work(&rt, "g", 1).await,
        Err(Error::ShuttingDown)
    ));
    let stored = Runtime::new(store.inner().clone());
    assert_eq!(
        Slow::value(&stored, "g").await.unwrap(),
        2,
        "both calls were committed"
    );
}

#[tokio::test(start_paused = true)]
async fn delete_removes_state_and_alarms_and_introspection_reads_storage() {
    let (rt, _store) = faulty();
    for id in ["a", "b", "c"] {
        Session::hit(&rt, id).await.unwrap();
    }
    Session::hit(&rt, "b").await.unwrap();
    let state = rt.read_state::<Session>("b").await.unwrap().unwrap();
    assert_eq!(state.hits, 2);
    assert!(rt.read_state::<Session>("zzz").await.unwrap().is_none());
    assert_eq!(
        rt.status::<Session>("zzz").await.unwrap(),
        ObjectStatus::Absent
    );

    let page = rt.list_ids::<Session>(None, 10).await.unwrap();
    assert_eq!(page.ids, ["a", "b", "c"]);

    assert!(rt.delete::<Session>("b").await.unwrap());
    assert!(!rt.delete::<Session>("b").await.unwrap());
    assert!(rt.read_state::<Session>("b").await.unwrap().is_none());
    assert_eq!(
        rt.list_ids::<Session>(None, 10).await.unwrap().ids,
        ["a", "c"]
    );
    // A call after deletion starts from the default state.
    assert_eq!(Session::hits(&rt, "b").await.unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn past_the_live_cap_the_least_recently_used_idle_object_leaves() {
    let store = MemoryStorage::new();
    let rt = Runtime::builder(store.clone()).max_live_objects(2).build();
    let mut events = rt.subscribe();
    Plain::bump(&rt, "a").await.unwrap();
    sleep(Duration::from_millis(10)).await;
    Plain::bump(&rt, "b").await.unwrap();
    sleep(Duration::from_millis(10)).await;
    Plain::bump(&rt, "a").await.unwrap();
    sleep(Duration::from_millis(10)).await;
    // `b` is the least recently used: starting `c` shuts it down.
    Plain::bump(&rt, "c").await.unwrap();
    assert_eq!(rt.live_objects::<Plain>(), 2);
    assert_eq!(rt.status::<Plain>("b").await.unwrap(), ObjectStatus::Stored);
    assert_eq!(rt.status::<Plain>("a").await.unwrap(), ObjectStatus::Active);
    sleep(Duration::from_millis(10)).await;
    let shut_down: Vec<String> = durable_tests::received(&mut events)
        .into_iter()
        .filter_map(|e| match e {
            Event::ShutDown { key } => Some(key.object_id),
            _ => None,
        })
        .collect();
    assert_eq!(shut_down, ["b"]);
    // Nothing was lost: `b` comes back from storage.
    assert_eq!(Plain::bump(&rt, "b").await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn past_the_live_cap_with_no_idle_object_new_activations_are_refused() {
    let rt = Runtime::builder(MemoryStorage::new())
        .max_live_objects(1)
        .build();
    let busy = {
        let rt = rt.clone();
        tokio::spawn(async move { Slow::work(&rt, "busy", 1_000).await })
    };
    sleep(Duration::from_millis(10)).await;
    match Slow::work(&rt, "other", 1).await {
        Err(err @ Error::TooManyObjects { .. }) => assert!(err.is_retryable()),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(busy.await.unwrap().is_ok());
    // Once the busy object is idle it can make room.
    assert_eq!(Slow::work(&rt, "other", 1).await.unwrap(), 1);
}

/// The same lifecycle in real time on SQLite: hibernation wakes without a read, idle
/// shutdown reloads from the file. Each step waits for the state it needs (with a deadline)
/// rather than for a fixed time, and each runtime's other timer is far enough away that a
/// stalled machine cannot skip past the state under test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_objects_hibernate_shut_down_and_come_back() {
    let backend = durable_tests::sqlite().await;
    let runtime = |hibernate_after: u64, shutdown_after: u64| {
        let store = FaultyStorage::new(backend.store.clone());
        let rt = Runtime::builder(store.clone())
            .register_with::<Plain>(
                ObjectOptions::new()
                    .with_hibernate_after(Duration::from_millis(hibernate_after))
                    .with_shutdown_after(Duration::from_millis(shutdown_after)),
            )
            .build();
        (rt, store)
    };

    // Hibernation: wakes without a storage read. (It would not shut down within the hour.)
    let (rt, store) = runtime(30, 3_600_000);
    assert_eq!(Plain::bump(&rt, "hibernating").await.unwrap(), 1);
    let loads = store.loads();
    durable_tests::eventually(|| async {
        rt.status::<Plain>("hibernating").await.unwrap() == ObjectStatus::Hibernated
    })
    .await;
    assert_eq!(Plain::bump(&rt, "hibernating").await.unwrap(), 2);
    assert_eq!(store.loads(), loads, "waking reads no storage");

    // Idle shutdown: leaves memory, and the next call reloads from the file.
    let (rt, store) = runtime(30, 150);
    assert_eq!(Plain::bump(&rt, "shutting-down").await.unwrap(), 1);
    let loads = store.loads();
    durable_tests::eventually(|| async { rt.live_objects::<Plain>() == 0 }).await;
    assert_eq!(Plain::bump(&rt, "shutting-down").await.unwrap(), 2);
    assert_eq!(
        store.loads(),
        loads + 1,
        "a shut-down object reloads from the file"
    );
}

#[tokio::test(start_paused = true)]
async fn objects_left_without_a_state_leave_memory_after_hibernate_after() {
    // Default options: hibernate after 5 minutes, never shut down. An object left with no
    // state (deleted, or its load failed) has nothing to hibernate, so its task goes instead.
    let (rt, store) = faulty();
    for i in 0..3 {
        assert!(!rt.delete::<Plain>(&format!("never-{i}")).await.unwrap());
    }
    store.fail_loads(1);
    assert!(Plain::bump(&rt, "unreachable").await.is_err());
    assert_eq!(rt.live_objects::<Plain>(), 4);
    sleep(Duration::from_secs(4 * 60)).await;
    assert_eq!(rt.live_objects::<Plain>(), 4, "not before hibernate_after");
    sleep(Duration::from_secs(60 + 1)).await;
    assert_eq!(rt.live_objects::<Plain>(), 0);
    assert_eq!(Plain::bump(&rt, "unreachable").await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn idle_deadlines_too_far_to_represent_are_never_reached() {
    let rt = Runtime::builder(MemoryStorage::new())
        .default_options(
            ObjectOptions::new()
                .with_hibernate_after(Duration::MAX)
                .with_shutdown_after(Duration::MAX),
        )
        .build();
    assert_eq!(Plain::bump(&rt, "p").await.unwrap(), 1);
    sleep(Duration::from_secs(3600)).await;
    assert_eq!(Plain::bump(&rt, "p").await.unwrap(), 2);
    assert_eq!(rt.status::<Plain>("p").await.unwrap(), ObjectStatus::Active);
}

#[durable_object]
pub struct Bell {
    rings: u32,
}

#[durable_object]
impl Bell {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context, after_ms: u64) {
        ctx.schedule_alarm(Bell::RING, Duration::from_millis(after_ms));
    }

    #[handler]
    fn handle_rings(&self) -> u32 {
        self.rings
    }

    #[alarm]
    fn ring(&mut self) {
        self.rings += 1;
    }
}

#[tokio::test(start_paused = true)]
async fn alarms_refused_by_a_full_runtime_wait_without_using_up_their_attempts() {
    let rt = Runtime::builder(MemoryStorage::new())
        .clock_follows_tokio()
        .max_live_objects(1)
        .alarm_settings(
            durable_runtime::AlarmSettings::default()
                .with_poll_interval(Duration::from_millis(50))
                .with_retry(durable_runtime::RetryPolicy::new(
                    Duration::from_millis(10),
                    Duration::from_millis(20),
                    2,
                )),
        )
        .register::<Bell>()
        .build();
    Bell::arm(&rt, "b", 200).await.unwrap();
    // The only room goes to an object busy past the alarm's due time: the alarm's object
    // cannot start, far more often than its two attempts.
    let busy = {
        let rt = rt.clone();
        tokio::spawn(async move {
            // The bell makes room once its task has seen its call through.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                match Slow::work(&rt, "busy", 1_500).await {
                    Err(Error::TooManyObjects { .. }) => {
                        assert!(tokio::time::Instant::now() < deadline, "no room for 10 s");
                        sleep(Duration::from_millis(5)).await;
                    }
                    done => return done,
                }
            }
        })
    };
    // Well past the due time and the two attempts' backoff, the alarm still waits, alive.
    sleep(Duration::from_millis(1_000)).await;
    let waiting = rt.list_alarms::<Bell>("b").await.unwrap();
    assert!(
        matches!(waiting.as_slice(), [alarm] if !alarm.dead),
        "{waiting:?}"
    );
    busy.await.unwrap().unwrap();
    durable_tests::eventually(|| async { Bell::rings(&rt, "b").await.is_ok_and(|n| n == 1) }).await;
    assert!(rt.list_alarms::<Bell>("b").await.unwrap().is_empty());
}
