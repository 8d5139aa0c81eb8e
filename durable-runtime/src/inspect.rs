//! Reading a database directly, without the objects' Rust types and without a runtime: the
//! stored types and ids, the stored states as JSON, and the alarms, dead ones included.
//!
//! A [`StoreInspector`] works on any [`Storage`], so a generic tool (a command line, an admin
//! page) can open the database of an application it was not compiled with. It sees what is
//! *committed*, never the memory of a running runtime: an object live in a runtime may be a
//! call ahead of what is listed here (but never behind a reply that call sent).
//!
//! Its two writes, [`cancel_alarm`](StoreInspector::cancel_alarm) and
//! [`requeue_dead_alarm`](StoreInspector::requeue_dead_alarm), go to the database directly,
//! not through an object. They are safe beside a runtime using the same database, in the
//! sense that nothing is lost: each write advances the object's version, so a runtime holding
//! the object finds a version conflict on its next commit, fails that call as retryable and
//! reloads. But that call fails: prefer the runtime's own operations
//! ([`Runtime::cancel_alarm`](crate::Runtime::cancel_alarm),
//! [`Runtime::requeue_dead_alarm`](crate::Runtime::requeue_dead_alarm)) while a runtime serves
//! the database, and make a tool ask before writing to a database in use.
//!
//! # Examples
//!
//! ```
//! use durable_runtime::inspect::StoreInspector;
//! use durable_runtime::{durable_object, MemoryStorage, Runtime};
//! use serde_json::json;
//!
//! #[durable_object]
//! pub struct Counter { count: i64 }
//!
//! #[durable_object]
//! impl Counter {
//!     #[handler]
//!     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let storage = MemoryStorage::new();
//! let rt = Runtime::new(storage.clone());
//! Counter::add(&rt, "a", 5).await?;
//!
//! // A tool that knows no Rust type, on the same database.
//! let inspector = StoreInspector::new(storage);
//! assert_eq!(inspector.list_types().await?, ["Counter"]);
//! assert_eq!(inspector.list_ids("Counter", None, 100).await?.ids, ["a"]);
//! let stored = inspector.read_state("Counter", "a").await?.expect("stored");
//! assert_eq!((stored.state, stored.version), (json!({"count": 5}), 1));
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::id::InvalidId;
use crate::inventory::{DeadAlarmPage, InvalidCursor, decode_cursor};
use crate::storage::{
    AlarmChange, AlarmRecord, CommitError, IdPage, Loaded, ObjectKey, ObjectWrite, Storage,
    StorageError, truncate_to_micros,
};

/// How many times a direct write is tried when the object changes under it.
const WRITE_ATTEMPTS: usize = 3;

/// Reads (and, on request, changes the alarms of) a database directly, knowing no Rust type:
/// see the [module documentation](self).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use durable_runtime::inspect::StoreInspector;
/// use durable_runtime::storage::Storage;
/// use durable_runtime::MemoryStorage;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // Any storage: a store, or an `Arc<dyn Storage>` shared with a runtime.
/// let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
/// let inspector = StoreInspector::new(Arc::clone(&storage));
/// assert!(inspector.list_types().await.unwrap().is_empty());
/// # }
/// ```
#[derive(Clone)]
pub struct StoreInspector {
    storage: Arc<dyn Storage>,
}

impl std::fmt::Debug for StoreInspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreInspector").finish_non_exhaustive()
    }
}

/// A stored state as JSON, with its version.
///
/// # Examples
///
/// ```
/// use durable_runtime::inspect::StoredState;
///
/// let stored = StoredState { state: serde_json::json!({"count": 1}), version: 3 };
/// assert_eq!(stored.version, 3);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct StoredState {
    /// The state, as JSON.
    pub state: Value,
    /// Its version: 1 for the first write, one more for each write since.
    pub version: u64,
}

