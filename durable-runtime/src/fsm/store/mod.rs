//! The storage contract of the FSM engine: [`FsmStore`] and the rows it speaks in.
//!
//! An instance is a row; its inbox is a set of signal rows. The engine never holds an
//! instance in memory between steps: it picks runnable rows, runs one step of each outside any
//! transaction, and commits each step's outcome with [`FsmStore::complete`]. Every rule of
//! the specification that concerns the rows lives in the store, so that every backend is
//! checked against the same rules by the conformance suite
//! (`durable_runtime::fsm::conformance`, features `fsm` and `conformance`):
//!
//! - the pick takes runnable rows of one queue whose `eligible_at` has come, by `priority`
//!   (lower first) then `eligible_at`, never a row another picker holds, and marks each
//!   `executing` with a lease and a fresh **claim token**;
//! - an outcome commits only while its claim still holds (`executing` with the same token):
//!   otherwise it is *stale* and changes nothing at all, neither the row, nor its inbox, nor
//!   a parent, nor children;
//! - consume rules: `next` and `schedule_childs` delete exactly the received signal ids;
//!   `retry` and `await` delete nothing; `done` and `stop` delete the whole inbox;
//! - no lost wake-up: an `await` commits `runnable` instead of `awaiting_signal` when a
//!   matching signal the step was not handed is already in the inbox, and a signal delivered
//!   concurrently with the park either sees the parked row or is seen by it;
//! - `schedule_childs` inserts the children and parks the parent in one transaction, with
//!   `children_pending` equal to the children actually inserted (runnable at once for none);
//!   a child's `done` or `stop` decrements its parent in the same transaction, releasing the
//!   barrier at zero;
//! - the correlation guard: a key is occupied while the instance's status is in its scope; an
//!   insert whose key is occupied inserts nothing, and a signal addressed by key reaches the
//!   occupying instance or nobody;
//! - concurrency keys: an executing instance with a concurrency key holds one of the slots
//!   `0..concurrency_limit` of its key, no two executing instances hold the same slot of a
//!   key, and leaving `executing` frees the slot. The pick skips a row whose key has no free
//!   slot below its limit and takes the next row instead; rows of one key are claimed in the
//!   pick's order (priority, then eligibility);
//! - rate limits: a row with a rate-limit key whose limit is stored is claimed only if the
//!   key's token bucket, refilled to the database's clock under the bucket's lock, holds its
//!   units, which the claim takes in the same transaction. A row the bucket cannot serve stays
//!   runnable with `eligible_at` moved to when the bucket will have earned its units (so
//!   picks do not read it again before then); a key without a stored limit is not limited;
//! - a paused queue is not picked from;
//! - a cancel ends a live instance and its live descendants `failed` with the cancel's
//!   reason, in one transaction: their claims no longer hold (their outcomes are stale), their
//!   inboxes are deleted, and the cancelled instance's parent is released like by a failed
//!   child.
//!
//! Times are the engine's clock readings ([`SystemTime`], whole microseconds): a store never
//! reads its own clock, so tests can run the engine on virtual time.
//!
//! States, results and payloads travel as JSON text that the engine has already checked can be
//! stored as Postgres `jsonb` (no `\u0000`, no NaN).

mod batch;
mod control;
mod memory;

use std::time::SystemTime;

use async_trait::async_trait;

pub use batch::{PickRequest, positions};
pub use control::{
    CancelOutcome, PausedQueue, RateDecision, RateLimit, RateLimitRecord, TokenBucket,
    decide_rate_limits,
};
pub use memory::MemoryFsmStore;

use super::status::{InstanceId, SignalId, Status};
use crate::storage::StorageError;

