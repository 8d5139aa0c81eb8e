//! Tools for testing durable objects and storage backends (feature `testing`).
//!
//! - [`TestRuntime`]: an in-memory runtime on virtual time whose alarms fire only when the
//!   test says so: one alarm ([`fire_alarm`](TestRuntime::fire_alarm)), the due ones
//!   ([`fire_due_alarms`](TestRuntime::fire_due_alarms)), or all of them in time order,
//!   advancing the clock ([`drain_alarms`](TestRuntime::drain_alarms)).
//! - [`context`]: a [`Context`] for calling handler methods directly on a state value,
//!   without a runtime, and [`scheduled_alarms`] to see what they scheduled.
//! - [`FaultyStorage`]: a storage wrapper that fails or delays operations on demand.
//! - [`jump_wall_clock_forward`] and [`jump_wall_clock_back`]: a system clock adjustment, for
//!   a runtime on tokio's clock.

mod faulty;

use std::ops::Deref;
use std::time::Duration;

pub use faulty::FaultyStorage;

use crate::alarms::Alarm;
use crate::error::Error;
use crate::object::context::Context;
use crate::object::handle::Runtime;
use crate::object::{BoxError, DurableObject};
use crate::storage::{AlarmChange, MemoryStorage, ObjectKey, Storage};

/// An in-memory runtime for tests, on tokio's (pausable) clock, with manual alarms.
///
/// Use it in `#[tokio::test(start_paused = true)]` tests: time stands still unless the test
/// sleeps or [`drain_alarms`](TestRuntime::drain_alarms) advances it, so alarm tests are
/// instant and deterministic.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::testing::TestRuntime;
/// use durable_runtime::{durable_object, Context};
///
/// #[durable_object]
/// pub struct Reminder { rung: u32 }
///
/// #[durable_object]
/// impl Reminder {
///     #[handler]
///     fn handle_arm(&mut self, ctx: &Context) {
///         ctx.schedule_alarm(Reminder::RING, Duration::from_secs(3600));
///     }
///
///     #[alarm]
///     fn ring(&mut self, ctx: &Context) {
///         self.rung += 1;
///         if self.rung < 3 {
///             ctx.schedule_alarm(Reminder::RING, Duration::from_secs(3600));
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let rt = TestRuntime::new();
/// Reminder::arm(&rt, "r").await.unwrap();
/// // Three hours pass in no time: the alarm fires, re-arms itself twice, then stops.
/// assert_eq!(rt.drain_alarms(10).await.unwrap(), 3);
/// assert_eq!(rt.state::<Reminder>("r").await.rung, 3);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TestRuntime {
    runtime: Runtime,
    storage: MemoryStorage,
}

impl Default for TestRuntime {
    fn default() -> Self {
        Self::new()
    }
}

/// Why draining alarms stopped early.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::testing::{DrainError, TestRuntime};
/// use durable_runtime::{durable_object, Context};
///
/// #[durable_object]
/// pub struct Ticker { ticks: u32 }
///
/// #[durable_object]
/// impl Ticker {
///     #[alarm]
///     fn tick(&mut self, ctx: &Context) {
///         self.ticks += 1;
///         ctx.schedule_alarm(Ticker::TICK, Duration::from_secs(1)); // forever
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let rt = TestRuntime::new();
/// rt.schedule_alarm("t", Ticker::TICK, Duration::ZERO).await.unwrap();
/// let err = rt.drain_alarms(5).await.unwrap_err();
/// assert!(matches!(err, DrainError::IterationCap { fired: 5 }));
/// assert_eq!(rt.state::<Ticker>("t").await.ticks, 5);
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DrainError {
    /// More alarms kept coming than the iteration cap allows (an alarm that re-arms itself
    /// forever, say).
    #[error("still firing alarms after {fired} iterations")]
    IterationCap {
        /// How many alarms fired.
        fired: usize,
    },
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
}

impl TestRuntime {
    /// A fresh runtime over an empty [`MemoryStorage`].
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::durable_object;
    /// use durable_runtime::testing::TestRuntime;
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = TestRuntime::new();
    /// assert_eq!(Counter::increment(&rt, "a").await.unwrap(), 1);
    /// // Each test runtime has its own storage.
    /// assert_eq!(Counter::increment(&TestRuntime::new(), "a").await.unwrap(), 1);
    /// # }
    /// ```
    pub fn new() -> Self {
        let storage = MemoryStorage::new();
        Self::with_builder(storage.clone(), Runtime::builder(storage))
    }

