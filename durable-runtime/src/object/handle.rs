//! The runtime handle: the `Runtime` type and the shared parts every layer reaches through it
//! (storage, clock, events, the commit and load loops, the scheduler's claims, live-object
//! slots). It sits below the registry, which it holds type-erased ([`Objects`], and a
//! [`TypeMap`] of each type's entry) along with the way to fire each type's alarms
//! ([`AlarmTarget`]); the public API built on it is in `crate::runtime`.

use std::any::TypeId;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::activation::fire::Completion;
use crate::alarms::AlarmSettings;
use crate::alarms::handle::SchedulerHandle;
use crate::clock::Clock;
use crate::commit::committer::Committer;
use crate::commit::freshness::{SecondWriterWarning, VersionChecks};
use crate::commit::loader::Loader;
use crate::object::type_map::TypeMap;
use crate::object::{BoxFuture, DurableObject, ObjectOptions};
use crate::observe::events::Event;
use crate::storage::{AlarmRecord, Loaded, Storage};

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
    pub(crate) inner: Arc<Shared>,
}

pub(crate) struct Shared {
    storage: Arc<dyn Storage>,
    defaults: ObjectOptions,
    overrides: HashMap<TypeId, ObjectOptions>,
    /// Each type's `Arc<TypeEntry<O>>`.
    pub(crate) types: TypeMap,
    /// Type name → how to fire its alarms.
    pub(crate) alarm_targets: DashMap<&'static str, Arc<dyn AlarmTarget>>,
    alarm_settings: AlarmSettings,
    pub(crate) scheduler: Arc<SchedulerHandle>,
    pub(crate) scheduler_started: AtomicBool,
    /// Whether the sweep of expired idempotency keys runs.
    pub(crate) sweep_started: AtomicBool,
    /// How long a reply stored under an idempotency key is kept.
    pub(crate) idempotency_retention: Duration,
    committer: std::sync::OnceLock<Committer>,
    loader: std::sync::OnceLock<Loader>,
    /// Read calls check the stored version first.
    validate_reads: bool,
    versions: std::sync::OnceLock<VersionChecks>,
    second_writer: SecondWriterWarning,
    clock: Clock,
    pub(crate) events: broadcast::Sender<Event>,
    pub(crate) closing: AtomicBool,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tasks: TaskTracker,
    /// Objects of every type live now, and the cap on them.
    live: AtomicUsize,
    max_live: Option<usize>,
    pub(crate) manual_alarms: bool,
    /// Every type's live objects, erased over the type.
    pub(crate) objects: DashMap<TypeId, Arc<dyn Objects>>,
    started: tokio::time::Instant,
    /// The registry of types callable by name, opaque here: the layer above that builds and
    /// reads it owns its type.
    pub(crate) exposed: Box<dyn std::any::Any + Send + Sync>,
    /// Cluster mode: the node's membership (unset for a single-node runtime).
    pub(crate) cluster: std::sync::OnceLock<Arc<crate::cluster::Node>>,
}

/// What a runtime is built from: the builder's settings.
pub(crate) struct Config {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) defaults: ObjectOptions,
    pub(crate) overrides: HashMap<TypeId, ObjectOptions>,
    pub(crate) alarm_settings: AlarmSettings,
    pub(crate) clock: Clock,
    pub(crate) max_live: Option<usize>,
    pub(crate) manual_alarms: bool,
    pub(crate) validate_reads: bool,
    pub(crate) idempotency_retention: Duration,
    pub(crate) exposed: Box<dyn std::any::Any + Send + Sync>,
}

impl Shared {
    /// The shared parts of a runtime that has just been built: no type registered, nothing
    /// live, its loops not started yet.
    pub(crate) fn new(config: Config) -> Self {
        let Config {
            storage,
            defaults,
            overrides,
            alarm_settings,
            clock,
            max_live,
            manual_alarms,
            validate_reads,
            idempotency_retention,
            exposed,
        } = config;
        Self {
            storage,
            defaults,
            overrides,
            types: TypeMap::default(),
            alarm_targets: DashMap::new(),
            alarm_settings,
            scheduler: Arc::default(),
            scheduler_started: AtomicBool::new(false),
            sweep_started: AtomicBool::new(false),
            idempotency_retention,
            committer: std::sync::OnceLock::new(),
            loader: std::sync::OnceLock::new(),
            validate_reads,
            versions: std::sync::OnceLock::new(),
            second_writer: SecondWriterWarning::default(),
            clock,
            events: broadcast::channel(EVENT_CAPACITY).0,
            closing: AtomicBool::new(false),
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            live: AtomicUsize::new(0),
            max_live,
            manual_alarms,
            objects: DashMap::new(),
            started: tokio::time::Instant::now(),
            exposed,
            cluster: std::sync::OnceLock::new(),
        }
    }
}

