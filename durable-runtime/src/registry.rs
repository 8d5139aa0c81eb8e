//! The live objects of one type: id → inbox, with exactly one instance per id.
//!
//! Callers enqueue into an inbox only while holding a read guard on its map entry, and an
//! instance removes its own entry (under the write guard) only when its inbox is empty. So
//! once an entry is gone nothing can reach the old instance any more, and the next call starts
//! a fresh one: there is never a moment with two instances of one object, and no call is lost
//! to an instance that is stopping.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use dashmap::DashMap;
use tokio::sync::oneshot;

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

/// Why an envelope was not enqueued.
pub(crate) enum SendError<O> {
    /// The inbox holds its capacity.
    Full(Envelope<O>),
    /// The inbox takes nothing more: its instance is ending.
    Closed(Envelope<O>),
}

/// One live object's queue of envelopes and what the registry knows of its activity, shared
/// by its registry entry and its task. (A plain queue under a lock: far smaller than a
/// channel, which preallocates a block of slots and pads its fields to cache lines.)
pub(crate) struct Inbox<O> {
    queue: Mutex<Queue<O>>,
    residency: AtomicU8,
    /// Envelopes enqueued and not yet fully handled. Incremented under the entry's read
    /// guard, so a zero seen under its write guard means the object is idle.
    outstanding: AtomicUsize,
    /// When the object last finished an envelope, in milliseconds of the runtime's uptime.
    last_used: AtomicU64,
    /// Whether replies wait in the object's output gate (writes not yet committed).
    gate_busy: AtomicBool,
}

struct Queue<O> {
    envelopes: VecDeque<Envelope<O>>,
    /// The task waiting for the next envelope.
    waker: Option<Waker>,
    /// Nothing more is accepted; the task ends once the queue is empty.
    closed: bool,
}

