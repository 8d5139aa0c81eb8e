//! The JSON bodies of the `/v1/fsm` routes: FSM instances inserted, signalled, read and
//! listed through the gateway.

use durable_runtime::fsm::store::SignalRecord;
use durable_runtime::fsm::{Delivered, InstanceRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::format_time;

/// `POST /v1/fsm/{name}`: a new instance of a registered FSM.
///
/// # Examples
///
/// ```
/// use durable_server::model::fsm::InsertInstance;
///
/// let body: InsertInstance = serde_json::from_str(r#"{"args": {"order_id": "42"}}"#).unwrap();
/// assert_eq!(body.args["order_id"], "42");
/// assert!(body.correlation_key.is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InsertInstance {
    /// The instance's first state, decoded into the FSM's state type (fields left out take
    /// their defaults; `{}` if absent).
    #[serde(default = "empty_object")]
    pub args: Value,
    /// The business key: the signal address and a uniqueness guard while the instance lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_key: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// The reply to `POST /v1/fsm/{name}`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::fsm::Inserted = serde_json::from_str(r#"{"id": 7}"#).unwrap();
/// assert_eq!(reply.id, 7);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Inserted {
    /// The new instance's id.
    pub id: i64,
}

/// `POST /v1/fsm/signal`: a signal for one instance, addressed by exactly one of `id` and
/// `correlation_key`.
///
/// # Examples
///
/// ```
/// use durable_server::model::fsm::SendSignal;
///
/// let body: SendSignal =
///     serde_json::from_str(r#"{"correlation_key": "order:42", "name": "paid"}"#).unwrap();
/// assert_eq!(body.name, "paid");
/// assert_eq!(body.payload, serde_json::Value::Null);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SendSignal {
    /// The instance, by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    /// The instance occupying this correlation key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_key: Option<String>,
    /// The signal's name.
    pub name: String,
    /// Its payload (`null` if absent).
    #[serde(default)]
    pub payload: Value,
    /// Delivering the same key again to the same instance adds nothing while the first is in
    /// its inbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
}

/// The reply to `POST /v1/fsm/signal`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::fsm::SignalSent =
///     serde_json::from_str(r#"{"target": 7, "signal": null, "woke": false}"#).unwrap();
/// assert_eq!(reply.signal, None); // its dedup key was already in the inbox
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SignalSent {
    /// The instance it went to.
    pub target: i64,
    /// The new signal's id; `null` when its deduplication key was already in the inbox.
    pub signal: Option<i64>,
    /// Whether it woke the instance from an await on its name.
    pub woke: bool,
}

impl From<Delivered> for SignalSent {
    fn from(delivered: Delivered) -> Self {
        Self {
            target: delivered.target.get(),
            signal: delivered.signal.map(|id| id.get()),
            woke: delivered.woke,
        }
    }
}

/// One signal waiting in an instance's inbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InboxSignal {
    /// Its id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its payload.
    pub payload: Value,
    /// The sender's deduplication key.
    pub dedup_key: Option<String>,
    /// When it was delivered.
    pub inserted_at: String,
}

impl From<&SignalRecord> for InboxSignal {
    fn from(signal: &SignalRecord) -> Self {
        Self {
            id: signal.id.get(),
            name: signal.name.clone(),
            payload: stored_json(&signal.payload),
            dedup_key: signal.dedup_key.clone(),
            inserted_at: format_time(signal.inserted_at),
        }
    }
}

/// An FSM instance: `GET /v1/fsm/{id}`, and each entry of a listing (without its inbox).
///
/// # Examples
///
/// ```
/// use durable_server::model::fsm::FsmInstance;
///
/// let text = r#"{"id": 1, "fsm": "order", "fsm_version": 1, "step": "charge",
///     "status": "runnable", "state": {}, "result": null, "error": null, "attempt": 0,
///     "queue": "default", "priority": 0, "correlation_key": null, "awaits": null,
///     "parent_id": null, "eligible_at": "2026-11-25T18:00:00.000Z",
///     "inserted_at": "2026-11-25T18:00:00.000Z", "updated_at": "2026-11-25T18:00:00.000Z"}"#;
/// let instance: FsmInstance = serde_json::from_str(text).unwrap();
/// assert_eq!(instance.status, "runnable");
/// assert!(instance.inbox.is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FsmInstance {
    /// Its id.
    pub id: i64,
    /// Its FSM.
    pub fsm: String,
    /// Its FSM's version.
    pub fsm_version: i32,
    /// The current step.
    pub step: String,
    /// `runnable`, `executing`, `awaiting_signal`, `awaiting_children`, `done` or `failed`.
    pub status: String,
    /// The state.
    pub state: Value,
    /// The result, once done.
    pub result: Option<Value>,
    /// The error it failed with (or the last one recorded).
    pub error: Option<String>,
    /// Attempts of the current step.
    pub attempt: u32,
    /// Its queue.
    pub queue: String,
    /// Its priority (lower first).
    pub priority: i16,
    /// Its business key.
    pub correlation_key: Option<String>,
    /// The signal names it awaits.
    pub awaits: Option<Vec<String>>,
    /// Its parent, for a child.
    pub parent_id: Option<i64>,
    /// When it may run next.
    pub eligible_at: String,
    /// When an await times out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub await_deadline: Option<String>,
    /// When it was inserted.
    pub inserted_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// The signals in its inbox, oldest first (in `GET /v1/fsm/{id}` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox: Option<Vec<InboxSignal>>,
}

impl From<&InstanceRecord> for FsmInstance {
    fn from(record: &InstanceRecord) -> Self {
        Self {
            id: record.id.get(),
            fsm: record.fsm.clone(),
            fsm_version: record.fsm_version,
            step: record.step.clone(),
            status: record.status.as_str().to_owned(),
            state: stored_json(&record.state),
            result: record.result.as_deref().map(stored_json),
            error: record.last_error.clone(),
            attempt: record.attempt,
            queue: record.queue.clone(),
            priority: record.priority,
            correlation_key: record.correlation_key.clone(),
            awaits: record.awaits.clone(),
            parent_id: record.parent_id.map(|id| id.get()),
            eligible_at: format_time(record.eligible_at),
            await_deadline: record.await_deadline.map(format_time),
            inserted_at: format_time(record.inserted_at),
            updated_at: format_time(record.updated_at),
            inbox: None,
        }
    }
}

/// The reply to `GET /v1/fsm`: a page of instances by id.
///
/// # Examples
///
/// ```
/// let page: durable_server::model::fsm::FsmInstanceList =
///     serde_json::from_str(r#"{"instances": [], "next_after": null}"#).unwrap();
/// assert!(page.instances.is_empty() && page.next_after.is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FsmInstanceList {
    /// The instances of this page, by id.
    pub instances: Vec<FsmInstance>,
    /// Pass it as `after` to get the next page; `null` on the last page.
    pub next_after: Option<i64>,
}

/// Stored JSON text as a value. The engine stores only JSON it encoded itself; text that
/// does not parse is shown as a string rather than lost.
fn stored_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}