/// One instance to insert.
///
/// # Examples
///
/// ```
/// use std::time::SystemTime;
/// use durable_runtime::fsm::Status;
/// use durable_runtime::fsm::store::NewInstance;
///
/// let row = NewInstance {
///     fsm: "order".into(),
///     fsm_version: 1,
///     step: "start".into(),
///     state: "{}".into(),
///     queue: "default".into(),
///     priority: 0,
///     eligible_at: SystemTime::UNIX_EPOCH,
///     correlation_key: Some("order:42".into()),
///     correlation_scope: Status::LIVE.to_vec(),
///     concurrency_key: Some("account:7".into()),
///     concurrency_limit: 1,
///     rate_limit_key: Some("psp".into()),
///     rate_limit_units: 1,
/// };
/// assert_eq!(row.fsm, "order");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewInstance {
    /// The FSM's name.
    pub fsm: String,
    /// The FSM's version.
    pub fsm_version: i32,
    /// The first step.
    pub step: String,
    /// The state, as JSON.
    pub state: String,
    /// The queue it runs on.
    pub queue: String,
    /// Lower runs first.
    pub priority: i16,
    /// When it may first run.
    pub eligible_at: SystemTime,
    /// The business key: signal address and uniqueness guard.
    pub correlation_key: Option<String>,
    /// The statuses in which the key is occupied.
    pub correlation_scope: Vec<Status>,
    /// The concurrency key: at most `concurrency_limit` instances of one key execute at once.
    pub concurrency_key: Option<String>,
    /// How many instances of its concurrency key may execute at once (at least 1; 0 is taken
    /// as 1): the instance runs only in one of the slots `0..concurrency_limit` of its key.
    pub concurrency_limit: u16,
    /// The rate-limit key: each claim takes `rate_limit_units` tokens of the key's bucket.
    pub rate_limit_key: Option<String>,
    /// The tokens each claim takes (at least 1; 0 is taken as 1).
    pub rate_limit_units: u32,
}

/// A row claimed by [`FsmStore::pick`], with what its step needs to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The instance.
    pub id: InstanceId,
    /// The claim token: outcomes and heartbeats name it, and they hold only while the row is
    /// still `executing` under it.
    pub token: i64,
    /// The FSM's name.
    pub fsm: String,
    /// The FSM's version.
    pub fsm_version: i32,
    /// The step to run.
    pub step: String,
    /// The state, as JSON.
    pub state: String,
    /// Attempts of this step before this one.
    pub attempt: u32,
    /// The business key, if any.
    pub correlation_key: Option<String>,
    /// The awaited names when the row was woken from an await (kept by `retry`).
    pub awaits: Option<Vec<String>>,
    /// The whole inbox, oldest first.
    pub inbox: Vec<SignalRecord>,
    /// Every child of this instance, by id.
    pub children: Vec<ChildRecord>,
}

/// One signal of an inbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalRecord {
    /// Its id.
    pub id: SignalId,
    /// Its name.
    pub name: String,
    /// Its payload, as JSON.
    pub payload: String,
    /// The sender's deduplication key.
    pub dedup_key: Option<String>,
    /// When it was delivered.
    pub inserted_at: SystemTime,
}

/// One child as its parent's step sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildRecord {
    /// The child.
    pub id: InstanceId,
    /// Its FSM's name.
    pub fsm: String,
    /// Its status.
    pub status: Status,
    /// Its state, as JSON.
    pub state: String,
    /// Its result (JSON) once done.
    pub result: Option<String>,
    /// Its error once failed.
    pub last_error: Option<String>,
}

/// The claim of one executing row: what a heartbeat extends and an outcome names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The row.
    pub id: InstanceId,
    /// Its claim token.
    pub token: i64,
}

/// The outcome of one step, to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomeCommit {
    /// The claim the step ran under.
    pub lease: Lease,
    /// The ids of the signals the step was handed as awaited. `next` and `schedule_childs`
    /// delete exactly these; `await` ignores them when looking for a match already in the inbox
    /// (the step has seen them); `retry` keeps them.
    pub received: Vec<SignalId>,
    /// The transition.
    pub transition: Transition,
}

/// What an outcome does to the row (the specification's outcome table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// To `step`, runnable now, attempt 0.
    Next {
        /// The next step.
        step: String,
        /// The new state.
        state: String,
    },
    /// The same step again at `eligible_at`, attempt + 1, awaited names kept.
    Retry {
        /// The new state.
        state: String,
        /// When the step runs again.
        eligible_at: SystemTime,
    },
    /// Park until a signal named in `names` arrives, then run `step`.
    Await {
        /// The step to run on wake-up.
        step: String,
        /// The new state.
        state: String,
        /// The awaited names.
        names: Vec<String>,
        /// When the await times out (the step then runs with what arrived).
        deadline: Option<SystemTime>,
    },
    /// Insert `children`, park until each has ended, then run `step`.
    ScheduleChildren {
        /// The step to run once the barrier is released.
        step: String,
        /// The new state.
        state: String,
        /// The children (their parent is set by the store).
        children: Vec<NewInstance>,
    },
    /// Ended with `result` (JSON); the state is not rewritten.
    Done {
        /// The result.
        result: String,
    },
    /// Ended with an error.
    Stop {
        /// Why.
        reason: String,
    },
}

