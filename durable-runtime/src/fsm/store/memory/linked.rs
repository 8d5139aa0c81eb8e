//! FSM changes committed by a [`MemoryStorage`](crate::storage::MemoryStorage) linked to this
//! store, with the objects' writes that carry them.

use std::time::SystemTime;

use super::MemoryFsmStore;
use crate::storage::{FsmChange, FsmChanges, FsmRefusal};

impl MemoryFsmStore {
    /// Applies the FSM changes of a batch of object writes (each with its index in the batch),
    /// all or none: the first refused change refuses its write, with nothing applied. The
    /// object store calls it holding its own lock, after its own checks, and applies its own
    /// changes only if this succeeds.
    pub(crate) fn apply_linked<'a>(
        &self,
        writes: impl IntoIterator<Item = (usize, &'a FsmChanges)>,
        now: SystemTime,
    ) -> Result<(), (usize, FsmRefusal)> {
        let mut inner = self.lock();
        // Applied to a copy, kept only if every change holds: a memory store for tests can
        // afford the copy, and the lock makes copy and swap one step for every reader.
        let mut draft = inner.clone();
        for (index, changes) in writes {
            for change in changes {
                match change {
                    FsmChange::Insert(instance) => {
                        if draft
                            .insert(std::slice::from_ref(instance), None, now)
                            .is_empty()
                        {
                            let correlation_key =
                                instance.correlation_key.clone().unwrap_or_default();
                            return Err((index, FsmRefusal::Duplicate { correlation_key }));
                        }
                    }
                    FsmChange::Signal { target, signal } => {
                        if draft.signal(target, signal, now).is_none() {
                            return Err((
                                index,
                                FsmRefusal::no_target(target, signal.name.clone()),
                            ));
                        }
                    }
                }
            }
        }
        *inner = draft;
        Ok(())
    }
}
