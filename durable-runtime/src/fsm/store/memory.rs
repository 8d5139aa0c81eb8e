//! [`MemoryFsmStore`]: the FSM store in memory, for tests and examples.

mod control;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;

use super::{
    CancelOutcome, ChildRecord, Claimed, Committed, Delivered, FsmStore, InstanceRecord, Lease,
    ListFilter, NewInstance, NewSignal, OutcomeCommit, PausedQueue, PickRequest, RateLimit,
    RateLimitRecord, SignalRecord, Swept, Target, TokenBucket, Transition,
};
use crate::fsm::status::{InstanceId, SignalId, Status};
use crate::storage::StorageError;

mod linked;

/// FSM instances and inboxes in memory: every rule of [`FsmStore`] without a database.
///
/// A batch of outcomes is applied under one lock, so it is atomic with respect to every other
/// operation. Cloning shares the data.
///
/// # Examples
///
/// ```
/// use std::time::SystemTime;
/// use durable_runtime::fsm::Status;
/// use durable_runtime::fsm::store::{FsmStore, MemoryFsmStore, NewInstance};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryFsmStore::new();
/// let now = SystemTime::now();
/// let row = NewInstance {
///     fsm: "order".into(),
///     fsm_version: 1,
///     step: "start".into(),
///     state: "{}".into(),
///     queue: "default".into(),
///     priority: 0,
///     eligible_at: now,
///     correlation_key: Some("order:1".into()),
///     correlation_scope: Status::LIVE.to_vec(),
///     concurrency_key: None,
///     concurrency_limit: 1,
///     rate_limit_key: None,
///     rate_limit_units: 1,
/// };
/// let ids = store.insert(&[row.clone(), row], now).await.unwrap();
/// assert_eq!(ids.len(), 1, "the key is occupied by the first row");
/// assert_eq!(store.find("order:1").await.unwrap(), Some(ids[0]));
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryFsmStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Clone, Debug, Default)]
struct Inner {
    last_id: i64,
    last_signal: i64,
    rows: BTreeMap<i64, Row>,
    signals: BTreeMap<i64, Signal>,
    /// The rate limits' buckets, by key.
    buckets: BTreeMap<String, TokenBucket>,
    /// The paused queues, with when they were paused.
    paused: BTreeMap<String, SystemTime>,
}

#[derive(Clone, Debug)]
struct Row {
    record: InstanceRecord,
    token: i64,
}

#[derive(Clone, Debug)]
struct Signal {
    target: i64,
    record: SignalRecord,
}

impl Row {
    /// The generated correlation guard: the key while the status is in the scope.
    fn guard(&self) -> Option<&str> {
        guard_of(&self.record, self.record.status)
    }
}

/// The guard `record` would have in `status`.
fn guard_of(record: &InstanceRecord, status: Status) -> Option<&str> {
    record
        .correlation_key
        .as_deref()
        .filter(|_| record.correlation_scope.contains(&status))
}

impl MemoryFsmStore {
    /// An empty store.
    ///
    /// # Examples
    ///
    /// ```
    /// let store = durable_runtime::fsm::store::MemoryFsmStore::new();
    /// # drop(store);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves whole rows behind (every change is a plain
        // field assignment): the data stays consistent enough for the tests this store serves.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Inner {
    /// Delivers `signal` ([`FsmStore::signal`]); `None` without a live target.
    fn signal(
        &mut self,
        target: &Target,
        signal: &NewSignal,
        now: SystemTime,
    ) -> Option<Delivered> {
        let id = match target {
            Target::Id(id) => id.get(),
            Target::Key(key) => self.occupant(key, None)?,
        };
        match self.rows.get(&id) {
            Some(row) if !row.record.status.is_terminal() => {}
            _ => return None,
        }
        let duplicate = signal.dedup_key.as_ref().is_some_and(|key| {
            self.signals
                .values()
                .any(|s| s.target == id && s.record.dedup_key.as_ref() == Some(key))
        });
        let inserted = if duplicate {
            None
        } else {
            self.last_signal += 1;
            let signal_id = SignalId::new(self.last_signal);
            self.signals.insert(
                signal_id.get(),
                Signal {
                    target: id,
                    record: SignalRecord {
                        id: signal_id,
                        name: signal.name.clone(),
                        payload: signal.payload.clone(),
                        dedup_key: signal.dedup_key.clone(),
                        inserted_at: now,
                    },
                },
            );
            Some(signal_id)
        };
        let mut woke = false;
        if let Some(row) = self.rows.get_mut(&id) {
            let record = &mut row.record;
            if record.status == Status::AwaitingSignal
                && record
                    .awaits
                    .as_ref()
                    .is_some_and(|names| names.contains(&signal.name))
            {
                record.status = Status::Runnable;
                record.eligible_at = now;
                record.await_deadline = None;
                record.updated_at = now;
                woke = true;
            }
        }
        Some(Delivered {
            target: InstanceId::new(id),
            signal: inserted,
            woke,
        })
    }