/// What became of one outcome of a [`FsmStore::complete`] batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Committed {
    /// The claim held and the transition is committed.
    Applied,
    /// The claim no longer held (the row was reaped, and maybe claimed again): nothing was
    /// changed.
    Stale,
}

/// Where a signal goes.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{InstanceId, Target};
///
/// assert_eq!(Target::from(InstanceId::new(1)), Target::Id(InstanceId::new(1)));
/// assert_eq!(Target::from("order:42"), Target::Key("order:42".into()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// The instance with this id.
    Id(InstanceId),
    /// The instance occupying this correlation key.
    Key(String),
}

impl From<InstanceId> for Target {
    fn from(id: InstanceId) -> Self {
        Target::Id(id)
    }
}

impl From<&str> for Target {
    fn from(key: &str) -> Self {
        Target::Key(key.to_owned())
    }
}

impl From<String> for Target {
    fn from(key: String) -> Self {
        Target::Key(key)
    }
}

impl From<&String> for Target {
    fn from(key: &String) -> Self {
        Target::Key(key.clone())
    }
}

/// A signal to deliver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSignal {
    /// Its name.
    pub name: String,
    /// Its payload, as JSON.
    pub payload: String,
    /// With a key, delivering the same key to the same instance again adds nothing while the
    /// first is in the inbox.
    pub dedup_key: Option<String>,
}

/// What a delivered signal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The instance it went to.
    pub target: InstanceId,
    /// The new signal, or `None` when its deduplication key was already in the inbox.
    pub signal: Option<SignalId>,
    /// Whether it woke the instance from an await on its name.
    pub woke: bool,
}

/// One instance as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceRecord {
    /// The instance.
    pub id: InstanceId,
    /// The FSM's name.
    pub fsm: String,
    /// The FSM's version.
    pub fsm_version: i32,
    /// The current step.
    pub step: String,
    /// The status.
    pub status: Status,
    /// The state, as JSON.
    pub state: String,
    /// The result (JSON) once done.
    pub result: Option<String>,
    /// The awaited names.
    pub awaits: Option<Vec<String>>,
    /// The queue.
    pub queue: String,
    /// The priority (lower first).
    pub priority: i16,
    /// When it may run next.
    pub eligible_at: SystemTime,
    /// Attempts of the current step.
    pub attempt: u32,
    /// The error it failed with, or the last stale-free error recorded.
    pub last_error: Option<String>,
    /// When an await times out.
    pub await_deadline: Option<SystemTime>,
    /// The worker holding it, while executing.
    pub locked_by: Option<String>,
    /// When the lease ends, while executing.
    pub lease_expires_at: Option<SystemTime>,
    /// The parent, for a child.
    pub parent_id: Option<InstanceId>,
    /// Children not yet ended, while awaiting them.
    pub children_pending: i32,
    /// The business key.
    pub correlation_key: Option<String>,
    /// The statuses in which the key is occupied.
    pub correlation_scope: Vec<Status>,
    /// The concurrency key.
    pub concurrency_key: Option<String>,
    /// How many instances of the concurrency key may execute at once.
    pub concurrency_limit: u16,
    /// The slot of the concurrency key it holds, while executing.
    pub concurrency_slot: Option<u16>,
    /// The rate-limit key.
    pub rate_limit_key: Option<String>,
    /// The tokens of the rate-limit key's bucket each claim takes.
    pub rate_limit_units: u32,
    /// When it was inserted.
    pub inserted_at: SystemTime,
    /// When it last changed.
    pub updated_at: SystemTime,
}

