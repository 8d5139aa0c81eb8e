//! The audit trail: one structured `tracing` event on the target [`TARGET`] for every
//! mutating request (a call of a write handler, a delete, an alarm set, cancelled or
//! re-queued), and for the objects' lifecycle events.
//!
//! Route it where audit lines belong with a `tracing` subscriber filtered on the target; with
//! `tracing-subscriber`'s JSON formatter each event is one JSON line. Fields of a request
//! event: `event = "request"`, `action` (`call`, `delete`, `alarm_set`, `alarm_cancel`,
//! `alarm_requeue`), `principal`, `route` (the route template), `type`, `id`, `name` (the
//! handler or alarm), `outcome` (`ok` or the error code) and `status`. Lifecycle events carry
//! `event` (`object_created`, `object_hibernated`, `object_woken`, `object_deleted`,
//! `alarm_failed`), `type` and `id`, and for a failed alarm `alarm`, `attempt`, `error` and
//! `dead`. Tokens never appear.

use durable_runtime::{Event, Runtime};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use crate::error::ApiError;

/// The `tracing` target of audit events.
///
/// # Examples
///
/// ```
/// assert_eq!(durable_server::audit::TARGET, "durable::audit");
/// ```
pub const TARGET: &str = "durable::audit";

/// A mutating request, as recorded once its outcome is known.
pub(crate) struct Mutation<'a> {
    pub(crate) action: &'static str,
    pub(crate) principal: &'a str,
    pub(crate) route: &'a str,
    pub(crate) type_name: &'a str,
    pub(crate) id: &'a str,
    pub(crate) name: Option<&'a str>,
}

impl Mutation<'_> {
    /// Records the request with the outcome of `result`.
    pub(crate) fn record<T>(&self, result: &Result<T, ApiError>) {
        let (outcome, status) = match result {
            Ok(_) => ("ok", 200),
            Err(error) => (error.code().as_str(), error.code().status().as_u16()),
        };
        tracing::info!(
            target: TARGET,
            event = "request",
            action = self.action,
            principal = self.principal,
            route = self.route,
            "type" = self.type_name,
            id = self.id,
            name = self.name,
            outcome,
            status,
        );
    }
}

/// Forwards the lifecycle events of `runtime` (created, hibernated, woken, deleted, alarm
/// failed) to the audit target, from a task that ends when the runtime is dropped (abort it
/// to stop earlier). [`serve`](crate::serve) starts one; an application embedding
/// [`router`](crate::router) in its own server starts it itself, once per runtime.
///
/// Events are delivered through the runtime's bounded event channel: if the audit task
/// falls behind, the lost events are counted in a warning on the audit target.
///
/// # Panics
///
/// Outside a tokio runtime.
///
/// # Examples
///
/// ```
/// use durable_runtime::{MemoryStorage, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// let audit = durable_server::audit::spawn_lifecycle_audit(&rt);
/// audit.abort();
/// # }
/// ```
pub fn spawn_lifecycle_audit(runtime: &Runtime) -> JoinHandle<()> {
    // Subscribed before the task starts, so no event after this call is missed.
    let mut events = runtime.subscribe();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) => record_lifecycle(&event),
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(target: TARGET, event = "lagged", missed, "lifecycle events were lost");
                }
                Err(RecvError::Closed) => break,
            }
        }
    })
}

fn record_lifecycle(event: &Event) {
    let (name, key) = match event {
        Event::Created { key } => ("object_created", key),
        Event::Hibernated { key } => ("object_hibernated", key),
        Event::Woken { key } => ("object_woken", key),
        Event::Deleted { key } => ("object_deleted", key),
        Event::AlarmFailed {
            key,
            alarm,
            attempt,
            error,
            dead,
        } => {
            tracing::warn!(
                target: TARGET,
                event = "alarm_failed",
                "type" = key.object_type.as_str(),
                id = key.object_id.as_str(),
                alarm = alarm.as_str(),
                attempt,
                error = error.as_str(),
                dead,
            );
            return;
        }
        // Loaded and shut down are routine memory management, not audit matter.
        _ => return,
    };
    tracing::info!(
        target: TARGET,
        event = name,
        "type" = key.object_type.as_str(),
        id = key.object_id.as_str(),
    );
}
