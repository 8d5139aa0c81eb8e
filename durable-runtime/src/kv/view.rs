//! What a live object knows of its key-value storage: the changes of its writes not yet
//! committed, and a read cache of committed values with a byte budget.
//!
//! An object runs its next call while the previous call's write is in flight, so a read must
//! see the changes of writes staged before it, committed or not (as the state it runs on
//! does). Those changes are *pending*: they stay in memory, never evicted, until their write
//! commits, and then become cached values like any read from storage. A key neither pending
//! nor cached is read from storage, which then holds its latest value. A failed write drops
//! the whole view, with the state: storage is the truth from then on.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use crate::kv::KvLimits;
use crate::kv::staged::Staged;
use crate::storage::KvChange;

/// Bytes a cached entry counts for besides its key and value (map slot, allocation headers).
const ENTRY_OVERHEAD: u64 = 64;

/// The key-value side of a live object, shared by its task and its handlers' contexts.
///
/// Its view is created by the first call that uses the storage: an object that never does
/// holds no more than this.
#[derive(Debug, Default)]
pub(crate) struct KvCell {
    pub(crate) limits: KvLimits,
    slot: Mutex<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    /// How many times the view was dropped: a storage read started before a drop must not
    /// fill the view that follows.
    resets: u64,
    view: Option<Box<View>>,
}

/// The view of a live object's storage.
#[derive(Debug, Default)]
struct View {
    /// Changes not yet committed, each with the write that carries it (see `generation`).
    pending: BTreeMap<String, (Option<Vec<u8>>, u64)>,
    /// The write carrying the latest clearing of every key, while not committed.
    cleared: Option<u64>,
    /// Writes with key-value changes submitted, and committed. The changes staged now go in
    /// write `submitted + 1`; writes commit in order.
    submitted: u64,
    committed: u64,
    /// Committed values (`None`: known absent).
    cache: HashMap<String, Option<Vec<u8>>>,
    cache_bytes: u64,
}

/// What the view knows about a key.
pub(crate) enum Known {
    /// Its value (`None`: absent), pending or cached.
    Value(Option<Vec<u8>>),
    /// Nothing: read storage, then [`KvCell::cache`] the answer with this ticket.
    Unknown(Ticket),
}

/// Lets a storage read fill the view it was started for, and no later one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket(u64);

