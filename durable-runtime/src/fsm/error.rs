//! The errors of the FSM engine: [`StepError`] (what the error handler receives), [`Error`]
//! (what the engine's operations return) and [`BuildError`] (bad settings).

use std::fmt;
use std::time::Duration;

use crate::object::BoxError;
use crate::storage::StorageError;

/// Why a step did not produce a storable outcome, as the `#[on_error]` handler receives it.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{StepError, StepErrorKind};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("card declined")]
/// struct Declined;
///
/// let error = StepError::failed(Declined);
/// assert_eq!(error.kind(), StepErrorKind::Failed);
/// assert_eq!(error.to_string(), "card declined");
/// assert!(error.downcast_ref::<Declined>().is_some());
/// ```
#[derive(Debug)]
pub struct StepError {
    kind: StepErrorKind,
    message: String,
    source: Option<BoxError>,
}

/// The class of a [`StepError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StepErrorKind {
    /// The step returned `Err`.
    Failed,
    /// The step panicked.
    Panicked,
    /// The step's outcome cannot be stored: its state, result or a child's state does not
    /// encode as JSON that decodes back into its type and that `jsonb` accepts (U+0000 in a
    /// string, a NaN float), or a delay or timeout is beyond the clock's range.
    Unencodable,
    /// The step's outcome is not valid: an `await_signal` on no name and without timeout
    /// (it would never wake).
    InvalidOutcome,
    /// The instance's stored step is not a step of this FSM (renamed or removed without a new
    /// version).
    UnknownStep,
}

impl StepErrorKind {
    /// The name used in metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            StepErrorKind::Failed => "failed",
            StepErrorKind::Panicked => "panicked",
            StepErrorKind::Unencodable => "unencodable",
            StepErrorKind::InvalidOutcome => "invalid_outcome",
            StepErrorKind::UnknownStep => "unknown_step",
        }
    }
}

impl StepError {
    /// The step returned `error`.
    pub fn failed(error: impl Into<BoxError>) -> Self {
        let source = error.into();
        Self {
            kind: StepErrorKind::Failed,
            message: source.to_string(),
            source: Some(source),
        }
    }

    /// An error of `kind` described by `message`.
    pub fn new(kind: StepErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The class of the error.
    pub fn kind(&self) -> StepErrorKind {
        self.kind
    }

    /// Whether the step panicked.
    pub fn is_panic(&self) -> bool {
        self.kind == StepErrorKind::Panicked
    }

    /// The step's own error, if it returned one of type `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.source.as_ref()?.downcast_ref()
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StepError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

/// An error of an engine operation.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::Error;
///
/// let error = Error::Duplicate { key: "order:42".into() };
/// assert_eq!(error.to_string(), "the correlation key \"order:42\" is occupied by another instance");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `insert`: an instance occupies the correlation key; nothing was inserted.
    #[error("the correlation key {key:?} is occupied by another instance")]
    Duplicate {
        /// The key.
        key: String,
    },
    /// `signal`: no live instance has this id or occupies this key; nothing was stored.
    #[error("no live instance is addressed by {target}")]
    NoTarget {
        /// The id or key, as given.
        target: String,
    },
    /// A state or payload cannot be stored as `jsonb` (see [`StepErrorKind::Unencodable`]).
    #[error("cannot store the {what}: {message}")]
    Unencodable {
        /// What was being encoded.
        what: &'static str,
        /// Why it failed.
        message: String,
    },
    /// `instance_from_json`: no FSM of this name is registered with the engine.
    #[error("no FSM named {fsm:?} is registered (registered: {})", registered.join(", "))]
    UnknownFsm {
        /// The name asked for.
        fsm: String,
        /// The names registered, sorted.
        registered: Vec<String>,
    },
    /// `instance_from_json`: the JSON is not a state of the FSM.
    #[error("the arguments are not a state of the FSM {fsm:?}: {message}")]
    InvalidArgs {
        /// The FSM.
        fsm: String,
        /// Why, as the JSON decoder says.
        message: String,
    },
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// `cancel`: no instance has this id or occupies this key; nothing changed.
    #[error("no instance is addressed by {target}")]
    UnknownInstance {
        /// The id or key, as given.
        target: String,
    },
    /// `cancel`: the instance had already ended; nothing changed.
    #[error("the instance {id} has already ended ({status})")]
    AlreadyEnded {
        /// The instance.
        id: super::InstanceId,
        /// Its status.
        status: super::Status,
    },
    /// `set_rate_limit`: the limit cannot be kept (a capacity of 0, or a period out of
    /// range); nothing was stored.
    #[error("invalid rate limit for {key:?}: {message}")]
    InvalidRateLimit {
        /// The rate-limit key.
        key: String,
        /// Why.
        message: String,
    },
    /// `insert_async`: the engine has stopped and accepts no more instances.
    #[error("the FSM engine has stopped: it queues no more inserts")]
    Stopped,
}

/// Settings an engine cannot run with.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::{BuildError, Engine, MemoryFsmStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let error = Engine::builder(MemoryFsmStore::new())
///     .lease_ttl(Duration::from_secs(10))
///     .heartbeat(Duration::from_secs(10))
///     .build()
///     .unwrap_err();
/// assert!(matches!(error, BuildError::HeartbeatTooSlow { .. }));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The heartbeat must come well within the lease, or live steps are reaped.
    #[error(
        "the heartbeat interval ({heartbeat:?}) must be shorter than the lease ({lease_ttl:?}); a third of it is customary"
    )]
    HeartbeatTooSlow {
        /// The heartbeat interval.
        heartbeat: Duration,
        /// The lease.
        lease_ttl: Duration,
    },
    /// A duration setting is zero.
    #[error("the {setting} must be longer than zero")]
    Zero {
        /// Which setting.
        setting: &'static str,
    },
    /// A queue was given a concurrency of zero.
    #[error("the queue {queue:?} has a concurrency of 0: give it at least 1, or leave it out")]
    ZeroConcurrency {
        /// The queue.
        queue: String,
    },
    /// Two types registered the same FSM name and version.
    #[error("two FSM types are registered as {fsm:?} version {version}")]
    DuplicateFsm {
        /// The name.
        fsm: &'static str,
        /// The version.
        version: i32,
    },
}
