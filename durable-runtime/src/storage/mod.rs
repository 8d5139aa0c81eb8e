//! The storage contract between the runtime and a database.
//!
//! The runtime talks to its database only through the [`Storage`] trait. The trait speaks the
//! runtime's language: object keys, encoded state with a version, and alarm rows. No driver type
//! appears in it, so a backend is one crate implementing one trait (`durable-sqlx` provides
//! SQLite and Postgres) and every backend is checked by the same conformance suite
//! (`durable_runtime::conformance`, behind the `conformance` feature).
//!
//! # Versions
//!
//! Every stored object carries a version that starts at 1 and grows by one on each write. A
//! write names the version it expects to replace ([`ObjectWrite::expected_version`], 0 when
//! nothing was ever stored under the key). A write whose expectation does not hold is rejected
//! with [`CommitError::Conflict`] and nothing of its batch is applied: a runtime that lost a
//! race against another process never silently overwrites a newer state.
//!
//! Versions never repeat for a key. Deleting an object keeps a *tombstone*: its state goes, its
//! version grows by one and stays. A load answers [`Loaded::Deleted`] with that version, and
//! the write that recreates the object expects it, so the new object continues above every
//! version the key ever had. A writer still holding a version of the deleted object finds the
//! tombstone's and gets a conflict, instead of overwriting the recreated object.
//!
//! # Time
//!
//! Alarm times are UTC wall-clock times ([`SystemTime`]). Backends store them with microsecond
//! precision; the runtime only passes times already truncated to whole microseconds (see
//! [`truncate_to_micros`]), so a time read back compares equal to the time written.
//!
//! # Batches
//!
//! [`Storage::commit`] applies a batch of writes, possibly for many objects, in one
//! transaction. This is what lets the runtime coalesce the writes of concurrent calls into one
//! commit while still releasing each reply only after its own write is durable.

mod fsm;
mod idempotency;
mod kv;
mod memory;

use std::fmt;
use std::time::SystemTime;

use async_trait::async_trait;

#[cfg(feature = "fsm")]
pub use fsm::FsmChange;
pub use fsm::{FsmChanges, FsmRefusal};
pub use idempotency::IdempotentReply;
pub use kv::{KvChange, KvLimitExceeded, KvUsage, entry_bytes, prefix_end};
pub use memory::MemoryStorage;

/// The address of one object: its type name and its id.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::ObjectKey;
///
/// let key = ObjectKey::new("Counter", "user:123");
/// assert_eq!(key.object_type, "Counter");
/// assert_eq!(key.to_string(), "Counter/user:123");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The object's type name (by default the Rust struct's name).
    pub object_type: String,
    /// The object's id, as given by the caller.
    pub object_id: String,
}

impl ObjectKey {
    /// Builds a key from a type name and an id.
    ///
    /// # Examples
    ///
    /// ```
    /// let key = durable_runtime::storage::ObjectKey::new("Counter", "a");
    /// assert_eq!(key.object_id, "a");
    /// ```
    pub fn new(object_type: impl Into<String>, object_id: impl Into<String>) -> Self {
        Self {
            object_type: object_type.into(),
            object_id: object_id.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.object_type, self.object_id)
    }
}

/// An object's state as stored: the encoded bytes and their version.
///
/// # Examples
///
/// ```
/// let stored = durable_runtime::storage::StoredObject { state: b"{}".to_vec(), version: 1 };
/// assert_eq!(stored.version, 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject {
    /// The encoded state (UTF-8 JSON, as written by the runtime).
    pub state: Vec<u8>,
    /// The version of this state; 1 for the first write.
    pub version: u64,
}

/// What a load finds under a key: the object, the tombstone of a deleted one, or nothing.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{Loaded, MemoryStorage, ObjectKey, ObjectWrite, Storage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStorage::new();
/// let key = ObjectKey::new("Counter", "a");
/// assert_eq!(store.load(&key).await.unwrap(), Loaded::Absent);
/// let write = ObjectWrite {
///     key: key.clone(),
///     expected_version: 0,
///     state: Some(b"{}".to_vec()),
///     alarms: vec![],
///     kv: Vec::new(),
///     idempotency: None,
///     fsm: Default::default(),
/// };
/// store.commit(&[write]).await.unwrap();
/// assert_eq!(store.load(&key).await.unwrap().object().map(|stored| stored.version), Some(1));
///
/// // Deleted: no object, and the version it reached is kept for the next one.
/// store.delete(&key).await.unwrap();
/// let loaded = store.load(&key).await.unwrap();
/// assert_eq!(loaded, Loaded::Deleted { version: 2 });
/// assert_eq!((loaded.version(), loaded.object()), (2, None));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// Nothing was ever stored under the key.
    Absent,
    /// The object was deleted. Its tombstone keeps the key's last version (the one the
    /// deletion wrote), which the write recreating the object must expect.
    Deleted {
        /// The tombstone's version.
        version: u64,
    },
    /// The object's state and version.
    Object(StoredObject),
}

impl Loaded {
    /// The stored object, if there is one (`None` if it was never stored or was deleted).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{Loaded, StoredObject};
    ///
    /// let stored = StoredObject { state: b"{}".to_vec(), version: 3 };
    /// assert_eq!(Loaded::Object(stored.clone()).object(), Some(stored));
    /// assert_eq!(Loaded::Deleted { version: 4 }.object(), None);
    /// ```
    pub fn object(self) -> Option<StoredObject> {
        match self {
            Self::Object(stored) => Some(stored),
            Self::Absent | Self::Deleted { .. } => None,
        }
    }

    /// The version the next write of the key must expect: the object's, the tombstone's, or 0
    /// if nothing was ever stored.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{Loaded, StoredObject};
    ///
    /// let stored = StoredObject { state: b"{}".to_vec(), version: 3 };
    /// assert_eq!(Loaded::Object(stored).version(), 3);
    /// assert_eq!(Loaded::Deleted { version: 4 }.version(), 4);
    /// assert_eq!(Loaded::Absent.version(), 0);
    /// ```
    pub fn version(&self) -> u64 {
        match self {
            Self::Absent => 0,
            Self::Deleted { version } => *version,
            Self::Object(stored) => stored.version,
        }
    }
}

