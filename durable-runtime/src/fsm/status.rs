//! The identifiers of instances and signals, and the status an instance is in.

use std::fmt;
use std::str::FromStr;

/// The engine's handle on one FSM instance: the row's identity, assigned at insert.
///
/// Ids are per execution: an instance inserted again under the same correlation key after the
/// first one ended gets a new id (the correlation key is the business identity; see
/// [`Instance::correlation_key`](crate::fsm::Instance::correlation_key)).
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::InstanceId;
///
/// let id = InstanceId::new(42);
/// assert_eq!(id.get(), 42);
/// assert_eq!(id.to_string(), "42");
/// assert_eq!("42".parse::<InstanceId>().unwrap(), id);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(i64);

impl InstanceId {
    /// The id with the stored value `id`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_runtime::fsm::InstanceId::new(7).get(), 7);
    /// ```
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    /// The stored value.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_runtime::fsm::InstanceId::new(7).get(), 7);
    /// ```
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for InstanceId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

/// The identity of one signal in an instance's inbox.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::SignalId;
///
/// assert_eq!(SignalId::new(3).get(), 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SignalId(i64);

impl SignalId {
    /// The id with the stored value `id`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_runtime::fsm::SignalId::new(3).to_string(), "3");
    /// ```
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    /// The stored value.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_runtime::fsm::SignalId::new(3).get(), 3);
    /// ```
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for SignalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where an instance is in its life (the specification's `durable_status`).
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::Status;
///
/// assert_eq!(Status::AwaitingSignal.as_str(), "awaiting_signal");
/// assert_eq!("done".parse::<Status>().unwrap(), Status::Done);
/// assert!(Status::Failed.is_terminal());
/// assert!(!Status::Executing.is_terminal());
/// assert_eq!(Status::LIVE.len(), 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Waiting for a worker to pick it once `eligible_at` has come.
    Runnable,
    /// Claimed by a worker, which holds a lease on it and runs its current step.
    Executing,
    /// Parked until a signal of one of the awaited names arrives (or the await times out).
    AwaitingSignal,
    /// Parked until every child it spawned has ended.
    AwaitingChildren,
    /// Ended with a result.
    Done,
    /// Ended with an error.
    Failed,
}

impl Status {
    /// Every status, in the order of the stored enum.
    pub const ALL: [Status; 6] = [
        Status::Runnable,
        Status::Executing,
        Status::AwaitingSignal,
        Status::AwaitingChildren,
        Status::Done,
        Status::Failed,
    ];

    /// The four statuses of a live (not yet ended) instance: the default correlation scope.
    pub const LIVE: [Status; 4] = [
        Status::Runnable,
        Status::Executing,
        Status::AwaitingSignal,
        Status::AwaitingChildren,
    ];

    /// The stored name.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_runtime::fsm::Status::Runnable.as_str(), "runnable");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Runnable => "runnable",
            Status::Executing => "executing",
            Status::AwaitingSignal => "awaiting_signal",
            Status::AwaitingChildren => "awaiting_children",
            Status::Done => "done",
            Status::Failed => "failed",
        }
    }

    /// Whether the instance has ended (`done` or `failed`).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(durable_runtime::fsm::Status::Done.is_terminal());
    /// ```
    pub const fn is_terminal(self) -> bool {
        matches!(self, Status::Done | Status::Failed)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`Status::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown FSM status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}
