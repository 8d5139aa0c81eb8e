//! The JSON bodies of the FSM scheduling controls: cancel an instance, pause and resume a
//! queue, list the paused queues.

use durable_runtime::fsm::store::PausedQueue;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::format_time;

/// The reply to `POST /v1/fsm/{id}/cancel`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::fsm_control::CancelledInstance =
///     serde_json::from_str(r#"{"id": 7, "instances": 3}"#).unwrap();
/// assert_eq!((reply.id, reply.instances), (7, 3));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CancelledInstance {
    /// The instance cancelled: it ended `failed` with the error `cancelled`.
    pub id: i64,
    /// How many instances ended: it and its live descendants.
    pub instances: u64,
}

/// The reply to `POST /v1/fsm/queues/{queue}/pause` and `/resume`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::fsm_control::QueueState =
///     serde_json::from_str(r#"{"queue": "emails", "paused": true, "changed": false}"#).unwrap();
/// assert!(reply.paused && !reply.changed);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueState {
    /// The queue.
    pub queue: String,
    /// Whether it is paused now.
    pub paused: bool,
    /// Whether this request changed it (false: it already was).
    pub changed: bool,
}

/// One paused queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PausedQueueView {
    /// The queue.
    pub queue: String,
    /// When it was paused (RFC 3339, UTC).
    pub paused_at: String,
}

impl From<&PausedQueue> for PausedQueueView {
    fn from(paused: &PausedQueue) -> Self {
        Self {
            queue: paused.queue.clone(),
            paused_at: format_time(paused.paused_at),
        }
    }
}

/// The reply to `GET /v1/fsm/queues/paused`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::fsm_control::PausedQueues = serde_json::from_str(
///     r#"{"queues": [{"queue": "emails", "paused_at": "2026-01-01T00:00:00.000Z"}]}"#,
/// )
/// .unwrap();
/// assert_eq!(reply.queues[0].queue, "emails");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PausedQueues {
    /// The paused queues, by name.
    pub queues: Vec<PausedQueueView>,
}
