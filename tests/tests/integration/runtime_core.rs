//! The core runtime semantics, on every storage backend: typed clients, load and merge, the
//! persistence contract, rollback on error and panic, one instance per object, ordering, bad
//! input.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{Context, Error, InvalidId, Runtime, durable_object};
use durable_tests::backend_tests;

#[derive(Debug, PartialEq, Eq)]
pub struct TooBig(i64);

impl std::fmt::Display for TooBig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is too big", self.0)
    }
}

#[durable_object]
pub struct Counter {
    #[field(default = 0)]
    count: i64,
    history: Vec<i64>,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_increment(&mut self, by: i64) -> i64 {
        self.count += by;
        self.count
    }

    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }

    #[handler]
    fn handle_checked_add(&mut self, by: i64) -> Result<i64, TooBig> {
        self.count += by;
        if self.count > 100 {
            return Err(TooBig(self.count));
        }
        Ok(self.count)
    }

    #[handler]
    fn handle_add_then_panic(&mut self, by: i64) -> i64 {
        self.count += by;
        panic!("boom after adding {by}");
    }

    /// Panics after an await: the `async` path catches it as the synchronous one does.
    #[handler]
    async fn handle_add_then_panic_later(&mut self, by: i64) -> i64 {
        self.count += by;
        tokio::task::yield_now().await;
        panic!("boom later after adding {by}");
    }

    #[handler]
    fn handle_touch(&mut self) {}

    /// Reads, yields to the scheduler, then writes: lost updates would show if two calls
    /// interleaved.
    #[handler]
    async fn handle_slow_append(&mut self, value: i64) -> usize {
        let before = self.history.len();
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.history.push(value);
        assert_eq!(self.history.len(), before + 1);
        self.history.len()
    }

    #[handler]
    fn handle_history(&self) -> Vec<i64> {
        self.history.clone()
    }
}

fn faulty(store: Arc<dyn Storage>) -> (Runtime, FaultyStorage<Arc<dyn Storage>>) {
    let store = FaultyStorage::new(store);
    (Runtime::new(store.clone()), store)
}

async fn stored(store: &impl Storage, ty: &str, id: &str) -> Option<(serde_json::Value, u64)> {
    store
        .load(&ObjectKey::new(ty, id))
        .await
        .unwrap()
        .object()
        .map(|s| (serde_json::from_slice(&s.state).unwrap(), s.version))
}

async fn typed_client_round_trip_and_state_is_committed(store: Arc<dyn Storage>) {
    let rt = Runtime::new(store.clone());
    assert_eq!(Counter::increment(&rt, "user:123", 2).await.unwrap(), 2);
    assert_eq!(Counter::increment(&rt, "user:123", 3).await.unwrap(), 5);
    assert_eq!(Counter::get(&rt, "user:123").await.unwrap(), 5);
    let (state, version) = stored(&store, "Counter", "user:123").await.unwrap();
    assert_eq!(state["count"], 5);
    // Created by the first write (version 1), then a second.
    assert_eq!(version, 2);

    let handle = Counter::handle(&rt, "user:123");
    assert_eq!(handle.increment(1).await.unwrap(), 6);
    assert_eq!(handle.id(), "user:123");
}

async fn the_first_change_stores_the_object(store: Arc<dyn Storage>) {
    let rt = Runtime::new(store.clone());
    // A read, and a write that changes nothing, run on the default state and store nothing.
    assert_eq!(Counter::get(&rt, "fresh").await.unwrap(), 0);
    Counter::increment(&rt, "fresh", 0).await.unwrap();
    assert_eq!(stored(&store, "Counter", "fresh").await, None);
    Counter::increment(&rt, "fresh", 2).await.unwrap();
    let (state, version) = stored(&store, "Counter", "fresh").await.unwrap();
    assert_eq!(state, serde_json::json!({"count": 2, "history": []}));
    assert_eq!(version, 1);
}

async fn read_only_and_unchanged_calls_write_nothing(store: Arc<dyn Storage>) {
    let (rt, store) = faulty(store);
    Counter::increment(&rt, "a", 1).await.unwrap();
    let commits = store.commits();
    for _ in 0..5 {
        Counter::get(&rt, "a").await.unwrap();
        Counter::touch(&rt, "a").await.unwrap();
        Counter::increment(&rt, "a", 0).await.unwrap();
    }
    assert_eq!(store.commits(), commits);
}