/// The registry's side of the objects of one type, erased over the type.
pub(crate) trait Objects: Send + Sync {
    /// The least recently used idle object among a sample: its last use and id.
    fn idle_candidate(&self) -> Option<(u64, Box<str>)>;

    /// Removes `id` if it is still idle. A live object's task then ends (its inbox has
    /// closed); a dormant object leaves at once.
    fn evict(&self, runtime: &Runtime, id: &str) -> bool;

    /// Runtime shutdown: closes every inbox, so that each task handles what it queued and
    /// ends, and forgets every dormant object.
    fn close_all(&self, runtime: &Runtime);

    /// The type described, with the options it runs with in `runtime`.
    fn describe(&self, runtime: &Runtime) -> crate::describe::TypeDescription;

    /// Cluster mode: closes the objects `matches` selects (by type name and id), as
    /// [`close_all`](Self::close_all) closes every object, when their shard leaves the node.
    fn close_matching(&self, runtime: &Runtime, matches: &dyn Fn(&str, &str) -> bool);

    /// Cluster mode: how many of the objects `matches` selects are live or dormant here.
    fn live_matching(&self, matches: &dyn Fn(&str, &str) -> bool) -> usize;
}

/// Fires an alarm at an object of a type known only by name.
pub(crate) trait AlarmTarget: Send + Sync {
    /// Counts an alarm of the type fired with `outcome`.
    fn alarm_fired(&self, outcome: &'static str);

    /// The registry's count to read the object's state under, or `None` if the object is
    /// registered (see `TypeEntry::fetch_epoch`).
    fn fetch_epoch(&self, runtime: &Runtime, id: &str) -> Option<u64>;

    /// Starts the object from its state as read (see `TypeEntry::start_fetched`).
    fn start_fetched(&self, runtime: &Runtime, id: &str, stored: Loaded, epoch: u64);

    /// Starts the object (loading its state) ahead of an alarm, without changing anything.
    fn activate<'a>(&'a self, runtime: &'a Runtime, id: &'a str) -> BoxFuture<'a, ()>;

    /// Hands the object of `alarm` the firing of its attempt `attempt`: the handler runs with
    /// the argument stored with the alarm, the alarm's removal (see [`Removal`]) is committed
    /// with the handler's state, and `completion` learns the outcome. Returns at once.
    fn fire(
        &self,
        runtime: &Runtime,
        alarm: AlarmRecord,
        attempt: u32,
        removal: Removal,
        completion: Completion,
    );
}

/// How a fired alarm is removed, in the same commit as its handler's state.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Removal {
    /// If the handler succeeds and the alarm is still claimed with this claim time (a handler
    /// that schedules it again clears the claim).
    Claimed(SystemTime),
    /// Before the handler runs, so that only a schedule made by the handler survives (alarms
    /// fired by hand in tests, which hold no claim).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    Unconditional,
}

/// How a fired alarm ended in its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fired {
    /// The handler ran (and its outcome is the call's result).
    Ran,
    /// The claim was revoked before the handler could run: the alarm was cancelled or moved.
    Revoked,
}

impl Runtime {
    pub(crate) fn upgrade(shared: &Weak<Shared>) -> Option<Self> {
        shared.upgrade().map(|inner| Self { inner })
    }

    /// The current UTC time as this runtime's clock gives it (the system clock, or tokio's
    /// clock when built with
    /// [`RuntimeBuilder::clock_follows_tokio`](crate::RuntimeBuilder::clock_follows_tokio)).
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

    /// Whether read calls check the stored version first (see
    /// [`RuntimeBuilder::validate_reads`](crate::RuntimeBuilder::validate_reads)).
    pub(crate) fn validates_reads(&self) -> bool {
        self.inner.validate_reads
    }

    /// The version-check loop of validated reads, started on first use.
    pub(crate) fn versions(&self) -> &VersionChecks {
        self.inner
            .versions
            .get_or_init(|| VersionChecks::start(Arc::clone(&self.inner.storage)))
    }

    /// A write of this runtime failed: a version conflict shows another writer of the
    /// database, which is worth a warning (once).
    pub(crate) fn commit_failed(&self, error: &crate::storage::CommitError) {
        self.inner
            .second_writer
            .conflict(error, self.inner.validate_reads);
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
    /// let stored = rt.storage().load(&key).await.unwrap().object().unwrap();
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

    /// Spawns a task that graceful shutdown waits for.
    pub(crate) fn spawn_task(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.inner.tasks.spawn(task);
    }

    /// Spawns `task` as [`Runtime::spawn_task`] does, for a caller that waits for its output.
    pub(crate) fn spawn_joined<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.inner.tasks.spawn(task)
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
        ceil_millis(at.saturating_duration_since(self.inner.started))
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
}

/// A duration in whole milliseconds, rounded up (an expiry is never early).
pub(crate) fn ceil_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}
