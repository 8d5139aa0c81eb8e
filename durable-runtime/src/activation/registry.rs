//! The objects of one type in this runtime: id → entry, with exactly one instance per id.
//!
//! An entry is *live* (the entry holds the object's inbox, and a task runs the object while it
//! works, see [`inbox`](crate::activation::inbox)) or *dormant* (the object hibernated; its
//! [key](crate::activation::key) holds only its encoded state, and the next envelope starts a
//! task from those bytes without a storage read).
//!
//! Callers enqueue into an inbox only while holding a read guard on its map entry, and an
//! instance removes or replaces its own entry (under the write guard) only when its inbox is
//! empty. So once an entry is gone nothing can reach the old instance any more, and the next
//! call starts (or wakes) a fresh one: there is never a moment with two instances of one
//! object, and no call is lost to an instance that is stopping.

use std::any::TypeId;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use dashmap::DashMap;
use dashmap::mapref::entry::{Entry as MapEntry, OccupiedEntry};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::activation::call::Invocation;
use crate::activation::idle::{IdleTimers, Wake, wait_for_deadline};
use crate::activation::inbox::{Inbox, SendError};
use crate::activation::instance::{Instance, Origin, Settings};
use crate::activation::key::Key;
use crate::activation::scheduler::{self, TypedTarget};
use crate::error::Error;
use crate::object::DurableObject;
use crate::object::handle::{Objects, Runtime, Shared, ceil_millis};
use crate::observe::events::Event;
use crate::observe::metrics;
use crate::storage::{IdPage, Loaded, ObjectKey};

/// What travels through an object's mailbox.
pub(crate) enum Envelope<O> {
    /// A handler call.
    Call(Box<dyn Invocation<O>>),
    /// Delete the object's state and alarms; replies whether a stored state existed.
    Delete(oneshot::Sender<Result<bool, Error>>),
    /// Drop what the object holds in memory once every write before it is committed, so
    /// that the next call reads storage; with `leave`, the instance also leaves the registry.
    Unload {
        leave: bool,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    /// Commit a state given from outside (boxed: queues hold envelopes by value, and this
    /// one is rare).
    Replace(Box<Replacement<O>>),
}

/// A state to commit as the object's if storage holds `expected_version`; the reply is the new
/// version.
pub(crate) struct Replacement<O> {
    pub(crate) state: O,
    pub(crate) expected_version: u64,
    pub(crate) reply: oneshot::Sender<Result<u64, Error>>,
}

impl<O: 'static> Envelope<O> {
    /// Answers the sender with `error` instead of handling the envelope.
    pub(crate) fn fail(self, error: Error) {
        match self {
            Self::Call(call) => call.fail(error),
            Self::Delete(reply) => {
                let _ = reply.send(Err(error));
            }
            Self::Unload { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Self::Replace(replacement) => {
                let _ = replacement.reply.send(Err(error));
            }
        }
    }
}

/// What [`TypeEntry::send_to_live`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reached {
    /// The envelope is in the object's inbox (or was refused there, its sender answered).
    Sent,
    /// The object was dormant and is forgotten: its encoded state is dropped.
    Forgotten,
    /// The object is not live in this runtime.
    NotLive,
}

/// What a live object holds in memory, as seen from outside its task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Residency {
    /// Started, state not loaded (yet, or any more after a failure).
    Unloaded = 0,
    /// State decoded in memory.
    Active = 1,
    /// Only the encoded state is kept.
    Hibernated = 2,
}

impl Residency {
    pub(crate) fn from_u8(value: u8) -> Self {
        match value {
            1 => Self::Active,
            2 => Self::Hibernated,
            _ => Self::Unloaded,
        }
    }
}

/// How many live objects of a type are looked at to find an eviction candidate.
const EVICTION_SAMPLE: usize = 64;

/// The registry entry of one live object. Dropping it closes the inbox.
pub(crate) struct Mailbox<O: DurableObject> {
    inbox: Arc<Inbox<O>>,
}

impl<O: DurableObject> Drop for Mailbox<O> {
    fn drop(&mut self) {
        self.inbox.close();
    }
}

/// The registry entry of one object.
enum Entry<O: DurableObject> {
    /// A task runs the object.
    Live(Mailbox<O>),
    /// The object hibernated and its task ended; its key holds what it wakes from.
    Dormant,
}

/// Dormant objects' shutdown times (uptime milliseconds) and ids, earliest first.
type Expiries = BinaryHeap<Reverse<(u64, Box<str>)>>;

/// Expiry items kept beyond twice the live objects before the stale ones are dropped.
const STALE_EXPIRIES_KEPT: usize = 64;

