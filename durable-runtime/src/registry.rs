//! The live objects of one type: id → mailbox, with exactly one instance per id.
//!
//! Callers enqueue into a mailbox only while holding a read guard on its map entry, and an
//! instance removes its own entry (under the write guard) only when its mailbox is empty. So
//! once an entry is gone nothing can reach the old instance any more, and the next call starts
//! a fresh one: there is never a moment with two instances of one object, and no call is lost
//! to an instance that is stopping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

use dashmap::DashMap;
use tokio::sync::{mpsc, oneshot};

use crate::call::Invocation;
use crate::error::Error;
use crate::instance::{Instance, Settings};
use crate::object::DurableObject;
use crate::runtime::Runtime;
use crate::storage::ObjectKey;

/// What travels through an object's mailbox.
pub(crate) enum Envelope<O> {
    /// A handler call.
    Call(Box<dyn Invocation<O>>),
    /// Delete the object's state and alarms; replies whether a stored state existed.
    Delete(oneshot::Sender<Result<bool, Error>>),
}

impl<O: 'static> Envelope<O> {
    /// Answers the sender with `error` instead of handling the envelope.
    pub(crate) fn fail(self, error: Error) {
        match self {
            Self::Call(call) => call.fail(error),
            Self::Delete(reply) => {
                let _ = reply.send(Err(error));
            }
        }
    }
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

/// What the registry knows of a live object's activity, shared with its task.
#[derive(Debug, Default)]
pub(crate) struct InstanceCell {
    residency: AtomicU8,
    /// Envelopes enqueued and not yet fully handled. Incremented under the entry's read
    /// guard, so a zero seen under its write guard means the object is idle.
    outstanding: AtomicUsize,
    /// When the object last finished an envelope, in milliseconds of the runtime's uptime.
    last_used: AtomicU64,
    /// Whether replies wait in the object's output gate (writes not yet committed).
    gate_busy: std::sync::atomic::AtomicBool,
}

impl InstanceCell {
    pub(crate) fn set_residency(&self, residency: Residency) {
        self.residency.store(residency as u8, Ordering::Relaxed);
    }

    pub(crate) fn residency(&self) -> Residency {
        match self.residency.load(Ordering::Relaxed) {
            1 => Residency::Active,
            2 => Residency::Hibernated,
            _ => Residency::Unloaded,
        }
    }

    /// An envelope was handled.
    pub(crate) fn finished(&self, at_millis: u64) {
        self.last_used.store(at_millis, Ordering::Relaxed);
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
    }

    /// Set before the envelope that made the gate busy is counted as finished.
    pub(crate) fn set_gate_busy(&self, busy: bool) {
        self.gate_busy.store(busy, Ordering::Release);
    }

    fn is_idle(&self) -> bool {
        self.outstanding.load(Ordering::Acquire) == 0 && !self.gate_busy.load(Ordering::Acquire)
    }
}

/// Evicts idle objects of one type, for the runtime's cap on live objects.
pub(crate) trait Evict: Send + Sync {
    /// The least recently used idle object among a sample: its last use and id.
    fn idle_candidate(&self) -> Option<(u64, Box<str>)>;

    /// Removes `id` if it is still idle. Its task then ends: its mailbox has closed.
    fn evict(&self, id: &str) -> bool;
}

/// How many live objects of a type are looked at to find an eviction candidate.
const EVICTION_SAMPLE: usize = 64;

/// The registry entry of one live object.
pub(crate) struct Mailbox<O> {
    generation: u64,
    sender: mpsc::Sender<Envelope<O>>,
    cell: Arc<InstanceCell>,
}

impl<O> Mailbox<O> {
    /// Enqueues without waiting, counting the envelope as outstanding.
    fn try_send(
        &self,
        envelope: Envelope<O>,
    ) -> Result<(), mpsc::error::TrySendError<Envelope<O>>> {
        self.cell.outstanding.fetch_add(1, Ordering::AcqRel);
        self.sender.try_send(envelope).inspect_err(|_| {
            self.cell.outstanding.fetch_sub(1, Ordering::AcqRel);
        })
    }
}

/// Live objects of type `O` and the settings they run with.
pub(crate) struct TypeEntry<O> {
    objects: DashMap<Box<str>, Mailbox<O>>,
    next_generation: AtomicU64,
    pub(crate) settings: Settings,
}

