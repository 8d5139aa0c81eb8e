//! Jobs (`#[job]`), batched inserts (`insert_async`) and FSM version pinning, on memory, SQLite
//! and Postgres.
//!
//! Retries run under the engine's virtual clock (`clock_follows_tokio` + `testing::advance`),
//! so backoff is checked without sleeping. Batching is counted with the engine's metrics on a
//! current-thread runtime, where the writer task runs only when the test yields: every
//! instance queued before the first await is in the queue when the writer looks, which makes
//! the batches exact. Waits on real workers are bounded by deadlines that fail the test.

use crate::fsm_support;

use std::time::{Duration, SystemTime};

use durable_runtime::fsm::metrics::{INSERT_BATCH_ROWS, INSERT_BATCHES};
use durable_runtime::fsm::store::{FsmStore, ListFilter, PickRequest};
use durable_runtime::fsm::testing::{DrainOptions, Tally, advance, drain, drain_with};
use durable_runtime::fsm::{
    Engine, EngineBuilder, Error, Instance, InstanceId, Job, JobSettings, Outcome, Settled, Status,
    StepContext, TryInsertError, durable_fsm, job,
};
use fsm_support::FsmBackend;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

const PATIENCE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
#[error("the mail server refused {0}")]
pub struct Refused(String);

/// Fails while `fail_first` attempts have not run, then succeeds.
#[job(
    name = "send_email",
    queue = "mail",
    max_attempts = 3,
    backoff = "1s",
    max_backoff = "1500ms"
)]
pub struct SendEmail {
    to: String,
    #[field(default = 0)]
    fail_first: u32,
}

impl Job for SendEmail {
    type Error = Refused;

    async fn perform(&self, ctx: &StepContext) -> Result<(), Refused> {
        if ctx.attempt() < self.fail_first {
            return Err(Refused(format!("{} (attempt {})", self.to, ctx.attempt())));
        }
        Ok(())
    }
}

/// Panics on every run: a panic is an attempt like an error.
#[job(queue = "mail", max_attempts = 1)]
pub struct Panicky {}

impl Job for Panicky {
    type Error = String;

    async fn perform(&self, _ctx: &StepContext) -> Result<(), String> {
        panic!("boom")
    }
}

fn mail_engine(backend: &FsmBackend) -> Engine {
    backend
        .engine()
        .register::<SendEmail>()
        .register::<Panicky>()
        .build()
        .expect("engine")
}

fn email(to: &str, fail_first: u32) -> SendEmail {
    SendEmail {
        to: to.to_owned(),
        fail_first,
    }
}

async fn record(engine: &Engine, id: InstanceId) -> durable_runtime::fsm::InstanceRecord {
    engine.get(id).await.expect("get").expect("the instance")
}

/// The policy's constants and delays, as the attribute set them.
async fn job_settings(_backend: FsmBackend) {
    assert_eq!(SendEmail::MAX_ATTEMPTS, 3);
    assert_eq!(SendEmail::BACKOFF, Duration::from_secs(1));
    assert_eq!(SendEmail::MAX_BACKOFF, Duration::from_millis(1500));
    assert_eq!(SendEmail::delay(0), Duration::from_secs(1));
    assert_eq!(SendEmail::delay(1), Duration::from_millis(1500));
    assert_eq!(SendEmail::delay(40), Duration::from_millis(1500));
    assert_eq!(
        <SendEmail as durable_runtime::fsm::FsmState>::NAME,
        "send_email"
    );
    assert_eq!(<SendEmail as durable_runtime::fsm::FsmState>::QUEUE, "mail");
}

/// A job that succeeds at once ends `done`, after one run.
async fn job_succeeds(backend: FsmBackend) {
    let engine = mail_engine(&backend);
    let id = engine.insert(email("ada@example.com", 0)).await.unwrap();
    let tally = drain(&engine).await.unwrap();
    assert_eq!(tally.steps, 1);
    let row = record(&engine, id).await;
    assert_eq!(row.status, Status::Done);
    assert_eq!((row.step.as_str(), row.attempt), ("perform", 0));
    assert_eq!(row.last_error, None);
    engine.shutdown().await;
}

/// Runs the steps due now on the engine's clock (delays are not collapsed).
async fn due(engine: &Engine) -> Result<Tally, durable_runtime::fsm::testing::DrainError> {
    drain_with(
        engine,
        DrainOptions {
            collapse_delays: false,
            ..DrainOptions::default()
        },
    )
    .await
}