/// The same type as `Counter` after a release added a field and dropped another.
mod v2 {
    use durable_runtime::durable_object;

    #[durable_object(name = "Counter")]
    pub struct Counter {
        pub count: i64,
        #[field(default = String::from("fresh"))]
        pub label: String,
    }

    #[durable_object]
    impl Counter {
        #[handler]
        fn handle_describe(&self) -> (i64, String) {
            (self.count, self.label.clone())
        }
    }
}

async fn stored_state_is_merged_with_defaults(store: Arc<dyn Storage>) {
    let rt = Runtime::new(store.clone());
    Counter::increment(&rt, "old", 7).await.unwrap();
    // A new struct version reads the row an older one wrote: the new field takes its default
    // and the dropped field (`history`) is ignored.
    let rt2 = Runtime::new(store.clone());
    assert_eq!(
        v2::Counter::describe(&rt2, "old").await.unwrap(),
        (7, "fresh".to_owned())
    );
}

async fn failed_write_rolls_back_and_the_object_recovers(store: Arc<dyn Storage>) {
    let (rt, store) = faulty(store);
    assert_eq!(Counter::increment(&rt, "a", 10).await.unwrap(), 10);

    store.fail_commits(1);
    let err = Counter::increment(&rt, "a", 5).await.unwrap_err();
    // The runtime cannot tell a commit that failed before applying from one that failed after.
    assert!(matches!(err, Error::OutcomeUnknown { .. }), "{err:?}");
    assert!(!err.is_retryable());
    // The in-memory state was thrown away: the next call sees the committed 10.
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 10);
    assert_eq!(Counter::increment(&rt, "a", 1).await.unwrap(), 11);
}

async fn unknown_commit_outcome_reloads_from_storage(store: Arc<dyn Storage>) {
    let (rt, store) = faulty(store);
    Counter::increment(&rt, "a", 1).await.unwrap();
    // The database applied the write but the acknowledgement was lost.
    store.fail_commits_after_applying(1);
    assert!(Counter::increment(&rt, "a", 1).await.is_err());
    // The object reloads what storage holds rather than keeping a guess.
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 2);
    assert_eq!(Counter::increment(&rt, "a", 1).await.unwrap(), 3);
}

async fn failed_load_is_reported_and_retried_on_the_next_call(store: Arc<dyn Storage>) {
    let (rt, store) = faulty(store);
    store.fail_loads(1);
    let err = Counter::get(&rt, "a").await.unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err:?}");
    assert_eq!(Counter::increment(&rt, "a", 1).await.unwrap(), 1);
}

async fn handler_error_rolls_back_and_reaches_the_caller_typed(store: Arc<dyn Storage>) {
    let (rt, store) = faulty(store);
    Counter::checked_add(&rt, "a", 60).await.unwrap();
    let commits = store.commits();
    match Counter::checked_add(&rt, "a", 50).await {
        Err(Error::Handler(TooBig(110))) => {}
        other => panic!("expected the typed handler error, got {other:?}"),
    }
    assert_eq!(store.commits(), commits, "a failed handler writes nothing");
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 60);
    assert_eq!(Counter::checked_add(&rt, "a", 1).await.unwrap(), 61);
}

async fn panicking_handler_rolls_back_and_the_object_keeps_serving(store: Arc<dyn Storage>) {
    let (rt, store) = faulty(store);
    Counter::increment(&rt, "a", 1).await.unwrap();
    let commits = store.commits();
    for round in 0..4 {
        // Synchronous and `async` handlers take different paths through the object's task.
        let (err, expected_handler, expected_message) = if round % 2 == 0 {
            let err = Counter::add_then_panic(&rt, "a", 100).await.unwrap_err();
            (err, "add_then_panic", "boom after adding 100")
        } else {
            let err = Counter::add_then_panic_later(&rt, "a", 100)
                .await
                .unwrap_err();
            (err, "add_then_panic_later", "boom later after adding 100")
        };
        match &err {
            Error::Panicked {
                handler, message, ..
            } => {
                assert_eq!(*handler, expected_handler);
                assert!(message.contains(expected_message), "{message}");
            }
            other => panic!("expected a panic error, got {other:?}"),
        }
        assert!(!err.is_retryable());
    }
    assert_eq!(store.commits(), commits);
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 1);
    // Other objects are unaffected.
    assert_eq!(Counter::increment(&rt, "b", 2).await.unwrap(), 2);
}