impl<O: DurableObject> TypeEntry<O> {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            objects: DashMap::new(),
            next_generation: AtomicU64::new(0),
            settings,
        }
    }

    /// Enqueues `envelope` for the object `id`, starting it if it is not live. A full mailbox
    /// refuses the call at once.
    pub(crate) fn dispatch(self: &Arc<Self>, runtime: &Runtime, id: &str, envelope: Envelope<O>) {
        use mpsc::error::TrySendError::{Closed, Full};

        let envelope = match self.objects.get(id) {
            Some(mailbox) => match mailbox.try_send(envelope) {
                Ok(()) => return,
                Err(Full(envelope)) => return self.refuse(id, envelope),
                Err(Closed(envelope)) => envelope,
            },
            None => envelope,
        };
        if runtime.is_closing() {
            // Shutting down: live objects drain what they queued, nothing new starts.
            envelope.fail(Error::ShuttingDown);
            return;
        }
        // Room for a new instance is reserved before the entry is locked: making room may
        // evict objects of this very type.
        if !runtime.reserve_live_slot() {
            let key = ObjectKey::new(O::TYPE_NAME, id);
            envelope.fail(Error::TooManyObjects { key });
            return;
        }
        let mut started = false;
        let mut entry = self.objects.entry(id.into()).or_insert_with(|| {
            started = true;
            self.start(runtime, id)
        });
        if entry.sender.is_closed() {
            // The instance ended without deregistering (its task panicked or was aborted);
            // replace it.
            *entry = self.start(runtime, id);
            started = true;
        }
        if !started {
            // Another caller started it first.
            runtime.release_live_slot();
        }
        if let Err(Full(envelope) | Closed(envelope)) = entry.try_send(envelope) {
            drop(entry);
            self.refuse(id, envelope);
        }
    }

    fn refuse(&self, id: &str, envelope: Envelope<O>) {
        crate::metrics::count(crate::metrics::QUEUE_REJECTIONS, O::TYPE_NAME);
        envelope.fail(Error::Overloaded {
            key: ObjectKey::new(O::TYPE_NAME, id),
            capacity: self.settings.queue_capacity,
        });
    }

    fn start(self: &Arc<Self>, runtime: &Runtime, id: &str) -> Mailbox<O> {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel(self.settings.queue_capacity.max(1));
        let cell = Arc::new(InstanceCell::default());
        let instance = Instance::new(
            runtime.clone(),
            Arc::clone(self),
            ObjectKey::new(O::TYPE_NAME, id),
            generation,
            receiver,
            Arc::clone(&cell),
        );
        runtime.spawn_task(instance.run());
        crate::metrics::live_objects(O::TYPE_NAME, 1.0);
        Mailbox {
            generation,
            sender,
            cell,
        }
    }

    /// What the live object `id` holds in memory, or `None` if it is not live.
    pub(crate) fn residency(&self, id: &str) -> Option<Residency> {
        self.objects.get(id).map(|mailbox| mailbox.cell.residency())
    }

    /// Removes the object's entry if it still belongs to `generation` and `mailbox_is_empty`
    /// holds while the entry is locked. Returns whether it was removed.
    pub(crate) fn deregister(
        &self,
        id: &str,
        generation: u64,
        mailbox_is_empty: impl FnOnce() -> bool,
    ) -> bool {
        self.objects
            .remove_if(id, |_, mailbox| {
                mailbox.generation == generation && mailbox_is_empty()
            })
            .is_some()
    }

    /// How many objects of this type are live.
    pub(crate) fn live_count(&self) -> usize {
        self.objects.len()
    }
}

impl<O: DurableObject> Evict for TypeEntry<O> {
    fn idle_candidate(&self) -> Option<(u64, Box<str>)> {
        self.objects
            .iter()
            .filter(|entry| entry.cell.is_idle())
            .take(EVICTION_SAMPLE)
            .map(|entry| {
                (
                    entry.cell.last_used.load(Ordering::Relaxed),
                    entry.key().clone(),
                )
            })
            .min()
    }

    fn evict(&self, id: &str) -> bool {
        self.objects
            .remove_if(id, |_, mailbox| mailbox.cell.is_idle())
            .is_some()
    }
}
