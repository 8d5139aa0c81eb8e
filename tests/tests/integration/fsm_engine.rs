//! The FSM engine's behaviours, each on the memory store and on Postgres, run through the
//! testing kit's `drain` (the engine's own pick, step and outcome path, in the test's task)
//! on a clock the tests move: outcomes, signals and awaits, correlation keys, children,
//! errors and panics, crash recovery, priorities and delays.

use crate::fsm_support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use durable_runtime::fsm::testing::{
    DrainError, DrainOptions, Tally, advance, drain, drain_with, sweep,
};
use durable_runtime::fsm::{
    AnyInstance, Error, Instance, InstanceId, Outcome, Status, StepContext, StepError, durable_fsm,
};
use fsm_support::FsmBackend;

// ---------------------------------------------------------------------------------------------
// The FSMs under test.

/// Walks three steps, recording each, then ends with how many it visited.
#[durable_fsm(result = usize)]
pub struct Walk {
    visited: Vec<String>,
}

#[durable_fsm]
impl Walk {
    #[step(initial)]
    fn first(&mut self, ctx: &StepContext) -> Outcome<Self> {
        self.visited.push(ctx.step().to_owned());
        Outcome::next(Self::SECOND)
    }

    #[step]
    async fn second(&mut self, ctx: &StepContext) -> Outcome<Self> {
        tokio::task::yield_now().await;
        self.visited.push(ctx.step().to_owned());
        Outcome::next(Self::THIRD)
    }

    #[step]
    fn third(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, String> {
        self.visited.push(ctx.step().to_owned());
        Ok(Outcome::done(self.visited.len()))
    }
}

/// Parks on `go` (with an optional timeout), then ends with the names and payloads it was
/// woken with.
#[durable_fsm(result = Vec<String>)]
pub struct Waiter {
    timeout_secs: Option<u64>,
}

#[durable_fsm]
impl Waiter {
    #[step(initial)]
    fn park(&mut self) -> Outcome<Self> {
        let outcome = Outcome::await_signal(["go"], Self::WOKEN);
        match self.timeout_secs {
            Some(secs) => outcome.timeout(Duration::from_secs(secs)),
            None => outcome,
        }
    }

    #[step]
    fn woken(&mut self, ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(
            ctx.awaited()
                .iter()
                .map(|signal| {
                    let payload: serde_json::Value = signal.payload().unwrap();
                    format!("{}:{payload}", signal.name())
                })
                .collect(),
        )
    }
}

/// Awaits either of two names and branches on the one that arrived.
#[durable_fsm(result = String)]
pub struct Branch {}

#[durable_fsm]
impl Branch {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::await_signal(["paid", "cancelled"], Self::SETTLE)
    }

    #[step]
    fn settle(&mut self, ctx: &StepContext) -> Outcome<Self> {
        match ctx.awaited().first().map(|signal| signal.name()) {
            Some("paid") => Outcome::done("paid".to_owned()),
            Some(other) => Outcome::stop(other),
            None => Outcome::stop("nothing"),
        }
    }
}

/// Accumulates a pack of `a` and `b` across re-awaits, counting its wake-ups, then moves on
/// (consuming both) and ends once `end` arrives.
#[durable_fsm(result = u32)]
pub struct Pack {
    wakeups: u32,
}

#[durable_fsm]
impl Pack {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::await_signal(["a", "b"], Self::COLLECT)
    }

    #[step]
    fn collect(&mut self, ctx: &StepContext) -> Outcome<Self> {
        self.wakeups += 1;
        let names: Vec<&str> = ctx.awaited().iter().map(|signal| signal.name()).collect();
        if names.contains(&"a") && names.contains(&"b") {
            Outcome::next(Self::PACKED)
        } else {
            Outcome::await_signal(["a", "b"], Self::COLLECT)
        }
    }

    #[step]
    fn packed(&mut self) -> Outcome<Self> {
        Outcome::await_signal(["end"], Self::END)
    }

    #[step]
    fn end(&mut self) -> Outcome<Self> {
        Outcome::done(self.wakeups)
    }
}

/// Retries its woken step once, which must see the same awaited signal again.
#[durable_fsm(result = Vec<usize>)]
pub struct RetryWoken {
    seen: Vec<usize>,
}

