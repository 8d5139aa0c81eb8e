//! [`Engine`]: the FSM engine's handle and its operations, and [`EngineBuilder`], its
//! settings. The background work (pickers, heartbeat, group commit, reaper, garbage
//! collection) is in [`super::workers`].

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::definition::Fsm;
use super::error::{BuildError, Error};
use super::insert_async::{self, InsertQueue, InsertSettings};
use super::json;
use super::outcome::AnyInstance;
use super::run::{self, Registry, TypedRunner};
use super::settle::{self, Settled};
use super::status::InstanceId;
use super::store::{
    Committed, Delivered, FsmStore, InstanceRecord, ListFilter, NewSignal, OutcomeCommit,
    SignalRecord, Target, Transition,
};
use super::workers;
use crate::clock::Clock;
use crate::storage::StorageError;

/// The durable FSM engine: inserts instances, delivers signals, and (for the queues it is
/// given) runs their steps.
///
/// Cloning is cheap and shares the engine. It stops when [`shutdown`](Self::shutdown) is
/// called, or when its last clone is dropped (then without waiting for running steps, which
/// the reaper of another engine runs again once their leases end).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::{durable_fsm, Engine, MemoryFsmStore, Outcome, Settled, StepContext};
///
/// #[durable_fsm(result = u32)]
/// pub struct Countdown {
///     #[field(default = 3)]
///     left: u32,
/// }
///
/// #[durable_fsm]
/// impl Countdown {
///     #[step(initial)]
///     fn tick(&mut self, _ctx: &StepContext) -> Outcome<Self> {
///         if self.left == 0 {
///             return Outcome::done(42);
///         }
///         self.left -= 1;
///         Outcome::next(Self::TICK)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::builder(MemoryFsmStore::new())
///     .register::<Countdown>()
///     .queue("default", 4)
///     .build()?;
/// let id = engine.insert(Countdown::default()).await?;
/// let settled = engine.await_settled(id, Duration::from_secs(5)).await?;
/// assert_eq!(settled.result::<u32>()?, Some(42));
/// engine.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    pub(crate) shared: Arc<Shared>,
    /// Held by engine handles only (not by the engine's tasks): dropping the last one stops
    /// the tasks.
    _alive: Arc<Alive>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("worker", &self.shared.worker)
            .field("queues", &self.shared.settings.queues)
            .finish_non_exhaustive()
    }
}

/// What the engine's handles and tasks share.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn FsmStore>,
    pub(crate) registry: Registry,
    pub(crate) clock: Clock,
    pub(crate) settings: Settings,
    /// This engine's name in `locked_by`.
    pub(crate) worker: String,
    /// Notified after every change that may make a row runnable or settled: pickers and
    /// `await_settled` look again.
    pub(crate) changed: Notify,
    /// The claims of the steps running here, which the heartbeat keeps alive.
    pub(crate) in_flight: Mutex<HashMap<InstanceId, i64>>,
    /// Every queue this engine knows of (for the testing kit's drain).
    pub(crate) known_queues: Mutex<BTreeSet<String>>,
    pub(crate) commits: mpsc::UnboundedSender<PendingCommit>,
    /// Stops the pickers (no new claims).
    pub(crate) stop_picking: CancellationToken,
    /// Stops heartbeat, group commit, reaper and GC, once no step runs any more.
    pub(crate) stop_maintenance: CancellationToken,
    /// The pickers and the steps they run.
    pub(crate) steps: TaskTracker,
    /// Heartbeat, group commit, reaper, GC and the commits in flight.
    pub(crate) maintenance: TaskTracker,
    /// The queue of `insert_async`.
    pub(crate) inserts: InsertQueue,
}

/// An outcome waiting for group commit.
pub(crate) struct PendingCommit {
    pub(crate) commit: OutcomeCommit,
    pub(crate) reply: oneshot::Sender<Result<Committed, StorageError>>,
}

/// Cancels everything when the last engine handle goes.
struct Alive {
    stop_picking: CancellationToken,
    stop_maintenance: CancellationToken,
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.stop_picking.cancel();
        self.stop_maintenance.cancel();
    }
}