impl<O> Inbox<O> {
    pub(crate) fn new(residency: Residency) -> Self {
        Self {
            queue: Mutex::new(Queue {
                envelopes: VecDeque::new(),
                waker: None,
                closed: false,
            }),
            residency: AtomicU8::new(residency as u8),
            outstanding: AtomicUsize::new(0),
            last_used: AtomicU64::new(0),
            gate_busy: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<O>> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Enqueues without waiting, counting the envelope as outstanding.
    fn try_send(&self, envelope: Envelope<O>, capacity: usize) -> Result<(), SendError<O>> {
        let mut queue = self.lock();
        if queue.closed {
            return Err(SendError::Closed(envelope));
        }
        if queue.envelopes.len() >= capacity {
            return Err(SendError::Full(envelope));
        }
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        queue.envelopes.push_back(envelope);
        let waker = queue.waker.take();
        drop(queue);
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// The next envelope; `None` once the inbox is closed and empty.
    pub(crate) async fn recv(&self) -> Option<Envelope<O>> {
        std::future::poll_fn(|cx| {
            let mut queue = self.lock();
            if let Some(envelope) = queue.envelopes.pop_front() {
                return Poll::Ready(Some(envelope));
            }
            if queue.closed {
                return Poll::Ready(None);
            }
            match &queue.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => queue.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }

    /// Accepts nothing more; what is queued is still handled.
    pub(crate) fn close(&self) {
        let waker = {
            let mut queue = self.lock();
            queue.closed = true;
            queue.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Closes and drops what is queued (its callers see the runtime shutting down): the task
    /// is gone.
    pub(crate) fn abandon(&self) {
        let envelopes = {
            let mut queue = self.lock();
            queue.closed = true;
            queue.waker = None;
            std::mem::take(&mut queue.envelopes)
        };
        drop(envelopes);
    }

    fn is_closed(&self) -> bool {
        self.lock().closed
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().envelopes.is_empty()
    }

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

/// The registry's side of the live objects of one type, erased over the type.
pub(crate) trait Objects: Send + Sync {
    /// The least recently used idle object among a sample: its last use and id.
    fn idle_candidate(&self) -> Option<(u64, Box<str>)>;

    /// Removes `id` if it is still idle. Its task then ends: its inbox has closed.
    fn evict(&self, id: &str) -> bool;

    /// Runtime shutdown: closes every inbox, so that each task handles what it queued and
    /// ends.
    fn close_all(&self);
}

/// How many live objects of a type are looked at to find an eviction candidate.
const EVICTION_SAMPLE: usize = 64;

/// The registry entry of one live object. Dropping it closes the inbox.
pub(crate) struct Mailbox<O> {
    inbox: Arc<Inbox<O>>,
}

impl<O> Drop for Mailbox<O> {
    fn drop(&mut self) {
        self.inbox.close();
    }
}

/// Live objects of type `O` and the settings they run with.
pub(crate) struct TypeEntry<O> {
    objects: DashMap<Box<str>, Mailbox<O>>,
    pub(crate) settings: Settings,
}

impl<O: DurableObject> TypeEntry<O> {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            objects: DashMap::new(),
            settings,
        }
    }

    /// Enqueues `envelope` for the object `id`, starting it if it is not live. A full inbox
    /// refuses the call at once.
    pub(crate) fn dispatch(self: &Arc<Self>, runtime: &Runtime, id: &str, envelope: Envelope<O>) {
        let capacity = self.settings.queue_capacity;
        let envelope = match self.objects.get(id) {
            Some(mailbox) => match mailbox.inbox.try_send(envelope, capacity) {
                Ok(()) => return,
                Err(SendError::Full(envelope)) => return self.refuse(id, envelope),
                Err(SendError::Closed(envelope)) => envelope,
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
        if !started && entry.inbox.is_closed() {
            // The instance ended without deregistering (its task panicked or was aborted);
            // replace it.
            *entry = self.start(runtime, id);
            started = true;
        }
        if !started {
            // Another caller started it first.
            runtime.release_live_slot();
        }
        if runtime.is_closing() {
            // Checked under the entry's lock: a runtime shutdown that did not see this entry
            // set the flag before it passed here, so an instance started now is closed at once.
            entry.inbox.close();
        }
        if let Err(SendError::Full(envelope) | SendError::Closed(envelope)) =
            entry.inbox.try_send(envelope, capacity)
        {
            drop(entry);
            match runtime.is_closing() {
                true => envelope.fail(Error::ShuttingDown),
                false => self.refuse(id, envelope),
            }
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
        let inbox = Arc::new(Inbox::new(Residency::Unloaded));
        let instance = Instance::new(
            runtime.clone(),
            Arc::clone(self),
            ObjectKey::new(O::TYPE_NAME, id),
            Arc::clone(&inbox),
        );
        runtime.spawn_task(instance.run());
        crate::metrics::live_objects(O::TYPE_NAME, 1.0);
        Mailbox { inbox }
    }

    /// What the live object `id` holds in memory, or `None` if it is not live.
    pub(crate) fn residency(&self, id: &str) -> Option<Residency> {
        self.objects
            .get(id)
            .map(|mailbox| mailbox.inbox.residency())
    }

    /// Removes the object's entry if it still holds `inbox` and that inbox is empty while the
    /// entry is locked. Returns whether it was removed.
    pub(crate) fn deregister(&self, id: &str, inbox: &Arc<Inbox<O>>) -> bool {
        self.objects
            .remove_if(id, |_, mailbox| {
                Arc::ptr_eq(&mailbox.inbox, inbox) && inbox.is_empty()
            })
            .is_some()
    }

    /// How many objects of this type are live.
    pub(crate) fn live_count(&self) -> usize {
        self.objects.len()
    }
}

impl<O: DurableObject> Objects for TypeEntry<O> {
    fn idle_candidate(&self) -> Option<(u64, Box<str>)> {
        self.objects
            .iter()
            .filter(|entry| entry.inbox.is_idle())
            .take(EVICTION_SAMPLE)
            .map(|entry| {
                (
                    entry.inbox.last_used.load(Ordering::Relaxed),
                    entry.key().clone(),
                )
            })
            .min()
    }

    fn evict(&self, id: &str) -> bool {
        self.objects
            .remove_if(id, |_, mailbox| mailbox.inbox.is_idle())
            .is_some()
    }

    fn close_all(&self) {
        self.objects.iter().for_each(|entry| entry.inbox.close());
    }
}