    /// A test runtime from a builder over `storage` (to register types or set options),
    /// made manual-alarm and virtual-clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::testing::TestRuntime;
    /// use durable_runtime::{durable_object, MemoryStorage, ObjectOptions, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Upload { bytes: u64 }
    ///
    /// #[durable_object]
    /// impl Upload {}
    ///
    /// let storage = MemoryStorage::new();
    /// let options = ObjectOptions::new().with_call_timeout(Duration::from_secs(60));
    /// let builder = Runtime::builder(storage.clone()).register_with::<Upload>(options);
    /// let rt = TestRuntime::with_builder(storage, builder);
    /// assert_eq!(rt.options_of::<Upload>().call_timeout, Some(Duration::from_secs(60)));
    /// ```
    pub fn with_builder(storage: MemoryStorage, builder: crate::RuntimeBuilder) -> Self {
        Self {
            runtime: builder.manual_alarms().clock_follows_tokio().build(),
            storage,
        }
    }

    /// The in-memory storage, to read or plant rows.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::durable_object;
    /// use durable_runtime::testing::TestRuntime;
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = TestRuntime::new();
    /// // Plant a state as if an earlier process had saved it.
    /// let write = ObjectWrite {
    ///     key: ObjectKey::new("Counter", "a"),
    ///     expected_version: 0,
    ///     state: Some(br#"{"count":41}"#.to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// rt.storage().commit(&[write]).await.unwrap();
    /// assert_eq!(Counter::increment(&rt, "a").await.unwrap(), 42);
    /// # }
    /// ```
    pub fn storage(&self) -> &MemoryStorage {
        &self.storage
    }

    /// The persisted state of `(O, id)`.
    ///
    /// # Panics
    ///
    /// If it was never stored or does not decode.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::durable_object;
    /// use durable_runtime::testing::TestRuntime;
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = TestRuntime::new();
    /// Counter::increment(&rt, "a").await.unwrap();
    /// Counter::increment(&rt, "a").await.unwrap();
    /// assert_eq!(rt.state::<Counter>("a").await.count, 2);
    /// # }
    /// ```
    pub async fn state<O: DurableObject>(&self, id: &str) -> O {
        match self.runtime.read_state::<O>(id).await {
            Ok(Some(state)) => state,
            Ok(None) => panic!("{}/{id} has no stored state", O::TYPE_NAME),
            Err(error) => panic!("reading {}/{id}: {error}", O::TYPE_NAME),
        }
    }

    /// Fires `alarm` of `(O, id)` now, whether or not it is due, as the scheduler would
    /// (attempt 1). The alarm is removed in the same commit as its handler's state, unless
    /// the handler schedules it again. Firing an alarm that is not scheduled is an error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::durable_object;
    /// use durable_runtime::testing::TestRuntime;
    ///
    /// #[durable_object]
    /// pub struct Reminder { rung: u32 }
    ///
    /// #[durable_object]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.rung += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = TestRuntime::new();
    /// rt.schedule_alarm("r", Reminder::RING, Duration::from_secs(3600)).await.unwrap();
    /// // Fired an hour early, and removed.
    /// rt.fire_alarm("r", Reminder::RING).await.unwrap();
    /// assert_eq!(rt.state::<Reminder>("r").await.rung, 1);
    /// assert!(rt.list_alarms::<Reminder>("r").await.unwrap().is_empty());
    /// assert!(rt.fire_alarm("r", Reminder::RING).await.is_err());
    /// # }
    /// ```
    pub async fn fire_alarm<O: DurableObject, A>(
        &self,
        id: &str,
        alarm: Alarm<O, A>,
    ) -> Result<(), Error<BoxError>> {
        let key = ObjectKey::new(O::TYPE_NAME, id);
        let scheduled = self
            .storage
            .list_alarms(&key)
            .await
            .map_err(|source| Error::Storage {
                key: key.clone(),
                source,
            })?
            .into_iter()
            .find(|a| a.name == alarm.name() && !a.dead);
        let Some(scheduled) = scheduled else {
            let message = format!("alarm `{}` of {key} is not scheduled", alarm.name());
            return Err(Error::Handler(message.into()));
        };
        let (reply, outcome) = tokio::sync::oneshot::channel();
        crate::activation::fire::dispatch::<O>(
            &self.runtime,
            scheduled,
            1,
            crate::object::handle::Removal::Unconditional,
            crate::activation::fire::Completion::Reply(reply),
        );
        match outcome.await {
            Ok(fired) => fired.map(drop),
            Err(_) => Err(Error::ShuttingDown),
        }
    }