/// One object's changes from one call, applied atomically with the rest of its batch.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite};
///
/// // First save of a new object, with one alarm scheduled in the same transaction.
/// let write = ObjectWrite {
///     key: ObjectKey::new("Counter", "a"),
///     expected_version: 0,
///     state: Some(b"{\"count\":0}".to_vec()),
///     alarms: vec![AlarmChange::Set {
///         name: "flush".into(),
///         due_at: std::time::SystemTime::now(),
///         payload: None,
///     }],
///     kv: Vec::new(),
///     idempotency: None,
///     fsm: Default::default(),
/// };
/// assert_eq!(write.new_version(), 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectWrite {
    /// The object written.
    pub key: ObjectKey,
    /// The version this write replaces: the stored object's, the tombstone's of a deleted
    /// object ([`Loaded::version`]), or 0 if nothing was ever stored under the key.
    pub expected_version: u64,
    /// The new encoded state, or `None` to keep the state and only change alarms (the version
    /// is still checked, and still advances). A write that creates the object (over nothing or
    /// over a tombstone) must carry a state.
    pub state: Option<Vec<u8>>,
    /// Alarm changes made by the same call, applied in order.
    pub alarms: Vec<AlarmChange>,
    /// Key-value storage changes made by the same call, applied in order.
    pub kv: Vec<KvChange>,
    /// The reply to store under the call's idempotency key, if it carried one.
    pub idempotency: Option<IdempotentReply>,
    /// FSM instances inserted and signals sent by the same call, applied in order after the
    /// object's changes (always empty without the `fsm` feature).
    pub fsm: FsmChanges,
}

impl ObjectWrite {
    /// The version the object has once this write is committed.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Counter", "a");
    /// let first = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// // A write that keeps the state (alarm changes only) still advances the version.
    /// let second = ObjectWrite { expected_version: 1, state: None, ..first.clone() };
    /// store.commit(std::slice::from_ref(&first)).await.unwrap();
    /// store.commit(std::slice::from_ref(&second)).await.unwrap();
    /// let stored = store.load(&key).await.unwrap().object().unwrap();
    /// assert_eq!((stored.version, second.new_version()), (2, 2));
    /// assert_eq!(stored.state, b"{}");
    /// # }
    /// ```
    pub fn new_version(&self) -> u64 {
        self.expected_version + 1
    }
}

/// A change to an object's alarms, committed with its state.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStorage::new();
/// let key = ObjectKey::new("Session", "s1");
/// let due_at = UNIX_EPOCH + Duration::from_secs(60);
/// let write = ObjectWrite {
///     key: key.clone(),
///     expected_version: 0,
///     state: Some(b"{}".to_vec()),
///     // Applied in order: "ping" is set then cancelled, "expire" stays.
///     alarms: vec![
///         AlarmChange::Set { name: "ping".into(), due_at, payload: None },
///         AlarmChange::Set { name: "expire".into(), due_at, payload: None },
///         AlarmChange::Cancel { name: "ping".into() },
///     ],
///     kv: Vec::new(),
///     idempotency: None,
///     fsm: Default::default(),
/// };
/// store.commit(&[write]).await.unwrap();
/// let alarms = store.list_alarms(&key).await.unwrap();
/// assert_eq!(alarms.len(), 1);
/// assert_eq!(alarms[0].name, "expire");
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlarmChange {
    /// Schedules the alarm `name`, replacing any alarm of that name and clearing its claim and
    /// attempt count.
    Set {
        /// The alarm's name, unique per object.
        name: String,
        /// When it is due (UTC wall-clock time).
        due_at: SystemTime,
        /// The encoded argument its handler receives, if any.
        payload: Option<Vec<u8>>,
    },
    /// Cancels the alarm `name` if it exists.
    Cancel {
        /// The alarm's name.
        name: String,
    },
    /// Cancels every alarm of the object.
    CancelAll,
    /// Deletes the fired alarm `name` if it is still claimed with `claimed_at`: committed
    /// with its handler's state, so a fired alarm's effects and its removal are one
    /// transaction. An alarm the handler scheduled again has no claim any more and survives.
    Finish {
        /// The alarm's name.
        name: String,
        /// The claim it was fired under.
        claimed_at: SystemTime,
    },
    /// Not a change but a check of the changes before it: once they are applied, the object
    /// has at most `max` alarms (dead ones included), or the write is rejected with
    /// [`CommitError::AlarmLimit`] and nothing of it is applied. Setting a name the object
    /// already has replaces that alarm and does not count twice.
    Limit {
        /// The most alarms the object may have.
        max: u64,
    },
}

/// A stored alarm.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStorage::new();
/// let key = ObjectKey::new("Session", "s1");
/// let due_at = UNIX_EPOCH + Duration::from_secs(60);
/// let set = AlarmChange::Set { name: "expire".into(), due_at, payload: None };
/// let write = ObjectWrite {
///     key: key.clone(),
///     expected_version: 0,
///     state: Some(b"{}".to_vec()),
///     alarms: vec![set],
///     kv: Vec::new(),
///     idempotency: None,
///     fsm: Default::default(),
/// };
/// store.commit(&[write]).await.unwrap();
///
/// // A freshly set alarm: never attempted, unclaimed, alive.
/// let record = &store.list_alarms(&key).await.unwrap()[0];
/// assert_eq!((record.key.clone(), record.name.as_str()), (key, "expire"));
/// assert_eq!(record.due_at, due_at);
/// assert_eq!((record.attempts, record.claimed_at, record.dead), (0, None, false));
/// assert_eq!((record.last_error.as_deref(), record.payload.as_deref()), (None, None));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlarmRecord {
    /// The object the alarm belongs to.
    pub key: ObjectKey,
    /// The alarm's name.
    pub name: String,
    /// When it is due.
    pub due_at: SystemTime,
    /// How many times it has been fired without success so far.
    pub attempts: u32,
    /// When it was claimed by a scheduler, if it is claimed. The claim lasts as long as its
    /// lease, which the claiming scheduler renews while it holds or fires the alarm.
    pub claimed_at: Option<SystemTime>,
    /// The error of the last failed attempt, if any.
    pub last_error: Option<String>,
    /// Whether the alarm exhausted its attempts and is kept as a dead alarm.
    pub dead: bool,
    /// The encoded argument its handler receives, as set with it (`None` for an alarm without
    /// one).
    pub payload: Option<Vec<u8>>,
}

/// One claim a scheduler holds on an alarm: which alarm, and the claim time that identifies
/// the claim (see [`Storage::renew_alarm_claims`]).
///
/// # Examples
///
/// ```
/// use std::time::UNIX_EPOCH;
/// use durable_runtime::storage::{AlarmClaim, ObjectKey};
///
/// let claim = AlarmClaim {
///     key: ObjectKey::new("Session", "s1"),
///     name: "expire".into(),
///     claimed_at: UNIX_EPOCH,
/// };
/// assert_eq!(claim.name, "expire");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AlarmClaim {
    /// The object the alarm belongs to.
    pub key: ObjectKey,
    /// The alarm's name.
    pub name: String,
    /// The time the alarm was claimed at, as returned by [`Storage::claim_due_alarms`].
    pub claimed_at: SystemTime,
}