/// Objects of type `O` and the settings they run with.
pub(crate) struct TypeEntry<O: DurableObject> {
    /// Hashed with foldhash, seeded per map: SipHash's cost shows on every call.
    objects: DashMap<Key, Entry<O>, foldhash::fast::RandomState>,
    /// Dormant objects by when they shut down (uptime milliseconds), if the type has a
    /// `shutdown_after`. A stale item (the object woke since) is skipped when it comes due.
    expiries: Mutex<Expiries>,
    /// Wakes the sweeper when an earlier expiry is queued.
    expiries_changed: Notify,
    sweeper_started: AtomicBool,
    /// The live objects' idle timers.
    pub(crate) idle_timers: Arc<IdleTimers<O>>,
    /// How many entries left the map. State read from storage while this did not move is
    /// still the latest: an object's state only changes in storage while it is registered.
    removals: AtomicU64,
    pub(crate) settings: Settings,
    pub(crate) call_metrics: crate::observe::metrics::CallMetrics,
}

impl<O: DurableObject> TypeEntry<O> {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            objects: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            expiries: Mutex::new(BinaryHeap::new()),
            expiries_changed: Notify::new(),
            sweeper_started: AtomicBool::new(false),
            idle_timers: Arc::new(IdleTimers::new()),
            removals: AtomicU64::new(0),
            settings,
            call_metrics: crate::observe::metrics::CallMetrics::new(O::TYPE_NAME),
        }
    }

    /// Enqueues `envelope` for the object `id`, starting (or waking) it if it has no task. A
    /// full inbox refuses the call at once.
    pub(crate) fn dispatch(self: &Arc<Self>, runtime: &Runtime, id: &str, envelope: Envelope<O>) {
        let capacity = self.settings.queue_capacity;
        let envelope = match self.objects.get(id.as_bytes()).as_deref() {
            Some(Entry::Live(mailbox)) => match mailbox.inbox.try_send(envelope, capacity) {
                Ok(()) => return,
                Err(SendError::Full(envelope)) => return self.refuse(id, envelope),
                Err(SendError::Closed(envelope)) => envelope,
            },
            _ => envelope,
        };
        if runtime.is_closing() {
            // Shutting down: live objects drain what they queued, nothing new starts.
            envelope.fail(runtime.shutting_down(O::TYPE_NAME, id));
            return;
        }
        // Room for a new instance is reserved without holding the entry's lock (making room
        // may evict objects of this very type), so the entry is looked at again afterwards.
        let mut reserved = false;
        loop {
            let mut occupied = match self.objects.entry(Key::new(id)) {
                MapEntry::Occupied(occupied) => occupied,
                MapEntry::Vacant(vacant) if reserved && !runtime.is_closing() => {
                    // The closing flag is read under the entry's lock: a runtime shutdown
                    // that did not see this entry set it before, so none is missed.
                    let entry =
                        vacant.insert(Entry::Live(self.start(runtime, id, Origin::Storage)));
                    let Entry::Live(mailbox) = &*entry else {
                        unreachable!("just inserted");
                    };
                    let result = mailbox.inbox.try_send(envelope, capacity);
                    drop(entry);
                    return self.sent(runtime, id, result);
                }
                MapEntry::Vacant(vacant) if reserved => {
                    drop(vacant);
                    runtime.release_live_slot();
                    envelope.fail(runtime.shutting_down(O::TYPE_NAME, id));
                    return;
                }
                MapEntry::Vacant(vacant) => {
                    // Unlocked first: making room may evict objects of this very type.
                    drop(vacant);
                    if !runtime.reserve_live_slot() {
                        let key = ObjectKey::new(O::TYPE_NAME, id);
                        envelope.fail(Error::TooManyObjects { key });
                        return;
                    }
                    reserved = true;
                    continue;
                }
            };
            // The instance ended without deregistering (its task panicked or was aborted,
            // releasing its slot): it is replaced, in a slot of its own.
            let ended = matches!(occupied.get(), Entry::Live(mailbox) if mailbox.inbox.is_closed());
            if ended && !reserved {
                drop(occupied);
                if !runtime.reserve_live_slot() {
                    let key = ObjectKey::new(O::TYPE_NAME, id);
                    envelope.fail(Error::TooManyObjects { key });
                    return;
                }
                reserved = true;
                continue;
            }
            let starts = ended || matches!(occupied.get(), Entry::Dormant);
            if starts && runtime.is_closing() {
                drop(occupied);
                if reserved {
                    runtime.release_live_slot();
                }
                envelope.fail(runtime.shutting_down(O::TYPE_NAME, id));
                return;
            }
            if reserved && !ended {
                // Another caller started it first, or it is dormant and keeps the slot it holds.
                runtime.release_live_slot();
            }
            if matches!(occupied.get(), Entry::Dormant) {
                return self.wake(runtime, id, occupied, envelope);
            }
            let entry = occupied.get_mut();
            if ended {
                *entry = Entry::Live(self.start(runtime, id, Origin::Storage));
            }
            let Entry::Live(mailbox) = &*entry else {
                unreachable!("live, or started above");
            };
            let result = mailbox.inbox.try_send(envelope, capacity);
            drop(occupied);
            return self.sent(runtime, id, result);
        }
    }

    /// Sends `envelope` to the object `id` only if it is live, without starting or waking it.
    /// A dormant object (no task, only its encoded state) is forgotten instead, when `forget`
    /// is set. Returns what happened; the envelope comes back unless it was sent.
    pub(crate) fn send_to_live(
        &self,
        runtime: &Runtime,
        id: &str,
        envelope: Envelope<O>,
        forget: bool,
    ) -> (Reached, Option<Envelope<O>>) {
        let capacity = self.settings.queue_capacity;
        let sent = match self.objects.get(id.as_bytes()).as_deref() {
            Some(Entry::Live(mailbox)) => mailbox.inbox.try_send(envelope, capacity),
            Some(Entry::Dormant) => Err(SendError::Closed(envelope)),
            None => return (Reached::NotLive, Some(envelope)),
        };
        match sent {
            Ok(()) => (Reached::Sent, None),
            Err(SendError::Full(envelope)) => {
                self.refuse(id, envelope);
                (Reached::Sent, None)
            }
            // A task that is ending, or a dormant object: nothing runs it.
            Err(SendError::Closed(envelope)) => {
                let removed = forget
                    && self
                        .objects
                        .remove_if(id.as_bytes(), |_, entry| matches!(entry, Entry::Dormant))
                        .is_some();
                if removed {
                    self.removed();
                    self.forget(runtime, id, true);
                    return (Reached::Forgotten, Some(envelope));
                }
                (Reached::NotLive, Some(envelope))
            }
        }
    }

    /// Answers an envelope the inbox refused (after the entry's lock is released).
    fn sent(&self, runtime: &Runtime, id: &str, result: Result<(), SendError<O>>) {
        match result {
            Ok(()) => {}
            Err(SendError::Full(envelope)) => self.refuse(id, envelope),
            Err(SendError::Closed(envelope)) if runtime.is_closing() => {
                envelope.fail(runtime.shutting_down(O::TYPE_NAME, id));
            }
            Err(SendError::Closed(envelope)) => self.refuse(id, envelope),
        }
    }

    fn refuse(&self, id: &str, envelope: Envelope<O>) {
        metrics::count::<O>(metrics::QUEUE_REJECTIONS);
        envelope.fail(Error::Overloaded {
            key: ObjectKey::new(O::TYPE_NAME, id),
            capacity: self.settings.queue_capacity,
        });
    }

    /// Starts an instance that loads the object from storage (or from `fetched`, what was
    /// read from it on the object's behalf).
    fn start(self: &Arc<Self>, runtime: &Runtime, id: &str, origin: Origin) -> Mailbox<O> {
        let inbox = Arc::new(Inbox::new(
            Residency::Unloaded,
            ObjectKey::new(O::TYPE_NAME, id),
            self.settings.kv,
        ));
        self.spawn(runtime, Arc::clone(&inbox), origin);
        metrics::live_objects::<O>(1.0);
        Mailbox { inbox }
    }

    /// A count to pass to [`start_fetched`](Self::start_fetched), read before the object's
    /// state is; `None` if the object is registered (its instance has what it needs).
    pub(crate) fn fetch_epoch(&self, id: &str) -> Option<u64> {
        let epoch = self.removals.load(Ordering::Acquire);
        (!self.objects.contains_key(id.as_bytes())).then_some(epoch)
    }

    /// Starts the object `id` from `stored`, what storage held when it was read after
    /// [`fetch_epoch`](Self::fetch_epoch) returned `epoch`. Nothing happens if the object
    /// was started meanwhile, or if any object of the type left the registry since (it may
    /// have committed after the read), or if there is no room: the object then loads on its
    /// own when it is called. Returns whether it started.
    pub(crate) fn start_fetched(
        self: &Arc<Self>,
        runtime: &Runtime,
        id: &str,
        stored: Loaded,
        epoch: u64,
    ) -> bool {
        let current = || self.removals.load(Ordering::Acquire) == epoch && !runtime.is_closing();
        if !current() || self.objects.contains_key(id.as_bytes()) || !runtime.reserve_live_slot() {
            return false;
        }
        // Checked again under the entry's lock: making room may have evicted an object.
        match self.objects.entry(Key::new(id)) {
            MapEntry::Vacant(vacant) if current() => {
                vacant.insert(Entry::Live(self.start(
                    runtime,
                    id,
                    Origin::Fetched(stored),
                )));
                true
            }
            _ => {
                runtime.release_live_slot();
                false
            }
        }
    }

    /// An entry left the map.
    fn removed(&self) {
        self.removals.fetch_add(1, Ordering::AcqRel);
    }

    /// Turns the dormant object of `occupied` live with `envelope` queued: a task starts from
    /// the record its key holds, and the key becomes the id alone.
    fn wake(
        self: &Arc<Self>,
        runtime: &Runtime,
        id: &str,
        occupied: OccupiedEntry<'_, Key, Entry<O>>,
        envelope: Envelope<O>,
    ) {
        let inbox = Arc::new(Inbox::new(
            Residency::Hibernated,
            ObjectKey::new(O::TYPE_NAME, id),
            self.settings.kv,
        ));
        // Queued before the inbox is in the map, where nothing else can reach it yet.
        let result = inbox.try_send(envelope, self.settings.queue_capacity);
        // A dormant entry's key holds its record (storage has the same state if not).
        let origin = occupied
            .key()
            .record()
            .map_or(Origin::Storage, |record| Origin::Dormant {
                committed: record.committed.into(),
                version: record.version,
            });
        // Started under the entry's lock, as every instance is: a runtime shutdown that sees
        // the new entry finds its task.
        self.spawn(runtime, Arc::clone(&inbox), origin);
        // The key becomes the id alone, and the entry's lock is released.
        occupied.replace_entry(Entry::Live(Mailbox { inbox }));
        self.sent(runtime, id, result);
    }

    fn spawn(self: &Arc<Self>, runtime: &Runtime, inbox: Arc<Inbox<O>>, origin: Origin) {
        let instance = Instance::new(runtime.clone(), Arc::clone(self), inbox, origin);
        runtime.spawn_task(instance.run());
    }

    /// The inbox of the object `id` if it is live and looks idle (to be checked again under
    /// its state's lock).
    pub(crate) fn idle_inbox(&self, id: &str) -> Option<Arc<Inbox<O>>> {
        match self.objects.get(id.as_bytes()).as_deref() {
            Some(Entry::Live(mailbox)) if mailbox.inbox.is_idle() => {
                Some(Arc::clone(&mailbox.inbox))
            }
            _ => None,
        }
    }

    /// What the object `id` holds in memory, or `None` if it is not live.
    pub(crate) fn residency(&self, id: &str) -> Option<Residency> {
        self.objects.get(id.as_bytes()).map(|entry| match &*entry {
            Entry::Live(mailbox) => mailbox.inbox.residency(),
            Entry::Dormant => Residency::Hibernated,
        })
    }

    /// Up to `limit` ids (at least one) of the live objects of this type that hold `residency`,
    /// after `after`, in ascending byte order, and where the next page starts. Looks at every
    /// live object once, keeping only the page's worth of ids.
    pub(crate) fn live_ids(
        &self,
        residency: Residency,
        after: Option<&str>,
        limit: usize,
    ) -> IdPage {
        let keep = limit.max(1).saturating_add(1);
        // The smallest ids seen so far, the largest on top to be pushed out.
        let mut smallest: BinaryHeap<Box<str>> = BinaryHeap::new();
        for entry in self.objects.iter() {
            let id = entry.key().id();
            let held = match entry.value() {
                Entry::Live(mailbox) => mailbox.inbox.residency(),
                Entry::Dormant => Residency::Hibernated,
            };
            if held != residency || after.is_some_and(|after| id <= after) {
                continue;
            }
            if smallest.len() == keep {
                if smallest.peek().is_some_and(|largest| id < &**largest) {
                    smallest.pop();
                } else {
                    continue;
                }
            }
            smallest.push(id.into());
        }
        let mut ids: Vec<String> = smallest
            .into_sorted_vec()
            .into_iter()
            .map(String::from)
            .collect();
        let next = if ids.len() > limit.max(1) {
            ids.truncate(limit.max(1));
            ids.last().cloned()
        } else {
            None
        };
        IdPage { ids, next }
    }

    /// Removes the object's entry if it still holds `inbox` and that inbox is empty while the
    /// entry is locked. Returns whether it was removed.
    pub(crate) fn deregister(&self, id: &str, inbox: &Arc<Inbox<O>>) -> bool {
        let removed = self
            .objects
            .remove_if(id.as_bytes(), |_, entry| {
                holds(entry, inbox) && inbox.is_empty()
            })
            .is_some();
        if removed {
            self.removed();
        }
        removed
    }

    /// Replaces the object's entry by a dormant one, holding `committed` (the encoding of its
    /// last committed state), its `version` and `idle_since`, if it still holds `inbox`, that
    /// inbox is empty and the runtime is not shutting down, all while the entry is locked.
    /// Returns whether it did; the instance's task then ends, and the object keeps its slot
    /// among the live ones.
    pub(crate) fn make_dormant(
        self: &Arc<Self>,
        runtime: &Runtime,
        id: &str,
        inbox: &Arc<Inbox<O>>,
        committed: &[u8],
        version: u64,
        idle_since: u64,
    ) -> bool {
        let key = Key::dormant(id, committed, version, idle_since);
        let MapEntry::Occupied(mut occupied) = self.objects.entry(key) else {
            return false;
        };
        if !holds(occupied.get(), inbox) || !inbox.is_empty() || runtime.is_closing() {
            return false;
        }
        // The mailbox goes (closing the inbox) while the entry is still locked, then the key
        // becomes the record.
        drop(occupied.insert(Entry::Dormant));
        occupied.replace_entry(Entry::Dormant);
        if let Some(after) = self.settings.shutdown_after {
            self.expire_at(runtime, idle_since.saturating_add(ceil_millis(after)), id);
        }
        true
    }

    /// Queues the dormant object `id` to shut down at `at`, starting the sweeper on first use.
    fn expire_at(self: &Arc<Self>, runtime: &Runtime, at: u64, id: &str) {
        let earliest = {
            let mut expiries = lock(&self.expiries);
            let earliest = expiries
                .peek()
                .is_none_or(|Reverse((first, _))| at < *first);
            expiries.push(Reverse((at, id.into())));
            // Every hibernation queues an item, and an object that wakes and hibernates again
            // leaves its earlier ones behind until they come due: with a long `shutdown_after`
            // they would pile up. Past twice the live objects, the stale ones go (each push
            // pays for a share of that pass).
            if expiries.len() > 2 * self.objects.len() + STALE_EXPIRIES_KEPT {
                self.drop_stale(&mut expiries);
            }
            earliest
        };
        if !self.sweeper_started.swap(true, Ordering::AcqRel) {
            runtime.spawn_task(sweep(
                Arc::clone(self),
                runtime.downgrade(),
                runtime.shutdown_token(),
            ));
        } else if earliest {
            self.expiries_changed.notify_one();
        }
    }

    /// Keeps only the items of objects still dormant with that very expiry.
    fn drop_stale(&self, expiries: &mut Expiries) {
        let Some(after) = self.settings.shutdown_after.map(ceil_millis) else {
            expiries.clear();
            return;
        };
        expiries.retain(|Reverse((at, id))| {
            self.objects
                .get(id.as_bytes())
                .is_some_and(|entry| dormant_until(entry.key(), entry.value(), after) == Some(*at))
        });
    }

    /// Shuts down the dormant object `id` if its expiry is `at` or earlier (if it woke since,
    /// it is live or has a later expiry).
    fn expire(&self, runtime: &Runtime, id: &str, at: u64) {
        let Some(after) = self.settings.shutdown_after else {
            return;
        };
        let after = ceil_millis(after);
        let removed = self.objects.remove_if(id.as_bytes(), |key, entry| {
            dormant_until(key, entry, after).is_some_and(|until| until <= at)
        });
        if removed.is_some() {
            self.removed();
            self.forget(runtime, id, true);
        }
    }

    /// A dormant object left: its slot and its place in the live count go with it.
    fn forget(&self, runtime: &Runtime, id: &str, counted: bool) {
        if counted {
            metrics::count::<O>(metrics::SHUTDOWNS);
        }
        metrics::live_objects::<O>(-1.0);
        metrics::residency_changed::<O>(Residency::Hibernated, Residency::Unloaded);
        runtime.release_live_slot();
        runtime.emit(|| Event::ShutDown {
            key: ObjectKey::new(O::TYPE_NAME, id),
        });
    }

    /// Closes a live object's inbox for good. One with a task handles what it queued and
    /// leaves; a parked one leaves at once (returns false: its entry goes).
    fn close_live(&self, mailbox: &Mailbox<O>) -> bool {
        match mailbox.inbox.close_parked() {
            Some(parked) => {
                self.removed();
                parked.leave(Arc::clone(&mailbox.inbox));
                false
            }
            None => {
                mailbox.inbox.close();
                true
            }
        }
    }

    /// How many objects of this type are live (dormant ones included).
    pub(crate) fn live_count(&self) -> usize {
        self.objects.len()
    }
}