/// Activations per object id, across every test of this module.
static ACTIVATIONS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

fn activations(id: &str) -> usize {
    let counts = ACTIVATIONS.lock().unwrap();
    counts
        .as_ref()
        .and_then(|c| c.get(id).copied())
        .unwrap_or(0)
}

#[durable_object]
pub struct Tally {
    count: u64,
}

#[durable_object]
impl Tally {
    #[after_load]
    fn count_activation(&mut self, ctx: &Context) {
        let mut counts = ACTIVATIONS.lock().unwrap();
        *counts
            .get_or_insert_with(HashMap::new)
            .entry(ctx.id().to_owned())
            .or_default() += 1;
    }

    #[handler]
    fn handle_add(&mut self) -> u64 {
        self.count += 1;
        self.count
    }
}

async fn racing_first_calls_reach_one_instance(store: Arc<dyn Storage>) {
    let rt = Runtime::new(store);
    let id = durable_tests::unique_prefix();
    let calls: Vec<_> = (0..200)
        .map(|_| {
            let rt = rt.clone();
            let id = id.clone();
            tokio::spawn(async move { Tally::add(&rt, &id).await.unwrap() })
        })
        .collect();
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await.unwrap());
    }
    results.sort_unstable();
    assert_eq!(results, (1..=200).collect::<Vec<u64>>());
    assert_eq!(activations(&id), 1);
    assert_eq!(rt.live_objects::<Tally>(), 1);
}

async fn calls_run_one_at_a_time_in_arrival_order_across_awaits(store: Arc<dyn Storage>) {
    let rt = Runtime::new(store);
    // `join_all` polls the calls in order, so they enqueue in index order.
    let calls = (0..50).map(|i| Counter::slow_append(&rt, "ordered", i));
    let lengths = futures_util::future::join_all(calls).await;
    let lengths: Vec<usize> = lengths.into_iter().map(Result::unwrap).collect();
    assert_eq!(lengths, (1..=50).collect::<Vec<usize>>());
    assert_eq!(
        Counter::history(&rt, "ordered").await.unwrap(),
        (0..50).collect::<Vec<i64>>()
    );
}

async fn undecodable_state_is_reported_and_never_overwritten(store: Arc<dyn Storage>) {
    let rt = Runtime::new(store.clone());
    let bad = br#"{"count":"seven","history":[]}"#.to_vec();
    store
        .commit(&[ObjectWrite {
            key: ObjectKey::new("Counter", "broken"),
            expected_version: 0,
            state: Some(bad.clone()),
            alarms: vec![],
            kv: Vec::new(),
            idempotency: None,
            fsm: Default::default(),
        }])
        .await
        .unwrap();
    for _ in 0..3 {
        match Counter::increment(&rt, "broken", 1).await {
            Err(Error::Decode { key, path, .. }) => {
                assert_eq!(key, ObjectKey::new("Counter", "broken"));
                assert_eq!(path, "count");
            }
            other => panic!("expected a decode error, got {other:?}"),
        }
    }
    let stored = store
        .load(&ObjectKey::new("Counter", "broken"))
        .await
        .unwrap()
        .object()
        .unwrap();
    assert_eq!(stored.state, bad);
    assert_eq!(stored.version, 1);
    assert_eq!(Counter::increment(&rt, "healthy", 1).await.unwrap(), 1);
}