/// A page of stored object ids of one type, in ascending order.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStorage::new();
/// for id in ["c", "a", "b"] {
///     let write = ObjectWrite {
///         key: ObjectKey::new("Counter", id),
///         expected_version: 0,
///         state: Some(b"{}".to_vec()),
///         alarms: vec![],
///         kv: Vec::new(),
///         idempotency: None,
///         fsm: Default::default(),
///     };
///     store.commit(&[write]).await.unwrap();
/// }
/// // Follow `next` until it is `None`, two ids at a time.
/// let (mut all, mut after) = (Vec::new(), None);
/// loop {
///     let page = store.list_ids("Counter", after.as_deref(), 2).await.unwrap();
///     all.extend(page.ids);
///     match page.next {
///         Some(next) => after = Some(next),
///         None => break,
///     }
/// }
/// assert_eq!(all, ["a", "b", "c"]);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IdPage {
    /// The ids on this page.
    pub ids: Vec<String>,
    /// The cursor for the next page (`None` when this is the last page).
    pub next: Option<String>,
}

/// The address of one alarm: the object it belongs to and its name (unique per object).
///
/// Alarms listed across objects ([`Storage::list_dead_alarms`]) are ordered by it: by type,
/// then id, then name, each in byte order. A page's [`AlarmPage::next`] is the address of its
/// last alarm, where the next page resumes.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{AlarmKey, ObjectKey};
///
/// let ring = AlarmKey::new(ObjectKey::new("Reminder", "r1"), "ring");
/// assert_eq!(ring.to_string(), "Reminder/r1#ring");
/// let later = AlarmKey::new(ObjectKey::new("Reminder", "r2"), "buzz");
/// assert!(ring < later); // by type, then id, then name
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AlarmKey {
    /// The object the alarm belongs to.
    pub key: ObjectKey,
    /// The alarm's name.
    pub name: String,
}

impl AlarmKey {
    /// The alarm `name` of the object `key`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{AlarmKey, ObjectKey};
    ///
    /// let alarm = AlarmKey::new(ObjectKey::new("Session", "s1"), "expire");
    /// assert_eq!((alarm.key.object_id.as_str(), alarm.name.as_str()), ("s1", "expire"));
    /// ```
    pub fn new(key: ObjectKey, name: impl Into<String>) -> Self {
        Self {
            key,
            name: name.into(),
        }
    }
}

impl fmt::Display for AlarmKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.key, self.name)
    }
}

impl From<&AlarmRecord> for AlarmKey {
    fn from(alarm: &AlarmRecord) -> Self {
        Self::new(alarm.key.clone(), alarm.name.clone())
    }
}

/// A page of alarms listed across objects, ordered by [`AlarmKey`] (type, id, name).
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{AlarmPage, MemoryStorage, Storage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStorage::new();
/// // Follow `next` until it is `None`.
/// let (mut dead, mut after) = (Vec::new(), None);
/// loop {
///     let page = store.list_dead_alarms(None, after.as_ref(), 100).await.unwrap();
///     let AlarmPage { alarms, next } = page;
///     dead.extend(alarms);
///     match next {
///         Some(next) => after = Some(next),
///         None => break,
///     }
/// }
/// assert!(dead.is_empty());
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct AlarmPage {
    /// The alarms on this page.
    pub alarms: Vec<AlarmRecord>,
    /// Where the next page starts: the last alarm of this one (`None` when this is the last
    /// page).
    pub next: Option<AlarmKey>,
}

impl AlarmPage {
    /// The page made of the first `limit` of `alarms` (listed in order, up to `limit + 1` of
    /// them: one more than the page holds tells that another page follows).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::UNIX_EPOCH;
    /// use durable_runtime::storage::{AlarmKey, AlarmPage, AlarmRecord, ObjectKey};
    ///
    /// let alarm = |id: &str| AlarmRecord {
    ///     key: ObjectKey::new("Job", id),
    ///     name: "run".into(),
    ///     due_at: UNIX_EPOCH,
    ///     attempts: 3,
    ///     claimed_at: None,
    ///     last_error: Some("boom".into()),
    ///     dead: true,
    ///     payload: None,
    /// };
    /// let page = AlarmPage::from_listed(vec![alarm("a"), alarm("b"), alarm("c")], 2);
    /// assert_eq!(page.alarms.len(), 2);
    /// assert_eq!(page.next, Some(AlarmKey::new(ObjectKey::new("Job", "b"), "run")));
    /// assert_eq!(AlarmPage::from_listed(vec![alarm("a")], 2).next, None);
    /// ```
    pub fn from_listed(mut alarms: Vec<AlarmRecord>, limit: usize) -> Self {
        if alarms.len() <= limit {
            return Self { alarms, next: None };
        }
        alarms.truncate(limit);
        let next = alarms.last().map(AlarmKey::from);
        Self { alarms, next }
    }
}

/// Why a batch was not committed.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{CommitError, MemoryStorage, ObjectKey, ObjectWrite, Storage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStorage::new();
/// let write = |id: &str| ObjectWrite {
///     key: ObjectKey::new("Counter", id),
///     expected_version: 0,
///     state: Some(b"{}".to_vec()),
///     alarms: vec![],
///     kv: Vec::new(),
///     idempotency: None,
///     fsm: Default::default(),
/// };
/// store.commit(&[write("a")]).await.unwrap();
///
/// // The second write expects `a` not to exist: the whole batch is refused.
/// let err = store.commit(&[write("b"), write("a")]).await.unwrap_err();
/// assert!(matches!(
///     err,
///     CommitError::Conflict { index: 1, expected: 0, found: Some(1), .. }
/// ));
/// assert_eq!(
///     err.to_string(),
///     "version conflict on Counter/a: expected no stored object, found version 1"
/// );
/// assert!(store.load(&ObjectKey::new("Counter", "b")).await.unwrap().object().is_none());
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The write at `index` expected a version the store does not hold; nothing of the batch
    /// was applied.
    #[error(
        "version conflict on {key}: expected {}, found {}",
        stored_version(Some(*expected).filter(|&v| v > 0)),
        stored_version(*found)
    )]
    Conflict {
        /// The index of the conflicting write in the batch.
        index: usize,
        /// The object whose version did not match.
        key: ObjectKey,
        /// The version the write expected.
        expected: u64,
        /// The version found: the object's, or a deleted object's tombstone's (`None` if
        /// nothing was ever stored under the key).
        found: Option<u64>,
    },
    /// A write's key-value changes would have exceeded one of its limits
    /// ([`KvChange::Limit`]): nothing of the batch was applied, and only that write is at
    /// fault.
    #[error("key-value storage of {key} would hold {limit}")]
    KvLimit {
        /// The write's position in the batch.
        index: usize,
        /// The object written.
        key: ObjectKey,
        /// The limit exceeded.
        limit: KvLimitExceeded,
    },
    /// A write's alarm changes would have left its object with more alarms than its limit
    /// ([`AlarmChange::Limit`]): nothing of the batch was applied, and only that write is at
    /// fault.
    #[error("{key} would have {found} alarms, more than the limit of {max}")]
    AlarmLimit {
        /// The write's position in the batch.
        index: usize,
        /// The object written.
        key: ObjectKey,
        /// The limit.
        max: u64,
        /// How many alarms the object would have had (a store may stop counting at `max + 1`).
        found: u64,
    },
    /// A write's FSM changes were refused ([`FsmRefusal`]): nothing of the batch was
    /// applied, and only that write is at fault.
    #[error("FSM changes of {key} refused: {refusal}")]
    Fsm {
        /// The write's position in the batch.
        index: usize,
        /// The object written.
        key: ObjectKey,
        /// Why.
        refusal: FsmRefusal,
    },
    /// The store failed; the batch may or may not have been applied (an unknown outcome is
    /// treated as a failure and the objects involved are reloaded).
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A stored version in words: "version 3", or "no stored object" for none.
fn stored_version(version: Option<u64>) -> String {
    match version {
        Some(version) => format!("version {version}"),
        None => "no stored object".to_owned(),
    }
}