/// The engine's settings (see the builder's methods for their meaning and defaults).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) queues: Vec<(String, usize)>,
    pub(crate) lease_ttl: Duration,
    pub(crate) heartbeat: Duration,
    pub(crate) reaper: Option<Duration>,
    pub(crate) gc: Option<GcSettings>,
    pub(crate) poll_interval: Duration,
    pub(crate) max_poll_interval: Duration,
    pub(crate) pick_batch: usize,
    pub(crate) commit_batch: usize,
    pub(crate) commit_concurrency: usize,
    pub(crate) settle_tick: Duration,
    pub(crate) inserts: InsertSettings,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct GcSettings {
    pub(crate) retention: Duration,
    pub(crate) interval: Duration,
    pub(crate) batch: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            queues: Vec::new(),
            lease_ttl: Duration::from_secs(60),
            heartbeat: Duration::from_secs(20),
            reaper: Some(Duration::from_secs(30)),
            gc: Some(GcSettings {
                retention: Duration::from_secs(24 * 3600),
                interval: Duration::from_secs(60),
                batch: 10_000,
            }),
            poll_interval: Duration::from_millis(500),
            max_poll_interval: Duration::from_secs(5),
            pick_batch: 100,
            commit_batch: 256,
            commit_concurrency: 2,
            settle_tick: Duration::from_millis(50),
            inserts: InsertSettings::default(),
        }
    }
}

/// Settings for an [`Engine`], from [`Engine::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::{Engine, MemoryFsmStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let engine = Engine::builder(MemoryFsmStore::new())
///     .queue("payments", 10)
///     .queue("emails", 2)
///     .lease_ttl(Duration::from_secs(60))
///     .heartbeat(Duration::from_secs(20))
///     .reaper_interval(Duration::from_secs(30))
///     .gc(Duration::from_secs(24 * 3600), Duration::from_secs(60))
///     .build()
///     .unwrap();
/// engine.shutdown().await;
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct EngineBuilder {
    store: Arc<dyn FsmStore>,
    registry: Registry,
    pub(crate) settings: Settings,
    clock: Clock,
    worker: Option<String>,
    errors: Vec<BuildError>,
}

impl std::fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl EngineBuilder {
    /// Registers the FSM `F` (its name and version): this engine runs steps of its instances.
    /// Instances of any FSM can be inserted and signalled without registering it.
    pub fn register<F: Fsm>(mut self) -> Self {
        if !self.registry.add(TypedRunner::<F>::erased()) {
            self.errors.push(BuildError::DuplicateFsm {
                fsm: F::NAME,
                version: F::VERSION,
            });
        }
        self
    }