async fn odd_ids_round_trip_and_invalid_ids_touch_nothing(store: Arc<dyn Storage>) {
    let rt = Runtime::new(store.clone());
    let long = "é".repeat(512);
    let odd = [
        "a/b/c",
        "quote'\"double",
        "100%_like",
        "🦀 crab",
        "'; DROP TABLE durable_objects; --",
        " spaced ",
        long.as_str(),
    ];
    for (i, id) in odd.iter().enumerate() {
        assert_eq!(
            Counter::increment(&rt, id, i as i64 + 1).await.unwrap(),
            i as i64 + 1
        );
    }
    let rt2 = Runtime::new(store.clone());
    for (i, id) in odd.iter().enumerate() {
        assert_eq!(Counter::get(&rt2, id).await.unwrap(), i as i64 + 1);
    }
    let page = store.list_ids("Counter", None, 100).await.unwrap();
    assert_eq!(page.ids.len(), odd.len());

    let too_long = "x".repeat(1025);
    for (id, expected) in [
        ("", InvalidId::Empty),
        (too_long.as_str(), InvalidId::TooLong { len: 1025 }),
        ("nul\0byte", InvalidId::ContainsNul { position: 3 }),
    ] {
        match Counter::increment(&rt, id, 1).await {
            Err(Error::InvalidId(err)) => assert_eq!(err, expected),
            other => panic!("expected an invalid id error, got {other:?}"),
        }
    }
    let page = store.list_ids("Counter", None, 100).await.unwrap();
    assert_eq!(page.ids.len(), odd.len());
}

#[durable_object]
pub struct Stamped {
    loaded_as: String,
    calls: u32,
}

#[durable_object]
impl Stamped {
    #[after_load]
    async fn stamp(&mut self, ctx: &Context) {
        self.loaded_as = format!("{}:{}", ctx.object_type(), ctx.id());
    }

    #[handler]
    fn handle_call(&mut self) -> u32 {
        self.calls += 1;
        self.calls
    }
}

async fn after_load_changes_are_committed_before_the_first_call(store: Arc<dyn Storage>) {
    let (rt, store) = faulty(store);
    // The first call fails to commit: the after-load write is the one that fails, so the call
    // is refused and nothing ran.
    store.fail_commits(1);
    assert!(Stamped::call(&rt, "s").await.is_err());
    assert_eq!(store.commits(), 0);
    assert_eq!(Stamped::call(&rt, "s").await.unwrap(), 1);
    let (state, _) = stored(&store, "Stamped", "s").await.unwrap();
    assert_eq!(state["loaded_as"], "Stamped:s");
    assert_eq!(state["calls"], 1);
}

async fn two_runtimes_are_independent_and_a_new_one_resumes_from_storage(store: Arc<dyn Storage>) {
    let rt1 = Runtime::new(store.clone());
    let rt2 = Runtime::new(MemoryStorage::new());
    Counter::increment(&rt1, "a", 1).await.unwrap();
    Counter::increment(&rt2, "a", 5).await.unwrap();
    assert_eq!(Counter::get(&rt1, "a").await.unwrap(), 1);
    assert_eq!(Counter::get(&rt2, "a").await.unwrap(), 5);
    drop(rt1);
    // A "restarted process": a fresh runtime over the same database.
    let rt3 = Runtime::new(store);
    assert_eq!(Counter::increment(&rt3, "a", 1).await.unwrap(), 2);
}

async fn a_runtime_that_lost_a_race_reports_a_conflict_and_reloads(store: Arc<dyn Storage>) {
    let rt1 = Runtime::new(store.clone());
    let rt2 = Runtime::new(store.clone());
    Counter::increment(&rt1, "shared", 1).await.unwrap();
    Counter::increment(&rt2, "shared", 10).await.unwrap();
    // rt1's activation still holds version 2; rt2 committed version 3.
    let err = Counter::increment(&rt1, "shared", 1).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(Counter::increment(&rt1, "shared", 1).await.unwrap(), 12);
}

backend_tests!(
    typed_client_round_trip_and_state_is_committed,
    the_first_change_stores_the_object,
    read_only_and_unchanged_calls_write_nothing,
    stored_state_is_merged_with_defaults,
    failed_write_rolls_back_and_the_object_recovers,
    unknown_commit_outcome_reloads_from_storage,
    failed_load_is_reported_and_retried_on_the_next_call,
    handler_error_rolls_back_and_reaches_the_caller_typed,
    panicking_handler_rolls_back_and_the_object_keeps_serving,
    racing_first_calls_reach_one_instance,
    calls_run_one_at_a_time_in_arrival_order_across_awaits,
    undecodable_state_is_reported_and_never_overwritten,
    odd_ids_round_trip_and_invalid_ids_touch_nothing,
    after_load_changes_are_committed_before_the_first_call,
    two_runtimes_are_independent_and_a_new_one_resumes_from_storage,
    a_runtime_that_lost_a_race_reports_a_conflict_and_reloads,
);