/// The most instances one [`FsmStore::list`] page holds: a larger `limit` is taken as this.
pub const MAX_LIST_LIMIT: usize = 1000;

/// Which instances [`FsmStore::list`] returns: those of one FSM and one status (each
/// optional), with an id above `after`, at most `limit` (bounded by [`MAX_LIST_LIMIT`]), in
/// id order. The next page starts after the last id of this one (keyset paging: stable while
/// rows are inserted or deleted, and never an offset scan).
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{InstanceId, Status};
/// use durable_runtime::fsm::store::{ListFilter, MAX_LIST_LIMIT};
///
/// let page = ListFilter::default()
///     .fsm("order")
///     .status(Status::Failed)
///     .after(InstanceId::new(40))
///     .limit(20);
/// assert_eq!(page.bounded_limit(), 20);
/// assert_eq!(ListFilter::default().limit(1_000_000).bounded_limit(), MAX_LIST_LIMIT);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListFilter {
    /// Only instances of this FSM.
    pub fsm: Option<String>,
    /// Only instances in this status.
    pub status: Option<Status>,
    /// Only instances with a greater id.
    pub after: Option<InstanceId>,
    /// The most instances returned (see [`ListFilter::bounded_limit`]).
    pub limit: usize,
}

impl Default for ListFilter {
    /// Every instance, the first 100.
    fn default() -> Self {
        Self {
            fsm: None,
            status: None,
            after: None,
            limit: 100,
        }
    }
}

impl ListFilter {
    /// Only instances of the FSM `fsm`.
    pub fn fsm(mut self, fsm: impl Into<String>) -> Self {
        self.fsm = Some(fsm.into());
        self
    }

    /// Only instances in `status`.
    pub fn status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }

    /// Only instances after `id` (the last id of the previous page).
    pub fn after(mut self, id: InstanceId) -> Self {
        self.after = Some(id);
        self
    }

    /// At most `limit` instances.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The limit a store applies: `limit`, at most [`MAX_LIST_LIMIT`].
    pub fn bounded_limit(&self) -> usize {
        self.limit.min(MAX_LIST_LIMIT)
    }
}

/// What a maintenance sweep ([`FsmStore::reap`]) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Executing rows whose lease had ended, returned to runnable with attempt + 1.
    pub expired_leases: u64,
    /// Awaits whose deadline had come, made runnable at their next step.
    pub await_timeouts: u64,
}

