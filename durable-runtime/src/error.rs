//! The error every call returns.

use std::convert::Infallible;

use crate::id::InvalidId;
use crate::storage::{
    CommitError, FsmRefusal, KvLimitExceeded, ObjectKey, StorageError, StorageErrorKind,
};

/// Why a call did not return a value.
///
/// `E` is the handler's own error type: a handler returning `Result<T, MyError>` gets a client
/// returning `Result<T, Error<MyError>>`, and its error arrives as [`Error::Handler`], typed.
/// Infallible handlers use the default, `Error<Infallible>`.
///
/// Whatever the variant but [`OutcomeUnknown`](Error::OutcomeUnknown), a failed call leaves the
/// object's committed state as it was before the call (a handler error or a panic rolls the
/// in-memory state back; a failed commit throws the activation away so the next call reloads
/// the last committed state).
/// [`is_retryable`](Error::is_retryable) says whether sending the same call again is safe.
///
/// # Examples
///
/// ```
/// use durable_runtime::{storage::ObjectKey, Error};
///
/// let err: Error = Error::ShuttingDown;
/// assert!(!err.is_retryable());
/// assert_eq!(err.to_string(), "the runtime is shutting down");
///
/// let err: Error = Error::Conflict { key: ObjectKey::new("Counter", "a"), found: Some(226) };
/// assert!(err.is_retryable());
/// assert_eq!(
///     err.to_string(),
///     "version conflict on Counter/a: another writer committed version 226 first"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error<E = Infallible> {
    /// The handler returned `Err`; its state changes were rolled back and nothing was written.
    #[error("handler error: {0}")]
    Handler(E),

    /// The object id was refused before anything was stored.
    #[error("invalid object id: {0}")]
    InvalidId(#[from] InvalidId),

    /// The handler panicked; its state changes were rolled back and nothing was written. The
    /// object keeps serving other calls.
    #[error("handler `{handler}` of {key} panicked: {message}")]
    Panicked {
        /// The object.
        key: ObjectKey,
        /// The handler that panicked.
        handler: &'static str,
        /// The panic's message, when it was a string.
        message: String,
    },

    /// Loading the object's state failed (or deleting it, or committing the state that
    /// loading created), or a write this call's reply waited for failed. The call was not
    /// applied; the in-memory state was discarded and the next call reloads the last committed
    /// state. A failed commit of the call's own write is
    /// [`OutcomeUnknown`](Error::OutcomeUnknown) instead.
    #[error("storage failed for {key}: {source}")]
    Storage {
        /// The object.
        key: ObjectKey,
        /// The backend's error.
        #[source]
        source: StorageError,
    },

    /// Another writer (another runtime on the same database) committed a newer version of the
    /// object first. Nothing was written; the object reloads the newer state.
    #[error("version conflict on {key}: {}", overtaken_by(*found))]
    Conflict {
        /// The object.
        key: ObjectKey,
        /// The version found in storage, if any.
        found: Option<u64>,
    },

    /// The call's key-value changes (with those of the calls committed with it) would have
    /// exceeded a limit of the object's key-value storage: its key count or its total bytes.
    /// Nothing was written; the object reloads what storage holds.
    #[error("key-value storage of {key} would hold {limit}")]
    KvLimit {
        /// The object.
        key: ObjectKey,
        /// The limit exceeded.
        limit: KvLimitExceeded,
    },

    /// The call's write reached storage, but whether it was applied is unknown: the storage
    /// failed during the commit (a connection lost before the database answered, say), or the
    /// batch holding the write failed and the write, committed again alone, found a version
    /// that may be its own. The in-memory state was discarded; the next call loads whatever
    /// storage holds. Sending the same call again may apply it twice: check what storage holds
    /// first, or make the call idempotent.
    #[error("the write of {key} may or may not have been applied: {source}")]
    OutcomeUnknown {
        /// The object.
        key: ObjectKey,
        /// The storage failure that left the outcome unknown.
        #[source]
        source: StorageError,
    },

    /// The stored state no longer decodes into the object's struct. The stored bytes are
    /// left untouched; every call to this object fails this way until the data or the struct
    /// is fixed.
    #[error("stored state of {key} does not decode at `{path}`: {message}")]
    Decode {
        /// The object.
        key: ObjectKey,
        /// The path of the failing field (`.` for the root).
        path: String,
        /// The decoder's message.
        message: String,
    },

    /// The state after the handler could not be encoded (for example a map with non-string
    /// keys), or its encoding would not decode back (an `f64` field holding NaN, which JSON
    /// writes as `null`), or its `Serialize` panicked. The call was rolled back.
    #[error("state of {key} cannot be encoded: {message}")]
    Encode {
        /// The object.
        key: ObjectKey,
        /// The encoder's message.
        message: String,
    },

    /// The object's after-load hook failed, so the object could not start.
    #[error("after_load of {key} failed: {message}")]
    AfterLoad {
        /// The object.
        key: ObjectKey,
        /// The hook's error message.
        message: String,
    },

    /// The object's queue is full; the call was not accepted. Retry later.
    #[error("{key} is overloaded: its queue of {capacity} calls is full")]
    Overloaded {
        /// The object.
        key: ObjectKey,
        /// The queue's capacity.
        capacity: usize,
    },

    /// The runtime holds its maximum of live objects and none is idle enough to make room;
    /// the object was not started. Retry later.
    #[error("cannot start {key}: the runtime's cap on live objects is reached and none is idle")]
    TooManyObjects {
        /// The object that could not start.
        key: ObjectKey,
    },

    /// The handler did not finish in time. The activation was discarded, so the handler's
    /// in-memory changes are not kept; whether its write was committed is unknown only if the
    /// time ran out during the commit.
    ///
    /// Also the error of a call whose per-call timeout
    /// ([`CallOptions::timeout`](crate::CallOptions::timeout)) ran out before its reply: the call
    /// was not cancelled and may still commit. Sent with an idempotency key, it can be sent
    /// again with the same key.
    #[error("call to `{handler}` of {key} timed out")]
    Timeout {
        /// The object.
        key: ObjectKey,
        /// The handler.
        handler: &'static str,
    },

    /// The call would wait for itself: its target is already handling a call further up the
    /// chain (an object calling itself, or A → B → A). Refused at once instead of deadlocking.
    #[error("call cycle: {key} is already handling a call in the chain {}", display_chain(.chain))]
    CallCycle {
        /// The object called again.
        key: ObjectKey,
        /// The objects the call passed through, outermost first.
        chain: Vec<ObjectKey>,
    },

    /// The call (a handler's, or a set from outside the object) would have left the object
    /// with more alarms than its limit
    /// ([`AlarmSettings::max_alarms_per_object`](crate::AlarmSettings::max_alarms_per_object),
    /// or its type's [`ObjectOptions::max_alarms`](crate::ObjectOptions::max_alarms)) allows;
    /// nothing of the call was written.
    #[error("{key} already has {limit} alarms, the most one object may have")]
    TooManyAlarms {
        /// The object.
        key: ObjectKey,
        /// The limit.
        limit: usize,
    },

    /// The store refused the FSM changes the call made through
    /// [`Context::fsm`](crate::Context::fsm) (or those of a call committed in the same write of
    /// the object): an occupied correlation key, a signal without a live target, or a store
    /// that cannot write FSM rows with objects. Nothing of the write was applied; the object
    /// reloads what storage holds.
    #[error("FSM changes of {key} refused: {refusal}")]
    FsmRefused {
        /// The object.
        key: ObjectKey,
        /// Why.
        refusal: FsmRefusal,
    },

    /// An alarm's argument could not be encoded when it was scheduled; nothing was scheduled.
    #[error(transparent)]
    AlarmArgs(#[from] crate::alarms::args::AlarmArgsError),

    /// The runtime is shutting down and accepts no new calls.
    #[error("the runtime is shutting down")]
    ShuttingDown,

    /// Cluster mode: the write was refused because another node took over the object's shard
    /// (the object's fence in the database is newer than this node's lease). Nothing was
    /// written; this node dropped its copy of the object. Retry: the call reaches the new
    /// owner. Counted in [`cluster::FENCED_COMMITS`](crate::cluster::FENCED_COMMITS).
    #[error("the write of {key} was fenced: another node owns its shard now; nothing was written")]
    Fenced {
        /// The object.
        key: ObjectKey,
    },

    /// Cluster mode: this node does not serve the object's shard now. Nothing ran. `owner` is
    /// the address of the node that does, if one does (send the call there); `None` while the
    /// shard is between owners (retry shortly).
    #[error("{key} is not served by this node{}", owner.as_ref().map(|o| format!(" (its owner is {o})")).unwrap_or_default())]
    NotOwner {
        /// The object.
        key: ObjectKey,
        /// The address of the node serving it, if any.
        owner: Option<String>,
    },

    /// Cluster mode: a typed call to an object another node serves was forwarded there, and
    /// the exchange failed (the node could not be reached, the connection broke, the owner
    /// answered an error of its own, or its reply did not decode into the handler's types).
    /// [`ForwardError::is_retryable`](crate::cluster::ForwardError::is_retryable) says whether
    /// sending the call again is safe; [`is_retryable`](Error::is_retryable) says the same.
    #[error("the call to {key} forwarded to the node serving it failed: {source}")]
    Forward {
        /// The object.
        key: ObjectKey,
        /// What failed.
        #[source]
        source: Box<crate::cluster::ForwardError>,
    },

    /// The call's idempotency key was already used on this object by a call to another handler
    /// or with other arguments. Nothing ran; the stored reply is kept for the call that made it.
    #[error("idempotency key {idempotency_key:?} of {key} was used by a different call")]
    IdempotencyKeyReused {
        /// The object.
        key: ObjectKey,
        /// The key.
        idempotency_key: String,
    },
}

/// What another writer did to the object, from the version it left in storage.
fn overtaken_by(found: Option<u64>) -> String {
    match found {
        Some(version) => format!("another writer committed version {version} first"),
        None => "another writer deleted the object first".to_owned(),
    }
}

fn display_chain(chain: &[ObjectKey]) -> String {
    chain
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" -> ")
}