/// A storage failure, carrying the backend's error as its source.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::StorageError;
///
/// let err = StorageError::unavailable(std::io::Error::other("connection reset"));
/// assert!(err.is_retryable());
/// assert!(err.to_string().contains("connection reset"));
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {source}")]
pub struct StorageError {
    kind: StorageErrorKind,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

/// The class of a [`StorageError`].
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{StorageError, StorageErrorKind};
///
/// let err = StorageError::rejected(std::io::Error::other("UNIQUE constraint failed"));
/// assert_eq!(err.kind(), StorageErrorKind::Rejected);
/// assert_eq!(StorageErrorKind::Rejected.to_string(), "storage rejected the operation");
/// assert_eq!(StorageErrorKind::Unavailable.to_string(), "storage unavailable");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageErrorKind {
    /// The database cannot be reached right now (connection refused or lost, pool timed out).
    /// Retrying later is safe.
    Unavailable,
    /// The database refused the operation (constraint, schema, corrupt data). Retrying the same
    /// operation is not expected to help.
    Rejected,
    /// Cluster mode: the operation was refused because this node does not hold the object's
    /// shard (any more): another node's fence is on the object, or the node's lease is not
    /// valid. Nothing was applied; retrying reaches the shard's current owner.
    Fenced,
}

impl fmt::Display for StorageErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unavailable => "storage unavailable",
            Self::Rejected => "storage rejected the operation",
            Self::Fenced => "fenced: another node owns the shard",
        })
    }
}

impl StorageError {
    /// A transient failure: the database cannot be reached right now.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{StorageError, StorageErrorKind};
    ///
    /// let err = StorageError::unavailable(std::io::Error::other("pool timed out"));
    /// assert_eq!(err.kind(), StorageErrorKind::Unavailable);
    /// assert_eq!(err.to_string(), "storage unavailable: pool timed out");
    /// ```
    pub fn unavailable(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            kind: StorageErrorKind::Unavailable,
            source: source.into(),
        }
    }

    /// A permanent failure: the database refused the operation.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::error::Error as _;
    /// use durable_runtime::storage::StorageError;
    ///
    /// let err = StorageError::rejected("no such table: durable_objects");
    /// assert!(!err.is_retryable());
    /// // The backend's error is kept as the source.
    /// assert_eq!(err.source().unwrap().to_string(), "no such table: durable_objects");
    /// ```
    pub fn rejected(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            kind: StorageErrorKind::Rejected,
            source: source.into(),
        }
    }

    /// Cluster mode: the operation was refused because the node does not hold the object's
    /// shard (see [`StorageErrorKind::Fenced`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{StorageError, StorageErrorKind};
    ///
    /// let err = StorageError::fenced("Counter/a carries fence 7, this node holds epoch 6");
    /// assert_eq!(err.kind(), StorageErrorKind::Fenced);
    /// assert!(err.is_retryable());
    /// ```
    pub fn fenced(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            kind: StorageErrorKind::Fenced,
            source: source.into(),
        }
    }

    /// A copy with the same class and message, for every call that shared one failed commit.
    pub(crate) fn duplicate(&self) -> Self {
        Self {
            kind: self.kind,
            source: self.source.to_string().into(),
        }
    }

    /// The class of this failure.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{StorageError, StorageErrorKind};
    ///
    /// let err = StorageError::unavailable("connection refused");
    /// let action = match err.kind() {
    ///     StorageErrorKind::Unavailable => "retry later",
    ///     _ => "give up",
    /// };
    /// assert_eq!(action, "retry later");
    /// ```
    pub fn kind(&self) -> StorageErrorKind {
        self.kind
    }

    /// Whether retrying the operation later may succeed.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::StorageError;
    ///
    /// assert!(StorageError::unavailable("connection lost").is_retryable());
    /// assert!(!StorageError::rejected("corrupt state").is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            StorageErrorKind::Unavailable | StorageErrorKind::Fenced
        )
    }
}

/// Truncates a time to whole microseconds since the Unix epoch, the precision every backend
/// stores.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use durable_runtime::storage::truncate_to_micros;
///
/// let t = UNIX_EPOCH + Duration::from_nanos(1_500_999);
/// assert_eq!(truncate_to_micros(t), UNIX_EPOCH + Duration::from_micros(1_500));
/// // Beyond what 64-bit microseconds hold: kept as it is, never wrapped to an earlier time.
/// let far = UNIX_EPOCH + Duration::from_secs(1 << 50);
/// assert_eq!(truncate_to_micros(far), far);
/// ```
pub fn truncate_to_micros(time: SystemTime) -> SystemTime {
    match time.duration_since(std::time::UNIX_EPOCH) {
        // Times too far ahead for 64-bit microseconds (half a million years) keep their
        // nanoseconds rather than wrap to an earlier time.
        Ok(since) => match u64::try_from(since.as_micros()) {
            Ok(micros) => std::time::UNIX_EPOCH + std::time::Duration::from_micros(micros),
            Err(_) => time,
        },
        Err(_) => std::time::UNIX_EPOCH,
    }
}