/// A database that holds FSM instances and their inboxes. See the [module docs](self) for
/// the rules every implementation keeps; `durable_runtime::fsm::conformance` checks them.
#[async_trait]
pub trait FsmStore: Send + Sync + 'static {
    /// Inserts `instances` in one statement, skipping each whose correlation key is occupied
    /// (by a stored row or by an earlier row of the batch), and returns the ids inserted. Rows
    /// are inserted in correlation-key order, so ids do not map to positions.
    async fn insert(
        &self,
        instances: &[NewInstance],
        now: SystemTime,
    ) -> Result<Vec<InstanceId>, StorageError>;

    /// Claims up to `limit` runnable rows of `queue` with `eligible_at <= eligible_by`, lowest
    /// `priority` first then earliest `eligible_at`, skipping rows another picker holds; marks
    /// each `executing` by `worker` with a lease until `lease_until` and a new claim token.
    async fn pick(
        &self,
        queue: &str,
        worker: &str,
        eligible_by: SystemTime,
        lease_until: SystemTime,
        limit: usize,
        now: SystemTime,
    ) -> Result<Vec<Claimed>, StorageError>;

    /// Extends to `lease_until` each lease still held (same row, executing, same token).
    /// Returns how many were extended.
    async fn heartbeat(
        &self,
        leases: &[Lease],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError>;

    /// Commits `outcomes` (of distinct rows), each guarded by its lease, in one transaction.
    /// Returns, per outcome, whether it applied or was stale.
    async fn complete(
        &self,
        outcomes: &[OutcomeCommit],
        now: SystemTime,
    ) -> Result<Vec<Committed>, StorageError>;

    /// Delivers a signal: resolves the target (by id, or by the occupied correlation key),
    /// inserts the signal unless its deduplication key is in the inbox, then flips the target
    /// to runnable if it awaits this name, keeping its awaited names. `None` when there is no
    /// live target (no row, a key nobody occupies, or an ended instance): nothing is inserted.
    async fn signal(
        &self,
        target: &Target,
        signal: &NewSignal,
        now: SystemTime,
    ) -> Result<Option<Delivered>, StorageError>;

    /// The instance `id`.
    async fn get(&self, id: InstanceId) -> Result<Option<InstanceRecord>, StorageError>;

    /// The instance occupying the correlation key `key`.
    async fn find(&self, key: &str) -> Result<Option<InstanceId>, StorageError>;

    /// The inbox of `id`, oldest first.
    async fn inbox(&self, id: InstanceId) -> Result<Vec<SignalRecord>, StorageError>;

    /// The instances `filter` selects, in id order: at most
    /// [`filter.bounded_limit()`](ListFilter::bounded_limit) of them.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<InstanceRecord>, StorageError>;

    /// Returns executing rows whose lease ended before `now` to runnable with attempt + 1, and
    /// makes runnable (at their next step, awaited names kept) the awaits whose deadline is at
    /// or before `now`.
    async fn reap(&self, now: SystemTime) -> Result<Swept, StorageError>;

    /// Deletes up to `limit` ended rows last changed before `ended_before`, sparing the
    /// children of a parent that has not ended. Returns how many were deleted.
    async fn gc(&self, ended_before: SystemTime, limit: usize) -> Result<u64, StorageError>;

    /// Stores (or replaces) the rate limit of `key`. A new bucket starts full; a replaced one
    /// keeps its tokens, at most the new capacity.
    ///
    /// The default refuses: a store without the scheduling controls.
    async fn set_rate_limit(&self, key: &str, limit: RateLimit) -> Result<(), StorageError> {
        let _ = (key, limit);
        Err(unsupported("rate limits"))
    }

    /// Removes the rate limit of `key` (its rows are then claimed freely). Returns whether
    /// there was one.
    async fn remove_rate_limit(&self, key: &str) -> Result<bool, StorageError> {
        let _ = key;
        Err(unsupported("rate limits"))
    }

    /// Every stored rate limit, by key.
    async fn rate_limits(&self) -> Result<Vec<RateLimitRecord>, StorageError> {
        Err(unsupported("rate limits"))
    }

    /// Pauses `queue`: no pick claims its rows until it is resumed (steps already executing
    /// finish). Returns whether it was running.
    async fn pause_queue(&self, queue: &str, now: SystemTime) -> Result<bool, StorageError> {
        let _ = (queue, now);
        Err(unsupported("queue pauses"))
    }

    /// Resumes `queue`. Returns whether it was paused.
    async fn resume_queue(&self, queue: &str) -> Result<bool, StorageError> {
        let _ = queue;
        Err(unsupported("queue pauses"))
    }

    /// The paused queues, by name.
    async fn paused_queues(&self) -> Result<Vec<PausedQueue>, StorageError> {
        Err(unsupported("queue pauses"))
    }

    /// Cancels the live instance `target` and its live descendants (see the
    /// [module docs](self)): each ends `failed` with `reason` as its error.
    async fn cancel(
        &self,
        target: &Target,
        reason: &str,
        now: SystemTime,
    ) -> Result<CancelOutcome, StorageError> {
        let _ = (target, reason, now);
        Err(unsupported("cancel"))
    }

    /// Claims as [`pick`](Self::pick) does, only rows of the `(fsm, version)` pairs of
    /// `request.fsms`: rows of other FSMs or versions stay runnable and untouched (no
    /// attempt counted), for a worker that runs them.
    async fn pick_registered(
        &self,
        request: &PickRequest<'_>,
    ) -> Result<Vec<Claimed>, StorageError>;

    /// Inserts `instances` as [`insert`](Self::insert) does, in one transaction, and answers
    /// per position: the id of each instance inserted, `None` for each skipped because its
    /// correlation key was occupied. Among instances of one key in the batch, the first wins.
    ///
    /// The default inserts each instance in a statement of its own; stores override it with
    /// one statement.
    async fn insert_batch(
        &self,
        instances: &[NewInstance],
        now: SystemTime,
    ) -> Result<Vec<Option<InstanceId>>, StorageError> {
        let mut ids = Vec::with_capacity(instances.len());
        for instance in instances {
            let inserted = self.insert(std::slice::from_ref(instance), now).await?;
            ids.push(inserted.first().copied());
        }
        Ok(ids)
    }
}