impl<E> Error<E> {
    /// Whether sending the same call again is safe and may succeed: the call was not applied
    /// and the cause is transient (a full queue, an unreachable database, a lost version race).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{storage::ObjectKey, Error};
    ///
    /// let err: Error = Error::Overloaded { key: ObjectKey::new("Counter", "a"), capacity: 8 };
    /// assert!(err.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Overloaded { .. }
            | Self::TooManyObjects { .. }
            | Self::Conflict { .. }
            | Self::Fenced { .. }
            | Self::NotOwner { .. } => true,
            Self::Storage { source, .. } => source.is_retryable(),
            Self::Forward { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    /// The handler's own error, if this is one.
    ///
    /// # Examples
    ///
    /// ```
    /// let err: durable_runtime::Error<&str> = durable_runtime::Error::Handler("too big");
    /// assert_eq!(err.handler_error(), Some(&"too big"));
    /// ```
    pub fn handler_error(&self) -> Option<&E> {
        match self {
            Self::Handler(e) => Some(e),
            _ => None,
        }
    }
}

impl<E> Error<E> {
    /// Re-types a runtime error for a handler with error `F`; the handler's own error, which
    /// has no such type, is handed back instead.
    fn retype<F>(self) -> Result<Error<F>, E> {
        Ok(match self {
            Self::Handler(error) => return Err(error),
            Self::InvalidId(e) => Error::InvalidId(e),
            Self::Panicked {
                key,
                handler,
                message,
            } => Error::Panicked {
                key,
                handler,
                message,
            },
            Self::Storage { key, source } => Error::Storage { key, source },
            Self::Conflict { key, found } => Error::Conflict { key, found },
            Self::KvLimit { key, limit } => Error::KvLimit { key, limit },
            Self::OutcomeUnknown { key, source } => Error::OutcomeUnknown { key, source },
            Self::Decode { key, path, message } => Error::Decode { key, path, message },
            Self::Encode { key, message } => Error::Encode { key, message },
            Self::AfterLoad { key, message } => Error::AfterLoad { key, message },
            Self::Overloaded { key, capacity } => Error::Overloaded { key, capacity },
            Self::TooManyObjects { key } => Error::TooManyObjects { key },
            Self::Timeout { key, handler } => Error::Timeout { key, handler },
            Self::CallCycle { key, chain } => Error::CallCycle { key, chain },
            Self::AlarmArgs(error) => Error::AlarmArgs(error),
            Self::TooManyAlarms { key, limit } => Error::TooManyAlarms { key, limit },
            Self::FsmRefused { key, refusal } => Error::FsmRefused { key, refusal },
            Self::ShuttingDown => Error::ShuttingDown,
            Self::Fenced { key } => Error::Fenced { key },
            Self::NotOwner { key, owner } => Error::NotOwner { key, owner },
            Self::Forward { key, source } => Error::Forward { key, source },
            Self::IdempotencyKeyReused {
                key,
                idempotency_key,
            } => Error::IdempotencyKeyReused {
                key,
                idempotency_key,
            },
        })
    }

