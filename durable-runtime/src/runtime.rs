//! The runtime's public API and its builder, on the handle defined in `object::handle`.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{broadcast, oneshot};

use crate::activation::call::{Access, AsyncBody, call};
use crate::activation::outside::{self, Route};
use crate::activation::registry::{Envelope, Residency};
use crate::alarms::{Alarm, AlarmSettings, AlarmTime};
use crate::clock::Clock;
use crate::error::Error;
use crate::object::context::Context;
use crate::object::handle::{Config, Objects, Runtime, Shared};
use crate::object::{DurableObject, ObjectOptions};
use crate::observe::events::Event;
use crate::storage::{AlarmChange, AlarmRecord, IdPage, Loaded, ObjectKey, Storage};

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
///     fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// assert_eq!(rt.status::<Counter>("a").await.unwrap(), ObjectStatus::Absent);
/// Counter::increment(&rt, "a").await.unwrap();
/// assert_eq!(rt.status::<Counter>("a").await.unwrap(), ObjectStatus::Active);
/// tokio::time::sleep(Duration::from_secs(120)).await;
/// assert_eq!(rt.status::<Counter>("a").await.unwrap(), ObjectStatus::Hibernated);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectStatus {
    /// Live in this runtime with its state decoded in memory (stored, or not yet: an object
    /// that has only been read runs on its default state and stores nothing until it changes).
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
            validate_reads: false,
            idempotency_retention: Duration::from_secs(24 * 3600),
            exposed: crate::exposed::Registry::default(),
            cluster: None,
            forwarder: None,
            registered: Vec::new(),
        }
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

    /// Schedules `alarm` for the object `(O, id)`, replacing an alarm of the same name (and
    /// re-queueing it if it was dead). When the object is live in this runtime it goes through
    /// the object, ordered with its calls and committed like one; when it is not, the alarm is
    /// written directly to storage (a version-checked write of the alarm alone) and the object
    /// is not started. An object with no stored state is created, with its default state,
    /// through the object.
    ///
    /// # Errors
    ///
    /// [`Error::TooManyAlarms`] when the object already has as many alarms as its limit
    /// ([`max_alarms_per_object`](crate::AlarmSettings::max_alarms_per_object)) and this one is
    /// new (nothing is written), else the errors of a call.
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
        self.set_alarm::<O>(id, alarm.name(), when.into(), None)
            .await
    }

    /// Schedules `alarm`, whose handler takes an argument, for the object `(O, id)` with
    /// `args`, replacing an alarm of the same name and its argument (see
    /// [`schedule_alarm`](Runtime::schedule_alarm) and
    /// [`Context::schedule_alarm_with`](crate::Context::schedule_alarm_with)).
    ///
    /// # Errors
    ///
    /// [`Error::AlarmArgs`] if `args` cannot be encoded (nothing is scheduled), else as
    /// `schedule_alarm`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Invoice { reminders: Vec<u32> }
    ///
    /// #[durable_object]
    /// impl Invoice {
    ///     #[alarm]
    ///     fn remind(&mut self, days_late: u32, attempt: u32) { self.reminders.push(days_late); }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).clock_follows_tokio().build();
    /// rt.schedule_alarm_with("i1", Invoice::REMIND, &7, Duration::from_secs(60)).await.unwrap();
    /// tokio::time::sleep(Duration::from_secs(120)).await;
    /// assert_eq!(rt.read_state::<Invoice>("i1").await.unwrap().unwrap().reminders, [7]);
    /// # }
    /// ```
    pub async fn schedule_alarm_with<O: DurableObject, A: serde::Serialize>(
        &self,
        id: &str,
        alarm: Alarm<O, A>,
        args: &A,
        when: impl Into<AlarmTime>,
    ) -> Result<(), Error> {
        let payload = crate::alarms::args::encode(alarm.name(), args)?;
        self.set_alarm::<O>(id, alarm.name(), when.into(), Some(payload))
            .await
    }

    /// Sets the alarm `name` of `(O, id)` with `payload`, from outside the object.
    pub(crate) async fn set_alarm<O: DurableObject>(
        &self,
        id: &str,
        name: &'static str,
        when: AlarmTime,
        payload: Option<Vec<u8>>,
    ) -> Result<(), Error> {
        let due_at = crate::storage::truncate_to_micros(when.resolve(self.now()));
        let change = AlarmChange::Set {
            name: name.to_owned(),
            due_at,
            payload,
        };
        self.change_alarm::<O>(id, change, "schedule_alarm").await
    }

    /// Applies `change` to the alarms of `(O, id)` from outside the object: written directly
    /// when the object is not live here, through the object (ordered with its calls) when it
    /// is (see `alarms::outside`). A set is refused beyond the alarm limit either way.
    pub(crate) async fn change_alarm<O: DurableObject>(
        &self,
        id: &str,
        change: AlarmChange,
        operation: &'static str,
    ) -> Result<(), Error> {
        crate::id::validate_id(id)?;
        // From a handler, the change leaves that handler's object: it goes as a call, which
        // waits for the state the handler ran on to be committed and refuses a cycle.
        let outside_any_handler = crate::object::chain::Chain::current().is_empty();
        if outside_any_handler
            && let Route::Written = outside::write_directly::<O>(self, id, &change).await?
        {
            return Ok(());
        }
        // The store checks the alarm limit in the call's commit.
        let body = AsyncBody::new(move |_: &mut O, ctx: &Context| {
            Box::pin(async move {
                ctx.push_alarm_change(change);
                Ok::<(), Error>(())
            })
        });
        match call::<O, (), Error, _>(self, id, Access::Write, operation, body).await {
            Ok(()) => Ok(()),
            Err(error) => Err(error.split().unwrap_or_else(|inner| inner)),
        }
    }

    /// Cancels `alarm` for the object `(O, id)`: through the object when it is live here,
    /// directly in storage when it is not (see [`schedule_alarm`](Runtime::schedule_alarm)).
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
    pub async fn cancel_alarm<O: DurableObject, A: 'static>(
        &self,
        id: &str,
        alarm: Alarm<O, A>,
    ) -> Result<(), Error> {
        let change = AlarmChange::Cancel {
            name: alarm.name().to_owned(),
        };
        self.change_alarm::<O>(id, change, "cancel_alarm").await
    }

    /// Cancels every alarm of the object `(O, id)`: through the object when it is live here,
    /// directly in storage when it is not (see [`schedule_alarm`](Runtime::schedule_alarm)).
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
        self.change_alarm::<O>(id, AlarmChange::CancelAll, "cancel_all_alarms")
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
    /// it was never stored, or was deleted.
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
        self.read_stored(ObjectKey::new(O::TYPE_NAME, id)).await
    }

    /// The committed state of `key` read from storage and decoded, without activating the
    /// object; `None` if it is not stored.
    pub(crate) async fn read_stored<T: serde::de::DeserializeOwned>(
        &self,
        key: ObjectKey,
    ) -> Result<Option<T>, Error> {
        let stored = self
            .storage()
            .load(&key)
            .await
            .map_err(|source| Error::Storage {
                key: key.clone(),
                source,
            })?;
        stored
            .object()
            .map(|stored| {
                crate::commit::codec::decode(&stored.state).map_err(|failure| Error::Decode {
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
            Ok(Loaded::Object(_)) => Ok(ObjectStatus::Stored),
            Ok(Loaded::Absent | Loaded::Deleted { .. }) => Ok(ObjectStatus::Absent),
            Err(source) => Err(Error::Storage { key, source }),
        }
    }

    /// Deletes the object `(O, id)`: its stored state and all its alarms, in one transaction.
    /// It goes through the object, so calls queued before it are handled first; a call after
    /// it starts from the default state, and stores nothing until it changes it. Storage keeps
    /// a tombstone with the object's version, so that a recreated object's versions continue
    /// above it. Returns whether a stored state existed.
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
        // From inside the object's own handler (or a call it is waiting on), the deletion
        // would wait for that handler: refuse at once, as calls do.
        let chain = crate::operate::outside_of::<O>(id)?;
        // Asked from a handler, as a call: not before the state it ran on is committed.
        crate::object::durability::leaving(&chain).await?;
        let (reply, receive) = oneshot::channel();
        self.dispatch::<O>(id, Envelope::Delete(reply));
        receive.await.unwrap_or(Err(Error::ShuttingDown))
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
    validate_reads: bool,
    idempotency_retention: Duration,
    pub(crate) exposed: crate::exposed::Registry,
    cluster: Option<crate::cluster::ClusterConfig>,
    forwarder: Option<Arc<dyn crate::cluster::Forwarder>>,
    /// The names of the registered types, to check in cluster mode that each is exposed.
    registered: Vec<&'static str>,
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
        if !self.registered.contains(&O::TYPE_NAME) {
            self.registered.push(O::TYPE_NAME);
        }
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

    /// How long the reply of a call made with an idempotency key is kept, from its commit:
    /// within it, a call with the same key is answered from the stored reply; after it, the
    /// key is forgotten (a background sweep removes it) and a call with it runs again.
    /// Default: 24 hours.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{MemoryStorage, Runtime};
    ///
    /// let rt = Runtime::builder(MemoryStorage::new())
    ///     .idempotency_retention(Duration::from_secs(3600))
    ///     .build();
    /// assert_eq!(rt.idempotency_retention(), Duration::from_secs(3600));
    /// ```
    pub fn idempotency_retention(mut self, retention: Duration) -> Self {
        self.idempotency_retention = retention;
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

    /// Validates reads: before a read-only (`&self`) call runs on an object live in memory,
    /// storage is asked for the object's version; if another runtime committed since this
    /// one loaded or wrote the object, the state in memory is thrown away and loaded again
    /// before the call runs. Use it when several runtimes (processes) share one database and
    /// a read must see every write acknowledged before it was sent, whichever runtime
    /// acknowledged it.
    ///
    /// Without it (the default), writes are still safe with several runtimes (a write made on
    /// an outdated state fails with [`Error::Conflict`] and the object reloads), but a read
    /// may return the state this runtime last saw, older than another runtime's acknowledged
    /// writes, for as long as the object stays in memory here.
    ///
    /// Cost: one storage read of the version per read call (checks of concurrent calls share
    /// a round trip), and reads no longer run in the caller's task; a read that arrives while
    /// the object's own write is in flight waits for that write first. Write calls are
    /// unchanged. One runtime alone on its database gains nothing from it.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    ///
    ///     #[handler]
    ///     fn handle_get(&self) -> i64 { self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new(); // one database, two processes
    /// let one = Runtime::builder(storage.clone()).validate_reads().build();
    /// let two = Runtime::new(storage);
    /// assert_eq!(Counter::increment(&one, "a").await.unwrap(), 1);
    /// assert_eq!(Counter::increment(&two, "a").await.unwrap(), 2);
    /// // `one` still holds `a` at 1 in memory; the read finds version 2 stored and reloads.
    /// assert_eq!(Counter::get(&one, "a").await.unwrap(), 2);
    /// # }
    /// ```
    pub fn validate_reads(mut self) -> Self {
        self.validate_reads = true;
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
    ///
    /// # Panics
    ///
    /// If a cluster is configured ([`cluster`](Self::cluster)): a cluster node is started with
    /// [`join`](Self::join).
    pub fn build(self) -> Runtime {
        assert!(
            self.cluster.is_none(),
            "a runtime with a cluster configured is started with `RuntimeBuilder::join().await`"
        );
        self.build_runtime()
    }

    /// Runs the runtime as a node of a cluster: many runtimes on one Postgres database, each
    /// object live on exactly one of them (see [`cluster`](crate::cluster)). Start it with
    /// [`join`](Self::join).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # fn postgres_store() -> durable_runtime::MemoryStorage { unimplemented!() }
    /// use durable_runtime::{Runtime, cluster::ClusterConfig};
    ///
    /// let store = postgres_store(); // a durable_sqlx::PostgresStore
    /// let rt = Runtime::builder(store)
    ///     .cluster(ClusterConfig::new("node-1", "10.0.0.1:7100"))
    ///     .join()
    ///     .await?;
    /// # drop(rt); Ok(()) }
    /// ```
    pub fn cluster(mut self, config: crate::cluster::ClusterConfig) -> Self {
        self.cluster = Some(config);
        self
    }

    /// Builds the runtime and, if a cluster is configured, joins it: checks the shard count
    /// against the database's, registers the node, takes the shards rendezvous hashing gives
    /// it, and starts renewing them. Without a cluster it is [`build`](Self::build).
    ///
    /// A storage that cannot arbitrate a cluster (SQLite, memory) is refused with
    /// [`ClusterError::Unsupported`](crate::cluster::ClusterError::Unsupported).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{MemoryStorage, Runtime, cluster::{ClusterConfig, ClusterError}};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let refused = Runtime::builder(MemoryStorage::new())
    ///     .cluster(ClusterConfig::new("node-1", "127.0.0.1:7100"))
    ///     .join()
    ///     .await;
    /// assert!(matches!(refused, Err(ClusterError::Unsupported)));
    /// # }
    /// ```
    pub async fn join(mut self) -> Result<Runtime, crate::cluster::ClusterError> {
        let Some(config) = self.cluster.take() else {
            return Ok(self.build_runtime());
        };
        // Calls are forwarded by name: a type that is not exposed could not be reached.
        if let Some(type_name) = self
            .registered
            .iter()
            .copied()
            .find(|name| !self.exposed.contains(name))
        {
            return Err(crate::cluster::ClusterError::NotExposed { type_name });
        }
        // Their calls by name are forwarded; their typed calls cannot be.
        for (type_name, handlers) in self.exposed.not_forwardable() {
            tracing::warn!(
                object_type = type_name,
                handlers = %handlers.join(", "),
                "typed calls to these handlers cannot be forwarded to the node serving their \
                 object (their output or error type is not `Deserialize`): on another node \
                 they fail with `NotOwner`; calls by name are forwarded"
            );
        }
        let storage = Arc::clone(&self.storage);
        let forwarder = self.forwarder.take();
        crate::cluster::join(storage.as_ref(), config, forwarder, || self.build_runtime()).await
    }

    /// In cluster mode, how this node sends a call by name
    /// ([`Runtime::call_by_name`](crate::Runtime::call_by_name) and the gateway's call route)
    /// or a typed call of an exposed handler (`Counter::increment(&rt, id, ..)`) to the node
    /// serving its object: see [`Forwarder`](crate::cluster::Forwarder).
    /// `durable_server::cluster::HttpForwarder` forwards over HTTP/2. Without one, such a call
    /// fails at once with [`Error::NotOwner`] naming the owner.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{BoxFuture, MemoryStorage, Runtime};
    /// use durable_runtime::cluster::{ForwardError, ForwardedCall, Forwarder};
    ///
    /// struct Nowhere;
    /// impl Forwarder for Nowhere {
    ///     fn forward(&self, call: ForwardedCall) -> BoxFuture<'static, Result<serde_json::Value, ForwardError>> {
    ///         Box::pin(async move { Err(ForwardError::Misdirected { owner: None }) })
    ///     }
    /// }
    ///
    /// let builder = Runtime::builder(MemoryStorage::new()).forwarder(Nowhere);
    /// # drop(builder);
    /// ```
    pub fn forwarder(mut self, forwarder: impl crate::cluster::Forwarder) -> Self {
        self.forwarder = Some(Arc::new(forwarder));
        self
    }

    fn build_runtime(self) -> Runtime {
        let runtime = Runtime {
            inner: Arc::new(Shared::new(Config {
                storage: self.storage,
                defaults: self.defaults,
                overrides: self.overrides,
                alarm_settings: self.alarm_settings,
                clock: self.clock,
                max_live: self.max_live,
                manual_alarms: self.manual_alarms,
                validate_reads: self.validate_reads,
                idempotency_retention: self.idempotency_retention,
                exposed: Box::new(self.exposed),
            })),
        };
        for register in &self.registrations {
            register(&runtime);
        }
        runtime.ensure_scheduler();
        runtime
    }
}