/// The error of a store that does not keep a scheduling control.
fn unsupported(what: &str) -> StorageError {
    StorageError::rejected(format!("this FSM store does not support {what}"))
}

/// A shared store is a store: several engines (or an engine and a test) can hold one.
#[async_trait]
impl<S: FsmStore + ?Sized> FsmStore for std::sync::Arc<S> {
    async fn insert(
        &self,
        instances: &[NewInstance],
        now: SystemTime,
    ) -> Result<Vec<InstanceId>, StorageError> {
        (**self).insert(instances, now).await
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
        (**self)
            .pick(queue, worker, eligible_by, lease_until, limit, now)
            .await
    }

    async fn heartbeat(
        &self,
        leases: &[Lease],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError> {
        (**self).heartbeat(leases, lease_until).await
    }

    async fn complete(
        &self,
        outcomes: &[OutcomeCommit],
        now: SystemTime,
    ) -> Result<Vec<Committed>, StorageError> {
        (**self).complete(outcomes, now).await
    }

    async fn signal(
        &self,
        target: &Target,
        signal: &NewSignal,
        now: SystemTime,
    ) -> Result<Option<Delivered>, StorageError> {
        (**self).signal(target, signal, now).await
    }

    async fn get(&self, id: InstanceId) -> Result<Option<InstanceRecord>, StorageError> {
        (**self).get(id).await
    }

    async fn find(&self, key: &str) -> Result<Option<InstanceId>, StorageError> {
        (**self).find(key).await
    }

    async fn inbox(&self, id: InstanceId) -> Result<Vec<SignalRecord>, StorageError> {
        (**self).inbox(id).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<InstanceRecord>, StorageError> {
        (**self).list(filter).await
    }

    async fn reap(&self, now: SystemTime) -> Result<Swept, StorageError> {
        (**self).reap(now).await
    }

    async fn gc(&self, ended_before: SystemTime, limit: usize) -> Result<u64, StorageError> {
        (**self).gc(ended_before, limit).await
    }

    async fn set_rate_limit(&self, key: &str, limit: RateLimit) -> Result<(), StorageError> {
        (**self).set_rate_limit(key, limit).await
    }

    async fn remove_rate_limit(&self, key: &str) -> Result<bool, StorageError> {
        (**self).remove_rate_limit(key).await
    }

    async fn rate_limits(&self) -> Result<Vec<RateLimitRecord>, StorageError> {
        (**self).rate_limits().await
    }

    async fn pause_queue(&self, queue: &str, now: SystemTime) -> Result<bool, StorageError> {
        (**self).pause_queue(queue, now).await
    }

    async fn resume_queue(&self, queue: &str) -> Result<bool, StorageError> {
        (**self).resume_queue(queue).await
    }

    async fn paused_queues(&self) -> Result<Vec<PausedQueue>, StorageError> {
        (**self).paused_queues().await
    }

    async fn cancel(
        &self,
        target: &Target,
        reason: &str,
        now: SystemTime,
    ) -> Result<CancelOutcome, StorageError> {
        (**self).cancel(target, reason, now).await
    }

    async fn pick_registered(
        &self,
        request: &PickRequest<'_>,
    ) -> Result<Vec<Claimed>, StorageError> {
        (**self).pick_registered(request).await
    }

    async fn insert_batch(
        &self,
        instances: &[NewInstance],
        now: SystemTime,
    ) -> Result<Vec<Option<InstanceId>>, StorageError> {
        (**self).insert_batch(instances, now).await
    }
}

impl InstanceRecord {
    /// The state, decoded.
    ///
    /// # Errors
    ///
    /// When the state does not decode as a `T`.
    pub fn decode_state<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.state)
    }

    /// The result, decoded, once done.
    ///
    /// # Errors
    ///
    /// When the result does not decode as a `T`.
    pub fn decode_result<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<Option<T>, serde_json::Error> {
        self.result.as_deref().map(serde_json::from_str).transpose()
    }
}
