//! The runtime: owns the storage and the registry of live objects.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::alarms::{Alarm, AlarmSettings, AlarmTime};
use crate::call::{Access, SyncBody, call};
use crate::clock::Clock;
use crate::committer::Committer;
use crate::context::Context;
use crate::error::Error;
use crate::events::Event;
use crate::instance::Settings;
use crate::loader::Loader;
use crate::object::{DurableObject, ObjectOptions};
use crate::registry::{Envelope, Objects, Residency, TypeEntry};
use crate::scheduler::{self, AlarmTarget, SchedulerHandle, TypedTarget};
use crate::storage::{AlarmRecord, IdPage, ObjectKey, Storage};
use crate::type_map::TypeMap;

/// How many lifecycle events a subscriber may fall behind before it loses the oldest.
const EVENT_CAPACITY: usize = 1024;

/// Runtime-wide defaults, used where neither the type nor its registration sets a value.
const DEFAULT_OPTIONS: ObjectOptions = ObjectOptions::new()
    .with_hibernate_after(Duration::from_secs(5 * 60))
    .with_call_timeout(Duration::from_secs(30))
    .with_queue_capacity(1024);

/// A durable objects runtime: a storage backend plus the objects live in this process.
///
/// Cloning is cheap and every clone is the same runtime. Two runtimes built separately are
/// fully independent (each has its own registry), even in one process. Objects run on the
/// ambient tokio runtime, so calls must be made from within one.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, MemoryStorage, Runtime};
///
/// #[durable_object]
/// pub struct Counter {
///     count: i64,
/// }
///
/// #[durable_object]
/// impl Counter {
///     #[handler]
///     fn handle_increment(&mut self, by: i64) -> i64 {
///         self.count += by;
///         self.count
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// assert_eq!(Counter::increment(&rt, "user:123", 2).await.unwrap(), 2);
/// assert_eq!(Counter::increment(&rt, "user:123", 3).await.unwrap(), 5);
/// # }
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Shared>,
}

pub(crate) struct Shared {
    storage: Arc<dyn Storage>,
    defaults: ObjectOptions,
    overrides: HashMap<TypeId, ObjectOptions>,
    /// Each type's `Arc<TypeEntry<O>>`.
    types: TypeMap,
    /// Type name → how to fire its alarms.
    alarm_targets: DashMap<&'static str, Arc<dyn AlarmTarget>>,
    alarm_settings: AlarmSettings,
    scheduler: Arc<SchedulerHandle>,
    scheduler_started: AtomicBool,
    committer: std::sync::OnceLock<Committer>,
    loader: std::sync::OnceLock<Loader>,
    clock: Clock,
    events: broadcast::Sender<Event>,
    closing: AtomicBool,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    /// Objects of every type live now, and the cap on them.
    live: AtomicUsize,
    max_live: Option<usize>,
    manual_alarms: bool,
    /// Every type's live objects, erased over the type.
    objects: DashMap<TypeId, Arc<dyn Objects>>,
    started: tokio::time::Instant,
}