impl KvCell {
    pub(crate) fn new(limits: KvLimits) -> Self {
        Self {
            limits,
            slot: Mutex::default(),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        // Every mutation below completes or leaves the view droppable: a poisoned lock is
        // still consistent enough to reset.
        self.slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What the view knows about `key`.
    pub(crate) fn lookup(&self, key: &str) -> Known {
        let slot = self.slot();
        let ticket = Ticket(slot.resets);
        let Some(view) = &slot.view else {
            return Known::Unknown(ticket);
        };
        if let Some((value, _)) = view.pending.get(key) {
            return Known::Value(value.clone());
        }
        if view.cleared.is_some() {
            return Known::Value(None);
        }
        match view.cache.get(key) {
            Some(value) => Known::Value(value.clone()),
            None => Known::Unknown(ticket),
        }
    }

    /// Caches what storage answered for `key`, unless the view was dropped since `ticket`.
    pub(crate) fn cache(&self, ticket: Ticket, key: &str, value: Option<&[u8]>) {
        let budget = self.limits.cache_bytes;
        let mut slot = self.slot();
        if slot.resets != ticket.0 {
            return;
        }
        let view = slot.view.get_or_insert_with(Box::default);
        if view.pending.contains_key(key) || view.cleared.is_some() {
            return;
        }
        view.insert_cached(key.to_owned(), value.map(<[u8]>::to_vec), budget);
    }

    /// The pending changes (and whether a clearing is pending) whose keys start with `prefix`,
    /// for a listing.
    pub(crate) fn pending(&self, prefix: &str) -> Staged {
        let slot = self.slot();
        let Some(view) = &slot.view else {
            return Staged::default();
        };
        Staged {
            cleared: view.cleared.is_some(),
            changes: view
                .pending
                .range::<str, _>((
                    std::ops::Bound::Included(prefix),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(|(key, _)| key.starts_with(prefix))
                .map(|(key, (value, _))| (key.clone(), value.clone()))
                .collect(),
        }
    }

    /// Makes a finished call's changes pending, and returns them as the changes of the
    /// object's next write.
    pub(crate) fn stage(&self, staged: Staged) -> Vec<KvChange> {
        let mut slot = self.slot();
        let view = slot.view.get_or_insert_with(Box::default);
        let write = view.submitted + 1;
        let mut changes = Vec::with_capacity(staged.changes.len() + 1);
        if staged.cleared {
            view.pending.clear();
            view.cache.clear();
            view.cache_bytes = 0;
            view.cleared = Some(write);
            changes.push(KvChange::DeleteAll);
        }
        for (key, value) in staged.changes {
            if let Some(cached) = view.cache.remove(&key) {
                view.cache_bytes -= cached_bytes(&key, cached.as_deref());
            }
            changes.push(match &value {
                Some(value) => KvChange::Put {
                    key: key.clone(),
                    value: value.clone(),
                },
                None => KvChange::Delete { key: key.clone() },
            });
            view.pending.insert(key, (value, write));
        }
        changes
    }

    /// A write with key-value changes was submitted.
    pub(crate) fn submitted(&self) {
        if let Some(view) = &mut self.slot().view {
            view.submitted += 1;
        }
    }

    /// The oldest submitted write with key-value changes committed: its changes are now
    /// cached values.
    pub(crate) fn committed(&self) {
        let budget = self.limits.cache_bytes;
        let mut slot = self.slot();
        let Some(view) = &mut slot.view else {
            return;
        };
        view.committed += 1;
        let write = view.committed;
        if view.cleared.is_some_and(|cleared| cleared <= write) {
            view.cleared = None;
        }
        let settled: Vec<String> = view
            .pending
            .iter()
            .filter(|(_, (_, carried_by))| *carried_by <= write)
            .map(|(key, _)| key.clone())
            .collect();
        for key in settled {
            if let Some((value, _)) = view.pending.remove(&key) {
                view.insert_cached(key, value, budget);
            }
        }
    }

    /// Drops the view (a failed write, an unloaded or hibernated object): storage is the
    /// truth from now on.
    pub(crate) fn reset(&self) {
        let mut slot = self.slot();
        if slot.view.is_some() {
            slot.view = None;
            slot.resets += 1;
        }
    }
}

impl View {
    /// Caches a committed value, evicting others to stay within `budget` (simple eviction:
    /// whichever entries the map yields first).
    fn insert_cached(&mut self, key: String, value: Option<Vec<u8>>, budget: u64) {
        let bytes = cached_bytes(&key, value.as_deref());
        if bytes > budget {
            return;
        }
        if let Some(old) = self.cache.remove(&key) {
            self.cache_bytes -= cached_bytes(&key, old.as_deref());
        }
        if self.cache_bytes + bytes > budget {
            // Down to three quarters, so that eviction runs once per many inserts.
            let target = (budget / 4 * 3).min(budget - bytes);
            let mut evicted = Vec::new();
            let mut held = self.cache_bytes;
            for (key, value) in &self.cache {
                if held <= target {
                    break;
                }
                held -= cached_bytes(key, value.as_deref());
                evicted.push(key.clone());
            }
            for key in evicted {
                self.cache.remove(&key);
            }
            self.cache_bytes = held;
        }
        self.cache_bytes += bytes;
        self.cache.insert(key, value);
    }
}

fn cached_bytes(key: &str, value: Option<&[u8]>) -> u64 {
    (key.len() + value.map_or(0, <[u8]>::len)) as u64 + ENTRY_OVERHEAD
}
