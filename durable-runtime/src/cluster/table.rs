//! [`ShardTable`]: what this node holds of each shard, read on every call (to route it) and
//! every commit (to fence it), written by the lease loop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use super::hash::shard_of;

/// One shard as this node sees it.
#[derive(Debug, Default)]
struct Slot {
    /// The epoch this node holds the shard's lease at; 0 when it does not hold it.
    epoch: AtomicU64,
    /// Until when the lease is valid here: nanoseconds after the table's base instant, on the
    /// monotonic clock (`renewal sent + ttl − margin`).
    deadline: AtomicU64,
    /// Being handed off: no new call is admitted, the calls already in flight still commit.
    draining: AtomicBool,
}

/// The shards of a cluster as one node holds them: for each shard, the epoch of this node's
/// lease (if it holds one) and until when the lease is valid on this node's monotonic clock,
/// and the address of the node that owns it otherwise.
///
/// The lease loop writes it; calls read it to be routed and commits read it to be fenced: a
/// storage backend in cluster mode writes an object only with the epoch its shard is held at
/// here, and refuses to write an object of a shard whose lease is not valid here.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use durable_runtime::cluster::ShardTable;
///
/// let table = ShardTable::new(16);
/// let shard = table.shard_of("Counter", "a");
/// assert_eq!(table.epoch(shard), None);
/// table.hold(shard, 3, Instant::now() + Duration::from_secs(5));
/// assert_eq!(table.epoch(shard), Some(3));
/// // A lease past its local deadline is not valid any more, whatever the database says.
/// table.hold(shard, 3, Instant::now());
/// assert_eq!(table.epoch(shard), None);
/// ```
#[derive(Debug)]
pub struct ShardTable {
    base: Instant,
    slots: Box<[Slot]>,
    /// The owner's address of each shard, as last read from the database (`None`: free).
    owners: RwLock<Arc<[Option<Arc<str>>]>>,
}

impl ShardTable {
    /// A table of `shards` shards, none held.
    ///
    /// # Panics
    ///
    /// If `shards` is zero.
    pub fn new(shards: u32) -> Self {
        assert!(shards > 0, "a cluster has at least one shard");
        let slots: Box<[Slot]> = (0..shards).map(|_| Slot::default()).collect();
        let owners: Arc<[Option<Arc<str>>]> = (0..shards).map(|_| None).collect();
        Self {
            base: Instant::now(),
            slots,
            owners: RwLock::new(owners),
        }
    }

    /// How many shards the cluster has.
    pub fn shard_count(&self) -> u32 {
        u32::try_from(self.slots.len()).unwrap_or(u32::MAX)
    }

    /// The shard of the object `id` of type `object_type` (see [`shard_of`]).
    pub fn shard_of(&self, object_type: &str, id: &str) -> u32 {
        shard_of(object_type, id, self.shard_count())
    }

    fn slot(&self, shard: u32) -> Option<&Slot> {
        self.slots.get(usize::try_from(shard).ok()?)
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The epoch this node holds `shard` at, if its lease is valid here now: the fence every
    /// write of the shard's objects carries.
    pub fn epoch(&self, shard: u32) -> Option<u64> {
        let slot = self.slot(shard)?;
        let epoch = slot.epoch.load(Ordering::Acquire);
        if epoch == 0 || self.nanos(Instant::now()) >= slot.deadline.load(Ordering::Acquire) {
            return None;
        }
        Some(epoch)
    }

    /// Whether this node takes new calls for `shard`: it holds a valid lease and is not
    /// handing the shard off.
    pub fn serving(&self, shard: u32) -> bool {
        self.epoch(shard).is_some()
            && self
                .slot(shard)
                .is_some_and(|slot| !slot.draining.load(Ordering::Acquire))
    }

    /// Records that this node holds `shard` at `epoch`, valid here until `deadline`.
    pub fn hold(&self, shard: u32, epoch: u64, deadline: Instant) {
        if let Some(slot) = self.slot(shard) {
            // The deadline first: a reader that sees the new epoch sees its deadline.
            slot.deadline.store(self.nanos(deadline), Ordering::Release);
            slot.epoch.store(epoch, Ordering::Release);
        }
    }

    /// Extends the local validity of `shard`'s lease, if it is still held at `epoch`.
    pub(crate) fn extend(&self, shard: u32, epoch: u64, deadline: Instant) {
        if let Some(slot) = self.slot(shard)
            && slot.epoch.load(Ordering::Acquire) == epoch
        {
            slot.deadline.store(self.nanos(deadline), Ordering::Release);
        }
    }

    /// Forgets the lease of `shard` if it is held at `epoch` (a newer owner's fence was found,
    /// or the lease was not renewed, or it was released). Returns whether it was held.
    pub fn lose(&self, shard: u32, epoch: u64) -> bool {
        let Some(slot) = self.slot(shard) else {
            return false;
        };
        let lost = slot
            .epoch
            .compare_exchange(epoch, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if lost {
            slot.draining.store(false, Ordering::Release);
        }
        lost
    }

    /// Stops admitting calls for `shard` (its hand-off started).
    pub(crate) fn drain(&self, shard: u32) {
        if let Some(slot) = self.slot(shard) {
            slot.draining.store(true, Ordering::Release);
        }
    }

    /// Admits calls for `shard` again (its hand-off failed).
    pub(crate) fn undrain(&self, shard: u32) {
        if let Some(slot) = self.slot(shard) {
            slot.draining.store(false, Ordering::Release);
        }
    }

    pub(crate) fn is_draining(&self, shard: u32) -> bool {
        self.slot(shard)
            .is_some_and(|slot| slot.draining.load(Ordering::Acquire))
    }

    /// The shards this node holds a lease on, with their epochs, valid here or not (a
    /// renewal that succeeds at the same epoch makes a lapsed one valid again: nobody took
    /// the shard meanwhile, or its epoch would have grown).
    pub fn held(&self) -> Vec<(u32, u64)> {
        (0..self.shard_count())
            .filter_map(|shard| {
                let epoch = self.slot(shard)?.epoch.load(Ordering::Acquire);
                (epoch != 0).then_some((shard, epoch))
            })
            .collect()
    }

    /// The shards this node takes calls for now.
    pub fn serving_shards(&self) -> Vec<u32> {
        (0..self.shard_count())
            .filter(|&shard| self.serving(shard))
            .collect()
    }

    /// Records the owner's address of every shard, as read from the database.
    pub(crate) fn set_owners(&self, owners: Arc<[Option<Arc<str>>]>) {
        *self.owners.write().unwrap_or_else(|e| e.into_inner()) = owners;
    }

    /// The address of the node that owned `shard` at the last look at the database, if any.
    pub fn owner_address(&self, shard: u32) -> Option<Arc<str>> {
        let owners = self.owners.read().unwrap_or_else(|e| e.into_inner());
        owners.get(usize::try_from(shard).ok()?)?.clone()
    }
}