/// Where an object is, as seen by [`Runtime::status`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::{durable_object, MemoryStorage, ObjectStatus, Runtime};
///
/// #[durable_object(hibernate_after = "1m")]
/// pub struct Counter { count: i64 }
///
/// #[durable_object]
/// impl Counter {
///     #[handler]
///     fn handle_get(&self) -> i64 { self.count }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// assert_eq!(rt.status::<Counter>("a").await.unwrap(), ObjectStatus::Absent);
/// Counter::get(&rt, "a").await.unwrap();
/// assert_eq!(rt.status::<Counter>("a").await.unwrap(), ObjectStatus::Active);
/// tokio::time::sleep(Duration::from_secs(120)).await;
/// assert_eq!(rt.status::<Counter>("a").await.unwrap(), ObjectStatus::Hibernated);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectStatus {
    /// Live in this runtime with its state decoded in memory.
    Active,
    /// Live in this runtime, its decoded state dropped after `hibernate_after` (only its
    /// encoded state is kept, without a task); the next call wakes it without a storage read.
    Hibernated,
    /// Not live in this runtime (or live without loaded state), but stored.
    Stored,
    /// Neither live nor stored.
    Absent,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("types", &self.inner.types.len())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime over `storage` with default settings.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = durable_runtime::Runtime::new(durable_runtime::MemoryStorage::new());
    /// # drop(rt);
    /// ```
    pub fn new(storage: impl Storage) -> Self {
        Self::builder(storage).build()
    }

    /// A builder for a runtime over `storage`, to set defaults and register types.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{MemoryStorage, ObjectOptions, Runtime};
    ///
    /// let rt = Runtime::builder(MemoryStorage::new())
    ///     .default_options(ObjectOptions::new().with_call_timeout(Duration::from_secs(5)))
    ///     .build();
    /// # drop(rt);
    /// ```
    pub fn builder(storage: impl Storage) -> RuntimeBuilder {
        RuntimeBuilder {
            storage: Arc::new(storage),
            defaults: ObjectOptions::new(),
            overrides: HashMap::new(),
            registrations: Vec::new(),
            alarm_settings: AlarmSettings::default(),
            clock: Clock::System,
            max_live: None,
            manual_alarms: false,
        }
    }

    pub(crate) fn upgrade(shared: &Weak<Shared>) -> Option<Self> {
        shared.upgrade().map(|inner| Self { inner })
    }

    /// The current UTC time as this runtime's clock gives it (the system clock, or tokio's
    /// clock when built with [`RuntimeBuilder::clock_follows_tokio`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = durable_runtime::Runtime::new(durable_runtime::MemoryStorage::new());
    /// assert!(rt.now() <= std::time::SystemTime::now());
    /// ```
    pub fn now(&self) -> SystemTime {
        self.inner.clock.now()
    }

    /// Subscribes to lifecycle events of every object of this runtime.
    ///
    /// The receiver sees the events sent after it subscribed; see [`Event`] for the channel's
    /// capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{storage::ObjectKey, Event};
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// let mut events = rt.subscribe();
    /// Counter::increment(&rt, "a").await.unwrap();
    /// rt.delete::<Counter>("a").await.unwrap();
    /// let key = ObjectKey::new("Counter", "a");
    /// assert_eq!(events.recv().await.unwrap(), Event::Created { key: key.clone() });
    /// assert_eq!(events.recv().await.unwrap(), Event::Deleted { key });
    /// # }
    /// ```
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    pub(crate) fn emit(&self, event: impl FnOnce() -> Event) {
        if self.inner.events.receiver_count() > 0 {
            let _ = self.inner.events.send(event());
        }
    }

    pub(crate) fn emit_unknown_alarm(&self, alarm: &AlarmRecord) {
        self.emit(|| Event::UnknownAlarmType {
            key: alarm.key.clone(),
            alarm: alarm.name.clone(),
        });
    }

    pub(crate) fn emit_alarm_failed(
        &self,
        alarm: &AlarmRecord,
        attempt: u32,
        error: &str,
        dead: bool,
    ) {
        self.emit(|| Event::AlarmFailed {
            key: alarm.key.clone(),
            alarm: alarm.name.clone(),
            attempt,
            error: error.to_owned(),
            dead,
        });
    }

    pub(crate) fn alarm_settings(&self) -> &AlarmSettings {
        &self.inner.alarm_settings
    }

    /// The alarm target of an object type known to this runtime.
    pub(crate) fn alarm_target(&self, object_type: &str) -> Option<Arc<dyn AlarmTarget>> {
        self.inner
            .alarm_targets
            .get(object_type)
            .map(|target| Arc::clone(target.value()))
    }

    /// The group-commit loop, started on first use (objects only commit inside tokio).
    pub(crate) fn committer(&self) -> &Committer {
        self.inner
            .committer
            .get_or_init(|| Committer::start(Arc::clone(&self.inner.storage)))
    }

    /// The group-load loop, started on first use (objects only load inside tokio).
    pub(crate) fn loader(&self) -> &Loader {
        self.inner
            .loader
            .get_or_init(|| Loader::start(Arc::clone(&self.inner.storage)))
    }

    /// A write with these alarm changes committed: wakes the scheduler if it scheduled one
    /// due before the scheduler looks at storage again anyway.
    pub(crate) fn alarms_committed(&self, changes: &[crate::storage::AlarmChange]) {
        let earliest = changes
            .iter()
            .filter_map(|change| match change {
                crate::storage::AlarmChange::Set { due_at, .. } => Some(*due_at),
                _ => None,
            })
            .min();
        if let Some(due_at) = earliest {
            self.inner.scheduler.alarm_scheduled(Some(due_at));
        }
    }

    /// Wakes the scheduler: an alarm changed in storage and may be due earlier than it thought.
    pub(crate) fn signal_alarm_scheduled(&self) {
        self.inner.scheduler.alarm_scheduled(None);
    }

    /// The scheduler's claims held in memory.
    pub(crate) fn scheduler(&self) -> &SchedulerHandle {
        &self.inner.scheduler
    }

    /// Starts the alarm scheduler once, when a tokio runtime is available.
    fn ensure_scheduler(&self) {
        if self.inner.scheduler_started.load(Ordering::Relaxed) || self.inner.manual_alarms {
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        if !self.inner.scheduler_started.swap(true, Ordering::AcqRel) {
            self.spawn_task(scheduler::run(
                Arc::downgrade(&self.inner),
                Arc::clone(&self.inner.scheduler),
                self.shutdown_token(),
            ));
        }
    }

    /// Schedules `alarm` for the object `(O, id)`, replacing an alarm of the same name (and
    /// re-queueing it if it was dead). It goes through the object, so it is ordered with its
    /// calls and committed like one; the object is started if it is not live.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// rt.schedule_alarm("r1", Reminder::RING, Duration::from_secs(3600)).await.unwrap();
    /// let alarms = rt.list_alarms::<Reminder>("r1").await.unwrap();
    /// assert_eq!(alarms[0].name, "ring");
    /// # }
    /// ```
    pub async fn schedule_alarm<O: DurableObject>(
        &self,
        id: &str,
        alarm: Alarm<O>,
        when: impl Into<AlarmTime>,
    ) -> Result<(), Error> {
        let when = when.into();
        call::<O, (), std::convert::Infallible, _>(
            self,
            id,
            Access::Write,
            "schedule_alarm",
            SyncBody(move |_: &mut O, ctx: &Context| {
                ctx.schedule_alarm(alarm, when);
                Ok(())
            }),
        )
        .await
    }

    /// Cancels `alarm` for the object `(O, id)`, through the object (see
    /// [`schedule_alarm`](Runtime::schedule_alarm)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// rt.schedule_alarm("r1", Reminder::RING, Duration::from_secs(3600)).await.unwrap();
    /// rt.cancel_alarm("r1", Reminder::RING).await.unwrap();
    /// assert!(rt.list_alarms::<Reminder>("r1").await.unwrap().is_empty());
    /// # }
    /// ```
    pub async fn cancel_alarm<O: DurableObject>(
        &self,
        id: &str,
        alarm: Alarm<O>,
    ) -> Result<(), Error> {
        call::<O, (), std::convert::Infallible, _>(
            self,
            id,
            Access::Write,
            "cancel_alarm",
            SyncBody(move |_: &mut O, ctx: &Context| {
                ctx.cancel_alarm(alarm);
                Ok(())
            }),
        )
        .await
    }

    /// Cancels every alarm of the object `(O, id)`, through the object.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Job { runs: u32 }
    ///
    /// #[durable_object]
    /// impl Job {
    ///     #[alarm]
    ///     fn run(&mut self) { self.runs += 1; }
    ///
    ///     #[alarm]
    ///     fn report(&mut self) {}
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// rt.schedule_alarm("j1", Job::RUN, Duration::from_secs(60)).await.unwrap();
    /// rt.schedule_alarm("j1", Job::REPORT, Duration::from_secs(3600)).await.unwrap();
    /// rt.cancel_all_alarms::<Job>("j1").await.unwrap();
    /// assert!(rt.list_alarms::<Job>("j1").await.unwrap().is_empty());
    /// # }
    /// ```
    pub async fn cancel_all_alarms<O: DurableObject>(&self, id: &str) -> Result<(), Error> {
        call::<O, (), std::convert::Infallible, _>(
            self,
            id,
            Access::Write,
            "cancel_all_alarms",
            SyncBody(move |_: &mut O, ctx: &Context| {
                ctx.cancel_all_alarms();
                Ok(())
            }),
        )
        .await
    }

    /// Lists the alarms of the object `(O, id)`, dead ones included, ordered by due time. It
    /// reads storage and does not start the object.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Job { runs: u32 }
    ///
    /// #[durable_object]
    /// impl Job {
    ///     #[alarm]
    ///     fn run(&mut self) { self.runs += 1; }
    ///
    ///     #[alarm]
    ///     fn report(&mut self) {}
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// let rt = Runtime::new(storage.clone());
    /// rt.schedule_alarm("j1", Job::REPORT, Duration::from_secs(3600)).await.unwrap();
    /// rt.schedule_alarm("j1", Job::RUN, Duration::from_secs(60)).await.unwrap();
    ///
    /// let other = Runtime::new(storage); // another process, say
    /// let alarms = other.list_alarms::<Job>("j1").await.unwrap();
    /// let names: Vec<_> = alarms.iter().map(|alarm| alarm.name.as_str()).collect();
    /// assert_eq!(names, ["run", "report"]);
    /// assert_eq!(other.live_objects::<Job>(), 0);
    /// # }
    /// ```
    pub async fn list_alarms<O: DurableObject>(&self, id: &str) -> Result<Vec<AlarmRecord>, Error> {
        crate::id::validate_id(id)?;
        let key = ObjectKey::new(O::TYPE_NAME, id);
        self.storage()
            .list_alarms(&key)
            .await
            .map_err(|source| Error::Storage { key, source })
    }

    /// The storage backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{ObjectKey, Storage};
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Counter::increment(&rt, "a").await.unwrap();
    /// let key = ObjectKey::new("Counter", "a");
    /// let stored = rt.storage().load(&key).await.unwrap().unwrap();
    /// assert_eq!(stored.state, br#"{"count":1}"#);
    /// # }
    /// ```
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.inner.storage
    }

    /// The options objects of type `O` run with, after applying the precedence runtime default
    /// < declared on the type < registration override.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, ObjectOptions, Runtime};
    ///
    /// #[durable_object(hibernate_after = "1m", shutdown_after = "1h")]
    /// pub struct Session {}
    ///
    /// #[durable_object]
    /// impl Session {}
    ///
    /// let rt = Runtime::builder(MemoryStorage::new())
    ///     .register_with::<Session>(ObjectOptions::new().with_shutdown_after(Duration::from_secs(60)))
    ///     .build();
    /// let options = rt.options_of::<Session>();
    /// assert_eq!(options.hibernate_after, Some(Duration::from_secs(60)));
    /// assert_eq!(options.shutdown_after, Some(Duration::from_secs(60)));
    /// assert_eq!(options.call_timeout, Some(Duration::from_secs(30)));
    /// ```
    pub fn options_of<O: DurableObject>(&self) -> ObjectOptions {
        self.inner
            .overrides
            .get(&TypeId::of::<O>())
            .copied()
            .unwrap_or_default()
            .or(O::options())
            .or(self.inner.defaults)
            .or(DEFAULT_OPTIONS)
    }

    /// How many objects of type `O` are live (active or hibernated) in this runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_get(&self) -> i64 { self.count }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// assert_eq!(rt.live_objects::<Counter>(), 0);
    /// Counter::get(&rt, "a").await.unwrap();
    /// assert_eq!(rt.live_objects::<Counter>(), 1);
    /// # }
    /// ```
    pub fn live_objects<O: DurableObject>(&self) -> usize {
        self.with_type_entry::<O, _>(|entry| entry.live_count())
    }

    pub(crate) fn dispatch<O: DurableObject>(&self, id: &str, envelope: Envelope<O>) {
        if self.is_closing() {
            envelope.fail(Error::ShuttingDown);
            return;
        }
        self.ensure_scheduler();
        self.with_type_entry::<O, _>(|entry| entry.dispatch(self, id, envelope));
    }

    /// Spawns a task that graceful shutdown waits for.
    pub(crate) fn spawn_task(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.inner.tasks.spawn(task);
    }

    /// The runtime's wall clock.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Milliseconds since the runtime was built (tokio's clock), for least-recently-used order.
    pub(crate) fn uptime_millis(&self) -> u64 {
        self.uptime_millis_of(tokio::time::Instant::now())
    }

    /// [`uptime_millis`](Self::uptime_millis) at `at`, for a caller that already read the clock.
    pub(crate) fn uptime_millis_of(&self, at: tokio::time::Instant) -> u64 {
        at.saturating_duration_since(self.inner.started).as_millis() as u64
    }

    /// The uptime at `at` in milliseconds, rounded up.
    pub(crate) fn uptime_millis_at(&self, at: tokio::time::Instant) -> u64 {
        crate::registry::ceil_millis(at.saturating_duration_since(self.inner.started))
    }

    /// The instant at `millis` of uptime.
    pub(crate) fn instant_at_uptime(&self, millis: u64) -> tokio::time::Instant {
        self.inner.started + Duration::from_millis(millis)
    }

    /// A handle that does not keep the runtime alive.
    pub(crate) fn downgrade(&self) -> Weak<Shared> {
        Arc::downgrade(&self.inner)
    }

    /// Counts a new live object, first evicting an idle one if the cap is reached. Returns
    /// false if there is no room.
    pub(crate) fn reserve_live_slot(&self) -> bool {
        let live = self.inner.live.fetch_add(1, Ordering::AcqRel) + 1;
        let Some(max) = self.inner.max_live else {
            return true;
        };
        if live <= max || self.evict_least_recently_used() {
            return true;
        }
        self.inner.live.fetch_sub(1, Ordering::AcqRel);
        false
    }

    /// A live object left (or a reserved slot was not used).
    pub(crate) fn release_live_slot(&self) {
        self.inner.live.fetch_sub(1, Ordering::AcqRel);
    }

    /// Shuts down the least recently used idle object among a sample of each type's. Its
    /// slot is released when its task ends.
    fn evict_least_recently_used(&self) -> bool {
        let evictors: Vec<Arc<dyn Objects>> = self
            .inner
            .objects
            .iter()
            .map(|entry| Arc::clone(entry.value()))
            .collect();
        for _ in 0..3 {
            let candidate = evictors
                .iter()
                .filter_map(|evictor| evictor.idle_candidate().map(|c| (c, evictor)))
                .min_by_key(|((last_used, _), _)| *last_used);
            let Some(((_, id), evictor)) = candidate else {
                return false;
            };
            if evictor.evict(self, &id) {
                return true;
            }
        }
        false
    }

    pub(crate) fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.inner.closing.load(Ordering::Acquire)
    }

    /// Shuts the runtime down gracefully: new calls fail with [`Error::ShuttingDown`], calls
    /// already queued are handled (each committed before its reply), the alarm scheduler
    /// stops, and this returns once every object has left memory.
    ///
    /// Nothing acknowledged is lost without it either (every reply follows its commit);
    /// shutting down gracefully lets queued calls finish instead of failing.
    ///
    /// # Examples
    ///
    /// ```
    /// # use durable_runtime::{durable_object, Error, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Counter::increment(&rt, "a").await.unwrap();
    /// rt.shutdown().await;
    /// assert!(matches!(Counter::increment(&rt, "a").await, Err(Error::ShuttingDown)));
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        self.inner.shutdown.cancel();
        // Each live object handles what it queued, then ends.
        let types: Vec<Arc<dyn Objects>> = self
            .inner
            .objects
            .iter()
            .map(|entry| Arc::clone(entry.value()))
            .collect();
        for objects in types {
            objects.close_all(self);
        }
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    /// Lists the stored ids of type `O` in ascending order, a page at a time, without
    /// activating any object. Pass the previous page's `next` as `after`. A `limit` of zero
    /// counts as one: an empty page would end the listing.
    ///
    /// # Examples
    ///
    /// ```
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// for id in ["a", "b", "c"] {
    ///     Counter::increment(&rt, id).await.unwrap();
    /// }
    /// let page = rt.list_ids::<Counter>(None, 2).await.unwrap();
    /// assert_eq!(page.ids, ["a", "b"]);
    /// let rest = rt.list_ids::<Counter>(page.next.as_deref(), 2).await.unwrap();
    /// assert_eq!(rest.ids, ["c"]);
    /// assert_eq!(rest.next, None);
    /// assert_eq!(rt.list_ids::<Counter>(None, 0).await.unwrap().ids, ["a"]);
    /// # }
    /// ```
    pub async fn list_ids<O: DurableObject>(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, Error> {
        self.storage()
            .list_ids(O::TYPE_NAME, after, limit.max(1))
            .await
            .map_err(|source| Error::Storage {
                key: ObjectKey::new(O::TYPE_NAME, after.unwrap_or_default()),
                source,
            })
    }

    /// Reads the committed state of `(O, id)` from storage, without activating it. `None` if
    /// it was never stored.
    ///
    /// # Examples
    ///
    /// ```
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// assert!(rt.read_state::<Counter>("a").await.unwrap().is_none());
    /// Counter::increment(&rt, "a").await.unwrap();
    /// let state = rt.read_state::<Counter>("a").await.unwrap().unwrap();
    /// assert_eq!(state.count, 1);
    /// # }
    /// ```
    pub async fn read_state<O: DurableObject>(&self, id: &str) -> Result<Option<O>, Error> {
        crate::id::validate_id(id)?;
        let key = ObjectKey::new(O::TYPE_NAME, id);
        let stored = self
            .storage()
            .load(&key)
            .await
            .map_err(|source| Error::Storage {
                key: key.clone(),
                source,
            })?;
        stored
            .map(|stored| {
                crate::codec::decode(&stored.state).map_err(|failure| Error::Decode {
                    key,
                    path: failure.path,
                    message: failure.message,
                })
            })
            .transpose()
    }

    /// Where the object `(O, id)` is: active or hibernated in this runtime, only stored, or
    /// absent. Does not activate it.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::ObjectStatus;
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// let rt = Runtime::new(storage.clone());
    /// Counter::increment(&rt, "a").await.unwrap();
    /// assert_eq!(rt.status::<Counter>("a").await.unwrap(), ObjectStatus::Active);
    ///
    /// let other = Runtime::new(storage); // the same storage, another runtime
    /// assert_eq!(other.status::<Counter>("a").await.unwrap(), ObjectStatus::Stored);
    /// assert_eq!(other.status::<Counter>("b").await.unwrap(), ObjectStatus::Absent);
    /// assert_eq!(other.live_objects::<Counter>(), 0);
    /// # }
    /// ```
    pub async fn status<O: DurableObject>(&self, id: &str) -> Result<ObjectStatus, Error> {
        crate::id::validate_id(id)?;
        match self.with_type_entry::<O, _>(|entry| entry.residency(id)) {
            Some(Residency::Active) => return Ok(ObjectStatus::Active),
            Some(Residency::Hibernated) => return Ok(ObjectStatus::Hibernated),
            _ => {}
        }
        let key = ObjectKey::new(O::TYPE_NAME, id);
        match self.storage().load(&key).await {
            Ok(Some(_)) => Ok(ObjectStatus::Stored),
            Ok(None) => Ok(ObjectStatus::Absent),
            Err(source) => Err(Error::Storage { key, source }),
        }
    }

    /// Deletes the object `(O, id)`: its stored state and all its alarms, in one transaction.
    /// It goes through the object, so calls queued before it are handled first; a call after
    /// it starts from the default state. Returns whether a stored state existed.
    ///
    /// # Examples
    ///
    /// ```
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Counter::increment(&rt, "a").await.unwrap();
    /// assert!(rt.delete::<Counter>("a").await.unwrap());
    /// assert_eq!(Counter::increment(&rt, "a").await.unwrap(), 1);
    /// # }
    /// ```
    pub async fn delete<O: DurableObject>(&self, id: &str) -> Result<bool, Error> {
        crate::id::validate_id(id)?;
        // From inside the object's own handler (or a call it is waiting on), the deletion
        // would wait for that handler: refuse at once, as calls do.
        let chain = crate::chain::Chain::current();
        if let Some(chain) = chain.cycle_to(O::TYPE_NAME, id) {
            return Err(Error::CallCycle {
                key: ObjectKey::new(O::TYPE_NAME, id),
                chain,
            });
        }
        // Asked from a handler, as a call: not before the state it ran on is committed.
        crate::durability::leaving(&chain).await?;
        let (reply, receive) = oneshot::channel();
        self.dispatch::<O>(id, Envelope::Delete(reply));
        receive.await.unwrap_or(Err(Error::ShuttingDown))
    }

    /// Calls `with` on the entry of type `O`, registering the type on first use.
    pub(crate) fn with_type_entry<O: DurableObject, R>(
        &self,
        with: impl FnOnce(&Arc<TypeEntry<O>>) -> R,
    ) -> R {
        self.inner.types.with(
            || {
                self.inner
                    .alarm_targets
                    .insert(O::TYPE_NAME, Arc::new(TypedTarget::<O>::new()));
                let entry = Arc::new(TypeEntry::<O>::new(self.settings_of::<O>()));
                self.inner
                    .objects
                    .insert(TypeId::of::<O>(), Arc::clone(&entry) as Arc<dyn Objects>);
                entry
            },
            with,
        )
    }

    fn settings_of<O: DurableObject>(&self) -> Settings {
        Settings::from_options(self.options_of::<O>())
    }
}