    /// Separates the handler's own error from a runtime error, which holds none.
    pub(crate) fn split(self) -> Result<Error, E> {
        self.retype()
    }
}

impl Error<Infallible> {
    /// Re-types a runtime error (which holds no handler error) for a handler with error `E`.
    pub(crate) fn widen<E>(self) -> Error<E> {
        match self.retype() {
            Ok(error) => error,
            Err(never) => match never {},
        }
    }
}

/// The error a call gets when the write it depends on failed; `wrote` if the write carried
/// the call's own changes. A storage failure leaves unknown whether the write was applied
/// (see [`CommitError::Storage`]): for such a call that is
/// [`OutcomeUnknown`](Error::OutcomeUnknown), never a retryable error; a call that only saw
/// the write's state (a read, a handler error) was not applied either way.
pub(crate) fn commit_error(key: &ObjectKey, error: &CommitError, wrote: bool) -> Error {
    match error {
        CommitError::Conflict { found, .. } => Error::Conflict {
            key: key.clone(),
            found: *found,
        },
        CommitError::KvLimit { limit, .. } => Error::KvLimit {
            key: key.clone(),
            limit: *limit,
        },
        CommitError::AlarmLimit { max, .. } => Error::TooManyAlarms {
            key: key.clone(),
            limit: usize::try_from(*max).unwrap_or(usize::MAX),
        },
        CommitError::Storage(source) if source.kind() == StorageErrorKind::Fenced => fenced(key),
        CommitError::Fsm { refusal, .. } => Error::FsmRefused {
            key: key.clone(),
            refusal: refusal.clone(),
        },
        CommitError::Storage(source) if wrote => Error::OutcomeUnknown {
            key: key.clone(),
            source: source.duplicate(),
        },
        CommitError::Storage(source) => Error::Storage {
            key: key.clone(),
            source: source.duplicate(),
        },
    }
}

/// The error of a call whose write was fenced (cluster mode), counted.
pub(crate) fn fenced(key: &ObjectKey) -> Error {
    metrics::counter!(crate::cluster::FENCED_COMMITS).increment(1);
    Error::Fenced { key: key.clone() }
}