#[durable_fsm]
impl RetryWoken {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::await_signal(["x"], Self::WOKEN)
    }

    #[step]
    fn woken(&mut self, ctx: &StepContext) -> Outcome<Self> {
        self.seen.push(ctx.awaited().len());
        if ctx.attempt() == 0 {
            Outcome::retry(Duration::ZERO)
        } else {
            Outcome::done(self.seen.clone())
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the provider is down")]
pub struct Down;

/// Fails every time; its handler retries twice, then gives up.
#[durable_fsm]
pub struct Flaky {
    runs: u32,
}

#[durable_fsm]
impl Flaky {
    #[step(initial)]
    async fn call(&mut self) -> Result<Outcome<Self>, Down> {
        self.runs += 1;
        Err(Down)
    }

    #[on_error]
    fn failed(&mut self, error: StepError, ctx: &StepContext) -> Outcome<Self> {
        assert_eq!(
            self.runs, 0,
            "the handler sees the state from before the step"
        );
        assert!(error.downcast_ref::<Down>().is_some());
        if ctx.attempt() < 2 {
            Outcome::retry(Duration::from_secs(10 << ctx.attempt()))
        } else {
            Outcome::stop("gave up")
        }
    }
}

/// Panics; the handler turns the panic into a failure naming it.
#[durable_fsm]
pub struct Panicky {}

#[durable_fsm]
impl Panicky {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        panic!("boom");
    }

    #[on_error]
    async fn handled(&mut self, error: StepError) -> Outcome<Self> {
        assert!(error.is_panic());
        Outcome::stop(format!("handled: {error}"))
    }
}

/// Ends with a result JSON cannot hold; no error handler.
#[durable_fsm(result = f64)]
pub struct BadResult {}

#[durable_fsm]
impl BadResult {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(f64::NAN)
    }
}

/// Writes a state `jsonb` cannot hold (U+0000); the handler sees the state before the step.
#[durable_fsm]
pub struct BadState {
    text: String,
}

#[durable_fsm]
impl BadState {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        self.text = "a\u{0}b".to_owned();
        Outcome::next(Self::START)
    }

    #[on_error]
    fn failed(&mut self, error: StepError, ctx: &StepContext) -> Outcome<Self> {
        Outcome::stop(format!(
            "{:?} at attempt {} with text {:?}",
            error.kind(),
            ctx.attempt(),
            self.text
        ))
    }
}

/// Its error handler panics.
#[durable_fsm]
pub struct BadHandler {}

#[durable_fsm]
impl BadHandler {
    #[step(initial)]
    fn start(&mut self) -> Result<Outcome<Self>, String> {
        Err("first".to_owned())
    }

    #[on_error]
    fn failed(&mut self, _error: StepError) -> Outcome<Self> {
        panic!("second");
    }
}

/// Records the attempt each run of its step sees.
#[durable_fsm(result = Vec<u32>)]
pub struct Attempts {
    seen: Vec<u32>,
}

#[durable_fsm]
impl Attempts {
    #[step(initial)]
    fn start(&mut self, ctx: &StepContext) -> Outcome<Self> {
        self.seen.push(ctx.attempt());
        Outcome::done(self.seen.clone())
    }
}

/// Appends its tag to the run's log when it runs.
#[durable_fsm(queue = "ordered")]
pub struct Ordered {
    run: String,
    tag: u32,
}

fn log() -> &'static Mutex<HashMap<String, Vec<u32>>> {
    static LOG: OnceLock<Mutex<HashMap<String, Vec<u32>>>> = OnceLock::new();
    LOG.get_or_init(Mutex::default)
}

#[durable_fsm]
impl Ordered {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        log()
            .lock()
            .unwrap()
            .entry(self.run.clone())
            .or_default()
            .push(self.tag);
        Outcome::done(())
    }
}

/// A child: fails when told to, else ends with its number.
#[durable_fsm(name = "fan.child", queue = "children", result = u32)]
pub struct Child {
    n: u32,
    fail: bool,
}