/// Why a direct read or write failed.
///
/// # Examples
///
/// ```
/// use durable_runtime::inspect::{InspectError, StoreInspector};
/// use durable_runtime::MemoryStorage;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let inspector = StoreInspector::new(MemoryStorage::new());
/// let err = inspector.read_state("Counter", "").await.unwrap_err();
/// assert!(matches!(err, InspectError::InvalidId(_)));
/// assert!(!err.is_retryable());
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The id cannot name an object.
    #[error("invalid object id: {0}")]
    InvalidId(#[from] InvalidId),

    /// A listing cursor that no listing handed out.
    #[error(transparent)]
    InvalidCursor(#[from] InvalidCursor),

    /// The stored state of `key` is not JSON (written by something else than a runtime).
    #[error("the stored state of {key} is not JSON: {message}")]
    NotJson {
        /// The object.
        key: ObjectKey,
        /// The decoder's message.
        message: String,
    },

    /// The object kept changing (a runtime writing it) while a direct write was tried; nothing
    /// was written.
    #[error("{key} changed during each of {WRITE_ATTEMPTS} attempts to write it directly")]
    Conflict {
        /// The object.
        key: ObjectKey,
    },

    /// The database failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl InspectError {
    /// Whether trying again later may succeed: the database was unreachable, or the object
    /// kept changing.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::inspect::InspectError;
    /// use durable_runtime::storage::{ObjectKey, StorageError};
    ///
    /// let err = InspectError::from(StorageError::unavailable("connection refused"));
    /// assert!(err.is_retryable());
    /// assert!(InspectError::Conflict { key: ObjectKey::new("Counter", "a") }.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Storage(error) => error.is_retryable(),
            Self::Conflict { .. } => true,
            _ => false,
        }
    }
}

impl StoreInspector {
    /// An inspector of `storage`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::inspect::StoreInspector;
    /// use durable_runtime::MemoryStorage;
    ///
    /// let inspector = StoreInspector::new(MemoryStorage::new());
    /// # drop(inspector);
    /// ```
    pub fn new(storage: impl Storage) -> Self {
        Self {
            storage: Arc::new(storage),
        }
    }

    /// The types that have stored objects, in ascending byte order.
    ///
    /// # Errors
    ///
    /// [`InspectError::Storage`] if the database fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::inspect::StoreInspector;
    /// use durable_runtime::storage::{ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// for ty in ["Lock", "Counter"] {
    ///     let write = ObjectWrite {
    ///         key: ObjectKey::new(ty, "a"),
    ///         expected_version: 0,
    ///         state: Some(b"{}".to_vec()),
    ///         alarms: vec![],
    ///         kv: Vec::new(),
    ///         idempotency: None,
    ///         fsm: Default::default(),
    ///     };
    ///     storage.commit(&[write]).await.unwrap();
    /// }
    /// let types = StoreInspector::new(storage).list_types().await.unwrap();
    /// assert_eq!(types, ["Counter", "Lock"]);
    /// # }
    /// ```
    pub async fn list_types(&self) -> Result<Vec<String>, InspectError> {
        Ok(self.storage.list_object_types().await?)
    }