/// Configures and builds a [`Runtime`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::{durable_object, MemoryStorage, ObjectOptions, Runtime};
///
/// #[durable_object]
/// pub struct Counter {
///     count: i64,
/// }
///
/// #[durable_object]
/// impl Counter {}
///
/// let rt = Runtime::builder(MemoryStorage::new())
///     .default_options(ObjectOptions::new().with_hibernate_after(Duration::from_secs(30)))
///     .register::<Counter>()
///     .build();
/// assert_eq!(rt.options_of::<Counter>().hibernate_after, Some(Duration::from_secs(30)));
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct RuntimeBuilder {
    storage: Arc<dyn Storage>,
    defaults: ObjectOptions,
    overrides: HashMap<TypeId, ObjectOptions>,
    registrations: Vec<fn(&Runtime)>,
    alarm_settings: AlarmSettings,
    clock: Clock,
    max_live: Option<usize>,
    manual_alarms: bool,
}

impl fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("defaults", &self.defaults)
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// Runtime-wide defaults for options that a type leaves unset. Built-in defaults:
    /// `hibernate_after` 5 minutes, `shutdown_after` never, `call_timeout` 30 seconds,
    /// `queue_capacity` 1024.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, ObjectOptions, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {}
    ///
    /// let rt = Runtime::builder(MemoryStorage::new())
    ///     .default_options(ObjectOptions::new().with_queue_capacity(64))
    ///     .build();
    /// let options = rt.options_of::<Counter>();
    /// assert_eq!(options.queue_capacity, Some(64));
    /// assert_eq!(options.call_timeout, Some(Duration::from_secs(30))); // built-in default
    /// ```
    pub fn default_options(mut self, defaults: ObjectOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// Registers an object type with the options it declares.
    ///
    /// Types are also registered on their first call, but only registered types have their
    /// alarms fired before anything calls them (after a restart, say): register every type
    /// that uses alarms.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let storage = MemoryStorage::new();
    /// let before = Runtime::builder(storage.clone()).clock_follows_tokio().build();
    /// before.schedule_alarm("r1", Reminder::RING, Duration::from_secs(60)).await.unwrap();
    /// before.shutdown().await;
    ///
    /// // After a restart, nothing calls `r1`, yet its alarm fires.
    /// let rt = Runtime::builder(storage).clock_follows_tokio().register::<Reminder>().build();
    /// tokio::time::sleep(Duration::from_secs(120)).await;
    /// assert_eq!(rt.read_state::<Reminder>("r1").await.unwrap().unwrap().fired, 1);
    /// # }
    /// ```
    pub fn register<O: DurableObject>(self) -> Self {
        self.register_with::<O>(ObjectOptions::new())
    }

    /// Registers an object type, overriding the options it declares with those set in
    /// `overrides`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, ObjectOptions, Runtime};
    ///
    /// #[durable_object(call_timeout = "10s", queue_capacity = 16)]
    /// pub struct Upload { bytes: u64 }
    ///
    /// #[durable_object]
    /// impl Upload {}
    ///
    /// let overrides = ObjectOptions::new().with_call_timeout(Duration::from_secs(60));
    /// let rt = Runtime::builder(MemoryStorage::new())
    ///     .register_with::<Upload>(overrides)
    ///     .build();
    /// let options = rt.options_of::<Upload>();
    /// assert_eq!(options.call_timeout, Some(Duration::from_secs(60))); // overridden
    /// assert_eq!(options.queue_capacity, Some(16)); // as declared
    /// ```
    pub fn register_with<O: DurableObject>(mut self, overrides: ObjectOptions) -> Self {
        self.overrides.insert(TypeId::of::<O>(), overrides);
        self.registrations.push(|runtime| {
            runtime.with_type_entry::<O, _>(|_| ());
        });
        self
    }

    /// Caps the number of objects live in this runtime (all types together). Past the cap,
    /// starting an object first shuts down the least recently used idle object (chosen among
    /// a sample of each type's live objects); if none is idle, the call fails with
    /// [`Error::TooManyObjects`]. Default: no cap.
    ///
    /// # Examples
    ///
    /// ```
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).max_live_objects(1).build();
    /// Counter::increment(&rt, "a").await.unwrap();
    /// Counter::increment(&rt, "b").await.unwrap(); // `a` is idle: it makes room
    /// assert_eq!(rt.live_objects::<Counter>(), 1);
    /// assert_eq!(Counter::increment(&rt, "a").await.unwrap(), 2); // reloaded from storage
    /// # }
    /// ```
    pub fn max_live_objects(mut self, max: usize) -> Self {
        self.max_live = Some(max.max(1));
        self
    }

    /// Settings of the alarm scheduler (poll interval, claim TTL, retries). Default:
    /// [`AlarmSettings::default`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{AlarmSettings, MemoryStorage, RetryPolicy, Runtime};
    ///
    /// let settings = AlarmSettings::default()
    ///     .with_poll_interval(Duration::from_secs(5))
    ///     .with_retry(RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(30), 5));
    /// assert_eq!(settings.retry.delay_after(10), Duration::from_secs(30));
    /// let rt = Runtime::builder(MemoryStorage::new())
    ///     .alarm_settings(settings)
    ///     .build();
    /// # drop(rt);
    /// ```
    pub fn alarm_settings(mut self, settings: AlarmSettings) -> Self {
        self.alarm_settings = settings;
        self
    }

    /// Makes the runtime's clock advance with tokio's clock instead of the system clock, so
    /// tests with paused time (`#[tokio::test(start_paused = true)]`) move alarm time too.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{MemoryStorage, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).clock_follows_tokio().build();
    /// let start = rt.now();
    /// tokio::time::sleep(Duration::from_secs(24 * 3600)).await; // instant: time is paused
    /// let elapsed = rt.now().duration_since(start).unwrap();
    /// assert!(elapsed >= Duration::from_secs(24 * 3600));
    /// # }
    /// ```
    pub fn clock_follows_tokio(mut self) -> Self {
        self.clock = Clock::following_tokio();
        self
    }

    /// Runs no alarm scheduler: alarms are stored but fire only when a test fires them (see
    /// `durable_runtime::testing`, feature `testing`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new())
    ///     .clock_follows_tokio()
    ///     .manual_alarms()
    ///     .build();
    /// rt.schedule_alarm("r1", Reminder::RING, Duration::ZERO).await.unwrap();
    /// tokio::time::sleep(Duration::from_secs(3600)).await;
    /// assert_eq!(rt.list_alarms::<Reminder>("r1").await.unwrap().len(), 1); // still due
    /// assert_eq!(rt.read_state::<Reminder>("r1").await.unwrap().unwrap().fired, 0);
    /// # }
    /// ```
    pub fn manual_alarms(mut self) -> Self {
        self.manual_alarms = true;
        self
    }

    /// Builds the runtime. Inside a tokio runtime the alarm scheduler starts at once;
    /// otherwise it starts with the first call.
    ///
    /// # Examples
    ///
    /// ```
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// # }
    /// // No tokio runtime is needed to build one...
    /// let rt = Runtime::builder(MemoryStorage::new()).build();
    /// // ...but calls must be made from within one.
    /// let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// assert_eq!(tokio.block_on(Counter::increment(&rt, "a")).unwrap(), 1);
    /// ```
    pub fn build(self) -> Runtime {
        let runtime = Runtime {
            inner: Arc::new(Shared {
                storage: self.storage,
                defaults: self.defaults,
                overrides: self.overrides,
                types: TypeMap::default(),
                alarm_targets: DashMap::new(),
                alarm_settings: self.alarm_settings,
                scheduler: Arc::default(),
                scheduler_started: AtomicBool::new(false),
                committer: std::sync::OnceLock::new(),
                loader: std::sync::OnceLock::new(),
                clock: self.clock,
                events: broadcast::channel(EVENT_CAPACITY).0,
                closing: AtomicBool::new(false),
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
                live: AtomicUsize::new(0),
                max_live: self.max_live,
                manual_alarms: self.manual_alarms,
                objects: DashMap::new(),
                started: tokio::time::Instant::now(),
            }),
        };
        for register in &self.registrations {
            register(&runtime);
        }
        runtime.ensure_scheduler();
        runtime
    }
}
