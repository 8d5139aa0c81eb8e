//! An in-memory [`Storage`] for tests, documentation and examples.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;

use super::{
    AlarmChange, AlarmClaim, AlarmKey, AlarmPage, AlarmRecord, CommitError, IdPage,
    IdempotentReply, KvChange, KvUsage, Loaded, ObjectKey, ObjectWrite, Storage, StorageError,
    StoredObject, entry_bytes,
};

/// Objects and alarms kept in process memory.
///
/// It honours the whole [`Storage`] contract (atomic batches, versions, alarm claims) except
/// durability: everything is gone when the last clone is dropped. Clones share the same data,
/// which lets a test build a second runtime over the "same database".
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{MemoryStorage, ObjectKey, Storage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStorage::new();
/// assert!(store.load(&ObjectKey::new("Counter", "a")).await.unwrap().object().is_none());
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryStorage {
    inner: Arc<Mutex<Tables>>,
    /// The FSM store whose rows commit with the objects' writes ([`MemoryStorage::with_fsm`]).
    #[cfg(feature = "fsm")]
    fsm: Option<crate::fsm::MemoryFsmStore>,
}

#[derive(Debug, Default)]
struct Tables {
    /// Stored objects, and the tombstones of deleted ones.
    objects: BTreeMap<ObjectKey, Row>,
    alarms: BTreeMap<(ObjectKey, String), AlarmRecord>,
    /// When each claimed alarm's lease ends (read only while the alarm is claimed).
    leases: BTreeMap<(ObjectKey, String), SystemTime>,
    /// Key-value storage per object, keys in byte order.
    kv: BTreeMap<ObjectKey, BTreeMap<String, Vec<u8>>>,
    /// Stored replies by object and idempotency key.
    idempotency: BTreeMap<(ObjectKey, String), IdempotentReply>,
}

/// What is stored under one key.
#[derive(Debug)]
struct Row {
    /// The encoded state; `None` for the tombstone of a deleted object.
    state: Option<Vec<u8>>,
    version: u64,
}

impl Row {
    fn loaded(&self) -> Loaded {
        match &self.state {
            Some(state) => Loaded::Object(StoredObject {
                state: state.clone(),
                version: self.version,
            }),
            None => Loaded::Deleted {
                version: self.version,
            },
        }
    }
}

impl MemoryStorage {
    /// Creates an empty store.
    ///
    /// # Examples
    ///
    /// ```
    /// let store = durable_runtime::storage::MemoryStorage::new();
    /// # drop(store);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates an empty store linked to an empty FSM store (feature `fsm`): handlers' FSM
    /// inserts and signals ([`Context::fsm`](crate::Context::fsm)) commit into
    /// [`fsm`](Self::fsm) atomically with their objects' writes, and an engine on that store
    /// runs them. Clones share both.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::Engine;
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::with_fsm();
    /// let engine = Engine::builder(storage.fsm().unwrap()).build().unwrap();
    /// assert!(MemoryStorage::new().fsm().is_none());
    /// # engine.shutdown().await;
    /// # }
    /// ```
    #[cfg(feature = "fsm")]
    pub fn with_fsm() -> Self {
        Self {
            inner: Arc::default(),
            fsm: Some(crate::fsm::MemoryFsmStore::new()),
        }
    }

    /// The linked FSM store, if the store was created [`with_fsm`](Self::with_fsm) (feature
    /// `fsm`).
    #[cfg(feature = "fsm")]
    pub fn fsm(&self) -> Option<crate::fsm::MemoryFsmStore> {
        self.fsm.clone()
    }

    /// Applies the FSM changes of `batch` in the linked FSM store, all or none (called with
    /// the tables locked, once the objects' own checks passed).
    fn apply_fsm(&self, batch: &[ObjectWrite]) -> Result<(), CommitError> {
        let mut carrying = batch
            .iter()
            .enumerate()
            .filter(|(_, write)| !write.fsm.is_empty())
            .peekable();
        let Some(&(first, _)) = carrying.peek() else {
            return Ok(());
        };
        let refused = |index: usize, refusal| CommitError::Fsm {
            index,
            key: batch[index].key.clone(),
            refusal,
        };
        #[cfg(feature = "fsm")]
        if let Some(fsm) = &self.fsm {
            let now = super::truncate_to_micros(SystemTime::now());
            return fsm
                .apply_linked(carrying.map(|(index, write)| (index, &write.fsm)), now)
                .map_err(|(index, refusal)| refused(index, refusal));
        }
        Err(refused(first, super::FsmRefusal::Unsupported))
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // A panic while holding the lock cannot leave the maps half-updated (every mutation
        // is checked before it starts), so a poisoned lock is still consistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Applies key-value changes in order (a limit is checked before, not here).
fn apply_kv(entries: &mut BTreeMap<String, Vec<u8>>, changes: &[KvChange]) {
    for change in changes {
        match change {
            KvChange::Put { key, value } => {
                entries.insert(key.clone(), value.clone());
            }
            KvChange::Delete { key } => {
                entries.remove(key);
            }
            KvChange::DeleteAll => entries.clear(),
            KvChange::Limit { .. } => {}
        }
    }
}

impl Tables {
    fn load(&self, key: &ObjectKey) -> Loaded {
        self.objects.get(key).map_or(Loaded::Absent, Row::loaded)
    }

    fn apply_alarm(&mut self, key: &ObjectKey, change: &AlarmChange) {
        match change {
            AlarmChange::Set {
                name,
                due_at,
                payload,
            } => {
                self.alarms.insert(
                    (key.clone(), name.clone()),
                    AlarmRecord {
                        key: key.clone(),
                        name: name.clone(),
                        due_at: *due_at,
                        attempts: 0,
                        claimed_at: None,
                        last_error: None,
                        dead: false,
                        payload: payload.clone(),
                    },
                );
            }
            AlarmChange::Cancel { name } => {
                self.alarms.remove(&(key.clone(), name.clone()));
            }
            AlarmChange::CancelAll => self.alarms.retain(|(k, _), _| k != key),
            AlarmChange::Finish { name, claimed_at } => {
                if self.claimed_alarm(key, name, *claimed_at).is_some() {
                    self.alarms.remove(&(key.clone(), name.clone()));
                }
            }
            AlarmChange::Limit { .. } => {}
        }
    }

    /// The first alarm limit of `write` its changes would exceed, as `(max, found)`: the
    /// object's alarm names, changed in order.
    fn alarm_limit_exceeded(&self, write: &ObjectWrite) -> Option<(u64, u64)> {
        if !write
            .alarms
            .iter()
            .any(|change| matches!(change, AlarmChange::Limit { .. }))
        {
            return None;
        }
        let key = &write.key;
        let of_object = (key.clone(), String::new())..;
        let mut names: BTreeSet<&str> = self
            .alarms
            .range(of_object)
            .take_while(|((k, _), _)| k == key)
            .map(|((_, name), _)| name.as_str())
            .collect();
        // Names set or cancelled by this write so far: no stored claim holds for them.
        let mut decided: BTreeSet<&str> = BTreeSet::new();
        let mut cleared = false;
        for change in &write.alarms {
            match change {
                AlarmChange::Set { name, .. } => {
                    names.insert(name);
                    decided.insert(name);
                }
                AlarmChange::Cancel { name } => {
                    names.remove(name.as_str());
                    decided.insert(name);
                }
                AlarmChange::CancelAll => {
                    names.clear();
                    cleared = true;
                }
                AlarmChange::Finish { name, claimed_at } => {
                    let claimed = !cleared
                        && !decided.contains(name.as_str())
                        && self
                            .alarms
                            .get(&(key.clone(), name.clone()))
                            .is_some_and(|alarm| alarm.claimed_at == Some(*claimed_at));
                    if claimed {
                        names.remove(name.as_str());
                    }
                }
                AlarmChange::Limit { max } => {
                    let found = names.len() as u64;
                    if found > *max {
                        return Some((*max, found));
                    }
                }
            }
        }
        None
    }

    /// When the alarm becomes claimable: its due time, or the end of its claim's lease if later.
    fn kv_usage(&self, key: &ObjectKey) -> KvUsage {
        self.kv.get(key).map_or_else(KvUsage::default, |entries| {
            KvUsage::of(entries.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
        })
    }

    /// The first limit of `write` its changes would exceed, counted as a store with counters
    /// does: the usage before, adjusted change by change.
    fn kv_limit_exceeded(&self, write: &ObjectWrite) -> Option<super::KvLimitExceeded> {
        if !write
            .kv
            .iter()
            .any(|change| matches!(change, KvChange::Limit { .. }))
        {
            return None;
        }
        let mut usage = self.kv_usage(&write.key);
        let stored = self.kv.get(&write.key);
        // What each touched key holds by now: `None` once removed.
        let mut now: BTreeMap<&str, Option<u64>> = BTreeMap::new();
        let mut cleared = false;
        for change in &write.kv {
            let current = |key: &str, now: &BTreeMap<&str, Option<u64>>| match now.get(key) {
                Some(bytes) => *bytes,
                None if cleared => None,
                None => stored
                    .and_then(|entries| entries.get(key))
                    .map(|value| entry_bytes(key, value)),
            };
            match change {
                KvChange::Put { key, value } => {
                    if let Some(old) = current(key, &now) {
                        usage.keys -= 1;
                        usage.bytes -= old;
                    }
                    let bytes = entry_bytes(key, value);
                    usage.keys += 1;
                    usage.bytes += bytes;
                    now.insert(key, Some(bytes));
                }
                KvChange::Delete { key } => {
                    if let Some(old) = current(key, &now) {
                        usage.keys -= 1;
                        usage.bytes -= old;
                    }
                    now.insert(key, None);
                }
                KvChange::DeleteAll => {
                    usage = KvUsage::default();
                    now.clear();
                    cleared = true;
                }
                KvChange::Limit {
                    max_keys,
                    max_bytes,
                } => {
                    if let Some(exceeded) = usage.exceeds(*max_keys, *max_bytes) {
                        return Some(exceeded);
                    }
                }
            }
        }
        None
    }

    fn claimable_at(&self, alarm: &AlarmRecord) -> SystemTime {
        let lease = alarm.claimed_at.and_then(|_| {
            self.leases
                .get(&(alarm.key.clone(), alarm.name.clone()))
                .copied()
        });
        lease.map_or(alarm.due_at, |lease| lease.max(alarm.due_at))
    }

    fn claimed_alarm(
        &mut self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Option<&mut AlarmRecord> {
        self.alarms
            .get_mut(&(key.clone(), name.to_owned()))
            .filter(|alarm| alarm.claimed_at == Some(claimed_at))
    }
}

#[async_trait]
impl Storage for MemoryStorage {
    async fn load(&self, key: &ObjectKey) -> Result<Loaded, StorageError> {
        Ok(self.tables().load(key))
    }

    async fn load_many(&self, keys: &[ObjectKey]) -> Result<Vec<Loaded>, StorageError> {
        let tables = self.tables();
        Ok(keys.iter().map(|key| tables.load(key)).collect())
    }

    async fn load_versions(&self, keys: &[ObjectKey]) -> Result<Vec<Option<u64>>, StorageError> {
        let tables = self.tables();
        Ok(keys
            .iter()
            .map(|key| tables.objects.get(key).map(|stored| stored.version))
            .collect())
    }

    async fn commit(&self, batch: &[ObjectWrite]) -> Result<(), CommitError> {
        let mut tables = self.tables();
        // Check every version first so that a conflict applies nothing.
        for (index, write) in batch.iter().enumerate() {
            let row = tables.objects.get(&write.key);
            let found = row.map(|row| row.version);
            // Only a write with a state can create an object (over nothing or a tombstone).
            let holds = found.unwrap_or(0) == write.expected_version
                && (write.state.is_some() || row.is_some_and(|row| row.state.is_some()));
            if !holds {
                return Err(CommitError::Conflict {
                    index,
                    key: write.key.clone(),
                    expected: write.expected_version,
                    found,
                });
            }
        }
        // Then every key-value limit, on what each write's changes would leave.
        for (index, write) in batch.iter().enumerate() {
            if let Some(limit) = tables.kv_limit_exceeded(write) {
                return Err(CommitError::KvLimit {
                    index,
                    key: write.key.clone(),
                    limit,
                });
            }
        }
        // Then every alarm limit.
        for (index, write) in batch.iter().enumerate() {
            if let Some((max, found)) = tables.alarm_limit_exceeded(write) {
                return Err(CommitError::AlarmLimit {
                    index,
                    key: write.key.clone(),
                    max,
                    found,
                });
            }
        }
        // Then the FSM changes, which apply last among the checks: nothing is refused after.
        self.apply_fsm(batch)?;
        for write in batch {
            if !write.kv.is_empty() {
                let entries = tables.kv.entry(write.key.clone()).or_default();
                apply_kv(entries, &write.kv);
                if entries.is_empty() {
                    tables.kv.remove(&write.key);
                }
            }
            let entry = tables.objects.entry(write.key.clone()).or_insert(Row {
                state: None,
                version: 0,
            });
            entry.version = write.new_version();
            if let Some(state) = &write.state {
                entry.state = Some(state.clone());
            }
            for change in &write.alarms {
                tables.apply_alarm(&write.key, change);
            }
            if let Some(reply) = &write.idempotency {
                tables
                    .idempotency
                    .insert((write.key.clone(), reply.key.clone()), reply.clone());
            }
        }
        Ok(())
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool, StorageError> {
        let mut tables = self.tables();
        tables.alarms.retain(|(k, _), _| k != key);
        tables.kv.remove(key);
        tables.idempotency.retain(|(k, _), _| k != key);
        // The tombstone keeps the version growing: a recreated object continues above it.
        match tables.objects.get_mut(key) {
            Some(row) if row.state.is_some() => {
                row.state = None;
                row.version += 1;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn list_ids(
        &self,
        object_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, StorageError> {
        let tables = self.tables();
        let mut ids: Vec<String> = tables
            .objects
            .iter()
            .filter(|(k, row)| k.object_type == object_type && row.state.is_some())
            .filter(|(k, _)| after.is_none_or(|after| k.object_id.as_str() > after))
            .map(|(k, _)| k.object_id.clone())
            .take(limit.saturating_add(1))
            .collect();
        let next = if ids.len() > limit {
            ids.truncate(limit);
            ids.last().cloned()
        } else {
            None
        };
        Ok(IdPage { ids, next })
    }

    async fn list_alarms(&self, key: &ObjectKey) -> Result<Vec<AlarmRecord>, StorageError> {
        let tables = self.tables();
        // The object's alarms are one range of the map, which is ordered by key, then name.
        let mut alarms: Vec<AlarmRecord> = tables
            .alarms
            .range((key.clone(), String::new())..)
            .take_while(|((of, _), _)| of == key)
            .map(|(_, alarm)| alarm.clone())
            .collect();
        alarms.sort_by(|a, b| (a.due_at, &a.name).cmp(&(b.due_at, &b.name)));
        Ok(alarms)
    }

    async fn list_object_types(&self) -> Result<Vec<String>, StorageError> {
        let tables = self.tables();
        let mut types: Vec<String> = Vec::new();
        // Keys are ordered by type first: each type's rows are adjacent.
        for (key, row) in &tables.objects {
            if row.state.is_some() && types.last() != Some(&key.object_type) {
                types.push(key.object_type.clone());
            }
        }
        Ok(types)
    }

    async fn list_dead_alarms(
        &self,
        object_type: Option<&str>,
        after: Option<&AlarmKey>,
        limit: usize,
    ) -> Result<AlarmPage, StorageError> {
        let tables = self.tables();
        // The map is ordered by (key, name), which is the listing's order.
        let listed = tables
            .alarms
            .iter()
            .filter(|((key, name), _)| {
                after.is_none_or(|after| (key, name) > (&after.key, &after.name))
            })
            .filter(|((key, _), alarm)| {
                alarm.dead && object_type.is_none_or(|ty| key.object_type == ty)
            })
            .map(|(_, alarm)| alarm.clone())
            .take(limit.saturating_add(1))
            .collect();
        Ok(AlarmPage::from_listed(listed, limit))
    }

    async fn next_alarm_due(&self) -> Result<Option<SystemTime>, StorageError> {
        let tables = self.tables();
        Ok(tables
            .alarms
            .values()
            .filter(|a| !a.dead)
            .map(|a| tables.claimable_at(a))
            .min())
    }

    async fn claim_due_alarms(
        &self,
        now: SystemTime,
        due_by: SystemTime,
        lease_until: SystemTime,
        limit: usize,
    ) -> Result<Vec<AlarmRecord>, StorageError> {
        let mut tables = self.tables();
        // Leases of alarms no longer claimed are forgotten, so the map stays small.
        let Tables { alarms, leases, .. } = &mut *tables;
        leases.retain(|id, _| alarms.get(id).is_some_and(|a| a.claimed_at.is_some()));
        let mut due: Vec<(ObjectKey, String)> = tables
            .alarms
            .iter()
            .filter(|(id, a)| {
                let lease_ended = a.claimed_at.is_none()
                    || tables.leases.get(*id).is_none_or(|lease| *lease <= now);
                !a.dead && a.due_at <= due_by && lease_ended
            })
            .map(|(id, _)| id.clone())
            .collect();
        due.sort_by(|a, b| {
            let (a, b) = (&tables.alarms[a], &tables.alarms[b]);
            (a.due_at, &a.key, &a.name).cmp(&(b.due_at, &b.key, &b.name))
        });
        due.truncate(limit);
        Ok(due
            .into_iter()
            .filter_map(|id| {
                tables.leases.insert(id.clone(), lease_until);
                let alarm = tables.alarms.get_mut(&id)?;
                alarm.claimed_at = Some(now);
                Some(alarm.clone())
            })
            .collect())
    }

    async fn renew_alarm_claims(
        &self,
        claims: &[AlarmClaim],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError> {
        let mut tables = self.tables();
        let mut renewed = 0;
        for claim in claims {
            if tables
                .claimed_alarm(&claim.key, &claim.name, claim.claimed_at)
                .is_some()
            {
                tables
                    .leases
                    .insert((claim.key.clone(), claim.name.clone()), lease_until);
                renewed += 1;
            }
        }
        Ok(renewed)
    }

    async fn finish_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        let mut tables = self.tables();
        if tables.claimed_alarm(key, name, claimed_at).is_none() {
            return Ok(false);
        }
        tables.alarms.remove(&(key.clone(), name.to_owned()));
        Ok(true)
    }

    async fn fail_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
        attempts: u32,
        error: &str,
        retry_at: Option<SystemTime>,
    ) -> Result<bool, StorageError> {
        let mut tables = self.tables();
        let Some(alarm) = tables.claimed_alarm(key, name, claimed_at) else {
            return Ok(false);
        };
        alarm.attempts = attempts;
        alarm.last_error = Some(error.to_owned());
        alarm.claimed_at = None;
        match retry_at {
            Some(at) => alarm.due_at = at,
            None => alarm.dead = true,
        }
        Ok(true)
    }

    async fn release_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        let mut tables = self.tables();
        let Some(alarm) = tables.claimed_alarm(key, name, claimed_at) else {
            return Ok(false);
        };
        alarm.claimed_at = None;
        Ok(true)
    }

    async fn kv_get(&self, key: &ObjectKey, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let tables = self.tables();
        Ok(tables
            .kv
            .get(key)
            .and_then(|entries| entries.get(name))
            .cloned())
    }

    async fn kv_list(
        &self,
        key: &ObjectKey,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        use std::ops::Bound;
        let tables = self.tables();
        let Some(entries) = tables.kv.get(key) else {
            return Ok(Vec::new());
        };
        let start = match start_after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        Ok(entries
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    async fn kv_usage(&self, key: &ObjectKey) -> Result<KvUsage, StorageError> {
        Ok(self.tables().kv_usage(key))
    }

    async fn load_idempotent_reply(
        &self,
        key: &ObjectKey,
        idempotency_key: &str,
    ) -> Result<Option<IdempotentReply>, StorageError> {
        let tables = self.tables();
        Ok(tables
            .idempotency
            .get(&(key.clone(), idempotency_key.to_owned()))
            .cloned())
    }

    async fn sweep_idempotency(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> Result<usize, StorageError> {
        let mut tables = self.tables();
        let expired: Vec<_> = tables
            .idempotency
            .iter()
            .filter(|(_, reply)| reply.expires_at <= now)
            .map(|(id, _)| id.clone())
            .take(limit)
            .collect();
        for id in &expired {
            tables.idempotency.remove(id);
        }
        Ok(expired.len())
    }
}