/// When the dormant object of `key` shuts down (`shutdown_after` is `after` milliseconds), or
/// `None` if it is live.
fn dormant_until<O: DurableObject>(key: &Key, entry: &Entry<O>, after: u64) -> Option<u64> {
    match entry {
        Entry::Dormant => key
            .record()
            .map(|record| record.idle_since.saturating_add(after)),
        Entry::Live(_) => None,
    }
}

/// Whether `entry` is the live entry of the instance owning `inbox`.
fn holds<O: DurableObject>(entry: &Entry<O>, inbox: &Arc<Inbox<O>>) -> bool {
    matches!(entry, Entry::Live(mailbox) if Arc::ptr_eq(&mailbox.inbox, inbox))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Shuts down the dormant objects of one type as their `shutdown_after` passes: one task per
/// type, sleeping until the earliest expiry.
async fn sweep<O: DurableObject>(
    entry: Arc<TypeEntry<O>>,
    runtime: Weak<Shared>,
    shutdown: CancellationToken,
) {
    loop {
        let next = lock(&entry.expiries).peek().map(|Reverse((at, _))| *at);
        match wait_for_deadline(&runtime, next, &entry.expiries_changed, &shutdown).await {
            Wake::Stopped => return,
            Wake::Changed => continue,
            Wake::Due => {}
        }
        let Some(runtime) = Runtime::upgrade(&runtime) else {
            return;
        };
        let now = runtime.uptime_millis();
        loop {
            let item = {
                let mut expiries = lock(&entry.expiries);
                match expiries.peek() {
                    Some(Reverse((at, _))) if *at <= now => expiries.pop(),
                    _ => None,
                }
            };
            let Some(Reverse((at, id))) = item else {
                break;
            };
            entry.expire(&runtime, &id, at);
        }
    }
}

impl<O: DurableObject> Objects for TypeEntry<O> {
    fn idle_candidate(&self) -> Option<(u64, Box<str>)> {
        self.objects
            .iter()
            .filter_map(|entry| {
                let last_used = match entry.value() {
                    Entry::Live(mailbox) if mailbox.inbox.is_idle() => mailbox.inbox.last_used(),
                    Entry::Live(_) => return None,
                    Entry::Dormant => entry.key().record()?.idle_since,
                };
                Some((last_used, entry.key().id().into()))
            })
            .take(EVICTION_SAMPLE)
            .min()
    }

    fn evict(&self, runtime: &Runtime, id: &str) -> bool {
        let removed = self
            .objects
            .remove_if(id.as_bytes(), |_, entry| match entry {
                Entry::Live(mailbox) => mailbox.inbox.is_idle(),
                Entry::Dormant => true,
            });
        if removed.is_some() {
            self.removed();
        }
        match removed {
            Some((_, Entry::Dormant)) => {
                self.forget(runtime, id, true);
                true
            }
            Some((_, Entry::Live(_))) => true,
            None => false,
        }
    }

    fn describe(&self, runtime: &Runtime) -> crate::describe::TypeDescription {
        let mut description = O::describe();
        description.options = runtime.options_of::<O>();
        description
    }

    fn close_matching(&self, runtime: &Runtime, matches: &dyn Fn(&str, &str) -> bool) {
        self.objects.retain(|key, entry| {
            let id = key.id();
            if !matches(O::TYPE_NAME, id) {
                return true;
            }
            match entry {
                Entry::Live(mailbox) => self.close_live(mailbox),
                Entry::Dormant => {
                    self.removed();
                    self.forget(runtime, id, true);
                    false
                }
            }
        });
    }

    fn live_matching(&self, matches: &dyn Fn(&str, &str) -> bool) -> usize {
        self.objects
            .iter()
            .filter(|entry| matches(O::TYPE_NAME, entry.key().id()))
            .count()
    }

    fn close_all(&self, runtime: &Runtime) {
        self.objects.retain(|key, entry| match entry {
            Entry::Live(mailbox) => self.close_live(mailbox),
            Entry::Dormant => {
                self.removed();
                self.forget(runtime, key.id(), false);
                false
            }
        });
    }
}

// How the runtime handle reaches each type's objects: here, with the registry, because the handle
// itself (in `object`) sits below every object type's registry and reaches it type-erased only.
impl Runtime {
    /// Starts the alarm scheduler once, when a tokio runtime is available.
    pub(crate) fn ensure_scheduler(&self) {
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

    pub(crate) fn dispatch<O: DurableObject>(&self, id: &str, envelope: Envelope<O>) {
        if self.is_closing() {
            envelope.fail(self.shutting_down(O::TYPE_NAME, id));
            return;
        }
        // Cluster mode: only the calls of the shards this node serves (single-node: one branch).
        if let Some(node) = self.inner.cluster.get()
            && let Err(error) = node.admit(O::TYPE_NAME, id)
        {
            envelope.fail(error);
            return;
        }
        self.ensure_scheduler();
        self.with_type_entry::<O, _>(|entry| entry.dispatch(self, id, envelope));
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{STALE_EXPIRIES_KEPT, lock};
    use crate::activation::instance::PARK_AFTER;
    use crate::storage::{Loaded, StoredObject};
    use crate::{MemoryStorage, ObjectOptions, Runtime, durable_object};

    #[durable_object]
    struct Probe {
        n: u32,
    }

    #[durable_object]
    impl Probe {
        #[handler]
        fn handle_n(&self) -> u32 {
            self.n
        }

        #[handler]
        fn handle_set(&mut self, n: u32) {
            self.n = n;
        }
    }

    fn runtime(options: ObjectOptions) -> Runtime {
        Runtime::builder(MemoryStorage::new())
            .register_with::<Probe>(options)
            .build()
    }

    fn stored(n: u32) -> Loaded {
        Loaded::Object(StoredObject {
            state: format!(r#"{{"n":{n}}}"#).into_bytes(),
            version: 1,
        })
    }

    /// A map entry is three words: the key (a boxed slice holding the id, and a dormant
    /// object's record) and a value of one (the mailbox, or nothing for a dormant object).
    #[test]
    fn a_registry_entry_is_three_words() {
        let word = std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<super::Key>(), 2 * word);
        assert_eq!(std::mem::size_of::<super::Entry<Probe>>(), word);
    }

    /// Whether `id` is live here with its task parked in its inbox.
    fn parked(rt: &Runtime, id: &str) -> bool {
        rt.with_type_entry::<Probe, _>(|entry| {
            matches!(entry.objects.get(id.as_bytes()).as_deref(), Some(super::Entry::Live(mailbox)) if mailbox.inbox.is_parked())
        })
    }

    /// Idle past the time an object keeps its task (virtual time).
    async fn idle() {
        tokio::time::sleep(PARK_AFTER + Duration::from_millis(10)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_object_parks_its_task_in_its_inbox_and_wakes_for_its_next_call() {
        let rt = runtime(ObjectOptions::new().with_hibernate_after(Duration::from_secs(3600)));
        Probe::set(&rt, "a", 5).await.unwrap();
        tokio::time::sleep(PARK_AFTER / 2).await;
        assert!(!parked(&rt, "a"), "an object used just now keeps its task");
        idle().await;
        assert!(parked(&rt, "a"), "idle: no task");
        assert_eq!(rt.live_objects::<Probe>(), 1);
        assert_eq!(
            rt.status::<Probe>("a").await.unwrap(),
            crate::ObjectStatus::Active
        );
        // A read runs in the caller's task: the object stays parked.
        assert_eq!(Probe::n(&rt, "a").await.unwrap(), 5);
        assert!(parked(&rt, "a"));
        // A write wakes it, with its decoded state, and it parks again once committed.
        Probe::set(&rt, "a", 6).await.unwrap();
        idle().await;
        assert!(parked(&rt, "a"));
        assert_eq!(Probe::n(&rt, "a").await.unwrap(), 6);
        // Shutdown closes it where it is, without a task.
        let mut events = rt.subscribe();
        rt.shutdown().await;
        assert_eq!(rt.live_objects::<Probe>(), 0);
        assert!(matches!(
            events.try_recv(),
            Ok(crate::Event::ShutDown { key }) if key.object_id == "a"
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_object_evicted_for_room_leaves_and_its_next_call_loads_it_again() {
        let rt = Runtime::builder(MemoryStorage::new())
            .register_with::<Probe>(
                ObjectOptions::new().with_hibernate_after(Duration::from_secs(3600)),
            )
            .max_live_objects(1)
            .build();
        Probe::set(&rt, "a", 5).await.unwrap();
        idle().await;
        assert!(parked(&rt, "a"));
        // No room for `b` but `a`'s, which it takes: `a` is woken to leave.
        Probe::set(&rt, "b", 6).await.unwrap();
        idle().await;
        assert_eq!(rt.live_objects::<Probe>(), 1);
        assert_eq!(
            rt.with_type_entry::<Probe, _>(|entry| entry.residency("a")),
            None
        );
        assert_eq!(Probe::n(&rt, "a").await.unwrap(), 5);
        rt.shutdown().await;
    }

    /// A read in a caller's task uses a parked object without waking it, so the timer it
    /// parked with fires early: the task it starts parks again, armed for the deadline counted
    /// from that read, instead of parking and waking in a loop that would hold virtual time
    /// still (hence the deadline on the real clock).
    #[test]
    fn a_parked_object_read_meanwhile_wakes_once_then_hibernates_on_time() {
        let (done, finished) = std::sync::mpsc::channel();
        let scenario = std::thread::spawn(move || {
            let tokio = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .expect("a runtime");
            tokio.block_on(async {
                let rt =
                    runtime(ObjectOptions::new().with_hibernate_after(Duration::from_secs(300)));
                let start = tokio::time::Instant::now();
                let at = |secs| tokio::time::sleep_until(start + Duration::from_secs(secs));
                Probe::set(&rt, "a", 5).await.unwrap();
                at(2).await;
                assert!(parked(&rt, "a"));
                at(121).await;
                assert_eq!(Probe::n(&rt, "a").await.unwrap(), 5);
                // Its timer, armed for 300 s, fires: the object is woken, and parks again.
                at(310).await;
                assert!(parked(&rt, "a"));
                // 300 s after the read, it hibernates.
                at(420).await;
                assert!(parked(&rt, "a"));
                at(422).await;
                assert_eq!(
                    rt.with_type_entry::<Probe, _>(|entry| entry.residency("a")),
                    Some(super::Residency::Hibernated)
                );
                rt.shutdown().await;
            });
            let _ = done.send(());
        });
        match finished.recv_timeout(Duration::from_secs(60)) {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                if let Err(panic) = scenario.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("virtual time stood still for a minute: the object woke in a loop")
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_parked_object_does_not_keep_its_runtime_alive() {
        let rt = runtime(ObjectOptions::new().with_hibernate_after(Duration::from_secs(3600)));
        let weak = rt.downgrade();
        Probe::set(&rt, "a", 5).await.unwrap();
        idle().await;
        assert!(parked(&rt, "a"));
        drop(rt);
        idle().await;
        assert!(
            Runtime::upgrade(&weak).is_none(),
            "the registry holds parked objects, and they hold no runtime"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fetched_state_starts_its_object_only_while_no_object_left() {
        let rt = runtime(ObjectOptions::new().with_shutdown_after(Duration::from_millis(1)));
        // Storage holds nothing: a call that sees 7 ran on the fetched state.
        let started = rt.with_type_entry::<Probe, _>(|entry| {
            let epoch = entry.fetch_epoch("a").expect("not registered");
            let started = entry.start_fetched(&rt, "a", stored(7), epoch);
            // Registered now: nothing to fetch, and a second start changes nothing.
            assert_eq!(entry.fetch_epoch("a"), None);
            assert!(!entry.start_fetched(&rt, "a", stored(8), epoch));
            started
        });
        assert!(started);
        assert_eq!(Probe::n(&rt, "a").await.unwrap(), 7);

        // An object leaves between the read and the start: what was read may be older than
        // what it committed, so the object loads from storage instead.
        let epoch = rt
            .with_type_entry::<Probe, _>(|entry| entry.fetch_epoch("b"))
            .expect("not registered");
        // Past `shutdown_after` (virtual time): `a` left.
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(rt.live_objects::<Probe>(), 0);
        let started =
            rt.with_type_entry::<Probe, _>(|entry| entry.start_fetched(&rt, "b", stored(7), epoch));
        assert!(!started);
        assert_eq!(Probe::n(&rt, "b").await.unwrap(), 0);
        rt.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_started_from_a_read_and_never_called_leaves_when_idle() {
        // Decoded as it starts (ahead of its alarm), it is then an idle object like any
        // other: hibernated, then shut down.
        let rt = runtime(
            ObjectOptions::new()
                .with_hibernate_after(Duration::from_millis(5))
                .with_shutdown_after(Duration::from_millis(8)),
        );
        let started = rt.with_type_entry::<Probe, _>(|entry| {
            let epoch = entry.fetch_epoch("idle").expect("not registered");
            entry.start_fetched(&rt, "idle", stored(1), epoch)
        });
        assert!(started);
        assert_eq!(rt.live_objects::<Probe>(), 1);
        // Past `shutdown_after` (virtual time).
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(rt.live_objects::<Probe>(), 0, "still live");
        rt.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_that_keeps_waking_leaves_a_bounded_queue_of_expiries() {
        let rt = runtime(
            ObjectOptions::new()
                .with_hibernate_after(Duration::from_secs(1))
                .with_shutdown_after(Duration::from_secs(24 * 3600)),
        );
        let queued = || rt.with_type_entry::<Probe, _>(|entry| lock(&entry.expiries).len());
        // Stored, so that it goes dormant when idle (an object never stored just leaves).
        Probe::set(&rt, "a", 1).await.unwrap();
        for _ in 0..500 {
            Probe::n(&rt, "a").await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        assert!(
            queued() <= 2 + STALE_EXPIRIES_KEPT + 1,
            "{} queued",
            queued()
        );
        // The latest expiry is kept: the object still shuts down a day after its last call.
        assert_eq!(rt.live_objects::<Probe>(), 1);
        tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
        assert_eq!(rt.live_objects::<Probe>(), 0);
    }
}
