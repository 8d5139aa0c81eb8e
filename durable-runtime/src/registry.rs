//! The live objects of one type: id → mailbox, with exactly one instance per id.
//!
//! Callers enqueue into a mailbox only while holding a read guard on its map entry, and an
//! instance removes its own entry (under the write guard) only when its mailbox is empty. So
//! once an entry is gone nothing can reach the old instance any more, and the next call starts
//! a fresh one: there is never a moment with two instances of one object, and no call is lost
//! to an instance that is stopping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use tokio::sync::mpsc;

use crate::call::Invocation;
use crate::error::Error;
use crate::instance::{Instance, Settings};
use crate::object::DurableObject;
use crate::runtime::Runtime;
use crate::storage::ObjectKey;

/// What travels through an object's mailbox.
pub(crate) type Envelope<O> = Box<dyn Invocation<O>>;

/// The registry entry of one live object.
pub(crate) struct Mailbox<O> {
    generation: u64,
    sender: mpsc::Sender<Envelope<O>>,
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
            Some(mailbox) => match mailbox.sender.try_send(envelope) {
                Ok(()) => return,
                Err(Full(envelope)) => return self.refuse(id, envelope),
                Err(Closed(envelope)) => envelope,
            },
            None => envelope,
        };
        let mut entry = self
            .objects
            .entry(id.into())
            .or_insert_with(|| self.start(runtime, id));
        if entry.sender.is_closed() {
            // The instance ended without deregistering (its task was aborted by a runtime
            // shutdown); replace it.
            *entry = self.start(runtime, id);
        }
        if let Err(Full(envelope) | Closed(envelope)) = entry.sender.try_send(envelope) {
            drop(entry);
            self.refuse(id, envelope);
        }
    }

    fn refuse(&self, id: &str, envelope: Envelope<O>) {
        envelope.fail(Error::Overloaded {
            key: ObjectKey::new(O::TYPE_NAME, id),
            capacity: self.settings.queue_capacity,
        });
    }

    fn start(self: &Arc<Self>, runtime: &Runtime, id: &str) -> Mailbox<O> {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel(self.settings.queue_capacity.max(1));
        let instance = Instance::new(
            runtime.clone(),
            Arc::clone(self),
            ObjectKey::new(O::TYPE_NAME, id),
            generation,
            receiver,
        );
        runtime.spawn_instance(instance.run());
        Mailbox { generation, sender }
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