/// A database that holds objects and their alarms.
///
/// Implementations must make [`commit`](Storage::commit) atomic (all writes of a batch or none)
/// and durable when it returns `Ok`, and must check versions as described in the
/// [module docs](self). Run `durable_runtime::conformance` against a new backend to check it.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStorage::new();
/// let key = ObjectKey::new("Counter", "a");
/// store
///     .commit(&[ObjectWrite {
///         key: key.clone(),
///         expected_version: 0,
///         state: Some(b"{\"count\":1}".to_vec()),
///         alarms: vec![],
///         kv: Vec::new(),
///         idempotency: None,
///         fsm: Default::default(),
///     }])
///     .await
///     .unwrap();
/// let stored = store.load(&key).await.unwrap().object().unwrap();
/// assert_eq!(stored.version, 1);
/// # }
/// ```
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Loads an object: its state and version, the version of its tombstone if it was
    /// deleted, or [`Loaded::Absent`] if nothing was ever stored under the key.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{Loaded, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Counter", "a");
    /// assert_eq!(store.load(&key).await.unwrap(), Loaded::Absent);
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{\"count\":1}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// let stored = store.load(&key).await.unwrap().object().unwrap();
    /// assert_eq!(stored.state, b"{\"count\":1}");
    /// assert_eq!(stored.version, 1);
    /// # }
    /// ```
    async fn load(&self, key: &ObjectKey) -> Result<Loaded, StorageError>;

    /// Loads several objects, in the order of `keys`: for each, what [`load`](Storage::load)
    /// would answer.
    /// The alarm scheduler reads the objects of a claimed batch of alarms this way, so that
    /// starting them costs one read rather than one per object.
    ///
    /// The default calls [`load`](Storage::load) for each key in turn; a backend overrides it
    /// with one round trip.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{Loaded, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let a = ObjectKey::new("Counter", "a");
    /// let write = ObjectWrite {
    ///     key: a.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{\"count\":1}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// let loaded = store
    ///     .load_many(&[ObjectKey::new("Counter", "b"), a])
    ///     .await
    ///     .unwrap();
    /// assert_eq!(loaded[0], Loaded::Absent);
    /// assert_eq!(loaded[1].version(), 1);
    /// # }
    /// ```
    async fn load_many(&self, keys: &[ObjectKey]) -> Result<Vec<Loaded>, StorageError> {
        let mut loaded = Vec::with_capacity(keys.len());
        for key in keys {
            loaded.push(self.load(key).await?);
        }
        Ok(loaded)
    }

    /// The stored versions of several objects, in the order of `keys`: `None` exactly where
    /// [`load_many`](Storage::load_many) would answer [`Loaded::Absent`], otherwise
    /// [`Loaded::version`] (a deleted object's tombstone included). A runtime with validated reads
    /// ([`RuntimeBuilder::validate_reads`](crate::RuntimeBuilder::validate_reads)) asks it
    /// before each read call, to learn whether another runtime wrote the object since; it is
    /// called with one key as often as with many.
    ///
    /// The default reads whole states with [`load_many`](Storage::load_many); a backend
    /// overrides it with a query that reads the versions alone.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let a = ObjectKey::new("Counter", "a");
    /// let write = |expected_version| ObjectWrite {
    ///     key: a.clone(),
    ///     expected_version,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write(0)]).await.unwrap();
    /// store.commit(&[write(1)]).await.unwrap();
    /// let versions = store.load_versions(&[ObjectKey::new("Counter", "b"), a]).await;
    /// assert_eq!(versions.unwrap(), [None, Some(2)]);
    /// # }
    /// ```
    async fn load_versions(&self, keys: &[ObjectKey]) -> Result<Vec<Option<u64>>, StorageError> {
        let loaded = self.load_many(keys).await?;
        Ok(loaded
            .into_iter()
            .map(|loaded| match loaded {
                Loaded::Absent => None,
                stored => Some(stored.version()),
            })
            .collect())
    }

    /// Applies a batch of writes in one transaction, checking each write's expected version.
    ///
    /// A batch never holds two writes for the same object.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{CommitError, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let write = |id: &str, expected_version| ObjectWrite {
    ///     key: ObjectKey::new("Counter", id),
    ///     expected_version,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// // Two objects in one transaction.
    /// store.commit(&[write("a", 0), write("b", 0)]).await.unwrap();
    /// store.commit(&[write("a", 1)]).await.unwrap();
    /// // A writer still holding version 1 of `a` lost the race.
    /// let stale = store.commit(&[write("a", 1)]).await;
    /// assert!(matches!(stale, Err(CommitError::Conflict { found: Some(2), .. })));
    /// # }
    /// ```
    async fn commit(&self, batch: &[ObjectWrite]) -> Result<(), CommitError>;

    /// How many batches the runtime may commit at once. A single-writer database (SQLite)
    /// gains nothing from more than one; a server (Postgres) overlaps several round trips.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, Storage};
    ///
    /// // The in-memory store keeps the default: one commit at a time.
    /// assert_eq!(MemoryStorage::new().max_concurrent_commits(), 1);
    /// ```
    fn max_concurrent_commits(&self) -> usize {
        1
    }

    /// Deletes an object's state, its alarms, its key-value storage and its stored replies in one
    /// transaction, keeping a tombstone
    /// one version above the object's last (see [versions](self#versions)). Returns whether a
    /// stored state existed; deleting a deleted or never stored object changes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{
    ///     AlarmChange, Loaded, MemoryStorage, ObjectKey, ObjectWrite, Storage,
    /// };
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Session", "s1");
    /// let due = UNIX_EPOCH + Duration::from_secs(100);
    /// let set = AlarmChange::Set { name: "expire".into(), due_at: due, payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(std::slice::from_ref(&write)).await.unwrap();
    /// assert!(store.delete(&key).await.unwrap());
    /// assert_eq!(store.load(&key).await.unwrap(), Loaded::Deleted { version: 2 });
    /// assert!(store.list_alarms(&key).await.unwrap().is_empty()); // its alarms went too
    /// assert!(!store.delete(&key).await.unwrap()); // nothing left to delete
    ///
    /// // Recreated: the first write expects the tombstone's version.
    /// let recreate = ObjectWrite { expected_version: 2, alarms: vec![], ..write };
    /// store.commit(&[recreate]).await.unwrap();
    /// assert_eq!(store.load(&key).await.unwrap().version(), 3);
    /// # }
    /// ```
    async fn delete(&self, key: &ObjectKey) -> Result<bool, StorageError>;

    /// Lists the ids of the stored objects of one type (deleted ones left out) in ascending
    /// byte order, starting after `after`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// for key in [("Counter", "b"), ("Counter", "a"), ("Counter", "c"), ("Lock", "x")] {
    ///     let write = ObjectWrite {
    ///         key: ObjectKey::new(key.0, key.1),
    ///         expected_version: 0,
    ///         state: Some(b"{}".to_vec()),
    ///         alarms: vec![],
    ///         kv: Vec::new(),
    ///         idempotency: None,
    ///         fsm: Default::default(),
    ///     };
    ///     store.commit(&[write]).await.unwrap();
    /// }
    /// let page = store.list_ids("Counter", None, 2).await.unwrap();
    /// assert_eq!(page.ids, ["a", "b"]);
    /// assert_eq!(page.next.as_deref(), Some("b")); // more may follow
    /// let page = store.list_ids("Counter", Some("b"), 2).await.unwrap();
    /// assert_eq!(page.ids, ["c"]); // `Lock/x` is another type
    /// assert_eq!(page.next, None);
    /// # }
    /// ```
    async fn list_ids(
        &self,
        object_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, StorageError>;

    /// Lists an object's alarms (dead ones included), ordered by due time then name.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Session", "s1");
    /// let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![
    ///         AlarmChange::Set { name: "b".into(), due_at: at(20), payload: None },
    ///         AlarmChange::Set { name: "c".into(), due_at: at(10), payload: None },
    ///         AlarmChange::Set { name: "a".into(), due_at: at(20), payload: None },
    ///     ],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// let alarms = store.list_alarms(&key).await.unwrap();
    /// let names: Vec<&str> = alarms.iter().map(|alarm| alarm.name.as_str()).collect();
    /// assert_eq!(names, ["c", "a", "b"]);
    /// # }
    /// ```
    async fn list_alarms(&self, key: &ObjectKey) -> Result<Vec<AlarmRecord>, StorageError>;

    /// Lists the types that have stored objects (deleted ones left out), in ascending byte
    /// order: what a tool that knows no Rust type finds in a database.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// for key in [("Lock", "x"), ("Counter", "a"), ("Counter", "b"), ("Gone", "g")] {
    ///     let write = ObjectWrite {
    ///         key: ObjectKey::new(key.0, key.1),
    ///         expected_version: 0,
    ///         state: Some(b"{}".to_vec()),
    ///         alarms: vec![],
    ///         kv: Vec::new(),
    ///         idempotency: None,
    ///         fsm: Default::default(),
    ///     };
    ///     store.commit(&[write]).await.unwrap();
    /// }
    /// store.delete(&ObjectKey::new("Gone", "g")).await.unwrap();
    /// assert_eq!(store.list_object_types().await.unwrap(), ["Counter", "Lock"]);
    /// # }
    /// ```
    async fn list_object_types(&self) -> Result<Vec<String>, StorageError>;

    /// Lists dead alarms (those that exhausted their attempts, see
    /// [`fail_alarm`](Storage::fail_alarm)) across objects: of every type, or of
    /// `object_type` only; ordered by [`AlarmKey`] (type, id, name, each in byte order),
    /// starting after `after` (a position, not necessarily an alarm that exists), up to
    /// `limit` of them. The page's [`next`](AlarmPage::next) is where the next page starts, or
    /// `None` on the last page.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let due = UNIX_EPOCH + Duration::from_secs(100);
    /// for id in ["b", "a"] {
    ///     let key = ObjectKey::new("Job", id);
    ///     let set = AlarmChange::Set { name: "run".into(), due_at: due, payload: None };
    ///     let write = ObjectWrite {
    ///         key: key.clone(),
    ///         expected_version: 0,
    ///         state: Some(b"{}".to_vec()),
    ///         alarms: vec![set],
    ///         kv: Vec::new(),
    ///         idempotency: None,
    ///         fsm: Default::default(),
    ///     };
    ///     store.commit(&[write]).await.unwrap();
    ///     // Claimed, then failed for the last time: dead.
    ///     store.claim_due_alarms(due, due, due + Duration::from_secs(60), 10).await.unwrap();
    ///     assert!(store.fail_alarm(&key, "run", due, 3, "boom", None).await.unwrap());
    /// }
    /// let page = store.list_dead_alarms(Some("Job"), None, 1).await.unwrap();
    /// assert_eq!((page.alarms[0].key.object_id.as_str(), page.alarms[0].attempts), ("a", 3));
    /// let rest = store.list_dead_alarms(None, page.next.as_ref(), 10).await.unwrap();
    /// assert_eq!(rest.alarms[0].key.object_id, "b");
    /// assert_eq!(rest.next, None);
    /// # }
    /// ```
    async fn list_dead_alarms(
        &self,
        object_type: Option<&str>,
        after: Option<&AlarmKey>,
        limit: usize,
    ) -> Result<AlarmPage, StorageError>;

    /// The earliest time at which an alarm becomes claimable, if any: the due time of an
    /// unclaimed alarm, or, for a claimed one, the later of its due time and the end of its
    /// claim's lease. Dead alarms are never claimable. The scheduler sleeps until then, so a
    /// claim left by a process that died is taken over as soon as its lease ends.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Session", "s1");
    /// let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
    /// let set = AlarmChange::Set { name: "expire".into(), due_at: at(100), payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// assert_eq!(store.next_alarm_due().await.unwrap(), Some(at(100)));
    /// // Claimed with a lease until 105: claimable again when the lease ends.
    /// store.claim_due_alarms(at(100), at(100), at(105), 10).await.unwrap();
    /// assert_eq!(store.next_alarm_due().await.unwrap(), Some(at(105)));
    /// # }
    /// ```
    async fn next_alarm_due(&self) -> Result<Option<SystemTime>, StorageError>;

    /// Atomically claims up to `limit` alarms that are not dead, due at or before `due_by`, and
    /// either unclaimed or claimed with a lease that ended (at or before `now`: a live lease is
    /// never taken, however far ahead the claimer looks), marking each claimed at `now` (the claim's identity: finishing,
    /// failing, releasing and renewing name it) with a lease until `lease_until`, and returns
    /// them (with `claimed_at` set to `now`), earliest first.
    ///
    /// A scheduler claims slightly ahead (`due_by` after `now`) and keeps its claims alive with
    /// [`renew_alarm_claims`](Storage::renew_alarm_claims); the claim of a process that died
    /// lapses when its lease ends.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Session", "s1");
    /// let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
    /// let set = AlarmChange::Set { name: "expire".into(), due_at: at(100), payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// // Not due by 99.
    /// assert!(store.claim_due_alarms(at(98), at(99), at(103), 10).await.unwrap().is_empty());
    /// // Due by 100: claimed at 99 (ahead of its due time), leased until 103.
    /// let claimed = store.claim_due_alarms(at(99), at(100), at(103), 10).await.unwrap();
    /// assert_eq!((claimed[0].name.as_str(), claimed[0].claimed_at), ("expire", Some(at(99))));
    /// // A live lease is not taken; one that ended is.
    /// assert!(store.claim_due_alarms(at(101), at(102), at(106), 10).await.unwrap().is_empty());
    /// let taken = store.claim_due_alarms(at(103), at(103), at(107), 10).await.unwrap();
    /// assert_eq!(taken[0].claimed_at, Some(at(103)));
    /// # }
    /// ```
    async fn claim_due_alarms(
        &self,
        now: SystemTime,
        due_by: SystemTime,
        lease_until: SystemTime,
        limit: usize,
    ) -> Result<Vec<AlarmRecord>, StorageError>;

    /// Extends to `lease_until` the lease of each of `claims` whose alarm is still claimed
    /// with that claim time (a claim that lapsed and was taken by another scheduler, or that
    /// was cleared by a change, is left alone). Returns how many leases were extended.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{
    ///     AlarmChange, AlarmClaim, MemoryStorage, ObjectKey, ObjectWrite, Storage,
    /// };
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Session", "s1");
    /// let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
    /// let set = AlarmChange::Set { name: "expire".into(), due_at: at(100), payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// store.claim_due_alarms(at(100), at(100), at(102), 10).await.unwrap();
    /// let claim = AlarmClaim { key, name: "expire".into(), claimed_at: at(100) };
    /// assert_eq!(store.renew_alarm_claims(&[claim.clone()], at(110)).await.unwrap(), 1);
    /// // Still leased at 105 thanks to the renewal.
    /// assert!(store.claim_due_alarms(at(105), at(105), at(107), 10).await.unwrap().is_empty());
    /// // A claim time the alarm is not claimed with renews nothing.
    /// let stale = AlarmClaim { claimed_at: at(99), ..claim };
    /// assert_eq!(store.renew_alarm_claims(&[stale], at(120)).await.unwrap(), 0);
    /// # }
    /// ```
    async fn renew_alarm_claims(
        &self,
        claims: &[AlarmClaim],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError>;

    /// Deletes a fired alarm if it is still claimed with the given claim time (an alarm
    /// rescheduled by its own handler has no claim any more and survives). Returns whether it
    /// was deleted.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Session", "s1");
    /// let due = UNIX_EPOCH + Duration::from_secs(100);
    /// let set = AlarmChange::Set { name: "expire".into(), due_at: due, payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// let claimed_at = due + Duration::from_secs(1);
    /// store.claim_due_alarms(claimed_at, claimed_at, claimed_at + Duration::from_secs(60), 10).await.unwrap();
    /// // A stale claim (another scheduler's, say) finishes nothing.
    /// assert!(!store.finish_alarm(&key, "expire", due).await.unwrap());
    /// assert!(store.finish_alarm(&key, "expire", claimed_at).await.unwrap());
    /// assert!(store.list_alarms(&key).await.unwrap().is_empty());
    /// # }
    /// ```
    async fn finish_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError>;

    /// Records a failed attempt of a claimed alarm (if still claimed with `claimed_at`): sets
    /// its attempt count and last error, releases the claim and either moves it to `retry_at`
    /// or, when `retry_at` is `None`, marks it dead. Returns whether the alarm was updated.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Session", "s1");
    /// let due = UNIX_EPOCH + Duration::from_secs(100);
    /// let set = AlarmChange::Set { name: "expire".into(), due_at: due, payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// let claimed_at = due + Duration::from_secs(1);
    /// store.claim_due_alarms(claimed_at, claimed_at, claimed_at + Duration::from_secs(60), 10).await.unwrap();
    /// let retry_at = due + Duration::from_secs(60);
    /// let updated = store.fail_alarm(&key, "expire", claimed_at, 1, "boom", Some(retry_at));
    /// assert!(updated.await.unwrap());
    /// let alarm = &store.list_alarms(&key).await.unwrap()[0];
    /// assert_eq!((alarm.due_at, alarm.attempts, alarm.claimed_at), (retry_at, 1, None));
    /// assert_eq!(alarm.last_error.as_deref(), Some("boom"));
    ///
    /// // Claimed again and failed for good: kept, dead, never claimed again.
    /// store.claim_due_alarms(retry_at, retry_at, retry_at + Duration::from_secs(60), 10).await.unwrap();
    /// assert!(store.fail_alarm(&key, "expire", retry_at, 2, "boom", None).await.unwrap());
    /// assert!(store.list_alarms(&key).await.unwrap()[0].dead);
    /// assert_eq!(store.next_alarm_due().await.unwrap(), None);
    /// # }
    /// ```
    async fn fail_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
        attempts: u32,
        error: &str,
        retry_at: Option<SystemTime>,
    ) -> Result<bool, StorageError>;

    /// Releases the claim of an alarm that was not fired (if still claimed with `claimed_at`),
    /// leaving its due time, attempt count and last error as they were, so that any scheduler
    /// may claim it again at once. Returns whether the alarm was updated.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Session", "s1");
    /// let due = UNIX_EPOCH + Duration::from_secs(100);
    /// let set = AlarmChange::Set { name: "expire".into(), due_at: due, payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// let claimed_at = due + Duration::from_secs(1);
    /// store.claim_due_alarms(claimed_at, claimed_at, claimed_at + Duration::from_secs(60), 10).await.unwrap();
    /// assert!(store.release_alarm(&key, "expire", claimed_at).await.unwrap());
    /// let alarm = &store.list_alarms(&key).await.unwrap()[0];
    /// assert_eq!((alarm.due_at, alarm.attempts, alarm.claimed_at), (due, 0, None));
    /// // No longer claimed under that time: a second release changes nothing.
    /// assert!(!store.release_alarm(&key, "expire", claimed_at).await.unwrap());
    /// # }
    /// ```
    async fn release_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError>;

    /// The encoded value stored under `name` in the key-value storage of the object `key`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{KvChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Doc", "d1");
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: vec![KvChange::Put { key: "title".into(), value: b"\"Hi\"".to_vec() }],
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// assert_eq!(store.kv_get(&key, "title").await.unwrap(), Some(b"\"Hi\"".to_vec()));
    /// assert_eq!(store.kv_get(&key, "body").await.unwrap(), None);
    /// # }
    /// ```
    async fn kv_get(&self, key: &ObjectKey, name: &str) -> Result<Option<Vec<u8>>, StorageError>;

    /// Up to `limit` entries of the object's key-value storage whose keys start with `prefix`
    /// and come after `start_after` (if given), in the order of the keys' bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{KvChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Doc", "d1");
    /// let put = |k: &str| KvChange::Put { key: k.into(), value: b"1".to_vec() };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: vec![put("b:2"), put("a:1"), put("b:1"), put("b:3")],
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// let page = store.kv_list(&key, "b:", Some("b:1"), 10).await.unwrap();
    /// let keys: Vec<&str> = page.iter().map(|(k, _)| k.as_str()).collect();
    /// assert_eq!(keys, ["b:2", "b:3"]);
    /// # }
    /// ```
    async fn kv_list(
        &self,
        key: &ObjectKey,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StorageError>;

    /// How many keys and bytes the object's key-value storage holds: the counters a commit
    /// checks [`KvChange::Limit`] against (zero for an object not stored).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{KvChange, KvUsage, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Doc", "d1");
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: vec![KvChange::Put { key: "ab".into(), value: b"123".to_vec() }],
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// assert_eq!(store.kv_usage(&key).await.unwrap(), KvUsage { keys: 1, bytes: 5 });
    /// # }
    /// ```
    async fn kv_usage(&self, key: &ObjectKey) -> Result<KvUsage, StorageError>;

    /// The reply stored under the idempotency key `idempotency_key` of the object `key`
    /// ([`ObjectWrite::idempotency`]), if any, expired or not: expired replies are removed by
    /// [`sweep_idempotency`](Storage::sweep_idempotency) only.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{IdempotentReply, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Counter", "a");
    /// let reply = IdempotentReply {
    ///     key: "k1".into(),
    ///     fingerprint: b"increment".to_vec(),
    ///     reply: br#"{"Ok":1}"#.to_vec(),
    ///     expires_at: UNIX_EPOCH + Duration::from_secs(100),
    /// };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: Some(reply.clone()),
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// assert_eq!(store.load_idempotent_reply(&key, "k1").await.unwrap(), Some(reply));
    /// assert_eq!(store.load_idempotent_reply(&key, "k2").await.unwrap(), None);
    /// # }
    /// ```
    async fn load_idempotent_reply(
        &self,
        key: &ObjectKey,
        idempotency_key: &str,
    ) -> Result<Option<IdempotentReply>, StorageError>;

    /// Removes at most `limit` stored replies whose `expires_at` is at or before `now`, and
    /// returns how many it removed (fewer than `limit`: none expired is left).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{IdempotentReply, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStorage::new();
    /// let key = ObjectKey::new("Counter", "a");
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: Some(IdempotentReply {
    ///         key: "k1".into(),
    ///         fingerprint: Vec::new(),
    ///         reply: Vec::new(),
    ///         expires_at: UNIX_EPOCH + Duration::from_secs(100),
    ///     }),
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// assert_eq!(store.sweep_idempotency(UNIX_EPOCH + Duration::from_secs(99), 10).await.unwrap(), 0);
    /// assert_eq!(store.sweep_idempotency(UNIX_EPOCH + Duration::from_secs(100), 10).await.unwrap(), 1);
    /// assert_eq!(store.load_idempotent_reply(&key, "k1").await.unwrap(), None);
    /// # }
    /// ```
    async fn sweep_idempotency(&self, now: SystemTime, limit: usize)
    -> Result<usize, StorageError>;

    /// The store's cluster arbitration, if it can run a cluster of nodes (see
    /// [`cluster`](crate::cluster)). The default, for stores kept in one process, is `None`:
    /// [`RuntimeBuilder::join`](crate::RuntimeBuilder::join) then refuses to start.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, Storage};
    ///
    /// assert!(MemoryStorage::new().cluster_backend().is_none());
    /// ```
    fn cluster_backend(&self) -> Option<std::sync::Arc<dyn crate::cluster::ClusterBackend>> {
        None
    }
}

/// [`Storage::load_many`] with its contract checked: a backend that answers a different number
/// of results than keys gets a rejected error rather than results paired with the wrong keys.
pub(crate) async fn load_all(
    storage: &dyn Storage,
    keys: &[ObjectKey],
) -> Result<Vec<Loaded>, StorageError> {
    let loaded = storage.load_many(keys).await?;
    if loaded.len() != keys.len() {
        return Err(StorageError::rejected(std::io::Error::other(format!(
            "a batched load of {} objects answered {}",
            keys.len(),
            loaded.len()
        ))));
    }
    Ok(loaded)
}

/// [`Storage::load_versions`] with its contract checked, as [`load_all`] does for states.
pub(crate) async fn load_all_versions(
    storage: &dyn Storage,
    keys: &[ObjectKey],
) -> Result<Vec<Option<u64>>, StorageError> {
    let versions = storage.load_versions(keys).await?;
    if versions.len() != keys.len() {
        return Err(StorageError::rejected(std::io::Error::other(format!(
            "a batched version check of {} objects answered {}",
            keys.len(),
            versions.len()
        ))));
    }
    Ok(versions)
}

/// A shared storage is a storage: lets one backend value serve several runtimes, and lets
/// `Arc<dyn Storage>` be passed where `impl Storage` is expected.
#[async_trait]
impl<S: Storage + ?Sized> Storage for std::sync::Arc<S> {
    async fn load(&self, key: &ObjectKey) -> Result<Loaded, StorageError> {
        (**self).load(key).await
    }

    async fn load_many(&self, keys: &[ObjectKey]) -> Result<Vec<Loaded>, StorageError> {
        (**self).load_many(keys).await
    }

    async fn load_versions(&self, keys: &[ObjectKey]) -> Result<Vec<Option<u64>>, StorageError> {
        (**self).load_versions(keys).await
    }

    async fn commit(&self, batch: &[ObjectWrite]) -> Result<(), CommitError> {
        (**self).commit(batch).await
    }

    fn max_concurrent_commits(&self) -> usize {
        (**self).max_concurrent_commits()
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool, StorageError> {
        (**self).delete(key).await
    }

    async fn list_ids(
        &self,
        object_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, StorageError> {
        (**self).list_ids(object_type, after, limit).await
    }

    async fn list_alarms(&self, key: &ObjectKey) -> Result<Vec<AlarmRecord>, StorageError> {
        (**self).list_alarms(key).await
    }

    async fn list_object_types(&self) -> Result<Vec<String>, StorageError> {
        (**self).list_object_types().await
    }

    async fn list_dead_alarms(
        &self,
        object_type: Option<&str>,
        after: Option<&AlarmKey>,
        limit: usize,
    ) -> Result<AlarmPage, StorageError> {
        (**self).list_dead_alarms(object_type, after, limit).await
    }

    async fn next_alarm_due(&self) -> Result<Option<SystemTime>, StorageError> {
        (**self).next_alarm_due().await
    }

    async fn claim_due_alarms(
        &self,
        now: SystemTime,
        due_by: SystemTime,
        lease_until: SystemTime,
        limit: usize,
    ) -> Result<Vec<AlarmRecord>, StorageError> {
        (**self)
            .claim_due_alarms(now, due_by, lease_until, limit)
            .await
    }

    async fn renew_alarm_claims(
        &self,
        claims: &[AlarmClaim],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError> {
        (**self).renew_alarm_claims(claims, lease_until).await
    }

    async fn finish_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        (**self).finish_alarm(key, name, claimed_at).await
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
        (**self)
            .fail_alarm(key, name, claimed_at, attempts, error, retry_at)
            .await
    }

    async fn release_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        (**self).release_alarm(key, name, claimed_at).await
    }

    async fn kv_get(&self, key: &ObjectKey, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        (**self).kv_get(key, name).await
    }

    async fn kv_list(
        &self,
        key: &ObjectKey,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        (**self).kv_list(key, prefix, start_after, limit).await
    }

    async fn kv_usage(&self, key: &ObjectKey) -> Result<KvUsage, StorageError> {
        (**self).kv_usage(key).await
    }

    async fn load_idempotent_reply(
        &self,
        key: &ObjectKey,
        idempotency_key: &str,
    ) -> Result<Option<IdempotentReply>, StorageError> {
        (**self).load_idempotent_reply(key, idempotency_key).await
    }

    async fn sweep_idempotency(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> Result<usize, StorageError> {
        (**self).sweep_idempotency(now, limit).await
    }

    fn cluster_backend(&self) -> Option<std::sync::Arc<dyn crate::cluster::ClusterBackend>> {
        (**self).cluster_backend()
    }
}
