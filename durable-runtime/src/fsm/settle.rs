//! `Engine::await_settled`: waiting for an instance to end or park.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::engine::Shared;
use super::error::Error;
use super::status::{InstanceId, Status};
use super::store::InstanceRecord;

/// Where an instance stood when [`Engine::await_settled`](super::Engine::await_settled)
/// returned.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{Settled, Snapshot, Status};
///
/// let done = Settled::Done { result: "42".into() };
/// assert_eq!(done.result::<u32>().unwrap(), Some(42));
///
/// let busy = Settled::Busy(Snapshot { status: Status::Executing, step: "charge".into(), attempt: 1 });
/// assert_eq!(busy.result::<u32>().unwrap(), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// It ended with a result.
    Done {
        /// The result, as JSON.
        result: String,
    },
    /// It ended with an error.
    Failed {
        /// The error.
        error: String,
    },
    /// It is parked, awaiting a signal or its children.
    Awaiting(Snapshot),
    /// It was still runnable or executing when the time was up: not a failure, call again to
    /// keep waiting.
    Busy(Snapshot),
    /// No such instance (never inserted, or garbage-collected).
    NotFound,
}

/// Where a live instance is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Its status.
    pub status: Status,
    /// Its current step.
    pub step: String,
    /// Attempts of that step.
    pub attempt: u32,
}

impl Settled {
    /// The result, decoded, if the instance is done.
    ///
    /// # Errors
    ///
    /// When the result does not decode as a `T`.
    pub fn result<T: DeserializeOwned>(&self) -> Result<Option<T>, serde_json::Error> {
        match self {
            Settled::Done { result } => serde_json::from_str(result).map(Some),
            _ => Ok(None),
        }
    }

    /// Whether the instance has ended.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Settled::Done { .. } | Settled::Failed { .. })
    }
}

/// Where `record` stands: settled, or the snapshot of an instance still working.
fn settled(record: &InstanceRecord) -> Result<Settled, Snapshot> {
    let snapshot = || Snapshot {
        status: record.status,
        step: record.step.clone(),
        attempt: record.attempt,
    };
    match record.status {
        Status::Done => Ok(Settled::Done {
            result: record.result.clone().unwrap_or_else(|| "null".to_owned()),
        }),
        Status::Failed => Ok(Settled::Failed {
            error: record.last_error.clone().unwrap_or_default(),
        }),
        Status::AwaitingSignal | Status::AwaitingChildren => Ok(Settled::Awaiting(snapshot())),
        Status::Runnable | Status::Executing => Err(snapshot()),
    }
}

/// Waits for `id` to settle (`until_terminal`: to end, waiting through parked states too).
pub(crate) async fn await_settled(
    shared: &Shared,
    id: InstanceId,
    timeout: Duration,
    until_terminal: bool,
) -> Result<Settled, Error> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        // Registered before reading, so that a commit between the read and the wait wakes it.
        let changed = shared.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let (snapshot, parked) = match shared.store.get(id).await? {
            None => return Ok(Settled::NotFound),
            Some(record) => match settled(&record) {
                Ok(Settled::Awaiting(snapshot)) if until_terminal => (snapshot, true),
                Ok(settled) => return Ok(settled),
                Err(snapshot) => (snapshot, false),
            },
        };
        if tokio::time::Instant::now() >= deadline {
            return Ok(if parked {
                Settled::Awaiting(snapshot)
            } else {
                Settled::Busy(snapshot)
            });
        }
        tokio::select! {
            () = changed => {}
            () = tokio::time::sleep(shared.settings.settle_tick) => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}