/// Asserts the row waits for its retry `delay` after a run that failed between `before` and
/// `after` (engine clock), at `attempt`.
fn assert_waits(
    row: &durable_runtime::fsm::InstanceRecord,
    attempt: u32,
    delay: Duration,
    (before, after): (SystemTime, SystemTime),
) {
    assert_eq!(row.status, Status::Runnable);
    assert_eq!(row.attempt, attempt);
    assert!(
        row.eligible_at >= before + delay - Duration::from_micros(1)
            && row.eligible_at <= after + delay,
        "retry {attempt} is due {:?} after the run, not {delay:?}",
        row.eligible_at.duration_since(before).unwrap_or_default()
    );
}

/// A job that always fails runs `max_attempts` times, waiting its capped exponential backoff
/// between runs (not running before it is due), and ends `failed` with its last error.
async fn job_exhausts_attempts(backend: FsmBackend) {
    let engine = mail_engine(&backend);
    let id = engine.insert(email("nobody.invalid", 99)).await.unwrap();

    let before = engine.now();
    assert_eq!(due(&engine).await.unwrap().steps, 1);
    let row = record(&engine, id).await;
    assert_waits(&row, 1, Duration::from_secs(1), (before, engine.now()));

    // Not due yet: nothing runs.
    advance(&engine, Duration::from_millis(500));
    assert_eq!(due(&engine).await.unwrap().steps, 0);
    advance(&engine, Duration::from_millis(600));
    let before = engine.now();
    assert_eq!(due(&engine).await.unwrap().steps, 1);
    let row = record(&engine, id).await;
    // 2 s doubled from 1 s, capped at 1.5 s.
    assert_waits(&row, 2, Duration::from_millis(1500), (before, engine.now()));

    advance(&engine, Duration::from_millis(1000));
    assert_eq!(due(&engine).await.unwrap().steps, 0);
    advance(&engine, Duration::from_millis(600));
    assert_eq!(due(&engine).await.unwrap().steps, 1);
    let row = record(&engine, id).await;
    assert_eq!(row.status, Status::Failed);
    assert_eq!(
        row.last_error.as_deref(),
        Some("the mail server refused nobody.invalid (attempt 2)")
    );
    // Ended: nothing more runs, however long we wait.
    advance(&engine, Duration::from_secs(3600));
    assert_eq!(due(&engine).await.unwrap().steps, 0);
    engine.shutdown().await;
}

/// A job that fails twice then succeeds ends `done` on its third run.
async fn job_recovers(backend: FsmBackend) {
    let engine = mail_engine(&backend);
    let id = engine.insert(email("flaky@example.com", 2)).await.unwrap();
    let mut runs = 0;
    for _ in 0..3 {
        runs += due(&engine).await.unwrap().steps;
        advance(&engine, Duration::from_secs(2));
    }
    assert_eq!(runs, 3);
    let row = record(&engine, id).await;
    assert_eq!((row.status, row.attempt), (Status::Done, 2));
    engine.shutdown().await;
}

/// A job that panics fails with the panic once its attempts are spent.
async fn job_panics(backend: FsmBackend) {
    let engine = mail_engine(&backend);
    let id = engine.insert(Panicky {}).await.unwrap();
    assert_eq!(drain(&engine).await.unwrap().steps, 1);
    let row = record(&engine, id).await;
    assert_eq!(row.status, Status::Failed);
    assert!(
        row.last_error.as_deref().unwrap_or("").contains("boom"),
        "{:?}",
        row.last_error
    );
    engine.shutdown().await;
}

/// Jobs run by real workers, inserted with `insert_async`, end `done`.
async fn jobs_on_workers(backend: FsmBackend) {
    let engine = backend
        .engine()
        .register::<SendEmail>()
        .queue("mail", 4)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .build()
        .unwrap();
    let mut pending = Vec::new();
    for n in 0..20 {
        pending.push(
            engine
                .insert_async(email(&format!("user{n}@example.com"), 0))
                .await
                .unwrap(),
        );
    }
    for pending in pending {
        let id = pending.await.unwrap();
        let settled = engine.await_ended(id, PATIENCE).await.unwrap();
        assert!(matches!(settled, Settled::Done { .. }), "{settled:?}");
    }
    engine.shutdown().await;
}