#[durable_fsm]
impl Child {
    #[step(initial)]
    fn work(&mut self) -> Outcome<Self> {
        if self.fail {
            Outcome::stop(format!("child {} failed", self.n))
        } else {
            Outcome::done(self.n)
        }
    }
}

/// Spawns `children` children (the one numbered `failing` fails), then counts them.
#[durable_fsm(name = "fan.parent", result = (u32, u32, u32))]
pub struct Parent {
    children: u32,
    failing: Option<u32>,
    joins: u32,
}

#[durable_fsm]
impl Parent {
    #[step(initial)]
    fn spawn(&mut self) -> Outcome<Self> {
        let children: Vec<AnyInstance> = (0..self.children)
            .map(|n| {
                Child {
                    n,
                    fail: Some(n) == self.failing,
                }
                .into()
            })
            .collect();
        Outcome::schedule_childs(Self::JOIN, children)
    }

    #[step]
    fn join(&mut self, ctx: &StepContext) -> Outcome<Self> {
        self.joins += 1;
        let done = ctx
            .children()
            .iter()
            .filter(|child| child.status() == Status::Done)
            .count() as u32;
        let failed = ctx
            .children()
            .iter()
            .filter(|child| child.status() == Status::Failed)
            .count() as u32;
        let sum: u32 = ctx
            .children()
            .iter()
            .filter_map(|child| child.result::<u32>().unwrap())
            .sum();
        assert_eq!(self.joins, 1, "the join runs once");
        Outcome::done((done, failed, sum))
    }
}

/// Never settles.
#[durable_fsm]
pub struct Forever {}