    /// Up to `limit` ids (at least one) of the stored objects of `object_type` after `after`,
    /// in ascending byte order, and where the next page starts.
    ///
    /// # Errors
    ///
    /// [`InspectError::Storage`] if the database fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::inspect::StoreInspector;
    /// use durable_runtime::storage::{ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// for id in ["b", "c", "a"] {
    ///     let write = ObjectWrite {
    ///         key: ObjectKey::new("Counter", id),
    ///         expected_version: 0,
    ///         state: Some(b"{}".to_vec()),
    ///         alarms: vec![],
    ///         kv: Vec::new(),
    ///         idempotency: None,
    ///         fsm: Default::default(),
    ///     };
    ///     storage.commit(&[write]).await.unwrap();
    /// }
    /// let inspector = StoreInspector::new(storage);
    /// let page = inspector.list_ids("Counter", None, 2).await.unwrap();
    /// assert_eq!(page.ids, ["a", "b"]);
    /// let rest = inspector.list_ids("Counter", page.next.as_deref(), 2).await.unwrap();
    /// assert_eq!((rest.ids, rest.next), (vec!["c".to_owned()], None));
    /// # }
    /// ```
    pub async fn list_ids(
        &self,
        object_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, InspectError> {
        Ok(self
            .storage
            .list_ids(object_type, after, limit.max(1))
            .await?)
    }

    /// The stored state of `(object_type, id)` as JSON, with its version; `None` if it was
    /// never stored or was deleted.
    ///
    /// # Errors
    ///
    /// [`InspectError::InvalidId`], [`InspectError::NotJson`] for a state that is not JSON, or
    /// [`InspectError::Storage`].
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::inspect::StoreInspector;
    /// use durable_runtime::storage::{ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// let write = ObjectWrite {
    ///     key: ObjectKey::new("Counter", "a"),
    ///     expected_version: 0,
    ///     state: Some(br#"{"count":7}"#.to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// storage.commit(&[write]).await.unwrap();
    /// let inspector = StoreInspector::new(storage);
    /// let stored = inspector.read_state("Counter", "a").await.unwrap().unwrap();
    /// assert_eq!(stored.state["count"], 7);
    /// assert_eq!(inspector.read_state("Counter", "b").await.unwrap(), None);
    /// # }
    /// ```
    pub async fn read_state(
        &self,
        object_type: &str,
        id: &str,
    ) -> Result<Option<StoredState>, InspectError> {
        let key = checked_key(object_type, id)?;
        let Some(stored) = self.storage.load(&key).await?.object() else {
            return Ok(None);
        };
        let state = serde_json::from_slice(&stored.state).map_err(|err| InspectError::NotJson {
            key,
            message: err.to_string(),
        })?;
        Ok(Some(StoredState {
            state,
            version: stored.version,
        }))
    }

    /// The alarms of `(object_type, id)`, dead ones included, ordered by due time then name.
    ///
    /// # Errors
    ///
    /// [`InspectError::InvalidId`] or [`InspectError::Storage`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::inspect::StoreInspector;
    /// use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// let due_at = UNIX_EPOCH + Duration::from_secs(60);
    /// let write = ObjectWrite {
    ///     key: ObjectKey::new("Session", "s1"),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![AlarmChange::Set { name: "expire".into(), due_at, payload: None }],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// storage.commit(&[write]).await.unwrap();
    /// let alarms = StoreInspector::new(storage).list_alarms("Session", "s1").await.unwrap();
    /// assert_eq!((alarms[0].name.as_str(), alarms[0].due_at), ("expire", due_at));
    /// # }
    /// ```
    pub async fn list_alarms(
        &self,
        object_type: &str,
        id: &str,
    ) -> Result<Vec<AlarmRecord>, InspectError> {
        let key = checked_key(object_type, id)?;
        Ok(self.storage.list_alarms(&key).await?)
    }

    /// The dead alarms of every type, or of `object_type`, ordered by type, id, then name, up
    /// to `limit` of them (at least one) after `cursor`, the previous page's
    /// [`next_cursor`](DeadAlarmPage::next_cursor). The cursors are those of
    /// [`Runtime::list_dead_alarms_by_name`](crate::Runtime::list_dead_alarms_by_name).
    ///
    /// # Errors
    ///
    /// [`InspectError::InvalidCursor`] or [`InspectError::Storage`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::inspect::StoreInspector;
    /// use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// // An alarm that failed for the last time, as a runtime leaves it in storage.
    /// let (key, due) = (ObjectKey::new("Job", "j1"), UNIX_EPOCH + Duration::from_secs(100));
    /// let set = AlarmChange::Set { name: "run".into(), due_at: due, payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// storage.commit(&[write]).await.unwrap();
    /// storage.claim_due_alarms(due, due, due + Duration::from_secs(60), 1).await.unwrap();
    /// storage.fail_alarm(&key, "run", due, 10, "boom", None).await.unwrap();
    ///
    /// let page = StoreInspector::new(storage).list_dead_alarms(None, None, 10).await.unwrap();
    /// let alarm = &page.alarms[0];
    /// assert_eq!((alarm.key.object_id.as_str(), alarm.attempts), ("j1", 10));
    /// assert_eq!(alarm.last_error.as_deref(), Some("boom"));
    /// assert_eq!(page.next_cursor, None);
    /// # }
    /// ```
    pub async fn list_dead_alarms(
        &self,
        object_type: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DeadAlarmPage, InspectError> {
        let after = cursor.map(decode_cursor).transpose()?;
        let page = self
            .storage
            .list_dead_alarms(object_type, after.as_ref(), limit.max(1))
            .await?;
        Ok(DeadAlarmPage::from_page(page))
    }

    /// Cancels the alarm `name` of `(object_type, id)` by writing to the database directly
    /// (see the [module documentation](self) about runtimes using it). Returns whether the
    /// alarm existed.
    ///
    /// # Errors
    ///
    /// [`InspectError::InvalidId`], [`InspectError::Conflict`] if the object kept changing,
    /// or [`InspectError::Storage`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::inspect::StoreInspector;
    /// use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// let due_at = UNIX_EPOCH + Duration::from_secs(60);
    /// let write = ObjectWrite {
    ///     key: ObjectKey::new("Session", "s1"),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![AlarmChange::Set { name: "expire".into(), due_at, payload: None }],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// storage.commit(&[write]).await.unwrap();
    /// let inspector = StoreInspector::new(storage);
    /// assert!(inspector.cancel_alarm("Session", "s1", "expire").await.unwrap());
    /// assert!(inspector.list_alarms("Session", "s1").await.unwrap().is_empty());
    /// assert!(!inspector.cancel_alarm("Session", "s1", "expire").await.unwrap());
    /// # }
    /// ```
    pub async fn cancel_alarm(
        &self,
        object_type: &str,
        id: &str,
        name: &str,
    ) -> Result<bool, InspectError> {
        let change = AlarmChange::Cancel {
            name: name.to_owned(),
        };
        self.change_alarm(object_type, id, name, |_| Some(change.clone()))
            .await
    }

    /// Re-queues the dead alarm `name` of `(object_type, id)` to fire now, with its attempts
    /// counted from zero again, by writing to the database directly (see the
    /// [module documentation](self) about runtimes using it): a runtime serving the database
    /// fires it once it polls storage (within its
    /// [`poll_interval`](crate::AlarmSettings::poll_interval)). Returns whether the alarm was
    /// dead; one that is not is left as it is.
    ///
    /// # Errors
    ///
    /// As [`cancel_alarm`](Self::cancel_alarm).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::inspect::StoreInspector;
    /// use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::MemoryStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// // An alarm that failed for the last time, as a runtime leaves it in storage.
    /// let (key, due) = (ObjectKey::new("Job", "j1"), UNIX_EPOCH + Duration::from_secs(100));
    /// let set = AlarmChange::Set { name: "run".into(), due_at: due, payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// storage.commit(&[write]).await.unwrap();
    /// storage.claim_due_alarms(due, due, due + Duration::from_secs(60), 1).await.unwrap();
    /// storage.fail_alarm(&key, "run", due, 10, "boom", None).await.unwrap();
    ///
    /// let inspector = StoreInspector::new(storage);
    /// assert!(inspector.requeue_dead_alarm("Job", "j1", "run").await.unwrap());
    /// let alarm = &inspector.list_alarms("Job", "j1").await.unwrap()[0];
    /// assert_eq!((alarm.dead, alarm.attempts), (false, 0));
    /// assert!(!inspector.requeue_dead_alarm("Job", "j1", "run").await.unwrap());
    /// # }
    /// ```
    pub async fn requeue_dead_alarm(
        &self,
        object_type: &str,
        id: &str,
        name: &str,
    ) -> Result<bool, InspectError> {
        // The change keeps the argument the alarm was set with.
        let change = |dead: &AlarmRecord| AlarmChange::Set {
            name: name.to_owned(),
            due_at: truncate_to_micros(SystemTime::now()),
            payload: dead.payload.clone(),
        };
        self.change_alarm(object_type, id, name, |alarm| {
            alarm.dead.then(|| change(alarm))
        })
        .await
    }

    /// Commits the change `applies` makes of the object's alarm `name`, if it exists and
    /// `applies` makes one,
    /// checking the object's version so that a concurrent write is never overwritten (the
    /// write is tried again on a conflict). Returns whether it was committed.
    async fn change_alarm(
        &self,
        object_type: &str,
        id: &str,
        name: &str,
        applies: impl Fn(&AlarmRecord) -> Option<AlarmChange>,
    ) -> Result<bool, InspectError> {
        let key = checked_key(object_type, id)?;
        for _ in 0..WRITE_ATTEMPTS {
            // The version first: a change after this read makes the commit conflict.
            let version = match self.storage.load(&key).await? {
                Loaded::Object(stored) => stored.version,
                // Alarms go with their object: none without one.
                Loaded::Absent | Loaded::Deleted { .. } => return Ok(false),
            };
            let alarms = self.storage.list_alarms(&key).await?;
            let Some(change) = alarms
                .iter()
                .filter(|alarm| alarm.name == name)
                .find_map(&applies)
            else {
                return Ok(false);
            };
            let write = ObjectWrite {
                key: key.clone(),
                expected_version: version,
                state: None,
                alarms: vec![change],
                kv: Vec::new(),
                idempotency: None,
                fsm: Default::default(),
            };
            match self.storage.commit(&[write]).await {
                Ok(()) => return Ok(true),
                Err(CommitError::Conflict { .. }) => continue,
                Err(CommitError::Storage(error)) => return Err(error.into()),
                // The write carries no key-value changes, so no key-value limit.
                Err(
                    error @ (CommitError::KvLimit { .. }
                    | CommitError::AlarmLimit { .. }
                    | CommitError::Fsm { .. }),
                ) => {
                    return Err(StorageError::rejected(error).into());
                }
            }
        }
        Err(InspectError::Conflict { key })
    }
}

/// The key of `(object_type, id)`, the id checked as the runtime checks it.
fn checked_key(object_type: &str, id: &str) -> Result<ObjectKey, InspectError> {
    crate::id::validate_id(id)?;
    Ok(ObjectKey::new(object_type, id))
}