    /// Fires every alarm due now, earliest first, one at a time, with the scheduler's
    /// retry and dead-alarm handling. Returns how many fired.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::durable_object;
    /// use durable_runtime::testing::TestRuntime;
    ///
    /// #[durable_object]
    /// pub struct Reminder { rung: u32 }
    ///
    /// #[durable_object]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.rung += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = TestRuntime::new();
    /// rt.schedule_alarm("now", Reminder::RING, Duration::ZERO).await.unwrap();
    /// rt.schedule_alarm("later", Reminder::RING, Duration::from_secs(3600)).await.unwrap();
    /// assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 1);
    /// assert_eq!(rt.state::<Reminder>("now").await.rung, 1);
    /// assert_eq!(rt.state::<Reminder>("later").await.rung, 0); // not due yet
    /// # }
    /// ```
    pub async fn fire_due_alarms(&self, max: usize) -> Result<usize, DrainError> {
        let mut fired = 0;
        loop {
            let now = self.runtime.now();
            if fired >= max {
                // Stop before claiming, so that what is left stays fireable.
                let more_due = self
                    .storage
                    .next_alarm_due()
                    .await?
                    .is_some_and(|due| due <= now);
                return if more_due {
                    Err(DrainError::IterationCap { fired })
                } else {
                    Ok(fired)
                };
            }
            let claimed = self
                .storage
                .claim_due_alarms(now, now, now + self.runtime.alarm_settings().claim_ttl, 1)
                .await?;
            let Some(alarm) = claimed.into_iter().next() else {
                return Ok(fired);
            };
            crate::activation::scheduler::fire(self.runtime.clone(), alarm).await;
            fired += 1;
        }
    }

    /// Fires every alarm in time order, advancing the (paused) clock to each due time,
    /// until none is left or `max` have fired. Returns how many fired.
    ///
    /// Needs paused time (`start_paused = true`): it moves tokio's clock forward.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::durable_object;
    /// use durable_runtime::testing::TestRuntime;
    ///
    /// #[durable_object]
    /// pub struct Reminder { rung: u32 }
    ///
    /// #[durable_object]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.rung += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = TestRuntime::new();
    /// let start = rt.now();
    /// rt.schedule_alarm("a", Reminder::RING, Duration::from_secs(60)).await.unwrap();
    /// rt.schedule_alarm("b", Reminder::RING, Duration::from_secs(3600)).await.unwrap();
    /// assert_eq!(rt.drain_alarms(10).await.unwrap(), 2);
    /// // The clock moved to the last due time.
    /// assert!(rt.now() >= start + Duration::from_secs(3600));
    /// # }
    /// ```
    pub async fn drain_alarms(&self, max: usize) -> Result<usize, DrainError> {
        let mut fired = 0;
        loop {
            fired += self
                .fire_due_alarms(max - fired.min(max))
                .await
                .map_err(|e| match e {
                    DrainError::IterationCap { fired: more } => DrainError::IterationCap {
                        fired: fired + more,
                    },
                    other => other,
                })?;
            let Some(next) = self.storage.next_alarm_due().await? else {
                return Ok(fired);
            };
            if fired >= max {
                return Err(DrainError::IterationCap { fired });
            }
            let wait = next.duration_since(self.runtime.now()).unwrap_or_default();
            tokio::time::advance(wait).await;
        }
    }
}

impl Deref for TestRuntime {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        &self.runtime
    }
}

/// A [`Context`] for `(O, id)` to call handler methods directly on a state value, without a
/// runtime. Alarm changes are recorded, not stored: read them with [`scheduled_alarms`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::testing::{context, scheduled_alarms};
/// use durable_runtime::storage::AlarmChange;
/// use durable_runtime::{durable_object, Context};
///
/// #[durable_object]
/// pub struct Lock { holder: Option<String> }
///
/// #[durable_object]
/// impl Lock {
///     #[handler]
///     fn handle_acquire(&mut self, ctx: &Context, who: String) -> bool {
///         if self.holder.is_some() {
///             return false;
///         }
///         self.holder = Some(who);
///         ctx.schedule_alarm(Lock::RELEASE, Duration::from_secs(30));
///         true
///     }
///
///     #[alarm]
///     fn release(&mut self) {
///         self.holder = None;
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let ctx = context::<Lock>("door");
/// let mut lock = Lock::default();
/// assert!(lock.handle_acquire(&ctx, "ann".into()));
/// assert!(!lock.handle_acquire(&ctx, "bob".into()));
/// assert!(matches!(&scheduled_alarms(&ctx)[..], [AlarmChange::Set { name, .. }] if name == "release"));
/// # }
/// ```
pub fn context<O: DurableObject>(id: &str) -> Context {
    let runtime = Runtime::builder(MemoryStorage::new())
        .manual_alarms()
        .build();
    Context::new(ObjectKey::new(O::TYPE_NAME, id), runtime)
}