    /// Runs the steps of `queue` here, at most `concurrency` at once. Without any queue the
    /// engine runs no step (a client that only inserts and signals, or a test that drains).
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        let queue = queue.into();
        if concurrency == 0 {
            self.errors.push(BuildError::ZeroConcurrency {
                queue: queue.clone(),
            });
        }
        self.settings.queues.retain(|(name, _)| *name != queue);
        self.settings.queues.push((queue, concurrency));
        self
    }

    /// How long a claim lasts without a heartbeat (default 60 s): a worker that dies loses
    /// its claims this long after its last heartbeat, and the reaper runs their steps again.
    pub fn lease_ttl(mut self, lease_ttl: Duration) -> Self {
        self.settings.lease_ttl = lease_ttl;
        self
    }

    /// How often the leases of running steps are extended (default 20 s; keep it about a
    /// third of the lease).
    pub fn heartbeat(mut self, interval: Duration) -> Self {
        self.settings.heartbeat = interval;
        self
    }

    /// How often this engine returns expired leases to runnable and fires await timeouts
    /// (default 30 s). Several engines may run it; at least one should.
    pub fn reaper_interval(mut self, interval: Duration) -> Self {
        self.settings.reaper = Some(interval);
        self
    }

    /// Runs no reaper here.
    pub fn no_reaper(mut self) -> Self {
        self.settings.reaper = None;
        self
    }

    /// Deletes rows that ended more than `retention` ago, every `interval` (default: 1 day,
    /// every minute), sparing the children of a parent that has not ended.
    pub fn gc(mut self, retention: Duration, interval: Duration) -> Self {
        let batch = self.settings.gc.map_or(10_000, |gc| gc.batch);
        self.settings.gc = Some(GcSettings {
            retention,
            interval,
            batch,
        });
        self
    }

    /// Runs no garbage collection here (prune ended rows yourself, or on another engine).
    pub fn no_gc(mut self) -> Self {
        self.settings.gc = None;
        self
    }

    /// How often an idle picker looks for work: `min` after finding some, growing to `max`
    /// while it finds none (defaults 500 ms and 5 s). Inserts, signals and outcomes of this
    /// engine wake its pickers at once; other processes' are seen within the interval.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.settings.poll_interval = min;
        self.settings.max_poll_interval = max.max(min);
        self
    }

    /// The most rows one pick claims (default 100; never more than the queue's free slots).
    pub fn pick_batch(mut self, rows: usize) -> Self {
        self.settings.pick_batch = rows.max(1);
        self
    }

    /// The most outcomes committed in one transaction (default 256). 1 commits each outcome
    /// in a transaction of its own.
    pub fn commit_batch(mut self, outcomes: usize) -> Self {
        self.settings.commit_batch = outcomes.max(1);
        self
    }

    /// How many outcome transactions may be in flight at once (default 2).
    pub fn commit_concurrency(mut self, transactions: usize) -> Self {
        self.settings.commit_concurrency = transactions.max(1);
        self
    }

    /// The name this engine writes in `locked_by` (default: `fsm-<pid>-<random>`).
    pub fn worker_name(mut self, name: impl Into<String>) -> Self {
        self.worker = Some(name.into());
        self
    }

    /// Makes the engine's clock advance with tokio's clock instead of the system clock, so
    /// that tests with paused time move it, and lets tests jump it forward
    /// (`durable_runtime::fsm::testing::advance`).
    pub fn clock_follows_tokio(mut self) -> Self {
        self.clock = Clock::following_tokio();
        self
    }

    /// Checks the settings and starts the engine's tasks on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`BuildError`] for settings the engine cannot run with.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn build(self) -> Result<Engine, BuildError> {
        if let Some(error) = self.errors.into_iter().next() {
            return Err(error);
        }
        let settings = self.settings;
        for (setting, value) in [
            ("lease", settings.lease_ttl),
            ("heartbeat interval", settings.heartbeat),
            ("poll interval", settings.poll_interval),
        ] {
            if value.is_zero() {
                return Err(BuildError::Zero { setting });
            }
        }
        if settings.reaper.is_some_and(|interval| interval.is_zero()) {
            return Err(BuildError::Zero {
                setting: "reaper interval",
            });
        }
        if settings.gc.is_some_and(|gc| gc.interval.is_zero()) {
            return Err(BuildError::Zero {
                setting: "garbage collection interval",
            });
        }
        if settings.heartbeat >= settings.lease_ttl {
            return Err(BuildError::HeartbeatTooSlow {
                heartbeat: settings.heartbeat,
                lease_ttl: settings.lease_ttl,
            });
        }
        let mut known_queues: BTreeSet<String> =
            settings.queues.iter().map(|(q, _)| q.clone()).collect();
        known_queues.extend(
            self.registry
                .all()
                .iter()
                .map(|runner| runner.queue().to_owned()),
        );
        let (commits, pending) = mpsc::unbounded_channel();
        let (inserts, queued) = insert_async::channel(settings.inserts);
        let stop_picking = CancellationToken::new();
        let stop_maintenance = CancellationToken::new();
        let shared = Arc::new(Shared {
            store: self.store,
            registry: self.registry,
            clock: self.clock,
            settings,
            worker: self.worker.unwrap_or_else(default_worker_name),
            changed: Notify::new(),
            in_flight: Mutex::default(),
            known_queues: Mutex::new(known_queues),
            commits,
            stop_picking: stop_picking.clone(),
            stop_maintenance: stop_maintenance.clone(),
            steps: TaskTracker::new(),
            maintenance: TaskTracker::new(),
            inserts,
        });
        workers::start(&shared, pending);
        insert_async::start(&shared, queued);
        Ok(Engine {
            shared,
            _alive: Arc::new(Alive {
                stop_picking,
                stop_maintenance,
            }),
        })
    }
}

/// `fsm-<pid>-<random>`: distinct per engine, even for several in one process.
fn default_worker_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos()),
    );
    format!("fsm-{}-{:08x}", std::process::id(), hasher.finish() as u32)
}

impl Engine {
    /// Settings for an engine on `store`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{Engine, MemoryFsmStore};
    ///
    /// let builder = Engine::builder(MemoryFsmStore::new());
    /// # drop(builder);
    /// ```
    pub fn builder(store: impl FsmStore) -> EngineBuilder {
        EngineBuilder {
            store: Arc::new(store),
            registry: Registry::default(),
            settings: Settings::default(),
            clock: Clock::System,
            worker: None,
            errors: Vec::new(),
        }
    }