#[durable_fsm]
impl Forever {
    #[step(initial)]
    fn spin(&mut self) -> Outcome<Self> {
        Outcome::next(Self::SPIN)
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.

async fn status(engine: &durable_runtime::fsm::Engine, id: InstanceId) -> Status {
    engine.get(id).await.unwrap().expect("instance").status
}

async fn result<T: serde::de::DeserializeOwned>(
    engine: &durable_runtime::fsm::Engine,
    id: InstanceId,
) -> T {
    let record = engine.get(id).await.unwrap().expect("instance");
    assert_eq!(
        record.status,
        Status::Done,
        "not done: {:?}",
        record.last_error
    );
    record
        .decode_result()
        .unwrap()
        .expect("a done instance has a result")
}

async fn last_error(engine: &durable_runtime::fsm::Engine, id: InstanceId) -> (String, u32) {
    let record = engine.get(id).await.unwrap().expect("instance");
    assert_eq!(record.status, Status::Failed);
    (record.last_error.expect("an error"), record.attempt)
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// A typed-state FSM walks its steps to `done`, each step's state committed before the next
/// runs (the next step sees what the previous recorded).
async fn steps_walk_to_done(backend: FsmBackend) {
    let engine = backend.engine().register::<Walk>().build().unwrap();
    let id = engine.insert(Walk::default()).await.unwrap();
    assert_eq!(status(&engine, id).await, Status::Runnable);
    let tally = drain(&engine).await.unwrap();
    assert_eq!(
        tally,
        Tally {
            steps: 3,
            next: 2,
            done: 1,
            ..Tally::default()
        }
    );
    assert_eq!(result::<usize>(&engine, id).await, 3);
    let state: Walk = engine
        .get(id)
        .await
        .unwrap()
        .unwrap()
        .decode_state()
        .unwrap();
    assert_eq!(
        state.visited,
        ["first", "second"],
        "done does not rewrite the state"
    );
}

/// `await` parks; a signal wakes the next step, which sees it as awaited; `done` empties the
/// inbox.
async fn await_parks_until_a_signal(backend: FsmBackend) {
    let engine = backend.engine().register::<Waiter>().build().unwrap();
    let id = engine.insert(Waiter::default()).await.unwrap();
    assert_eq!(drain(&engine).await.unwrap().await_signal, 1);
    assert_eq!(status(&engine, id).await, Status::AwaitingSignal);
    assert_eq!(
        drain(&engine).await.unwrap().steps,
        0,
        "parked: nothing runs"
    );
    let delivered = engine
        .signal(id, "go", serde_json::json!({"n": 1}), None)
        .await
        .unwrap();
    assert!(delivered.woke);
    assert_eq!(drain(&engine).await.unwrap().done, 1);
    assert_eq!(result::<Vec<String>>(&engine, id).await, [r#"go:{"n":1}"#]);
    assert!(engine.inbox(id).await.unwrap().is_empty());
}

/// A signal delivered before the instance parks still wakes it.
async fn a_signal_before_the_park_is_not_lost(backend: FsmBackend) {
    let engine = backend.engine().register::<Waiter>().build().unwrap();
    let id = engine.insert(Waiter::default()).await.unwrap();
    let delivered = engine.signal(id, "go", 7, None).await.unwrap();
    assert!(!delivered.woke, "runnable, not awaiting yet");
    let tally = drain(&engine).await.unwrap();
    assert_eq!((tally.await_signal, tally.done), (1, 1));
    assert_eq!(result::<Vec<String>>(&engine, id).await, ["go:7"]);
}

/// A timed-out await runs its next step with nothing awaited (not a failure); a signal before
/// the deadline wins.
async fn await_timeout_wakes_with_nothing(backend: FsmBackend) {
    let engine = backend.engine().register::<Waiter>().build().unwrap();
    let timed = engine
        .insert(Waiter {
            timeout_secs: Some(60),
        })
        .await
        .unwrap();
    let signalled = engine
        .insert(Waiter {
            timeout_secs: Some(60),
        })
        .await
        .unwrap();
    drain(&engine).await.unwrap();
    engine.signal(signalled, "go", "early", None).await.unwrap();
    assert_eq!(drain(&engine).await.unwrap().done, 1);
    advance(&engine, Duration::from_secs(59));
    assert_eq!(sweep(&engine).await.unwrap().await_timeouts, 0);
    advance(&engine, Duration::from_secs(2));
    assert_eq!(sweep(&engine).await.unwrap().await_timeouts, 1);
    assert_eq!(drain(&engine).await.unwrap().done, 1);
    assert!(result::<Vec<String>>(&engine, timed).await.is_empty());
    assert_eq!(
        result::<Vec<String>>(&engine, signalled).await,
        [r#"go:"early""#]
    );
}

/// An await on a set wakes on any one of its names, and the step branches on it; a name it
/// does not await is stored without waking it.
async fn await_on_a_set_branches(backend: FsmBackend) {
    let engine = backend.engine().register::<Branch>().build().unwrap();
    let paid = engine.insert(Branch {}).await.unwrap();
    let cancelled = engine.insert(Branch {}).await.unwrap();
    drain(&engine).await.unwrap();
    assert!(!engine.signal(paid, "refund", (), None).await.unwrap().woke);
    assert_eq!(status(&engine, paid).await, Status::AwaitingSignal);
    assert!(engine.signal(paid, "paid", (), None).await.unwrap().woke);
    assert!(
        engine
            .signal(cancelled, "cancelled", (), None)
            .await
            .unwrap()
            .woke
    );
    let tally = drain(&engine).await.unwrap();
    assert_eq!((tally.done, tally.stop), (1, 1));
    assert_eq!(result::<String>(&engine, paid).await, "paid");
    assert_eq!(last_error(&engine, cancelled).await.0, "cancelled");
}

/// Re-awaiting signals already handed to the step parks without spinning; the pack is
/// processed once complete, consuming exactly what it received: a signal of an awaited name
/// that arrived meanwhile but was not handed over stays.
async fn a_pack_accumulates_across_re_awaits(backend: FsmBackend) {
    let engine = backend.engine().register::<Pack>().build().unwrap();
    let id = engine.insert(Pack::default()).await.unwrap();
    drain(&engine).await.unwrap();
    engine.signal(id, "a", 1, None).await.unwrap();
    let tally = drain(&engine).await.unwrap();
    assert_eq!(
        (tally.steps, tally.await_signal),
        (1, 1),
        "woken once, re-parked, no busy loop"
    );
    assert_eq!(status(&engine, id).await, Status::AwaitingSignal);
    engine.signal(id, "b", 2, None).await.unwrap();
    let tally = drain(&engine).await.unwrap();
    assert_eq!((tally.steps, tally.next, tally.await_signal), (2, 1, 1));
    assert!(
        engine.inbox(id).await.unwrap().is_empty(),
        "a and b consumed by the progress"
    );
    engine.signal(id, "end", (), None).await.unwrap();
    drain(&engine).await.unwrap();
    assert_eq!(result::<u32>(&engine, id).await, 2);
}

/// Progress consumes exactly the signals handed to the step; never-awaited signals stay in
/// the inbox until the instance ends, which deletes them.
async fn consumption_is_by_received_id(backend: FsmBackend) {
    let engine = backend.engine().register::<Pack>().build().unwrap();
    let id = engine.insert(Pack::default()).await.unwrap();
    drain(&engine).await.unwrap();
    engine.signal(id, "note", "kept", None).await.unwrap();
    engine.signal(id, "a", 1, None).await.unwrap();
    engine.signal(id, "b", 2, None).await.unwrap();
    drain(&engine).await.unwrap();
    let inbox: Vec<String> = engine
        .inbox(id)
        .await
        .unwrap()
        .into_iter()
        .map(|signal| signal.name)
        .collect();
    assert_eq!(inbox, ["note"]);
    engine.signal(id, "end", (), None).await.unwrap();
    drain(&engine).await.unwrap();
    assert_eq!(status(&engine, id).await, Status::Done);
    assert!(engine.inbox(id).await.unwrap().is_empty());
}

/// A retry of a woken step sees the same awaited signals again.
async fn a_retry_sees_the_same_signals(backend: FsmBackend) {
    let engine = backend.engine().register::<RetryWoken>().build().unwrap();
    let id = engine.insert(RetryWoken::default()).await.unwrap();
    drain(&engine).await.unwrap();
    engine.signal(id, "x", (), None).await.unwrap();
    let tally = drain(&engine).await.unwrap();
    assert_eq!((tally.retry, tally.done), (1, 1));
    assert_eq!(result::<Vec<usize>>(&engine, id).await, [1, 1]);
}

/// A deduplication key is delivered once while in the inbox; without one, every delivery
/// is kept. Signals to an ended or missing instance, or an unoccupied key, are refused.
async fn signal_dedup_and_missing_targets(backend: FsmBackend) {
    let engine = backend.engine().register::<Waiter>().build().unwrap();
    let id = engine
        .insert(Instance::new(Waiter::default()).correlation_key("w:1"))
        .await
        .unwrap();
    let first = engine.signal(id, "note", 1, Some("evt-1")).await.unwrap();
    let again = engine.signal(id, "note", 1, Some("evt-1")).await.unwrap();
    assert!(first.signal.is_some());
    assert_eq!(again.signal, None);
    engine.signal(id, "note", 2, None).await.unwrap();
    engine.signal(id, "note", 2, None).await.unwrap();
    assert_eq!(engine.inbox(id).await.unwrap().len(), 3);

    let missing = InstanceId::new(id.get() + 10_000);
    assert!(matches!(
        engine.signal(missing, "go", (), None).await,
        Err(Error::NoTarget { .. })
    ));
    assert!(matches!(
        engine.signal("w:unknown", "go", (), None).await,
        Err(Error::NoTarget { .. })
    ));
    engine.signal("w:1", "go", (), None).await.unwrap();
    drain(&engine).await.unwrap();
    assert_eq!(status(&engine, id).await, Status::Done);
    for target in [
        durable_runtime::fsm::Target::Id(id),
        durable_runtime::fsm::Target::Key("w:1".into()),
    ] {
        let refused = engine.signal(target, "go", (), None).await;
        assert!(
            matches!(refused, Err(Error::NoTarget { .. })),
            "{refused:?}"
        );
    }
    assert!(engine.inbox(id).await.unwrap().is_empty());
}

/// A correlation key is a signal address and a uniqueness guard: a duplicate among live
/// instances is refused, the key is free again once the instance ends, keyless instances
/// never conflict, a scope with the terminal statuses keeps the key reserved, and a batch
/// dedups within itself and against stored rows.
async fn correlation_keys(backend: FsmBackend) {
    let engine = backend.engine().register::<Waiter>().build().unwrap();
    let first = engine
        .insert(Instance::new(Waiter::default()).correlation_key("order:42"))
        .await
        .unwrap();
    let duplicate = engine
        .insert(Instance::new(Waiter::default()).correlation_key("order:42"))
        .await;
    assert!(
        matches!(&duplicate, Err(Error::Duplicate { key }) if key == "order:42"),
        "{duplicate:?}"
    );
    assert_eq!(engine.find("order:42").await.unwrap(), Some(first));
    engine.insert(Waiter::default()).await.unwrap();
    engine.insert(Waiter::default()).await.unwrap();

    drain(&engine).await.unwrap();
    assert!(
        engine
            .signal("order:42", "go", (), None)
            .await
            .unwrap()
            .woke
    );
    drain(&engine).await.unwrap();
    assert_eq!(engine.find("order:42").await.unwrap(), None);
    let reused = engine
        .insert(Instance::new(Waiter::default()).correlation_key("order:42"))
        .await
        .unwrap();
    assert_ne!(reused, first);

    let reserved = engine
        .insert(
            Instance::new(Waiter::default())
                .correlation_key("once")
                .scope(Status::ALL),
        )
        .await
        .unwrap();
    drain(&engine).await.unwrap();
    engine.signal("once", "go", (), None).await.unwrap();
    drain(&engine).await.unwrap();
    assert_eq!(status(&engine, reserved).await, Status::Done);
    assert!(matches!(
        engine
            .insert(Instance::new(Waiter::default()).correlation_key("once"))
            .await,
        Err(Error::Duplicate { .. })
    ));

    let batch = engine
        .insert_all(
            ["b:1", "b:2", "b:1", "order:42", "b:3"]
                .map(|key| Instance::new(Waiter::default()).correlation_key(key)),
        )
        .await
        .unwrap();
    assert_eq!(batch.len(), 3, "b:1, b:2, b:3: {batch:?}");
}

/// A step error goes to the error handler, which retries (with its own backoff, collapsed
/// by drain) and then gives up; the handler sees the state from before the step.
async fn errors_go_to_the_handler(backend: FsmBackend) {
    let engine = backend.engine().register::<Flaky>().build().unwrap();
    let id = engine.insert(Flaky::default()).await.unwrap();
    let tally = drain(&engine).await.unwrap();
    assert_eq!(
        (tally.steps, tally.retry, tally.stop, tally.errors),
        (3, 2, 1, 3)
    );
    assert_eq!(last_error(&engine, id).await, ("gave up".to_owned(), 2));
    let state: Flaky = engine
        .get(id)
        .await
        .unwrap()
        .unwrap()
        .decode_state()
        .unwrap();
    assert_eq!(state.runs, 0, "the failed steps' changes were discarded");
}

/// Retry delays are honoured on the clock when not collapsed.
async fn retry_delays_wait_for_the_clock(backend: FsmBackend) {
    let engine = backend.engine().register::<Flaky>().build().unwrap();
    let id = engine.insert(Flaky::default()).await.unwrap();
    let due_only = DrainOptions {
        collapse_delays: false,
        ..DrainOptions::default()
    };
    assert_eq!(
        drain_with(&engine, due_only.clone()).await.unwrap().retry,
        1
    );
    assert_eq!(
        drain_with(&engine, due_only.clone()).await.unwrap().steps,
        0
    );
    advance(&engine, Duration::from_secs(10));
    assert_eq!(
        drain_with(&engine, due_only.clone()).await.unwrap().retry,
        1
    );
    advance(&engine, Duration::from_secs(19));
    assert_eq!(
        drain_with(&engine, due_only.clone()).await.unwrap().steps,
        0
    );
    advance(&engine, Duration::from_secs(1));
    assert_eq!(drain_with(&engine, due_only).await.unwrap().stop, 1);
    assert_eq!(last_error(&engine, id).await.1, 2);
}

/// A panicking step reaches the error handler at once (no lease to wait for).
async fn panics_go_to_the_handler(backend: FsmBackend) {
    let engine = backend.engine().register::<Panicky>().build().unwrap();
    let id = engine.insert(Panicky {}).await.unwrap();
    let tally = drain(&engine).await.unwrap();
    assert_eq!((tally.steps, tally.stop, tally.errors), (1, 1, 1));
    assert_eq!(
        last_error(&engine, id).await,
        ("handled: the step panicked: boom".to_owned(), 0)
    );
}

/// A value that cannot be stored is a deterministic error: without a handler the instance
/// fails at once (attempt 0), never a crash loop; with one, the handler gets it and sees
/// the state from before the step.
async fn unstorable_values_fail_deterministically(backend: FsmBackend) {
    let engine = backend
        .engine()
        .register::<BadResult>()
        .register::<BadState>()
        .build()
        .unwrap();
    let bad_result = engine.insert(BadResult {}).await.unwrap();
    let bad_state = engine.insert(BadState::default()).await.unwrap();
    let tally = drain(&engine).await.unwrap();
    assert_eq!((tally.steps, tally.stop), (2, 2));
    let (error, attempt) = last_error(&engine, bad_result).await;
    assert!(error.contains("the result cannot be stored"), "{error}");
    assert_eq!(attempt, 0);
    assert_eq!(
        last_error(&engine, bad_state).await.0,
        r#"Unencodable at attempt 0 with text """#
    );
    // Inserting such a state is refused up front.
    let refused = engine
        .insert(BadState {
            text: "\u{0}".to_owned(),
        })
        .await;
    assert!(
        matches!(refused, Err(Error::Unencodable { .. })),
        "{refused:?}"
    );
    let payload = engine.signal(bad_state, "x", "\u{0}", None).await;
    assert!(
        matches!(payload, Err(Error::Unencodable { .. })),
        "{payload:?}"
    );
}

/// An error handler that panics fails the instance, naming both errors.
async fn a_panicking_handler_fails_the_instance(backend: FsmBackend) {
    let engine = backend.engine().register::<BadHandler>().build().unwrap();
    let id = engine.insert(BadHandler {}).await.unwrap();
    drain(&engine).await.unwrap();
    assert_eq!(
        last_error(&engine, id).await.0,
        "first; and the error handler panicked: second"
    );
}

/// A worker that claimed a step and died: once its lease ends the reaper makes the row
/// runnable with attempt + 1, without calling the error handler, and the step runs again.
async fn a_crashed_claim_is_reaped_and_rerun(backend: FsmBackend) {
    let engine = backend.engine().register::<Attempts>().build().unwrap();
    let id = engine.insert(Attempts::default()).await.unwrap();
    // The dead worker's claim.
    let now = engine.now();
    let claimed = backend
        .store
        .pick(
            "default",
            "dead-worker",
            now,
            now + Duration::from_secs(60),
            10,
            now,
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(drain(&engine).await.unwrap().steps, 0, "the claim is held");
    advance(&engine, Duration::from_secs(59));
    assert_eq!(sweep(&engine).await.unwrap().expired_leases, 0);
    advance(&engine, Duration::from_secs(2));
    assert_eq!(sweep(&engine).await.unwrap().expired_leases, 1);
    let tally = drain(&engine).await.unwrap();
    assert_eq!((tally.done, tally.errors), (1, 0));
    assert_eq!(result::<Vec<u32>>(&engine, id).await, [1]);
}

/// An outcome whose claim was lost (reaped and claimed again) is stale: dropped, counted, and
/// the row keeps the outcome of its current claim.
async fn a_lost_claim_commits_nothing(backend: FsmBackend) {
    let engine = backend.engine().register::<Attempts>().build().unwrap();
    let id = engine.insert(Attempts::default()).await.unwrap();
    let now = engine.now();
    let stale = backend
        .store
        .pick("default", "slow", now, now + Duration::from_secs(1), 1, now)
        .await
        .unwrap()
        .remove(0);
    advance(&engine, Duration::from_secs(5));
    sweep(&engine).await.unwrap();
    drain(&engine).await.unwrap();
    let before = engine.get(id).await.unwrap().unwrap();
    assert_eq!(before.status, Status::Done);
    let late = durable_runtime::fsm::store::OutcomeCommit {
        lease: durable_runtime::fsm::store::Lease {
            id,
            token: stale.token,
        },
        received: Vec::new(),
        transition: durable_runtime::fsm::store::Transition::Stop {
            reason: "late".into(),
        },
    };
    let committed = backend.store.complete(&[late], engine.now()).await.unwrap();
    assert_eq!(committed, [durable_runtime::fsm::store::Committed::Stale]);
    assert_eq!(engine.get(id).await.unwrap().unwrap(), before);
}

/// A parent spawns children and resumes at its join step once, when all have ended, seeing
/// each one's status and result; a failed child still releases its slot.
async fn children_join_once(backend: FsmBackend) {
    let engine = backend
        .engine()
        .register::<Parent>()
        .register::<Child>()
        .build()
        .unwrap();
    let id = engine
        .insert(Parent {
            children: 4,
            failing: Some(2),
            joins: 0,
        })
        .await
        .unwrap();
    let tally = drain(&engine).await.unwrap();
    assert_eq!(
        (tally.schedule_childs, tally.done, tally.stop, tally.steps),
        (1, 4, 1, 6)
    );
    assert_eq!(result::<(u32, u32, u32)>(&engine, id).await, (3, 1, 4));
    let record = engine.get(id).await.unwrap().unwrap();
    assert_eq!(record.children_pending, 0);
}

/// Zero children: the parent moves on at once.
async fn no_children_proceed_at_once(backend: FsmBackend) {
    let engine = backend.engine().register::<Parent>().build().unwrap();
    let id = engine.insert(Parent::default()).await.unwrap();
    let tally = drain(&engine).await.unwrap();
    assert_eq!((tally.schedule_childs, tally.done), (1, 1));
    assert_eq!(result::<(u32, u32, u32)>(&engine, id).await, (0, 0, 0));
}

/// Lower priority numbers run first; a delayed start waits for the clock.
async fn priority_and_delayed_start(backend: FsmBackend) {
    let engine = backend.engine().register::<Ordered>().build().unwrap();
    let run = durable_tests::unique_prefix();
    let ordered = |tag: u32| Ordered {
        run: run.clone(),
        tag,
    };
    engine
        .insert_all([
            Instance::new(ordered(1)).priority(5),
            Instance::new(ordered(2)).priority(-1),
            Instance::new(ordered(3)),
            Instance::new(ordered(4)).delay(Duration::from_secs(3600)),
        ])
        .await
        .unwrap();
    let due_only = DrainOptions {
        collapse_delays: false,
        ..DrainOptions::default()
    };
    assert_eq!(drain_with(&engine, due_only.clone()).await.unwrap().done, 3);
    assert_eq!(log().lock().unwrap()[&run], [2, 3, 1]);
    advance(&engine, Duration::from_secs(3600));
    assert_eq!(drain_with(&engine, due_only).await.unwrap().done, 1);
    assert_eq!(log().lock().unwrap()[&run], [2, 3, 1, 4]);
}

/// `drain` refuses to run forever.
async fn drain_stops_a_runaway(backend: FsmBackend) {
    let engine = backend.engine().register::<Forever>().build().unwrap();
    engine.insert(Forever {}).await.unwrap();
    let runaway = drain_with(
        &engine,
        DrainOptions {
            max_steps: 25,
            ..DrainOptions::default()
        },
    )
    .await;
    assert!(
        matches!(runaway, Err(DrainError::Runaway { max_steps: 25, tally }) if tally.next == 25),
        "{runaway:?}"
    );
}

fsm_backend_tests!(
    steps_walk_to_done,
    await_parks_until_a_signal,
    a_signal_before_the_park_is_not_lost,
    await_timeout_wakes_with_nothing,
    await_on_a_set_branches,
    a_pack_accumulates_across_re_awaits,
    consumption_is_by_received_id,
    a_retry_sees_the_same_signals,
    signal_dedup_and_missing_targets,
    correlation_keys,
    errors_go_to_the_handler,
    retry_delays_wait_for_the_clock,
    panics_go_to_the_handler,
    unstorable_values_fail_deterministically,
    a_panicking_handler_fails_the_instance,
    a_crashed_claim_is_reaped_and_rerun,
    a_lost_claim_commits_nothing,
    children_join_once,
    no_children_proceed_at_once,
    priority_and_delayed_start,
    drain_stops_a_runaway,
);