    /// The row whose guard is `key`, other than `except`.
    fn occupant(&self, key: &str, except: Option<i64>) -> Option<i64> {
        self.rows
            .iter()
            .find(|(id, row)| Some(**id) != except && row.guard() == Some(key))
            .map(|(id, _)| *id)
    }

    /// Inserts the rows whose key is free, in key order; returns their ids.
    fn insert(
        &mut self,
        instances: &[NewInstance],
        parent: Option<i64>,
        now: SystemTime,
    ) -> Vec<InstanceId> {
        let mut order: Vec<&NewInstance> = instances.iter().collect();
        // Postgres' `ORDER BY correlation_key`: keys ascending, rows without one last.
        order.sort_by(|a, b| match (&a.correlation_key, &b.correlation_key) {
            (Some(a), Some(b)) => a.cmp(b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
        let mut ids = Vec::new();
        for new in order {
            let record = InstanceRecord {
                id: InstanceId::new(0),
                fsm: new.fsm.clone(),
                fsm_version: new.fsm_version,
                step: new.step.clone(),
                status: Status::Runnable,
                state: new.state.clone(),
                result: None,
                awaits: None,
                queue: new.queue.clone(),
                priority: new.priority,
                eligible_at: new.eligible_at,
                attempt: 0,
                last_error: None,
                await_deadline: None,
                locked_by: None,
                lease_expires_at: None,
                parent_id: parent.map(InstanceId::new),
                children_pending: 0,
                correlation_key: new.correlation_key.clone(),
                correlation_scope: new.correlation_scope.clone(),
                concurrency_key: new.concurrency_key.clone(),
                concurrency_limit: new.concurrency_limit.max(1),
                concurrency_slot: None,
                rate_limit_key: new.rate_limit_key.clone(),
                rate_limit_units: new.rate_limit_units.max(1),
                inserted_at: now,
                updated_at: now,
            };
            if let Some(guard) = guard_of(&record, Status::Runnable)
                && self.occupant(guard, None).is_some()
            {
                continue;
            }
            self.last_id += 1;
            let id = self.last_id;
            let mut record = record;
            record.id = InstanceId::new(id);
            self.rows.insert(id, Row { record, token: 0 });
            ids.push(InstanceId::new(id));
        }
        ids
    }

    fn inbox(&self, id: i64) -> Vec<SignalRecord> {
        self.signals
            .values()
            .filter(|signal| signal.target == id)
            .map(|signal| signal.record.clone())
            .collect()
    }

    fn children(&self, id: i64) -> Vec<ChildRecord> {
        self.rows
            .values()
            .filter(|row| row.record.parent_id == Some(InstanceId::new(id)))
            .map(|row| ChildRecord {
                id: row.record.id,
                fsm: row.record.fsm.clone(),
                status: row.record.status,
                state: row.record.state.clone(),
                result: row.record.result.clone(),
                last_error: row.record.last_error.clone(),
            })
            .collect()
    }

    /// Whether an executing row holds `slot` of the concurrency key `key` (what the unique
    /// index over executing rows' `(concurrency_key, concurrency_slot)` holds in Postgres).
    fn slot_taken(&self, key: &str, slot: u16) -> bool {
        self.rows.values().any(|row| {
            row.record.status == Status::Executing
                && row.record.concurrency_key.as_deref() == Some(key)
                && row.record.concurrency_slot == Some(slot)
        })
    }

    /// Whether `lease` still holds.
    fn holds(&self, lease: &Lease) -> bool {
        self.rows
            .get(&lease.id.get())
            .is_some_and(|row| row.record.status == Status::Executing && row.token == lease.token)
    }

    /// The status `commit` leaves its row in (before any await match or barrier), for the
    /// guard check.
    fn landing_status(&self, commit: &OutcomeCommit) -> Status {
        match &commit.transition {
            Transition::Next { .. } | Transition::Retry { .. } => Status::Runnable,
            Transition::Await { names, .. } => {
                if self.matching_signal(commit.lease.id.get(), names, &commit.received) {
                    Status::Runnable
                } else {
                    Status::AwaitingSignal
                }
            }
            Transition::ScheduleChildren { .. } => Status::AwaitingChildren,
            Transition::Done { .. } => Status::Done,
            Transition::Stop { .. } => Status::Failed,
        }
    }

    /// Whether a signal named in `names` that the step was not handed is in the inbox of `id`.
    fn matching_signal(&self, id: i64, names: &[String], received: &[SignalId]) -> bool {
        self.signals.values().any(|signal| {
            signal.target == id
                && names.contains(&signal.record.name)
                && !received.contains(&signal.record.id)
        })
    }

    /// Refuses a transition that would give its row a guard another row holds, as the unique
    /// index does.
    fn check_guard(&self, id: i64, status: Status) -> Result<(), StorageError> {
        let Some(row) = self.rows.get(&id) else {
            return Ok(());
        };
        if let Some(guard) = guard_of(&row.record, status)
            && self.occupant(guard, Some(id)).is_some()
        {
            return Err(StorageError::rejected(format!(
                "correlation key {guard:?} is occupied by another instance"
            )));
        }
        Ok(())
    }

    fn delete_signals(&mut self, id: i64, only: Option<&[SignalId]>) {
        self.signals.retain(|_, signal| {
            signal.target != id || only.is_some_and(|ids| !ids.contains(&signal.record.id))
        });
    }

    fn apply(&mut self, commit: &OutcomeCommit, now: SystemTime) {
        let id = commit.lease.id.get();
        let landing = self.landing_status(commit);
        match &commit.transition {
            Transition::Next { .. } | Transition::ScheduleChildren { .. } => {
                self.delete_signals(id, Some(&commit.received));
            }
            Transition::Done { .. } | Transition::Stop { .. } => self.delete_signals(id, None),
            Transition::Retry { .. } | Transition::Await { .. } => {}
        }
        let inserted = match &commit.transition {
            Transition::ScheduleChildren { children, .. } => {
                self.insert(children, Some(id), now).len()
            }
            _ => 0,
        };
        let Some(row) = self.rows.get_mut(&id) else {
            return;
        };
        let record = &mut row.record;
        record.locked_by = None;
        record.lease_expires_at = None;
        record.concurrency_slot = None;
        record.updated_at = now;
        record.await_deadline = None;
        match &commit.transition {
            Transition::Next { step, state } => {
                record.step.clone_from(step);
                record.state.clone_from(state);
                record.status = Status::Runnable;
                record.eligible_at = now;
                record.attempt = 0;
                record.awaits = None;
            }
            Transition::Retry { state, eligible_at } => {
                record.state.clone_from(state);
                record.status = Status::Runnable;
                record.eligible_at = *eligible_at;
                record.attempt += 1;
            }
            Transition::Await {
                step,
                state,
                names,
                deadline,
            } => {
                record.step.clone_from(step);
                record.state.clone_from(state);
                record.awaits = Some(names.clone());
                record.eligible_at = now;
                record.status = landing;
                record.await_deadline = *deadline;
            }
            Transition::ScheduleChildren { step, state, .. } => {
                record.step.clone_from(step);
                record.state.clone_from(state);
                record.children_pending = i32::try_from(inserted).unwrap_or(i32::MAX);
                record.status = if inserted == 0 {
                    Status::Runnable
                } else {
                    Status::AwaitingChildren
                };
                record.eligible_at = now;
                record.attempt = 0;
                record.awaits = None;
            }
            Transition::Done { result } => {
                record.result = Some(result.clone());
                record.status = Status::Done;
                record.awaits = None;
            }
            Transition::Stop { reason } => {
                record.status = Status::Failed;
                record.last_error = Some(reason.clone());
                record.awaits = None;
            }
        }
        if record.status.is_terminal()
            && let Some(parent) = record.parent_id
            && let Some(parent) = self.rows.get_mut(&parent.get())
        {
            let parent = &mut parent.record;
            parent.children_pending -= 1;
            if parent.children_pending <= 0 && parent.status == Status::AwaitingChildren {
                parent.status = Status::Runnable;
                parent.eligible_at = now;
            }
            parent.updated_at = now;
        }
    }
}

#[async_trait]
impl FsmStore for MemoryFsmStore {
    async fn insert(
        &self,
        instances: &[NewInstance],
        now: SystemTime,
    ) -> Result<Vec<InstanceId>, StorageError> {
        Ok(self.lock().insert(instances, None, now))
    }

    async fn pick(
        &self,
        queue: &str,
        worker: &str,
        eligible_by: SystemTime,
        lease_until: SystemTime,
        limit: usize,
        now: SystemTime,
    ) -> Result<Vec<Claimed>, StorageError> {
        self.pick_rows(queue, worker, eligible_by, lease_until, limit, now, None)
    }

    async fn heartbeat(
        &self,
        leases: &[Lease],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError> {
        let mut inner = self.lock();
        let mut extended = 0;
        for lease in leases {
            if inner.holds(lease)
                && let Some(row) = inner.rows.get_mut(&lease.id.get())
            {
                row.record.lease_expires_at = Some(lease_until);
                extended += 1;
            }
        }
        Ok(extended)
    }

    async fn complete(
        &self,
        outcomes: &[OutcomeCommit],
        now: SystemTime,
    ) -> Result<Vec<Committed>, StorageError> {
        let mut inner = self.lock();
        // Checked before anything changes, so that a refused batch changes nothing.
        for commit in outcomes.iter().filter(|commit| inner.holds(&commit.lease)) {
            inner.check_guard(commit.lease.id.get(), inner.landing_status(commit))?;
        }
        let mut results = Vec::with_capacity(outcomes.len());
        for commit in outcomes {
            if inner.holds(&commit.lease) {
                inner.apply(commit, now);
                results.push(Committed::Applied);
            } else {
                results.push(Committed::Stale);
            }
        }
        Ok(results)
    }

    async fn signal(
        &self,
        target: &Target,
        signal: &NewSignal,
        now: SystemTime,
    ) -> Result<Option<Delivered>, StorageError> {
        Ok(self.lock().signal(target, signal, now))
    }

    async fn get(&self, id: InstanceId) -> Result<Option<InstanceRecord>, StorageError> {
        Ok(self
            .lock()
            .rows
            .get(&id.get())
            .map(|row| row.record.clone()))
    }

    async fn find(&self, key: &str) -> Result<Option<InstanceId>, StorageError> {
        Ok(self.lock().occupant(key, None).map(InstanceId::new))
    }

    async fn inbox(&self, id: InstanceId) -> Result<Vec<SignalRecord>, StorageError> {
        Ok(self.lock().inbox(id.get()))
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<InstanceRecord>, StorageError> {
        let after = filter.after.map_or(0, InstanceId::get);
        Ok(self
            .lock()
            .rows
            .range(after.saturating_add(1)..)
            .map(|(_, row)| &row.record)
            .filter(|record| filter.fsm.as_deref().is_none_or(|fsm| record.fsm == fsm))
            .filter(|record| filter.status.is_none_or(|status| record.status == status))
            .take(filter.bounded_limit())
            .cloned()
            .collect())
    }

    async fn reap(&self, now: SystemTime) -> Result<Swept, StorageError> {
        let mut inner = self.lock();
        let mut swept = Swept::default();
        for row in inner.rows.values_mut() {
            let record = &mut row.record;
            if record.status == Status::Executing
                && record.lease_expires_at.is_some_and(|until| until < now)
            {
                record.status = Status::Runnable;
                record.locked_by = None;
                record.lease_expires_at = None;
                record.concurrency_slot = None;
                record.attempt += 1;
                record.updated_at = now;
                swept.expired_leases += 1;
            } else if record.status == Status::AwaitingSignal
                && record
                    .await_deadline
                    .is_some_and(|deadline| deadline <= now)
            {
                record.status = Status::Runnable;
                record.eligible_at = now;
                record.await_deadline = None;
                record.updated_at = now;
                swept.await_timeouts += 1;
            }
        }
        Ok(swept)
    }

    async fn gc(&self, ended_before: SystemTime, limit: usize) -> Result<u64, StorageError> {
        let mut inner = self.lock();
        let doomed: Vec<i64> = inner
            .rows
            .values()
            .filter(|row| {
                let record = &row.record;
                let parent_live = record.parent_id.is_some_and(|parent| {
                    inner
                        .rows
                        .get(&parent.get())
                        .is_some_and(|parent| !parent.record.status.is_terminal())
                });
                record.status.is_terminal() && record.updated_at < ended_before && !parent_live
            })
            .map(|row| row.record.id.get())
            .take(limit)
            .collect();
        for id in &doomed {
            inner.rows.remove(id);
            inner.delete_signals(*id, None);
        }
        for row in inner.rows.values_mut() {
            if row
                .record
                .parent_id
                .is_some_and(|parent| doomed.contains(&parent.get()))
            {
                row.record.parent_id = None;
            }
        }
        Ok(doomed.len() as u64)
    }

    async fn set_rate_limit(&self, key: &str, limit: RateLimit) -> Result<(), StorageError> {
        limit.check().map_err(StorageError::rejected)?;
        let clock = control::database_clock()?;
        self.lock()
            .buckets
            .entry(key.to_owned())
            .and_modify(|bucket| {
                bucket.limit = limit;
                bucket.tokens = bucket.tokens.min(f64::from(limit.capacity));
            })
            .or_insert_with(|| TokenBucket::full(limit, clock));
        Ok(())
    }

    async fn remove_rate_limit(&self, key: &str) -> Result<bool, StorageError> {
        Ok(self.lock().buckets.remove(key).is_some())
    }

    async fn rate_limits(&self) -> Result<Vec<RateLimitRecord>, StorageError> {
        self.lock()
            .buckets
            .iter()
            .map(|(key, bucket)| control::rate_limit_record(key, bucket))
            .collect()
    }

    async fn pause_queue(&self, queue: &str, now: SystemTime) -> Result<bool, StorageError> {
        let mut inner = self.lock();
        if inner.paused.contains_key(queue) {
            return Ok(false);
        }
        inner.paused.insert(queue.to_owned(), now);
        Ok(true)
    }

    async fn resume_queue(&self, queue: &str) -> Result<bool, StorageError> {
        Ok(self.lock().paused.remove(queue).is_some())
    }

    async fn paused_queues(&self) -> Result<Vec<PausedQueue>, StorageError> {
        Ok(self
            .lock()
            .paused
            .iter()
            .map(|(queue, at)| PausedQueue {
                queue: queue.clone(),
                paused_at: *at,
            })
            .collect())
    }

    async fn cancel(
        &self,
        target: &Target,
        reason: &str,
        now: SystemTime,
    ) -> Result<CancelOutcome, StorageError> {
        Ok(self.lock().cancel(target, reason, now))
    }

    async fn pick_registered(
        &self,
        request: &PickRequest<'_>,
    ) -> Result<Vec<Claimed>, StorageError> {
        self.pick_rows(
            request.queue,
            request.worker,
            request.eligible_by,
            request.lease_until,
            request.limit,
            request.now,
            Some(request),
        )
    }

    async fn insert_batch(
        &self,
        instances: &[NewInstance],
        now: SystemTime,
    ) -> Result<Vec<Option<InstanceId>>, StorageError> {
        let mut inner = self.lock();
        let ids = inner.insert(instances, None, now);
        let returned = ids
            .into_iter()
            .map(|id| (id, inner.rows[&id.get()].record.correlation_key.clone()))
            .collect();
        Ok(super::positions(instances, returned))
    }
}

impl MemoryFsmStore {
    /// The pick, restricted to the FSM versions of `only` when given.
    #[allow(clippy::too_many_arguments)]
    fn pick_rows(
        &self,
        queue: &str,
        worker: &str,
        eligible_by: SystemTime,
        lease_until: SystemTime,
        limit: usize,
        now: SystemTime,
        only: Option<&PickRequest<'_>>,
    ) -> Result<Vec<Claimed>, StorageError> {
        let mut inner = self.lock();
        if inner.paused.contains_key(queue) {
            return Ok(Vec::new());
        }
        let clock = control::database_clock()?;
        let buckets = inner.buckets.clone();
        let mut candidates: Vec<(i16, SystemTime, i64)> = inner
            .rows
            .values()
            .filter(|row| {
                row.record.status == Status::Runnable
                    && row.record.queue == queue
                    && row.record.eligible_at <= eligible_by
                    && only
                        .is_none_or(|request| request.runs(&row.record.fsm, row.record.fsm_version))
            })
            .map(|row| {
                (
                    row.record.priority,
                    row.record.eligible_at,
                    row.record.id.get(),
                )
            })
            .collect();
        candidates.sort();
        // Rows whose concurrency key has no free slot below their limit are passed over,
        // and the next rows taken instead.
        let mut chosen: Vec<(i64, Option<u16>)> = Vec::new();
        let mut taken: Vec<(String, u16)> = Vec::new();
        for (_, _, id) in candidates {
            if chosen.len() >= limit {
                break;
            }
            let record = &inner.rows[&id].record;
            let Some(key) = &record.concurrency_key else {
                if inner.rate_gate(id, clock, now) {
                    chosen.push((id, None));
                }
                continue;
            };
            let free = (0..record.concurrency_limit.max(1)).find(|slot| {
                !taken.iter().any(|(k, s)| k == key && s == slot) && !inner.slot_taken(key, *slot)
            });
            if let Some(slot) = free {
                let key = key.clone();
                if inner.rate_gate(id, clock, now) {
                    taken.push((key, slot));
                    chosen.push((id, Some(slot)));
                }
            }
        }
        // A claim that would collide on a correlation guard fails the whole pick, as the
        // unique index fails the statement.
        for (id, _) in &chosen {
            if let Err(error) = inner.check_guard(*id, Status::Executing) {
                // The failed pick takes no token.
                inner.buckets = buckets;
                return Err(error);
            }
        }
        let mut claimed = Vec::with_capacity(chosen.len());
        for (id, slot) in chosen {
            let inbox = inner.inbox(id);
            let children = inner.children(id);
            let Some(row) = inner.rows.get_mut(&id) else {
                continue;
            };
            row.token += 1;
            let record = &mut row.record;
            record.status = Status::Executing;
            record.concurrency_slot = slot;
            record.locked_by = Some(worker.to_owned());
            record.lease_expires_at = Some(lease_until);
            record.updated_at = now;
            claimed.push(Claimed {
                id: record.id,
                token: row.token,
                fsm: record.fsm.clone(),
                fsm_version: record.fsm_version,
                step: record.step.clone(),
                state: record.state.clone(),
                attempt: record.attempt,
                correlation_key: record.correlation_key.clone(),
                awaits: record.awaits.clone(),
                inbox,
                children,
            });
        }
        Ok(claimed)
    }
}