    /// Inserts one instance (a state value, or an [`Instance`](super::Instance) with options)
    /// and returns its id. It runs once a worker of its queue picks it.
    ///
    /// # Errors
    ///
    /// [`Error::Duplicate`] when its correlation key is occupied (nothing is inserted),
    /// [`Error::Unencodable`] when its state cannot be stored, [`Error::Storage`].
    pub async fn insert(&self, instance: impl Into<AnyInstance>) -> Result<InstanceId, Error> {
        let instance = instance.into();
        let key = instance.correlation_key.clone();
        let ids = self.insert_rows(&[instance]).await?;
        match (ids.first(), key) {
            (Some(id), _) => Ok(*id),
            (None, Some(key)) => Err(Error::Duplicate { key }),
            (None, None) => Err(Error::Storage(StorageError::rejected(
                "the store inserted no row for an instance without a correlation key",
            ))),
        }
    }

    /// Inserts `instances` in one statement, skipping those whose correlation key is occupied
    /// (by a stored instance or an earlier one of the batch), and returns the ids inserted.
    /// Instances are inserted in key order, so the ids do not map to positions.
    ///
    /// # Errors
    ///
    /// [`Error::Unencodable`] when a state cannot be stored (nothing is inserted),
    /// [`Error::Storage`].
    pub async fn insert_all<I, T>(&self, instances: I) -> Result<Vec<InstanceId>, Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<AnyInstance>,
    {
        let instances: Vec<AnyInstance> = instances.into_iter().map(Into::into).collect();
        self.insert_rows(&instances).await
    }

    async fn insert_rows(&self, instances: &[AnyInstance]) -> Result<Vec<InstanceId>, Error> {
        if instances.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.shared.clock.now();
        let rows = instances
            .iter()
            .map(|instance| {
                run::new_instance(instance, now).map_err(|message| Error::Unencodable {
                    what: "state",
                    message,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.shared
            .know_queues(rows.iter().map(|row| row.queue.as_str()));
        let ids = self.shared.store.insert(&rows, now).await?;
        self.shared.changed.notify_waiters();
        Ok(ids)
    }

    /// Delivers the signal `name` with `payload` to the instance `target` (an
    /// [`InstanceId`], or a correlation key as a string): it is stored in the instance's
    /// inbox, and wakes the instance if it awaits this name. With a `dedup_key`, delivering
    /// the same key again to the same instance adds nothing while the first is in its inbox.
    ///
    /// # Errors
    ///
    /// [`Error::NoTarget`] when no live instance has this id or occupies this key (nothing
    /// is stored: signals are never held for instances that do not exist yet),
    /// [`Error::Unencodable`], [`Error::Storage`].
    pub async fn signal(
        &self,
        target: impl Into<Target>,
        name: &str,
        payload: impl Serialize,
        dedup_key: Option<&str>,
    ) -> Result<Delivered, Error> {
        let target = target.into();
        let payload = json::encode_value(&payload).map_err(|message| Error::Unencodable {
            what: "signal payload",
            message,
        })?;
        let signal = NewSignal {
            name: name.to_owned(),
            payload,
            dedup_key: dedup_key.map(str::to_owned),
        };
        let delivered = self
            .shared
            .store
            .signal(&target, &signal, self.shared.clock.now())
            .await?;
        match delivered {
            Some(delivered) => {
                if delivered.woke {
                    self.shared.changed.notify_waiters();
                }
                Ok(delivered)
            }
            None => Err(Error::NoTarget {
                target: match target {
                    Target::Id(id) => format!("id {id}"),
                    Target::Key(key) => format!("key {key:?}"),
                },
            }),
        }
    }

    /// The instance `id` as stored, or `None`.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn get(&self, id: InstanceId) -> Result<Option<InstanceRecord>, Error> {
        Ok(self.shared.store.get(id).await?)
    }

    /// The instance occupying the correlation key `key`, or `None`.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn find(&self, key: &str) -> Result<Option<InstanceId>, Error> {
        Ok(self.shared.store.find(key).await?)
    }

    /// The inbox of the instance `id`, oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn inbox(&self, id: InstanceId) -> Result<Vec<SignalRecord>, Error> {
        Ok(self.shared.store.inbox(id).await?)
    }

    /// The instances `filter` selects, in id order, at most
    /// [`MAX_LIST_LIMIT`](super::store::MAX_LIST_LIMIT) of them: pass the last id as
    /// [`ListFilter::after`] for the next page.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<InstanceRecord>, Error> {
        Ok(self.shared.store.list(filter).await?)
    }