/// The alarm changes recorded in `ctx` since the last call, in order (and clears them).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::storage::AlarmChange;
/// use durable_runtime::testing::{context, scheduled_alarms};
/// use durable_runtime::{durable_object, Context};
///
/// #[durable_object]
/// pub struct Job { runs: u32 }
///
/// #[durable_object]
/// impl Job {
///     #[handler]
///     fn handle_stop(&mut self, ctx: &Context) { ctx.cancel_all_alarms(); }
///
///     #[alarm]
///     fn run(&mut self) { self.runs += 1; }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let ctx = context::<Job>("j");
/// Job::default().handle_stop(&ctx);
/// assert_eq!(scheduled_alarms(&ctx), [AlarmChange::CancelAll]);
/// assert!(scheduled_alarms(&ctx).is_empty()); // taken by the first read
/// # }
/// ```
pub fn scheduled_alarms(ctx: &Context) -> Vec<AlarmChange> {
    ctx.take_alarm_changes()
}

/// The FSM inserts and signals a handler staged through [`Context::fsm`] on `ctx` (feature
/// `fsm`), taken from it: a handler run directly on a [`context`] commits nothing, so this is
/// how a unit test sees what its commit would carry.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::FsmChange;
/// use durable_runtime::testing::{context, staged_fsm};
/// use durable_runtime::{durable_object, Context};
///
/// #[durable_object]
/// pub struct Order { confirmed: bool }
///
/// #[durable_object]
/// impl Order {
///     #[handler]
///     fn handle_confirm(&mut self, ctx: &Context) -> Result<(), durable_runtime::fsm::Error> {
///         self.confirmed = true;
///         ctx.fsm().signal(format!("ship:{}", ctx.id()), "confirmed", (), None)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let ctx = context::<Order>("o1");
/// Order::default().handle_confirm(&ctx).unwrap();
/// let staged = staged_fsm(&ctx);
/// assert!(matches!(
///     staged.iter().next(),
///     Some(FsmChange::Signal { signal, .. }) if signal.name == "confirmed"
/// ));
/// assert!(staged_fsm(&ctx).is_empty()); // taken by the first read
/// # }
/// ```
#[cfg(feature = "fsm")]
pub fn staged_fsm(ctx: &Context) -> crate::storage::FsmChanges {
    ctx.take_fsm()
}

/// Moves the wall clock of `runtime` forward by `by` without moving tokio's clock, as a system
/// clock adjustment (an NTP step, a manual change) does to a running process. Alarms compare
/// their due times with this clock; sleeps are on tokio's clock.
///
/// # Panics
///
/// If `runtime` was not built with
/// [`clock_follows_tokio`](crate::RuntimeBuilder::clock_follows_tokio): only that clock can be
/// moved by a test.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::{MemoryStorage, Runtime, testing};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::builder(MemoryStorage::new()).clock_follows_tokio().build();
/// let before = rt.now();
/// testing::jump_wall_clock_forward(&rt, Duration::from_secs(3600));
/// assert!(rt.now() >= before + Duration::from_secs(3600));
/// # }
/// ```
pub fn jump_wall_clock_forward(runtime: &Runtime, by: Duration) {
    jump(runtime, by, true);
}

/// Moves the wall clock of `runtime` back by `by` without moving tokio's clock. See
/// [`jump_wall_clock_forward`].
///
/// # Panics
///
/// If `runtime` was not built with
/// [`clock_follows_tokio`](crate::RuntimeBuilder::clock_follows_tokio).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::{MemoryStorage, Runtime, testing};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::builder(MemoryStorage::new()).clock_follows_tokio().build();
/// let before = rt.now();
/// testing::jump_wall_clock_back(&rt, Duration::from_secs(60));
/// assert!(rt.now() < before);
/// # }
/// ```
pub fn jump_wall_clock_back(runtime: &Runtime, by: Duration) {
    jump(runtime, by, false);
}

fn jump(runtime: &Runtime, by: Duration, forward: bool) {
    assert!(
        runtime.clock().jump(by, forward),
        "only a runtime built with `clock_follows_tokio` has a wall clock a test can move"
    );
}