fsm_backend_tests!(
    job_settings,
    job_succeeds,
    job_exhausts_attempts,
    job_recovers,
    job_panics,
    jobs_on_workers,
    insert_async_duplicates,
    pick_registered_leaves_other_versions,
    versions_on_two_engines,
    in_flight_instance_keeps_its_version,
);

// ---------------------------------------------------------------------------------------
// insert_async

type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

fn counter(snapshot: &Snapshot, name: &str, outcome: &str) -> u64 {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            key.key().name() == name
                && key
                    .key()
                    .labels()
                    .any(|label| label.key() == "outcome" && label.value() == outcome)
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

fn histogram(snapshot: &Snapshot, name: &str) -> Vec<f64> {
    snapshot
        .iter()
        .filter(|(key, ..)| key.key().name() == name)
        .flat_map(|(.., value)| match value {
            DebugValue::Histogram(values) => values.iter().map(|v| v.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect()
}

async fn count_rows(store: &dyn FsmStore, fsm: &str) -> usize {
    let mut total = 0;
    let mut filter = ListFilter::default().fsm(fsm).limit(1000);
    loop {
        let page = store.list(&filter).await.unwrap();
        total += page.len();
        match page.last() {
            Some(last) => filter = filter.after(last.id),
            None => return total,
        }
    }
}

/// 250 instances queued at once are written in batches of at most 100: exactly 3 statements,
/// and every caller gets the id of its own instance.
async fn insert_async_batches(backend: FsmBackend) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let engine = backend
        .engine()
        .register::<SendEmail>()
        .insert_queue(1000, 100)
        .build()
        .unwrap();
    // No await between these: the writer task cannot run before all are queued.
    let pending: Vec<_> = (0..250)
        .map(|n| {
            engine
                .try_insert_async(email(&format!("user{n}@example.com"), n))
                .unwrap()
        })
        .collect();
    let mut ids = Vec::new();
    for (n, pending) in pending.into_iter().enumerate() {
        let id = pending.await.unwrap();
        let row = record(&engine, id).await;
        let state: SendEmail = row.decode_state().unwrap();
        assert_eq!(state.to, format!("user{n}@example.com"), "instance {n}");
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 250);
    let snapshot: Snapshot = snapshotter.snapshot().into_vec();
    assert_eq!(counter(&snapshot, INSERT_BATCHES, "ok"), 3);
    let mut sizes = histogram(&snapshot, INSERT_BATCH_ROWS);
    sizes.sort_by(f64::total_cmp);
    assert_eq!(sizes, [50.0, 100.0, 100.0]);
    engine.shutdown().await;
}

/// A full queue refuses `try_insert_async` with a typed error, and `insert_async` waits for
/// room instead.
async fn insert_async_full_queue(backend: FsmBackend) {
    let engine = backend
        .engine()
        .register::<SendEmail>()
        .insert_queue(2, 10)
        .build()
        .unwrap();
    let first = engine.try_insert_async(email("a@example.com", 0)).unwrap();
    let second = engine.try_insert_async(email("b@example.com", 0)).unwrap();
    let full = engine.try_insert_async(email("c@example.com", 0));
    assert!(
        matches!(full, Err(TryInsertError::Full { capacity: 2 })),
        "{full:?}"
    );
    // Waits until the writer has taken the first two, then queues.
    let third = tokio::time::timeout(PATIENCE, engine.insert_async(email("c@example.com", 0)))
        .await
        .expect("room in the queue")
        .unwrap();
    for pending in [first, second, third] {
        pending.await.unwrap();
    }
    assert_eq!(count_rows(&*backend.store, "send_email").await, 3);
    engine.shutdown().await;
}

/// Shutdown writes everything queued, even when nobody waits for the ids; an engine that has
/// stopped refuses new instances.
async fn insert_async_shutdown_flushes(backend: FsmBackend) {
    let engine = backend
        .engine()
        .register::<SendEmail>()
        .insert_queue(1000, 64)
        .build()
        .unwrap();
    for n in 0..300 {
        drop(
            engine
                .try_insert_async(email(&format!("user{n}@example.com"), 0))
                .unwrap(),
        );
    }
    let handle = engine.clone();
    engine.shutdown().await;
    let store = backend.open_again().await;
    assert_eq!(count_rows(&*store, "send_email").await, 300);
    assert!(matches!(
        handle.insert_async(email("late@example.com", 0)).await,
        Err(Error::Stopped)
    ));
    assert!(matches!(
        handle.try_insert_async(email("late@example.com", 0)),
        Err(TryInsertError::Engine(Error::Stopped))
    ));
}

/// In one batch, the first instance of a correlation key wins and later ones (and one whose
/// key an earlier batch took) resolve to `Duplicate`; instances without a key are unaffected.
async fn insert_async_duplicates(backend: FsmBackend) {
    let engine = backend.engine().register::<SendEmail>().build().unwrap();
    let taken = engine
        .insert(Instance::new(email("x@example.com", 0)).correlation_key("mail:x"))
        .await
        .unwrap();
    let batch = [
        (Some("mail:a"), "a1"),
        (None, "n1"),
        (Some("mail:a"), "a2"),
        (Some("mail:x"), "x2"),
        (Some("mail:b"), "b1"),
        (None, "n2"),
    ];
    let mut pending = Vec::new();
    for (key, to) in batch {
        let mut instance = Instance::new(email(to, 0));
        if let Some(key) = key {
            instance = instance.correlation_key(key);
        }
        pending.push(engine.insert_async(instance).await.unwrap());
    }
    let mut answers = Vec::new();
    for pending in pending {
        answers.push(pending.await);
    }
    for ((key, to), answer) in batch.iter().zip(&answers) {
        match (to, answer) {
            (&"a2", Err(Error::Duplicate { key: k }))
            | (&"x2", Err(Error::Duplicate { key: k })) => {
                assert_eq!(Some(k.as_str()), *key);
            }
            (_, Ok(id)) => {
                let state: SendEmail = record(&engine, *id).await.decode_state().unwrap();
                assert_eq!(state.to, *to);
                assert_ne!(*id, taken);
            }
            (to, other) => panic!("{to}: {other:?}"),
        }
    }
    engine.shutdown().await;
}

/// One test per backend on a current-thread runtime, for the exact batching tests.
macro_rules! current_thread_tests {
    ($($case:ident),+ $(,)?) => {
        mod current_thread {
            mod memory {
                $(
                    #[tokio::test(flavor = "current_thread")]
                    async fn $case() {
                        super::super::$case(crate::fsm_support::memory().await).await;
                    }
                )+
            }
            mod sqlite {
                $(
                    #[tokio::test(flavor = "current_thread")]
                    async fn $case() {
                        super::super::$case(crate::fsm_support::sqlite().await).await;
                    }
                )+
            }
            mod postgres {
                $(
                    #[tokio::test(flavor = "current_thread")]
                    async fn $case() {
                        if let Some(backend) = crate::fsm_support::postgres().await {
                            super::super::$case(backend).await;
                        }
                    }
                )+
            }
        }
    };
}

current_thread_tests!(
    insert_async_batches,
    insert_async_failed_batch,
    insert_async_full_queue,
    insert_async_shutdown_flushes,
);

// ---------------------------------------------------------------------------------------
// Version pinning

/// Version 1 of the FSM "order": two steps around a signal, each saying which version ran it.
#[durable_fsm(name = "order", version = 1, queue = "orders", result = String)]
pub struct OrderV1 {
    steps: Vec<String>,
}

#[durable_fsm]
impl OrderV1 {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        self.steps.push("v1.start".into());
        Outcome::await_signal(["go"], Self::FINISH)
    }

    #[step]
    fn finish(&mut self) -> Outcome<Self> {
        self.steps.push("v1.finish".into());
        Outcome::done(self.steps.join(","))
    }
}

/// Version 2: other steps, another result.
#[durable_fsm(name = "order", version = 2, queue = "orders", result = String)]
pub struct OrderV2 {
    steps: Vec<String>,
}

#[durable_fsm]
impl OrderV2 {
    #[step(initial)]
    fn begin(&mut self) -> Outcome<Self> {
        self.steps.push("v2.begin".into());
        Outcome::await_signal(["go"], Self::END)
    }

    #[step]
    fn end(&mut self) -> Outcome<Self> {
        self.steps.push("v2.end".into());
        Outcome::done(self.steps.join(","))
    }
}

/// A pick restricted to version 2 leaves a runnable version 1 row untouched (not claimed,
/// no attempt counted), and claims it for version 1.
async fn pick_registered_leaves_other_versions(backend: FsmBackend) {
    let engine = backend.engine().build().unwrap();
    let v1 = engine.insert(OrderV1::default()).await.unwrap();
    let now = engine.now();
    let pick = |fsms| PickRequest {
        queue: "orders",
        worker: "w",
        eligible_by: now,
        lease_until: now + Duration::from_secs(60),
        limit: 10,
        now,
        fsms,
    };
    let v2_only = [("order".to_owned(), 2)];
    assert!(
        backend
            .store
            .pick_registered(&pick(&v2_only))
            .await
            .unwrap()
            .is_empty()
    );
    let other = [("invoice".to_owned(), 1)];
    assert!(
        backend
            .store
            .pick_registered(&pick(&other))
            .await
            .unwrap()
            .is_empty()
    );
    let row = record(&engine, v1).await;
    assert_eq!(
        (row.status, row.attempt, row.locked_by),
        (Status::Runnable, 0, None)
    );
    let both = [("order".to_owned(), 2), ("order".to_owned(), 1)];
    let claimed = backend.store.pick_registered(&pick(&both)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!((claimed[0].id, claimed[0].fsm_version), (v1, 1));
    engine.shutdown().await;
}

/// An engine running the orders queue on `store`, FSMs to register.
fn run_orders(store: std::sync::Arc<dyn FsmStore>) -> EngineBuilder {
    Engine::builder(store)
        .queue("orders", 4)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .no_gc()
}

/// Two engines on one database, one running version 1 and the other version 2: each
/// instance runs only on the engine of its version, never claimed by the other (its
/// attempt stays 0: no lease ever lapsed).
async fn versions_on_two_engines(backend: FsmBackend) {
    let v1_engine = Engine::builder(std::sync::Arc::clone(&backend.store))
        .register::<OrderV1>()
        .queue("orders", 4)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .no_gc()
        .build()
        .unwrap();
    let v2_engine = Engine::builder(backend.open_again().await)
        .register::<OrderV2>()
        .queue("orders", 4)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .no_gc()
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..6 {
        // Inserted through either engine: the type says the version.
        let inserter = if n % 2 == 0 { &v1_engine } else { &v2_engine };
        ids.push((1, inserter.insert(OrderV1::default()).await.unwrap()));
        ids.push((2, inserter.insert(OrderV2::default()).await.unwrap()));
    }
    for (_, id) in &ids {
        let settled = v1_engine.await_settled(*id, PATIENCE).await.unwrap();
        assert!(matches!(settled, Settled::Awaiting(_)), "{settled:?}");
        v1_engine.signal(*id, "go", (), None).await.unwrap();
    }
    for (version, id) in &ids {
        let settled = v1_engine.await_ended(*id, PATIENCE).await.unwrap();
        let expected = if *version == 1 {
            "v1.start,v1.finish"
        } else {
            "v2.begin,v2.end"
        };
        assert_eq!(
            settled.result::<String>().unwrap().as_deref(),
            Some(expected)
        );
        let row = record(&v1_engine, *id).await;
        assert_eq!((row.fsm_version, row.attempt), (*version, 0));
    }
    v1_engine.shutdown().await;
    v2_engine.shutdown().await;
}

/// An instance started on version 1 finishes on version 1 after a deploy that registers
/// version 2 beside it, while new instances from JSON take the newest version.
async fn in_flight_instance_keeps_its_version(backend: FsmBackend) {
    let old = run_orders(std::sync::Arc::clone(&backend.store))
        .register::<OrderV1>()
        .build()
        .unwrap();
    let id = old.insert(OrderV1::default()).await.unwrap();
    let settled = old.await_settled(id, PATIENCE).await.unwrap();
    assert!(matches!(settled, Settled::Awaiting(_)), "{settled:?}");
    old.shutdown().await;

    let new = run_orders(backend.open_again().await)
        .register::<OrderV2>()
        .register::<OrderV1>()
        .build()
        .unwrap();
    let fresh = new
        .insert(
            new.instance_from_json("order", serde_json::json!({}))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(record(&new, fresh).await.fsm_version, 2);
    new.signal(id, "go", (), None).await.unwrap();
    new.signal(fresh, "go", (), None).await.unwrap();
    let settled = new.await_ended(id, PATIENCE).await.unwrap();
    assert_eq!(
        settled.result::<String>().unwrap().as_deref(),
        Some("v1.start,v1.finish")
    );
    let settled = new.await_ended(fresh, PATIENCE).await.unwrap();
    assert_eq!(
        settled.result::<String>().unwrap().as_deref(),
        Some("v2.begin,v2.end")
    );
    new.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// A batch the store fails

/// The backend's store, failing the next `failures` batch inserts before they reach the
/// database (as a lost connection would).
struct FailingBatches {
    inner: std::sync::Arc<dyn FsmStore>,
    failures: std::sync::atomic::AtomicUsize,
}

mod failing {
    use std::sync::atomic::Ordering;
    use std::time::SystemTime;

    use durable_runtime::fsm::store::{
        Claimed, Committed, FsmStore, Lease, ListFilter, NewInstance, NewSignal, OutcomeCommit,
        PickRequest, SignalRecord, Swept,
    };
    use durable_runtime::fsm::{Delivered, InstanceId, InstanceRecord, Target};
    use durable_runtime::storage::StorageError;

    #[async_trait::async_trait]
    impl FsmStore for super::FailingBatches {
        async fn insert(
            &self,
            instances: &[NewInstance],
            now: SystemTime,
        ) -> Result<Vec<InstanceId>, StorageError> {
            self.inner.insert(instances, now).await
        }

        async fn pick(
            &self,
            queue: &str,
            worker: &str,
            eligible_by: SystemTime,
            lease_until: SystemTime,
            limit: usize,
            now: SystemTime,
        ) -> Result<Vec<Claimed>, StorageError> {
            self.inner
                .pick(queue, worker, eligible_by, lease_until, limit, now)
                .await
        }

        async fn heartbeat(
            &self,
            leases: &[Lease],
            lease_until: SystemTime,
        ) -> Result<usize, StorageError> {
            self.inner.heartbeat(leases, lease_until).await
        }

        async fn complete(
            &self,
            outcomes: &[OutcomeCommit],
            now: SystemTime,
        ) -> Result<Vec<Committed>, StorageError> {
            self.inner.complete(outcomes, now).await
        }

        async fn signal(
            &self,
            target: &Target,
            signal: &NewSignal,
            now: SystemTime,
        ) -> Result<Option<Delivered>, StorageError> {
            self.inner.signal(target, signal, now).await
        }

        async fn get(&self, id: InstanceId) -> Result<Option<InstanceRecord>, StorageError> {
            self.inner.get(id).await
        }

        async fn find(&self, key: &str) -> Result<Option<InstanceId>, StorageError> {
            self.inner.find(key).await
        }

        async fn inbox(&self, id: InstanceId) -> Result<Vec<SignalRecord>, StorageError> {
            self.inner.inbox(id).await
        }

        async fn list(&self, filter: &ListFilter) -> Result<Vec<InstanceRecord>, StorageError> {
            self.inner.list(filter).await
        }

        async fn reap(&self, now: SystemTime) -> Result<Swept, StorageError> {
            self.inner.reap(now).await
        }

        async fn gc(&self, ended_before: SystemTime, limit: usize) -> Result<u64, StorageError> {
            self.inner.gc(ended_before, limit).await
        }

        async fn pick_registered(
            &self,
            request: &PickRequest<'_>,
        ) -> Result<Vec<Claimed>, StorageError> {
            self.inner.pick_registered(request).await
        }

        async fn insert_batch(
            &self,
            instances: &[NewInstance],
            now: SystemTime,
        ) -> Result<Vec<Option<InstanceId>>, StorageError> {
            let fail = self
                .failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if fail {
                return Err(StorageError::unavailable("connection lost"));
            }
            self.inner.insert_batch(instances, now).await
        }
    }
}

/// A failed batch answers every caller in it with the storage error and stores none of it;
/// the next batch is written as usual.
async fn insert_async_failed_batch(backend: FsmBackend) {
    let store = std::sync::Arc::new(FailingBatches {
        inner: std::sync::Arc::clone(&backend.store),
        failures: std::sync::atomic::AtomicUsize::new(1),
    });
    let engine = Engine::builder(store)
        .clock_follows_tokio()
        .no_reaper()
        .no_gc()
        .register::<SendEmail>()
        .build()
        .unwrap();
    let failed: Vec<_> = (0..5)
        .map(|n| {
            engine
                .try_insert_async(email(&format!("lost{n}@example.com"), 0))
                .unwrap()
        })
        .collect();
    for pending in failed {
        match pending.await {
            Err(Error::Storage(error)) => assert!(error.is_retryable(), "{error}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(count_rows(&*backend.store, "send_email").await, 0);
    let id = engine
        .insert_async(email("kept@example.com", 0))
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(engine.get(id).await.unwrap().is_some());
    assert_eq!(count_rows(&*backend.store, "send_email").await, 1);
    engine.shutdown().await;
}