    /// The names of the FSMs registered with this engine, sorted, without repeats.
    pub fn registered(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .shared
            .registry
            .all()
            .iter()
            .map(|runner| runner.name().to_owned())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// A new instance of the registered FSM `fsm` (its newest registered version) from its
    /// state given as JSON, for callers that only have JSON (the HTTP gateway): the JSON is
    /// decoded into the FSM's state type, so fields left out take their defaults and a value
    /// of the wrong type is refused. Insert it with [`insert`](Self::insert).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownFsm`] when no FSM of that name is registered, [`Error::InvalidArgs`]
    /// when the JSON does not decode into its state.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{durable_fsm, Engine, Error, MemoryFsmStore, Outcome, StepContext};
    ///
    /// #[durable_fsm(name = "greet")]
    /// pub struct Greet {
    ///     name: String,
    /// }
    ///
    /// #[durable_fsm]
    /// impl Greet {
    ///     #[step(initial)]
    ///     fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
    ///         Outcome::done(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::builder(MemoryFsmStore::new()).register::<Greet>().build()?;
    /// let instance = engine.instance_from_json("greet", serde_json::json!({"name": "Ada"}))?;
    /// let id = engine.insert(instance.with_correlation_key(Some("greet:ada".into()))).await?;
    /// assert_eq!(engine.get(id).await?.unwrap().state, r#"{"name":"Ada"}"#);
    /// assert!(matches!(
    ///     engine.instance_from_json("greet", serde_json::json!({"name": 7})),
    ///     Err(Error::InvalidArgs { .. })
    /// ));
    /// assert!(matches!(
    ///     engine.instance_from_json("nobody", serde_json::json!({})),
    ///     Err(Error::UnknownFsm { .. })
    /// ));
    /// # engine.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn instance_from_json(
        &self,
        fsm: &str,
        state: serde_json::Value,
    ) -> Result<AnyInstance, Error> {
        let runner = self
            .shared
            .registry
            .newest(fsm)
            .ok_or_else(|| Error::UnknownFsm {
                fsm: fsm.to_owned(),
                registered: self.registered(),
            })?;
        runner
            .instance_from_json(state)
            .map_err(|message| Error::InvalidArgs {
                fsm: fsm.to_owned(),
                message,
            })
    }

    /// Waits, at most `timeout`, for the instance `id` to settle: ended (`Done`, `Failed`) or
    /// parked (`Awaiting`). Still working at the deadline is `Busy`, not an error: call again
    /// to keep waiting. Changes committed by this engine are seen at once, others' within a
    /// short poll.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn await_settled(&self, id: InstanceId, timeout: Duration) -> Result<Settled, Error> {
        settle::await_settled(&self.shared, id, timeout, false).await
    }

    /// Waits, at most `timeout`, for the instance `id` to end (`Done` or `Failed`), through
    /// its parked states too. At the deadline it answers where the instance stands: `Awaiting`
    /// or `Busy`.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn await_ended(&self, id: InstanceId, timeout: Duration) -> Result<Settled, Error> {
        settle::await_settled(&self.shared, id, timeout, true).await
    }

    /// The engine's clock: the time it stamps on rows.
    pub fn now(&self) -> SystemTime {
        self.shared.clock.now()
    }

    /// The name this engine writes in `locked_by`.
    pub fn worker_name(&self) -> &str {
        &self.shared.worker
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn FsmStore> {
        &self.shared.store
    }

    /// Stops picking, waits for the running steps to commit their outcomes, then stops the
    /// engine's other tasks, writing the instances queued by
    /// [`insert_async`](Self::insert_async) first.
    pub async fn shutdown(self) {
        self.shared.stop_picking.cancel();
        self.shared.steps.close();
        self.shared.steps.wait().await;
        self.shared.stop_maintenance.cancel();
        self.shared.maintenance.close();
        self.shared.maintenance.wait().await;
    }
}

impl Shared {
    pub(crate) fn know_queues<'a>(&self, queues: impl IntoIterator<Item = &'a str>) {
        let mut known = lock(&self.known_queues);
        for queue in queues {
            if !known.contains(queue) {
                known.insert(queue.to_owned());
            }
        }
    }

    /// Learns the queues of the children a commit spawns.
    pub(crate) fn know_children_queues(&self, commit: &OutcomeCommit) {
        if let Transition::ScheduleChildren { children, .. } = &commit.transition {
            self.know_queues(children.iter().map(|child| child.queue.as_str()));
        }
    }
}

/// Locks `mutex`, ignoring poisoning: the engine's maps hold plain values that a panic
/// cannot leave half-written.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
